"""Shared fixtures: one bwrap sandbox for the module tests, and a guard that checks the host.

These tests need a working bubblewrap (CI installs it); they fail, not skip, without one.
The sandbox here runs programs as a dedicated host uid (TEST_UID) so that "no process of
the sandbox uid is left" cannot be confused with other sandboxes running on the machine.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import time

import pytest

from posttrain.sandbox import LocalSandbox, RunRequest, RunResult, Settings

TEST_UID = 64124 if os.geteuid() == 0 else os.getuid()
SMALL = Settings(fsize_bytes=8 << 20, disk_bytes=32 << 20, disk_entries=2000)


def processes_of(uid: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of every host process whose real uid is `uid`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                found.append((int(name), cmd))
    return found


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class HostGuard:
    """Plants secrets and markers on the host; `check()` asserts nothing was touched."""

    def __init__(self, sandbox: LocalSandbox) -> None:
        self.sandbox = sandbox
        tag = secrets.token_hex(6)
        self.secret = f"posttrain-secret-{secrets.token_hex(16)}"
        self.secret_tmp = f"/tmp/posttrain-test-secret-{tag}"  # world-readable on purpose
        self.marker = f"/tmp/posttrain-test-marker-{tag}"  # must never come to exist
        self.secret_root = f"/root/posttrain-test-secret-{tag}" if os.geteuid() == 0 else None
        for path in filter(None, (self.secret_tmp, self.secret_root)):
            with open(path, "w") as f:
                f.write(self.secret)
            os.chmod(path, 0o644)
        self.watched = {p: _digest(p) for p in ("/etc/passwd", "/etc/hosts") if os.path.exists(p)}
        self.allowed_pids: set[int] = set()

    def check(self) -> None:
        assert not os.path.exists(self.marker), "a sandboxed program created a file on the host"
        for path in filter(None, (self.secret_tmp, self.secret_root)):
            with open(path) as f:
                assert f.read() == self.secret, f"{path} was changed"
        for path, digest in self.watched.items():
            assert _digest(path) == digest, f"{path} was changed"
        left = [p for p in processes_of(TEST_UID) if p[0] not in self.allowed_pids]
        if TEST_UID != os.getuid():
            assert left == [], f"processes of the sandbox uid outlived the run: {left}"
        assert os.listdir(self.sandbox.work_root) == [], "a work dir was left behind"

    def cleanup(self) -> None:
        for path in filter(None, (self.secret_tmp, self.secret_root, self.marker)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


@pytest.fixture(scope="session")
def sandbox():
    sb = LocalSandbox(max_workers=2, max_queue=16, uid=TEST_UID, gid=TEST_UID, settings=SMALL)
    yield sb
    sb.close()


@pytest.fixture
def host(sandbox):
    guard = HostGuard(sandbox)
    yield guard
    guard.cleanup()


@pytest.fixture
def run(sandbox):
    """run(code, language="python", **request fields) with the small limits of the hostile tests."""

    def _run(code: str, language: str = "python", **kw) -> RunResult:
        kw.setdefault("run_timeout", 1.0)
        kw.setdefault("memory_limit_mb", 256)
        kw.setdefault("output_limit_bytes", 1 << 16)
        return sandbox.run(RunRequest(code=code, language=language, **kw))

    return _run


@pytest.fixture
def start_as_sandbox_uid():
    """Start a host process running as the sandbox's uid; killed at the end of the test."""
    procs: list[subprocess.Popen] = []

    def _start(argv: list[str]) -> subprocess.Popen:
        cmd = argv
        if TEST_UID != os.getuid():
            cmd = ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", *argv]
        procs.append(subprocess.Popen(cmd))
        time.sleep(0.1)
        return procs[-1]

    yield _start
    for proc in procs:
        proc.kill()
        proc.wait()
