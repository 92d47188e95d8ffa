"""The two programs the code verifier sends into the sandbox, as source text: `JUDGE` (trusted:
runs the tests, authenticates the verdict) and `RUNNER` (untrusted: runs the solution). Both
hold codec.py, the value codec they share: the judge is judge.py (which first makes itself
non-dumpable and cleans sys.path, before any other import), codec.py, judge_stdio.py, then
`main()`; the runner is codec.py, then runner.py."""

from pathlib import Path

_HERE = Path(__file__).parent


def _source(*names: str) -> str:
    return "\n\n".join((_HERE / name).read_text() for name in names)


JUDGE = _source("judge.py", "codec.py", "judge_stdio.py") + "\n\nmain()\n"
RUNNER = _source("codec.py", "runner.py")
