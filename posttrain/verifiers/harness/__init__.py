"""The two programs the code verifier sends into the sandbox, as source text: `JUDGE` (trusted:
runs the tests, authenticates the verdict; judge.py, then judge_stdio.py, then `main()`) and
`RUNNER` (untrusted: runs the solution)."""

from pathlib import Path

_HERE = Path(__file__).parent
JUDGE = (_HERE / "judge.py").read_text() + "\n\n" + (_HERE / "judge_stdio.py").read_text() + "\n\nmain()\n"
RUNNER = (_HERE / "runner.py").read_text()
