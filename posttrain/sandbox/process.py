"""Start one command, drain its output under a cap, enforce the wall clock, measure it.

The command is started in its own session (its own process group) with stdin from an
in-memory file. stdout and stderr are read incrementally as they arrive; bytes past the cap
are dropped and the command is killed. Killing under bwrap sends SIGKILL to the sandbox's
pid 1 (bwrap's only child): the kernel then kills everything in its pid namespace and bwrap
reaps pid 1 and exits, so nothing is left, not even a zombie; if bwrap has not exited a
second later, its whole process group is killed too. Without a pid namespace
(isolation="none") the process group is killed directly.

CPU time is user + system time of the whole tree as returned by wait4() (pid 1 reaps every
process inside); for a killed run, whose processes are never reaped by anyone who reports
to us, it is read from /proc just before the kill.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

from posttrain.sandbox.types import SandboxError
from posttrain.sandbox.workdir import disk_usage

DISK_POLL_S = 0.1  # how often the work dir's size is measured while a command runs
DRAIN_GRACE_S = 1.0  # after exit: how long to wait for pipe EOF; after a kill: before escalating


@dataclass(frozen=True)
class Command:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdin: bytes
    timeout: float  # seconds, wall clock
    output_limit: int  # bytes per stream
    work_dir: str  # host path of the work dir, for the disk quota
    disk_bytes: int  # quota of the work dir: bytes ...
    disk_entries: int  # ... and files + directories
    pid_namespace: bool  # kill through the sandbox's pid 1 (bwrap) or the process group


@dataclass(frozen=True)
class Outcome:
    exit_code: int  # as os.waitstatus_to_exitcode: negative for a death by signal
    stdout: bytes
    stderr: bytes
    wall_time: float
    cpu_time: float
    max_rss_bytes: int
    killed_for: str | None  # "time_limit" | "output_limit" | "disk_limit" | None


def tree_snapshot(root: int) -> tuple[float, list[int]]:
    """(CPU seconds of `root` and its live descendants incl. what they reaped, its children)."""
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
    return total / os.sysconf("SC_CLK_TCK"), children.get(root, [])


def _start(cmd: Command) -> subprocess.Popen:
    stdin_fd = os.memfd_create("stdin")
    try:
        view = memoryview(cmd.stdin)
        while view:
            view = view[os.write(stdin_fd, view) :]
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        return subprocess.Popen(
            cmd.argv, cwd=cmd.cwd, env=cmd.env, stdin=stdin_fd, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
        )  # fmt: skip
    except OSError as e:
        raise SandboxError(f"could not start {cmd.argv[0]}: {e}") from e
    finally:
        os.close(stdin_fd)


def _signal(pid: int, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_command(cmd: Command) -> Outcome:
    """Run `cmd` until it exits or a limit is hit; never leaves a process behind."""
    start = time.monotonic()
    proc = _start(cmd)
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    pidfd = os.pidfd_open(proc.pid)
    sel = selectors.DefaultSelector()
    for fd in (out_fd, err_fd):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    sel.register(pidfd, selectors.EVENT_READ)
    deadline = start + cmd.timeout
    next_disk = start + DISK_POLL_S
    exited_at: float | None = None
    killed_for: str | None = None
    killed_at = 0.0
    cpu_at_kill = 0.0

    def kill(reason: str) -> None:
        nonlocal killed_for, killed_at, cpu_at_kill
        if killed_for is not None:
            return
        killed_for, killed_at = reason, time.monotonic()
        if exited_at is not None:
            return  # already gone (e.g. output past the cap still in the pipe): verdict only
        cpu_at_kill, children = tree_snapshot(proc.pid)
        if cmd.pid_namespace and children:
            for child in children:  # the sandbox's pid 1; bwrap reaps it and exits
                _signal(child, group=False)
        else:
            _signal(proc.pid, group=True)

    try:
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None:
                if now >= deadline:
                    kill("time_limit")
                if killed_for is not None and now - killed_at > DRAIN_GRACE_S:
                    _signal(proc.pid, group=True)  # bwrap did not go away by itself
                if killed_for is None and now >= next_disk:
                    next_disk = now + DISK_POLL_S
                    if disk_usage(cmd.work_dir, cmd.disk_entries) > cmd.disk_bytes:
                        kill("disk_limit")
            elif now - exited_at > DRAIN_GRACE_S:
                break  # a process outside any pid namespace (isolation="none") holds a pipe
            if exited_at is not None or killed_for is not None:
                wait = 0.05  # draining the last bytes, or waiting for the kill to land
            else:
                wait = max(0.0, min(deadline, next_disk) - now)
            for key, _ in sel.select(wait):
                if key.fd == pidfd:
                    sel.unregister(pidfd)
                    exited_at = time.monotonic()
                    continue
                try:
                    data = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                room = cmd.output_limit - len(buf)
                buf += data[: max(room, 0)]
                if len(data) > room:
                    kill("output_limit")
    finally:
        sel.close()
        os.close(pidfd)
        if not cmd.pid_namespace:
            _signal(proc.pid, group=True)  # what is left of the group; the leader is not reaped yet
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        proc.stderr.close()
    if killed_for is None and disk_usage(cmd.work_dir, cmd.disk_entries) > cmd.disk_bytes:
        killed_for = "disk_limit"  # written faster than one poll interval
    return Outcome(
        exit_code=proc.returncode,
        stdout=bytes(bufs[out_fd]),
        stderr=bytes(bufs[err_fd]),
        wall_time=(exited_at or time.monotonic()) - start,
        cpu_time=max(usage.ru_utime + usage.ru_stime, cpu_at_kill),
        max_rss_bytes=usage.ru_maxrss * 1024,
        killed_for=killed_for,
    )
