"""The TRUSTED test runner of a terminal task: the main program of the verification sandbox.

Started by verify.py as `/usr/bin/python3 -I -S -B -c <this source>` in a fresh sandbox whose
/work holds the episode's final files and, mounted read-only at /work/tests, the task's tests.
It reads its job from stdin (a per-run random key, the pytest files, whether to run test.sh, the
time budget), then:

1. makes itself non-dumpable (no /proc/PID/mem or fd access, no ptrace by the same uid), closes
   stdin (the key lives only in this process's memory) and keeps a private copy of stdout as the
   verdict channel; fds 1 and 2 go to /dev/null for everything the tests print;
2. runs pytest in this process over the given files (pytest comes read-only from the project's
   venv, on sys.path here only), with a plugin that records each test's outcome in this process;
   config files in /work are ignored (an ini of ours, --confcutdir=/work/tests, importlib import
   mode: /work is never put on sys.path), the cache plugin is off;
3. runs tests/test.sh (its text, read now, as `bash -c`) with $REWARD_FILE naming a fresh file
   under a private /tmp directory, and reads the number after it ends;
4. kills every other process of the sandbox (pid 1 aside), then writes one verdict line with an
   HMAC under the key. The host believes nothing else: not exit codes, not other output.

The agent's code runs only as subprocesses of the tests (the tests call it); a test that imports
the agent's modules into this process hands them this process (docs/terminal.md says so).
"""

import ctypes
import os
import sys

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
sys.path[:] = [p for p in sys.path if p and not p.startswith("/work")]

import hashlib  # noqa: E402  (after the path is cleaned)
import hmac  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

_spec = json.loads(sys.stdin.buffer.read())
_KEY = bytes.fromhex(_spec.pop("key"))
_OUT = os.dup(1)  # the verdict channel; fds 0, 1 and 2 become /dev/null (the key's stdin is let go)
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
os.close(_null)
_DEADLINE = time.monotonic() + float(_spec["timeout"])
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
        "MALLOC_ARENA_MAX": "2"}
events = []


class Recorder:
    """pytest plugin: each collected test's outcome, kept in this process only."""

    def __init__(self):
        self.items, self.failed, self.passed, self.errors = {}, {}, set(), {}

    def pytest_itemcollected(self, item):
        self.items[item.nodeid] = _file_of(item.nodeid)

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors[_file_of(report.nodeid)] = _short(report)

    def pytest_runtest_logreport(self, report):
        if report.failed or (report.skipped and report.when == "call"):
            self.failed.setdefault(report.nodeid, _short(report))
        elif report.when == "call" and report.passed:
            self.passed.add(report.nodeid)


def _file_of(nodeid):
    path = nodeid.split("::")[0]
    return path[len("tests/"):] if path.startswith("tests/") else path


def _short(report):
    text = str(getattr(report, "longreprtext", "") or report.outcome)
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors[0] if errors else lines[-1] if lines else report.outcome)[:300]


def _timeout(signum, frame):
    import pytest

    events.append("verifier_timeout")
    pytest.exit("verifier timeout", returncode=3)


def run_pytest(files):
    sys.path.insert(0, _spec["pytest_dir"])
    os.environ.clear()
    os.environ.update(_ENV, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    import pytest

    conf = tempfile.mkdtemp(prefix="pytest-conf-")
    ini = os.path.join(conf, "pytest.ini")
    with open(ini, "w") as f:
        f.write("[pytest]\n")
    rec = Recorder()
    signal.signal(signal.SIGALRM, _timeout)
    signal.setitimer(signal.ITIMER_REAL, max(0.1, _DEADLINE - time.monotonic()))
    try:
        pytest.main(["-c", ini, "--rootdir=/work", "--confcutdir=/work/tests", "--import-mode=importlib",
                     "-p", "no:cacheprovider", "-p", "no:pastebin", "-q", "--no-header",
                     *["tests/" + f for f in files]], plugins=[rec])
    except BaseException as e:  # noqa: BLE001 - a test that ends the runner fails, the runner goes on
        events.append(f"pytest_aborted:{type(e).__name__}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out = {}
    for f in files:
        ids = [i for i, g in rec.items.items() if g == f]
        passed = [i for i in ids if i in rec.passed and i not in rec.failed]
        failures = (f"{i.split('::')[-1]}: {rec.failed[i]}" for i in ids if i in rec.failed)
        error = rec.errors.get(f) or next(failures, None)
        if not ids and error is None:
            error = "no test collected"
        out[f] = {"tests": len(ids), "passed": len(passed), "ok": bool(ids) and len(passed) == len(ids)
                  and f not in rec.errors, "error": error}
    return out


def run_test_sh():
    with open("/work/tests/test.sh", "rb") as f:
        script = f.read().decode("utf-8", errors="replace")
    private = tempfile.mkdtemp(prefix="verifier-")
    reward_file = os.path.join(private, "reward.txt")
    left = _DEADLINE - time.monotonic()
    error = None
    if left <= 0:
        return {"reward_file": reward_file, "error": "no time left for test.sh", "exit_code": None}
    proc = subprocess.Popen(["/bin/bash", "-c", script, "/work/tests/test.sh"], cwd="/work",
                            env={**_ENV, "REWARD_FILE": reward_file}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    code = None
    try:
        code = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        events.append("verifier_timeout")
        error = "test.sh timed out"
    return {"reward_file": reward_file, "error": error, "exit_code": code}


def read_reward(path):
    """(reward, error): the file must hold one number in [0, 1]."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, "test.sh wrote no reward file"
    try:
        text = os.read(fd, 256).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    try:
        value = float(text)
    except ValueError:
        return None, f"the reward file does not hold one number: {text[:40]!r}"
    if not 0.0 <= value <= 1.0:  # also rejects nan
        return None, f"the reward {text[:40]!r} is not in [0, 1]"
    return value, None


def kill_others():
    me = os.getpid()
    for _ in range(50):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.002)


def main():
    verdict = {"pytest": {}, "test_sh": None}
    if _spec["pytest_files"]:
        verdict["pytest"] = run_pytest(_spec["pytest_files"])
    sh = run_test_sh() if _spec["test_sh"] else None
    if os.getppid() == 1:  # inside the sandbox: nothing else may outlive the tests
        kill_others()
    if sh is not None:
        reward, error = read_reward(sh["reward_file"]) if sh["error"] is None else (None, sh["error"])
        verdict["test_sh"] = {"reward": reward, "error": error, "exit_code": sh["exit_code"]}
    verdict["events"] = sorted(set(events))
    payload = json.dumps(verdict, sort_keys=True).encode()
    mac = hmac.new(_KEY, payload, hashlib.sha256).hexdigest().encode()
    os.write(_OUT, b"\nPOSTTRAIN-TERMINAL-VERDICT " + mac + b" " + payload + b"\n")


main()
