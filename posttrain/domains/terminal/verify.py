"""Score a terminal episode from its saved final files alone: the task's tests in a FRESH sandbox.

    state = snapshot(work_dir, task_dir)            # JSON-able: what Trajectory.final_state holds
    score = verify(task, state, isolation=shared_isolation(), work_root=root)
    score.value, score.details["checks"], score.details["events"]

`verify` writes the state's files into a new directory (symlinks last, never followed; anything
the episode left under tests/ is dropped; reward files it planted are deleted, with an event),
mounts the task's own tests read-only at /work/tests (they can be neither edited, renamed nor
removed from inside), and runs harness/runner.py as the sandbox's main program: no process of
the episode exists there. pytest and its dependencies come read-only from this Python's own
environment (PYTEST_MODULES, mounted under /opt/posttrain-pytest), whatever the system Python has.

The verdict is the one line the runner writes with an HMAC under a key made for this run and
sent on its stdin; see harness/runner.py for why the code under test cannot produce it. A line
with a wrong MAC voids the run (`forged_verdict`, reward 0); no line (the runner was killed at
the time limit) is reward 0 with `verifier_timeout` / `no_verdict`. A sandbox that does not start
is an InfraError. Reward: with [[checks]], the summed weights of the checks whose files all pass
over the total; without, 1.0 when every test_*.py passes (times test.sh's number when there is
one: a test.sh alone may give partial reward). A pytest file passes when it collected at least
one test and every test passed; test.sh passes (in a check) when it wrote exactly 1.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import json
import math
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from posttrain.envs.env import InfraError
from posttrain.domains.terminal.programs import RUNNER
from posttrain.domains.terminal.task import TEST_SH, TerminalTask
from posttrain.sandbox.isolation import BwrapIsolation, Limits, resolve, sandbox_env
from posttrain.sandbox.process import Command, run_command
from posttrain.sandbox.workdir import check_relative_path, remove_work_dir
from posttrain.core.types import Score

VERDICT = "POSTTRAIN-TERMINAL-VERDICT "
PYTEST_DIR = "/opt/posttrain-pytest"
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
_REQUIRED = ("pytest", "_pytest", "pluggy", "iniconfig")
MAX_STATE_BYTES = 16 << 20
REWARD_NAMES = ("reward.txt", "reward.json")


def snapshot(work_dir: str, task_dir: str, max_bytes: int = MAX_STATE_BYTES) -> dict[str, Any]:
    """The work dir as JSON: regular files (base64 + mode), dirs (mode), symlinks (target); links
    are never followed, special files are skipped. Past `max_bytes` of files: `over_cap`, no files."""
    files: dict[str, dict] = {}
    dirs: dict[str, int] = {}
    links: dict[str, str] = {}
    skipped: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(work_dir):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, work_dir)
            try:
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    links[rel] = os.readlink(full)
                elif stat.S_ISDIR(st.st_mode):
                    dirs[rel] = stat.S_IMODE(st.st_mode)
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
                    if total > max_bytes:
                        return {"task_dir": task_dir, "files": {}, "dirs": {}, "links": {}, "skipped": [],
                                "bytes": total, "over_cap": True}
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    with os.fdopen(fd, "rb") as f:
                        data = f.read(max_bytes + 1)
                    files[rel] = {"data": base64.b64encode(data).decode(), "mode": stat.S_IMODE(st.st_mode)}
                else:
                    skipped.append(rel)
            except OSError:
                skipped.append(rel)
    return {"task_dir": task_dir, "files": files, "dirs": dirs, "links": links, "skipped": sorted(skipped),
            "bytes": total, "over_cap": False}


def _planted(rel: str) -> bool:
    return os.path.basename(rel) in REWARD_NAMES or rel.startswith("logs/verifier")


def restore(state: dict, dest: str) -> list[str]:
    """Write a snapshot into the empty dir `dest` (tests/ and planted reward files left out); events."""
    events: set[str] = set()
    entries = [(check_relative_path("state", p), v) for p, v in state.get("files", {}).items()]
    dirs = [(check_relative_path("state", p), m) for p, m in state.get("dirs", {}).items()]
    links = [(check_relative_path("state", p), t) for p, t in state.get("links", {}).items()]

    def keep(rel: str) -> bool:
        if rel == "tests" or rel.startswith("tests/"):  # the task's own tests are mounted there
            return False
        if _planted(rel):
            events.add("planted_reward_file")
            return False
        return True

    for rel, _mode in sorted(dirs):
        if keep(rel):
            os.makedirs(os.path.join(dest, rel), exist_ok=True)
    for rel, entry in entries:
        if keep(rel):
            full = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(entry["data"]))
            os.chmod(full, int(entry["mode"]) & 0o777)
    for rel, target in links:  # last: nothing is ever written through them
        full = os.path.join(dest, rel)
        if keep(rel) and not os.path.lexists(full) and os.path.isdir(os.path.dirname(full)):
            os.symlink(str(target), full)
    for rel, mode in sorted(dirs, reverse=True):  # modes last, deepest first (a 0o555 dir was written into)
        if keep(rel):
            os.chmod(os.path.join(dest, rel), (int(mode) & 0o777) | 0o700)
    return sorted(events)


def pytest_binds() -> list[tuple[str, str]]:
    """(host path, sandbox path) of pytest and its dependencies, from this Python's environment."""
    binds = []
    for name in PYTEST_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            if name in _REQUIRED:
                raise InfraError(f"terminal verifier: {name} is not installed in {sys.prefix} (pip install pytest)")
            continue
        origin = Path(spec.origin)
        src = origin.parent if origin.name == "__init__.py" else origin
        binds.append((str(src), f"{PYTEST_DIR}/{src.name}"))
    return binds


def _write_tests(task: TerminalTask, dest: str) -> None:
    for rel, tf in sorted(task.tests.items()):
        full = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
        with open(full, "wb") as f:
            f.write(tf.data)
        os.chmod(full, (tf.mode & 0o777) | 0o444)  # readable by the sandbox uid, never writable
    for dirpath, _dirs, _files in os.walk(dest):
        os.chmod(dirpath, 0o755)


def read_verdict(stdout: bytes, key: bytes) -> tuple[dict | None, list[str]]:
    found, events = [], []
    for line in stdout.decode("utf-8", errors="replace").splitlines():
        if not line.startswith(VERDICT):
            continue
        mac, _, payload = line[len(VERDICT):].partition(" ")
        if not hmac.compare_digest(mac, hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()):
            return None, ["forged_verdict"]
        found.append(json.loads(payload))
    if len(found) > 1:
        return None, ["duplicate_verdict"]
    return (found[0] if found else None), events


def _passes(verdict: dict, name: str) -> bool:
    if name == TEST_SH:
        return (verdict.get("test_sh") or {}).get("reward") == 1.0
    return bool((verdict.get("pytest") or {}).get(name, {}).get("ok"))


def reward_of(task: TerminalTask, verdict: dict) -> tuple[float, dict[str, bool]]:
    """(reward, check name -> passed) from an authenticated verdict (see the module docstring)."""
    if task.checks:
        checks = {c.name: all(_passes(verdict, f) for f in c.tests) for c in task.checks}
        total = sum(c.weight for c in task.checks)
        return sum(c.weight for c in task.checks if checks[c.name]) / total, checks
    checks = {f: _passes(verdict, f) for f in task.pytest_files}
    reward = 1.0 if all(checks.values()) else 0.0
    if task.has_test_sh:
        sh = (verdict.get("test_sh") or {}).get("reward")
        checks[TEST_SH] = sh == 1.0
        reward *= float(sh or 0.0)
    return reward, checks


def _error_of(verdict: dict) -> str | None:
    for name, res in sorted((verdict.get("pytest") or {}).items()):
        if not res.get("ok"):
            return f"{name}: {res.get('error')}"
    sh = verdict.get("test_sh") or {}
    return f"{TEST_SH}: {sh['error']}" if sh.get("error") else None


def verify(task: TerminalTask, state: dict, *, isolation: BwrapIsolation, work_root: str,
           memory_bytes: int = 2 << 30, nproc: int = 128) -> Score:
    """Run the task's tests over the state's files in a fresh sandbox; the Score (module docstring)."""
    if state.get("over_cap"):
        return Score(0.0, "env_score", {"checks": {}, "events": ["state_over_cap"],
                                        "error": f"the final files exceed {MAX_STATE_BYTES >> 20} MiB"})
    root = tempfile.mkdtemp(prefix="verify-", dir=work_root)
    try:
        os.chmod(root, 0o711)
        work, tests = os.path.join(root, "work"), os.path.join(root, "tests")
        os.mkdir(work)
        events = restore(state, work)
        os.makedirs(os.path.join(work, "tests"), exist_ok=True)  # the mount point of the read-only tests
        isolation.prepare_work_dir(work)
        os.mkdir(tests)
        _write_tests(task, tests)
        key = secrets.token_bytes(32)
        job = {"key": key.hex(), "pytest_dir": PYTEST_DIR, "pytest_files": list(task.pytest_files),
               "test_sh": task.has_test_sh, "timeout": task.verifier_timeout}
        python = resolve("python3", ("/usr/bin/python3",))
        if python is None:
            raise InfraError("terminal verifier: python3 not found under /usr")
        binds = [(tests, "/work/tests"), *(pytest_binds() if task.pytest_files else [])]
        limits = Limits(memory_bytes=memory_bytes, cpu_seconds=int(math.ceil(task.verifier_timeout)) + 5,
                        nproc=nproc, fsize_bytes=64 << 20, nofile=256)
        argv, cwd = isolation.command([python, "-I", "-S", "-B", "-c", RUNNER], work, limits, binds)
        try:
            out = run_command(Command(argv=argv, cwd=cwd, env=sandbox_env(work, True), stdin=json.dumps(job).encode(),
                                      timeout=task.verifier_timeout + 10.0, output_limit=1 << 20, work_dir=work,
                                      disk_bytes=1 << 30, disk_entries=50000, pid_namespace=True))
        except Exception as e:  # SandboxError: bwrap could not even be started
            raise InfraError(f"terminal verifier: {e}") from e
    finally:
        remove_work_dir(root)
    verdict, v_events = read_verdict(out.stdout, key)
    events += v_events
    if verdict is None:
        stderr = out.stderr.decode("utf-8", errors="replace").strip()
        if not v_events and stderr.startswith("bwrap:"):
            raise InfraError(f"terminal verifier: the sandbox did not start ({stderr.splitlines()[-1]})")
        if not v_events and out.killed_for is None and stderr:
            raise RuntimeError(f"terminal verifier: the runner failed: {stderr.splitlines()[-1][:300]}")
        why = v_events[0] if v_events else "verifier_timeout" if out.killed_for == "time_limit" else "no_verdict"
        events.append(why)
        return Score(0.0, "env_score", {"checks": {}, "events": sorted(set(events)), "error": f"no verdict ({why})"})
    reward, checks = reward_of(task, verdict)
    sh = verdict.get("test_sh") or {}
    if sh.get("error") and "reward" in sh["error"]:
        events.append("bad_reward")
    events += verdict.get("events") or []
    return Score(reward, "env_score", {"checks": checks, "tests": verdict.get("pytest") or {},
                                       "test_sh": verdict.get("test_sh"), "events": sorted(set(events)),
                                       "error": _error_of(verdict)})
