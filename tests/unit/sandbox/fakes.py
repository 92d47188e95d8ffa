"""Small real sandboxes implementing the `Sandbox` protocol, for testing the HTTP layer.

`SubprocessSandbox` runs programs with the real interpreters and compilers through
`subprocess`, with no isolation: enough to test the HTTP layer honestly (it is not the
executor under test). `ScriptedSandbox` returns a fixed result or raises.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from posttrain.sandbox.types import CommandResult, RunRequest, RunResult, Status

_SOURCES = {"python": "main.py", "bash": "main.sh", "c": "main.c", "cpp": "main.cpp"}


def _command(argv: list[str], cwd: str, stdin: str, timeout: float) -> CommandResult:
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return CommandResult(Status.TIME_LIMIT, None, out, "", time.monotonic() - start, 0.0)
    status = Status.FINISHED if proc.returncode >= 0 else Status.ERROR
    return CommandResult(status, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start, 0.0)


class SubprocessSandbox:
    """Runs python / bash / c / cpp with subprocess in a temporary directory."""

    def __init__(self) -> None:
        self.requests: list[RunRequest] = []
        self.lock = threading.Lock()

    def run(self, request: RunRequest) -> RunResult:
        with self.lock:
            self.requests.append(request)
        with tempfile.TemporaryDirectory() as work:
            for path, content in request.files.items():
                target = Path(work, path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            source = Path(work, _SOURCES[request.language])
            source.write_text(request.code)
            compiled = None
            if request.language in ("c", "cpp"):
                cc = "gcc" if request.language == "c" else "g++"
                compiled = _command([cc, source.name, "-o", "main"], work, "", request.compile_timeout)
                if not (compiled.status is Status.FINISHED and compiled.return_code == 0):
                    return RunResult(compile=compiled, run=None)
                argv = ["./main"]
            else:
                argv = [sys.executable if request.language == "python" else "bash", source.name]
            ran = _command(argv, work, request.stdin, request.run_timeout)
            files = {p: Path(work, p).read_bytes() for p in request.fetch_files if Path(work, p).is_file()}
            return RunResult(compile=compiled, run=ran, files=files)


class ScriptedSandbox:
    """Returns `result` (or raises `error`) for every request, after `delay` seconds."""

    def __init__(self, result: RunResult | None = None, error: Exception | None = None, delay: float = 0.0):
        self.result, self.error, self.delay = result, error, delay
        self.calls = 0

    def run(self, request: RunRequest) -> RunResult:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result
