"""The program verify.py sends into the verification sandbox, as source text: `RUNNER`
(harness/runner.py, trusted: runs the task's tests, authenticates the verdict). It is never
imported here; the sandbox's own /usr/bin/python3 runs it with `-I -S -B -c`."""

from pathlib import Path

RUNNER = (Path(__file__).parent / "runner.py").read_text()
