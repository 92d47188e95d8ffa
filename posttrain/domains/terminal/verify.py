"""Score a terminal episode from its saved final files alone: the task's tests in a FRESH sandbox.

    state = snapshot(work_dir, task_dir)            # workspace.py; what Trajectory.final_state holds
    score = verify(task, state, isolation=shared_isolation(), work_root=root)
    score.value, score.details["checks"], score.details["events"]

Before `verify` runs, every process of the episode is dead (env.state() kills the sandbox's pid 1,
which tears down its pid namespace). `verify` writes the state's files into a new directory
(workspace.restore: links last, never followed; a link that leads out of the workspace, too many
files, over-long paths or too many bytes refuse the workspace: reward 0 with `workspace_refused`
and the reason, never an infrastructure error; planted reward files are deleted, with an event),
copies the task's tests from the task folder into a directory OUTSIDE it, mounted read-only at
/tests (the episode never saw them and could not have linked to them), and runs harness/runner.py
as the sandbox's main program: no process of the episode exists there. pytest and its
dependencies are a copy, made once per process, of this Python's own (verifier_tools), mounted
read-only at TOOLS_DIR: the sandbox can read it wherever the venv lives.

The verdict is the one line the runner writes with an HMAC under a key made for this run and
sent on its stdin; see harness/runner.py for why the code under test cannot produce it. A line
with a wrong MAC voids the run (`forged_verdict`, reward 0); no line (the runner was killed at
the time limit) is reward 0 with `verifier_timeout` / `no_verdict`. A sandbox that does not start,
or a host that cannot write the verification dir (disk full), is an InfraError. Reward: with
[[checks]], the summed weights of the checks whose files all pass over the total; without, 1.0
when every test_*.py passes (times test.sh's number when there is one: a test.sh alone may give
partial reward). A pytest file passes when it collected at least one test and every test passed;
test.sh passes (in a check) when it wrote exactly 1.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import importlib.util
import json
import math
import os
import secrets
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from posttrain.core.types import Score
from posttrain.domains.terminal.programs import RUNNER
from posttrain.domains.terminal.task import TEST_SH, TerminalTask
from posttrain.domains.terminal.workspace import MAX_ENTRIES, Refused, restore, snapshot
from posttrain.envs.env import InfraError
from posttrain.sandbox.isolation import BwrapIsolation, Limits, resolve, sandbox_env
from posttrain.sandbox.process import Command, run_command
from posttrain.sandbox.workdir import remove_work_dir

__all__ = ["verify", "snapshot", "read_verdict", "reward_of", "verifier_tools"]

VERDICT = "POSTTRAIN-TERMINAL-VERDICT "
TESTS_DIR = "/tests"  # where the task's tests are mounted, read-only, outside the workspace
TOOLS_DIR = "/opt/posttrain-verifier"  # verifier_tools(): site/ = pytest and its dependencies
PRIVATE_DIR = "/run/posttrain-verifier"  # the runner's own scratch (pytest's basetemp), unlistable
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
_REQUIRED = ("pytest", "_pytest", "pluggy", "iniconfig")
_HOST_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ENOMEM, errno.EMFILE, errno.ENFILE}
_tools: dict[str, str] = {}
_tools_lock = threading.Lock()


def _copy_readable(src: str, dst: str) -> None:
    if os.path.isdir(src):
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.pyc.*"))
    else:
        shutil.copy2(src, dst)
    for dirpath, dirnames, filenames in os.walk(dst):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def verifier_tools(work_root: str) -> str:
    """A host dir, made once per work root, that the verification sandbox mounts read-only at
    TOOLS_DIR: `site/` holds a COPY of pytest and its dependencies from this Python's environment
    (readable by the sandbox uid wherever the venv lives: under a 0700 home, /root, a mktemp -d
    dir; bwrap opens a bind's source as the sandbox uid, so binding the venv itself would fail)."""
    with _tools_lock:
        done = _tools.get(work_root)
        if done is not None:
            return done
        tools = tempfile.mkdtemp(prefix="verifier-tools-", dir=work_root)
        site = os.path.join(tools, "site")
        os.mkdir(site)
        for name in PYTEST_MODULES:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                if name in _REQUIRED:
                    raise InfraError(f"terminal verifier: {name} is not installed in {sys.prefix} (pip install pytest)")
                continue
            origin = Path(spec.origin)
            src = origin.parent if origin.name == "__init__.py" else origin
            _copy_readable(str(src), os.path.join(site, src.name))
        os.chmod(tools, 0o755)
        _tools[work_root] = tools
        return tools


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


def _refused(e: Refused, events: list[str]) -> Score:
    return Score(0.0, "env_score", {"checks": {}, "events": sorted({*events, "workspace_refused", e.event}),
                                    "error": f"workspace refused: {e}"})


def verify(task: TerminalTask, state: dict, *, isolation: BwrapIsolation, work_root: str,
           memory_bytes: int = 2 << 30, nproc: int = 128) -> Score:
    """Run the task's tests over the state's files in a fresh sandbox; the Score (module docstring)."""
    tools = verifier_tools(work_root) if task.pytest_files else None
    root = tempfile.mkdtemp(prefix="verify-", dir=work_root)
    try:
        os.chmod(root, 0o711)
        work, tests, private = (os.path.join(root, d) for d in ("work", "tests", "private"))
        os.mkdir(work)
        try:
            events = restore(state, work)
        except Refused as e:
            return _refused(e, [])
        except ValueError as e:  # a path in the state that is not a plain relative path
            return _refused(Refused("bad_path", str(e)), [])
        except OSError as e:
            if e.errno in _HOST_ERRNOS:
                raise InfraError(f"terminal verifier: the host could not restore the workspace: {e}") from e
            return _refused(Refused("unrestorable", f"{type(e).__name__}: {e.strerror or e}"), [])
        isolation.prepare_work_dir(work)
        os.mkdir(tests)
        _write_tests(task, tests)
        os.mkdir(private)
        os.chmod(private, 0o733)  # the sandbox uid may create entries, not list them (when we are root)
        key = secrets.token_bytes(32)
        job = {"key": key.hex(), "tests": TESTS_DIR, "site": f"{TOOLS_DIR}/site", "private": PRIVATE_DIR,
               "name": secrets.token_hex(16), "pytest_files": list(task.pytest_files), "test_sh": task.has_test_sh,
               "timeout": task.verifier_timeout}
        python = resolve("python3", ("/usr/bin/python3",))
        if python is None:
            raise InfraError("terminal verifier: python3 not found under /usr")
        binds = [(tests, TESTS_DIR), *([(tools, TOOLS_DIR)] if tools else [])]
        limits = Limits(memory_bytes=memory_bytes, cpu_seconds=int(math.ceil(task.verifier_timeout)) + 5,
                        nproc=nproc, fsize_bytes=64 << 20, nofile=256)
        argv, cwd = isolation.command([python, "-I", "-S", "-B", "-c", RUNNER], work, limits, binds,
                                      rw_binds=[(private, PRIVATE_DIR)])
        try:
            out = run_command(Command(argv=argv, cwd=cwd, env=sandbox_env(work, True), stdin=json.dumps(job).encode(),
                                      timeout=task.verifier_timeout + 10.0, output_limit=1 << 20, work_dir=root,
                                      disk_bytes=1 << 30, disk_entries=2 * MAX_ENTRIES + 1000, pid_namespace=True))
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
