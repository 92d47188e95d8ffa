"""A persistent bash shell in the bubblewrap sandbox: one per episode, many per event loop.

    session = ShellSession(work_dir, isolation=shared_isolation(), limits=SessionLimits())
    await session.start()
    out = await session.run("cd src && export X=1", timeout=10.0)   # CommandOutput
    out = await session.run("echo $X; pwd", timeout=10.0)            # "1\\n/work/src\\n", exit_code 0
    await session.close()                                            # every process of it is gone

The shell is `bash --noprofile --norc` started with `BwrapIsolation.command` (no network, fresh
/tmp, the episode's host work dir bound at /work, rlimits including a process count), reading
commands on a pipe. Each command is sent as one line that `eval`s it (quoted as $'\\xHH...', so
no quoting or syntax error can swallow the line after it, and no fork is needed to decode it)
with stdin from /dev/null, then prints a fresh random sentinel and `$?`; the command's output
(stdout and stderr merged) is what comes before the sentinel. The model cannot guess a sentinel
before it is used. Env vars and the cwd persist because `eval` runs in the shell itself.

Output is kept as head + tail of `max_output_bytes` with "[... N bytes cut ...]" between; the
rest is read and dropped, so a flood costs time, not memory. A command past its timeout, or
one that ends the shell (`exit`, `kill -9 $$`, `exec`), or a work dir past its disk quota
(polled every DISK_POLL_S while the session lives): the sandbox's pid 1 is killed, which tears
down its pid namespace (background jobs and double-forked daemons included), and a fresh shell
starts over the same files; `CommandOutput.restarted` says so. `close()` does the same and
reaps bwrap: nothing of the episode survives it.

No thread per session: the process is a plain Popen, its pipes are asyncio pipe transports, and
its exit is noticed by polling `poll()` (only after EOF or a kill). `spawn_sandboxed`,
`connect_pipes` and `stop_sandbox` are that lifecycle for any long-lived sandboxed process (the
bfcl env's API runner uses them too, domains/bfcl/session.py).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from posttrain.envs.env import InfraError
from posttrain.sandbox.isolation import BwrapIsolation, Limits, resolve, sandbox_env
from posttrain.sandbox.process import tree_snapshot
from posttrain.sandbox.types import SandboxError
from posttrain.sandbox.workdir import disk_usage, remove_work_dir

DISK_POLL_S = 1.0
KILL_GRACE_S = 2.0  # after killing the sandbox's pid 1: how long bwrap may take to exit
START_TIMEOUT_S = 20.0
READ_CHUNK = 1 << 16
_MARGIN = 128  # bytes a sentinel line takes at most


@dataclass(frozen=True)
class CommandOutput:
    output: str  # stdout + stderr merged, cut to max_output_bytes with a marker
    exit_code: int | None  # the command's status; the shell's when it ended; None after a timeout
    timed_out: bool
    truncated: bool
    seconds: float
    restarted: bool = False  # the shell was killed and started again after this command
    reason: str = ""  # why it was restarted: "timeout" | "shell_exited" | "disk_limit"


@dataclass(frozen=True)
class SessionLimits:
    memory_bytes: int = 2 << 30  # RLIMIT_AS per process
    cpu_seconds: int = 600  # RLIMIT_CPU per process
    nproc: int = 128  # processes + threads of the sandbox
    fsize_bytes: int = 64 << 20  # largest file
    nofile: int = 256
    disk_bytes: int = 512 << 20  # the work dir's total size ...
    disk_entries: int = 20000  # ... and entry count


_isolations: dict[tuple[int, int], BwrapIsolation] = {}
_iso_lock = threading.Lock()


def shared_isolation(uid: int = 65534, gid: int = 65534) -> BwrapIsolation:
    """The process-wide bwrap command builder (checked once); InfraError when bwrap cannot run."""
    with _iso_lock:
        iso = _isolations.get((uid, gid))
        if iso is None:
            try:
                iso = BwrapIsolation(uid=uid, gid=gid)
                iso.check()
            except SandboxError as e:
                raise InfraError(f"terminal sandbox: {e}") from e
            _isolations[(uid, gid)] = iso
        return iso


def make_work_root() -> str:
    """A host directory for episode work dirs (the sandbox uid may traverse it, not list it)."""
    root = tempfile.mkdtemp(prefix="posttrain-terminal-")
    os.chmod(root, 0o711)
    return root


def bash_quote(text: str) -> str:
    """`text` as a bash $'...' word of \\xHH escapes (any bytes but NUL, no expansion)."""
    return "$'" + "".join(f"\\x{b:02x}" for b in text.encode()) + "'"


def _cut(data: bytes, total: int, limit: int) -> tuple[str, bool]:
    """Head + "[... N bytes cut ...]" + tail of a stream of `total` bytes whose ends `data` kept."""
    if len(data) == total and total <= limit:
        return data.decode("utf-8", errors="replace"), False
    head, tail = limit // 2, limit - limit // 2
    marker = f"\n[... {total - head - tail} bytes cut ...]\n"
    return data[:head].decode("utf-8", errors="replace") + marker + data[-tail:].decode("utf-8", errors="replace"), True


class ShellSession:
    def __init__(self, work_dir: str, *, isolation: BwrapIsolation, limits: SessionLimits = SessionLimits(),
                 max_output_bytes: int = 8192, ro_binds: Sequence[tuple[str, str]] = ()) -> None:
        self.work_dir = work_dir
        self.isolation = isolation
        self.limits = limits
        self.max_output_bytes = max_output_bytes
        self.ro_binds = tuple(ro_binds)
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._reader: asyncio.StreamReader | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._writer: asyncio.WriteTransport | None = None
        self._pending = b""  # bytes after the last sentinel (background output): the next command's
        self._watchdog: asyncio.Task | None = None
        self._over_disk = False
        self._stopped = False
        bash = resolve("bash", ("/usr/bin/bash", "/bin/bash"))
        if bash is None:
            raise InfraError("terminal sandbox: bash not found under /usr")
        self._bash = bash

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the shell; InfraError when the sandbox does not come up."""
        lim = Limits(memory_bytes=self.limits.memory_bytes, cpu_seconds=self.limits.cpu_seconds,
                     nproc=self.limits.nproc, fsize_bytes=self.limits.fsize_bytes, nofile=self.limits.nofile)
        try:
            proc = spawn_sandboxed(self.isolation, [self._bash, "--noprofile", "--norc"], self.work_dir, lim,
                                   self.ro_binds)
        except OSError as e:
            raise InfraError(f"terminal sandbox: could not start bwrap: {e}") from e
        self._proc, self._pending, self._stopped = proc, b"", False
        self._reader, self._writer, self._transports = await connect_pipes(proc, READ_CHUNK)
        if self._watchdog is None:
            self._watchdog = asyncio.create_task(self._watch_disk())
        hello = await self._exchange("true", START_TIMEOUT_S, probe=True)
        if hello.exit_code != 0:
            text = hello.output.strip().splitlines()
            await self._kill()
            raise InfraError(f"terminal sandbox: the shell did not start ({text[-1] if text else 'no output'})")

    async def run(self, command: str, timeout: float) -> CommandOutput:
        """Run one command in the shell (see the module docstring); restarts the shell when needed."""
        if self._proc is None or self._stopped:  # never started, or stopped by kill_now (state())
            await self._kill()
            await self.start()
        return await self._exchange(command.replace("\x00", ""), timeout)

    def kill_now(self) -> None:
        """SIGKILL every process of the session (sync: for `state()`); bwrap is reaped by `close()`."""
        proc = self._proc
        self._stopped = True
        if proc is None or proc.poll() is not None:
            return
        kill_sandbox(proc)
        deadline = time.monotonic() + KILL_GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if proc.poll() is None:
            _kill(proc.pid, group=True)
            proc.wait()

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        await self._kill()

    # -- internals ---------------------------------------------------------------------------
    async def _kill(self) -> None:
        proc, self._proc = self._proc, None
        for t in self._transports:
            t.close()
        self._transports, self._writer, self._reader = [], None, None
        if proc is not None:
            await stop_sandbox(proc)

    async def _restart(self) -> None:
        await self._kill()
        self._over_disk = False
        self.restarts += 1
        await self.start()

    async def _watch_disk(self) -> None:
        while True:
            await asyncio.sleep(DISK_POLL_S)
            used = await asyncio.to_thread(disk_usage, self.work_dir, self.limits.disk_entries)
            if used > self.limits.disk_bytes and self._proc is not None:
                self._over_disk = True
                self.kill_now()

    async def _exchange(self, command: str, timeout: float, probe: bool = False) -> CommandOutput:
        assert self._writer is not None and self._reader is not None
        token = secrets.token_hex(16).encode()
        line = (f"eval {bash_quote(command)} </dev/null; "
                f"builtin printf '\\n%s %s\\n' {token.decode()} \"$?\"\n")
        sentinel = re.compile(rb"\n" + token + rb" (\d+)\n")
        start = time.monotonic()
        head_keep = self.max_output_bytes // 2
        tail_keep = self.max_output_bytes + READ_CHUNK + _MARGIN
        kept, dropped, found = bytearray(self._pending), 0, None
        self._pending = b""
        self._writer.write(line.encode())
        reader = self._reader
        timed_out = eof = False
        try:
            async with asyncio.timeout(timeout):
                while found is None:
                    chunk = await reader.read(READ_CHUNK)
                    if not chunk:
                        eof = True
                        break
                    kept += chunk
                    found = sentinel.search(kept, max(0, len(kept) - len(chunk) - _MARGIN))
                    if found is None and len(kept) > head_keep + tail_keep:
                        excess = len(kept) - head_keep - tail_keep
                        del kept[head_keep:head_keep + excess]
                        dropped += excess
        except TimeoutError:
            timed_out = True
        except asyncio.CancelledError:  # the episode was cancelled mid-command: the next run starts afresh
            self._stopped = True
            raise
        if not found and not (timed_out or eof):  # a cancelled read: nothing else leaves the loop
            raise RuntimeError("shell session: read ended without a sentinel")
        end = found.start() if found else len(kept)
        if found:
            self._pending = bytes(kept[found.end():])
        out, truncated = _cut(bytes(kept[:end]), dropped + end, self.max_output_bytes)
        seconds = time.monotonic() - start
        if found:
            return CommandOutput(out, int(found.group(1)), False, truncated, seconds)
        if probe:
            return CommandOutput(out, None, timed_out, truncated, seconds)
        reason = "disk_limit" if self._over_disk else "timeout" if timed_out else "shell_exited"
        code = None
        if not timed_out and self._proc is not None:
            for _ in range(200):
                if self._proc.poll() is not None:
                    break
                await asyncio.sleep(0.005)
            code = self._proc.returncode
        await self._restart()
        return CommandOutput(out, code, timed_out, truncated, seconds, restarted=True, reason=reason)


def spawn_sandboxed(isolation: BwrapIsolation, argv: list[str], work_dir: str, limits: Limits,
                    ro_binds: Sequence[tuple[str, str]] = ()) -> subprocess.Popen:
    """Start `argv` in the sandbox (`work_dir` at /work) with pipes on stdin and stdout (stderr
    merged into stdout), in its own session; OSError when bwrap cannot be started."""
    argv, cwd = isolation.command(argv, work_dir, limits, ro_binds)
    return subprocess.Popen(argv, cwd=cwd, env=sandbox_env(work_dir, True), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)


async def connect_pipes(proc: subprocess.Popen, limit: int) -> tuple[asyncio.StreamReader, asyncio.WriteTransport,
                                                                     list[asyncio.BaseTransport]]:
    """(reader of its stdout, writer of its stdin, both transports to close) on the running loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    rt, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
    wt, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
    return reader, wt, [rt, wt]


async def stop_sandbox(proc: subprocess.Popen) -> None:
    """Kill every process of the sandbox (kill_sandbox) and reap bwrap; bwrap itself is killed
    when it has not exited within KILL_GRACE_S."""
    if proc.poll() is None:
        kill_sandbox(proc)
    deadline = time.monotonic() + KILL_GRACE_S
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    if proc.poll() is None:
        _kill(proc.pid, group=True)
        proc.wait()


def kill_sandbox(proc: subprocess.Popen) -> None:
    """SIGKILL the sandbox's pid 1. The kernel then kills everything in its pid namespace and
    reports pid 1's death (so bwrap exits) only once they are all gone: bwrap's exit is the
    proof that nothing is left, so bwrap itself is killed only when it does not exit."""
    _, children = tree_snapshot(proc.pid)
    for child in children:
        _kill(child, group=False)
    if not children:
        _kill(proc.pid, group=True)


def _kill(pid: int, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def new_work_dir(root: str, files: dict[str, tuple[bytes, int]], isolation: BwrapIsolation) -> str:
    """A fresh directory under `root` holding exactly `files` (relative path -> (bytes, mode)),
    given to the sandbox uid."""
    path = tempfile.mkdtemp(prefix="ep-", dir=root)
    try:
        write_files(path, files)
        isolation.prepare_work_dir(path)
    except OSError:
        remove_work_dir(path)
        raise
    return path


def write_files(path: str, files: dict[str, tuple[bytes, int]]) -> None:
    for rel, (data, mode) in sorted(files.items()):
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
        os.chmod(full, mode & 0o777)


def cpu_seconds_for(wall: float) -> int:
    return int(math.ceil(wall)) + 5
