"""The program verify.py sends into the verification sandbox, as source text: `RUNNER`
(harness/runner.py, trusted: runs the task's tests, authenticates the verdict). harness/ holds plain
files, never imported; the sandbox's own /usr/bin/python3 runs it with `-I -S -B -c`."""

from pathlib import Path

RUNNER = (Path(__file__).parent / "harness" / "runner.py").read_text()
