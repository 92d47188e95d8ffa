"""One request, start to end: fresh work dir, compile (C/C++), run, classify, fetch files.

How one command is started, drained, timed and killed is in process.py; the work dir and
safe fetching in workdir.py; the isolation command line in isolation.py.

How a status is decided, honestly:
- TimeLimitExceeded: the host wall clock ran out, or the process died of SIGXCPU (CPU rlimit).
- OutputLimitExceeded: stdout or stderr passed the cap, the work dir passed its disk quota,
  or a write hit RLIMIT_FSIZE (SIGXFSZ, or "File too large" on stderr with a nonzero code).
- MemoryLimitExceeded: a heuristic, since the limit is RLIMIT_AS (no cgroup): a nonzero exit
  whose stderr shows MemoryError / std::bad_alloc / "Cannot allocate memory" / "memory
  exhausted", or a death by SIGSEGV, SIGBUS, SIGABRT or SIGKILL after using at least half
  the limit in resident memory. A program can fake these lines; that only changes the
  status of its own failed run.
- Error: death by a signal otherwise. bwrap reports a death by signal N as exit code 128+N,
  so a program that calls exit(128+N) itself is reported the same way; return_code for a
  signal death is always 128+N (the shell convention), also with isolation="none".
- Finished: anything else, with the program's return code.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass

from posttrain.sandbox.isolation import Limits, resolve, sandbox_env
from posttrain.sandbox.process import Command, Outcome, run_command
from posttrain.sandbox.types import CommandResult, RunRequest, RunResult, SandboxError, Status
from posttrain.sandbox.workdir import (
    BINARY_NAME,
    SOURCE_NAMES,
    fetch,
    make_work_dir,
    remove_work_dir,
    validate,
)

_FATAL = {
    signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGKILL, signal.SIGSEGV,
    signal.SIGSYS, signal.SIGTRAP, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGTERM, signal.SIGPIPE,
    signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2,
}  # fmt: skip
_MEMORY_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGKILL}
_MEMORY_TEXT = re.compile(
    rb"^MemoryError|std::bad_alloc|Cannot allocate memory|memory exhausted|out of memory",
    re.MULTILINE | re.IGNORECASE,
)
_FSIZE_TEXT = re.compile(rb"File too large|File size limit exceeded")


@dataclass(frozen=True)
class Toolchain:
    """Interpreters and compilers by absolute real path (no shims, no PATH lookup per run)."""

    python: str | None
    bash: str | None
    gcc: str | None
    gpp: str | None

    @classmethod
    def find(cls) -> "Toolchain":
        return cls(
            python=resolve("python3", ("/usr/bin/python3",)),
            bash=resolve("bash", ("/usr/bin/bash", "/bin/bash")),
            gcc=resolve("gcc", ("/usr/bin/gcc",)),
            gpp=resolve("g++", ("/usr/bin/g++",)),
        )

    def need(self, what: str) -> str:
        path = getattr(self, what)
        if path is None:
            name = {"python": "python3", "bash": "bash", "gcc": "gcc", "gpp": "g++"}[what]
            raise SandboxError(f"{name} not found under /usr: install it (`apt-get install {name}`)")
        return path


@dataclass(frozen=True)
class Settings:
    """Per-sandbox limits that are not part of a request."""

    compile_memory_bytes: int = 2 << 30  # compilers get at least this much address space
    fsize_bytes: int = 64 << 20  # largest single file a program may write
    disk_bytes: int = 256 << 20  # total size of the work dir
    disk_entries: int = 20000  # files and directories in the work dir
    nproc: int = 64
    nofile: int = 256
    work_root: str | None = None  # where work dirs are made; default: a fresh temp dir


def _signal_of(exit_code: int) -> int | None:
    """The signal that ended the program: from the wait status, or bwrap's 128+N convention."""
    if exit_code < 0:
        return -exit_code
    if exit_code > 128 and (exit_code - 128) in _FATAL:
        return exit_code - 128
    return None


def to_result(out: Outcome, memory_bytes: int) -> tuple[CommandResult, list[str]]:
    """Decide the status of one finished command (see the module docstring)."""
    sig = _signal_of(out.exit_code)
    rc = 128 + sig if sig is not None else out.exit_code
    status, event = _classify(out.killed_for, rc, sig, out.stderr, out.max_rss_bytes, memory_bytes)
    result = CommandResult(
        status=status,
        return_code=None if out.killed_for else rc,
        stdout=out.stdout.decode("utf-8", errors="replace"),
        stderr=out.stderr.decode("utf-8", errors="replace"),
        wall_time=out.wall_time,
        cpu_time=out.cpu_time,
    )
    return result, [event] if event else []


def _classify(
    killed_for: str | None, rc: int, sig: int | None, stderr: bytes, maxrss: int, memory_bytes: int
) -> tuple[Status, str | None]:
    if killed_for == "time_limit":
        return Status.TIME_LIMIT, "time_limit"
    if killed_for in ("output_limit", "disk_limit"):
        return Status.OUTPUT_LIMIT, killed_for
    if sig == signal.SIGXCPU:
        return Status.TIME_LIMIT, "cpu_limit"
    if sig == signal.SIGXFSZ or (rc != 0 and _FSIZE_TEXT.search(stderr[-4096:])):
        return Status.OUTPUT_LIMIT, "file_size_limit"
    if rc != 0 and _MEMORY_TEXT.search(stderr[-4096:]):
        return Status.MEMORY_LIMIT, "memory_limit"
    if sig in _MEMORY_SIGNALS and maxrss >= memory_bytes // 2:
        return Status.MEMORY_LIMIT, "memory_limit"
    if sig is not None:
        return Status.ERROR, f"signal_{signal.Signals(sig).name}"
    return Status.FINISHED, None


def _argvs(lang: str, tools: Toolchain) -> tuple[list[str] | None, list[str]]:
    """(compile argv or None, run argv), relative to the work dir."""
    source = SOURCE_NAMES[lang]
    if lang == "python":  # -E -s: no PYTHON* variables, no user site; -B: no .pyc in /work
        return None, [tools.need("python"), "-E", "-s", "-B", source]
    if lang == "bash":
        return None, [tools.need("bash"), source]
    if lang == "c":
        return [tools.need("gcc"), "-O2", "-o", BINARY_NAME, source, "-lm"], ["./" + BINARY_NAME]
    return [tools.need("gpp"), "-O2", "-std=c++17", "-o", BINARY_NAME, source], ["./" + BINARY_NAME]


def execute(request: RunRequest, isolation, tools: Toolchain, settings: Settings, work_root: str) -> RunResult:
    """Validate, prepare a fresh work dir, compile if needed, run, fetch, clean up."""
    files, fetch_paths = validate(request)
    compile_argv, run_argv = _argvs(request.language, tools)
    memory = int(request.memory_limit_mb * (1 << 20))
    work_dir = make_work_dir(work_root, SOURCE_NAMES[request.language], request.code, files)
    env = sandbox_env(work_dir, isolated=isolation.name != "none")

    def command(argv: list[str], memory_bytes: int, timeout: float, stdin: bytes) -> tuple[CommandResult, list[str]]:
        limits = Limits(
            memory_bytes=memory_bytes,
            cpu_seconds=int(math.ceil(timeout)) + 1,
            nproc=settings.nproc,
            fsize_bytes=settings.fsize_bytes,
            nofile=settings.nofile,
        )
        full_argv, cwd = isolation.command(argv, work_dir, limits)
        out = run_command(
            Command(
                argv=full_argv, cwd=cwd, env=env, stdin=stdin, timeout=timeout,
                output_limit=request.output_limit_bytes, work_dir=work_dir,
                disk_bytes=settings.disk_bytes, disk_entries=settings.disk_entries,
                pid_namespace=isolation.name != "none",
            )
        )  # fmt: skip
        return to_result(out, memory_bytes)

    events: list[str] = []
    try:
        isolation.prepare_work_dir(work_dir)
        compiled = None
        if compile_argv is not None:
            compile_memory = max(memory, settings.compile_memory_bytes)
            compiled, ev = command(compile_argv, compile_memory, request.compile_timeout, b"")
            events += ["compile_" + e for e in ev]
            if not (compiled.status is Status.FINISHED and compiled.return_code == 0):
                return RunResult(compile=compiled, run=None, files={}, events=tuple(events))
        ran, ev = command(run_argv, memory, request.run_timeout, request.stdin.encode())
        events += ev
        fetched: dict[str, bytes] = {}
        for path in fetch_paths:
            got = fetch(work_dir, path, settings.fsize_bytes)
            if isinstance(got, bytes):
                fetched[path] = got
            elif isinstance(got, str):
                events.append(f"fetch_refused:{path}: {got}")
        return RunResult(compile=compiled, run=ran, files=fetched, events=tuple(events))
    finally:
        remove_work_dir(work_dir)
