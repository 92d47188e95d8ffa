"""One request, start to end: fresh work dir, compile (C/C++), run, classify, fetch files.

Each command is started in its own session (so its whole process group can be killed)
with stdin from an in-memory file, and its stdout/stderr drained incrementally: bytes past
`output_limit_bytes` are dropped and the command is killed (OutputLimitExceeded). The wall
clock is enforced from the host (SIGKILL to the process group; under bwrap that kills the
sandbox's pid 1 and with it every process inside). The work dir's total size is polled
while the command runs.

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
import os
import re
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

from posttrain.sandbox.isolation import Limits, resolve, sandbox_env
from posttrain.sandbox.types import CommandResult, RunRequest, RunResult, SandboxError, Status
from posttrain.sandbox.workdir import (
    BINARY_NAME,
    SOURCE_NAMES,
    disk_usage,
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
DISK_POLL_S = 0.1
DRAIN_GRACE_S = 1.0  # after the process exits (or is killed), how long to wait for pipe EOF


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
    nproc: int = 64
    nofile: int = 256
    work_root: str | None = None  # where work dirs are made; default: a fresh temp dir


def _signal_of(rc: int, raw_signal: int | None) -> int | None:
    if raw_signal is not None:
        return raw_signal
    if rc > 128 and (rc - 128) in _FATAL:
        return rc - 128
    return None


def run_command(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    stdin: bytes,
    timeout: float,
    output_limit: int,
    memory_bytes: int,
    work_dir: str,
    disk_bytes: int,
) -> tuple[CommandResult, list[str]]:
    """Run one command to completion or until a limit; return its result and events."""
    stdin_fd = os.memfd_create("stdin")
    try:
        view = memoryview(stdin)
        while view:
            view = view[os.write(stdin_fd, view) :]
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=stdin_fd, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError as e:
            raise SandboxError(f"could not start {argv[0]}: {e}") from e
    finally:
        os.close(stdin_fd)

    cpu_at_kill = 0.0

    def kill() -> None:
        nonlocal cpu_at_kill
        if proc.returncode is None and cpu_at_kill == 0.0:
            cpu_at_kill = tree_cpu_seconds(proc.pid)  # killed processes are never reaped by us
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    pidfd = os.pidfd_open(proc.pid)
    sel = selectors.DefaultSelector()
    bufs: dict[int, bytearray] = {}
    for pipe in (proc.stdout, proc.stderr):
        assert pipe is not None
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe.fileno(), selectors.EVENT_READ)
        bufs[pipe.fileno()] = bytearray()
    sel.register(pidfd, selectors.EVENT_READ)
    deadline = start + timeout
    next_disk = start + DISK_POLL_S
    exited_at: float | None = None
    killed_for: str | None = None
    try:
        while len(sel.get_map()) > 0:
            now = time.monotonic()
            if exited_at is None and killed_for is None and now >= deadline:
                killed_for = "time_limit"
                kill()
            if exited_at is not None and now - exited_at > DRAIN_GRACE_S:
                break  # something outside a pid namespace (isolation="none") kept a pipe open
            if exited_at is None and killed_for is None and now >= next_disk:
                next_disk = now + DISK_POLL_S
                if disk_usage(work_dir) > disk_bytes:
                    killed_for = "disk_limit"
                    kill()
            if exited_at is not None or killed_for is not None:
                wait = 0.05  # draining the last bytes (or waiting for the kill to land)
            else:
                wait = max(0.0, min(deadline, next_disk) - now)
            for key, _ in sel.select(wait):
                fd = key.fd
                if fd == pidfd:
                    sel.unregister(pidfd)
                    exited_at = time.monotonic()
                    continue
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    continue
                buf = bufs[fd]
                room = output_limit - len(buf)
                buf += data[: max(room, 0)]
                if len(data) > room and killed_for is None:
                    killed_for = "output_limit"
                    kill()
    finally:
        sel.close()
        os.close(pidfd)
        try:  # anything left in the group (only possible with isolation="none")
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        for pipe in (proc.stdout, proc.stderr):
            assert pipe is not None
            pipe.close()
    wall = (exited_at or time.monotonic()) - start
    cpu = max(usage.ru_utime + usage.ru_stime, cpu_at_kill)
    rc = proc.returncode
    sig = _signal_of(rc, -rc if rc < 0 else None)
    if sig is not None:
        rc = 128 + sig
    stdout_b, stderr_b = (bytes(b) for b in bufs.values())  # registered stdout first
    if killed_for is None and disk_usage(work_dir) > disk_bytes:
        killed_for = "disk_limit"
    status_, event = _classify(killed_for, rc, sig, stderr_b, usage.ru_maxrss * 1024, memory_bytes)
    result = CommandResult(
        status=status_,
        return_code=None if killed_for in ("time_limit", "output_limit", "disk_limit") else rc,
        stdout=stdout_b.decode("utf-8", errors="replace"),
        stderr=stderr_b.decode("utf-8", errors="replace"),
        wall_time=wall,
        cpu_time=cpu,
    )
    return result, [event] if event else []


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and its live descendants (with what they reaped), from /proc."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        ticks[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


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


def execute(request: RunRequest, isolation, tools: Toolchain, settings: Settings, work_root: str) -> RunResult:
    """Validate, prepare a fresh work dir, compile if needed, run, fetch, clean up."""
    files, fetch_paths = validate(request)
    lang = request.language
    source = SOURCE_NAMES[lang]
    if lang == "python":
        run_argv = [tools.need("python"), "-E", "-s", "-B", source]
    elif lang == "bash":
        run_argv = [tools.need("bash"), source]
    else:
        run_argv = ["./" + BINARY_NAME]
    compile_argv = None
    if lang == "c":
        compile_argv = [tools.need("gcc"), "-O2", "-o", BINARY_NAME, source, "-lm"]
    elif lang == "cpp":
        compile_argv = [tools.need("gpp"), "-O2", "-std=c++17", "-o", BINARY_NAME, source]
    memory = int(request.memory_limit_mb * (1 << 20))
    work_dir = make_work_dir(work_root, source, request.code, files)
    events: list[str] = []
    try:
        isolation.prepare_work_dir(work_dir)
        env = sandbox_env(work_dir, isolated=isolation.name != "none")
        compiled = None
        if compile_argv is not None:
            limits = _limits(max(memory, settings.compile_memory_bytes), request.compile_timeout, settings)
            argv, cwd = isolation.command(compile_argv, work_dir, limits)
            compiled, ev = run_command(
                argv, cwd, env, b"", request.compile_timeout, request.output_limit_bytes,
                limits.memory_bytes, work_dir, settings.disk_bytes,
            )  # fmt: skip
            events += ["compile_" + e for e in ev]
            if not (compiled.status is Status.FINISHED and compiled.return_code == 0):
                return RunResult(compile=compiled, run=None, files={}, events=tuple(events))
        limits = _limits(memory, request.run_timeout, settings)
        argv, cwd = isolation.command(run_argv, work_dir, limits)
        ran, ev = run_command(
            argv, cwd, env, request.stdin.encode(), request.run_timeout,
            request.output_limit_bytes, memory, work_dir, settings.disk_bytes,
        )  # fmt: skip
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


def _limits(memory_bytes: int, timeout: float, settings: Settings) -> Limits:
    return Limits(
        memory_bytes=memory_bytes,
        cpu_seconds=int(math.ceil(timeout)) + 1,
        nproc=settings.nproc,
        fsize_bytes=settings.fsize_bytes,
        nofile=settings.nofile,
    )
