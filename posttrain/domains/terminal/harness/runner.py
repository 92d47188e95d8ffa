"""The TRUSTED test runner of a terminal task: the main program of the verification sandbox.

Started by verify.py as `/usr/bin/python3 -I -S -B -c <this source>` (isolated: no PYTHON*
variables, no user site, no site module, no cwd on sys.path) in a fresh sandbox whose /work holds
the episode's final files (no process of the episode exists any more) and whose /tests holds,
read-only, the task's tests (outside the workspace: nothing in /work is on a path pytest looks at).
It reads its job from stdin (a per-run random key, the pytest files, whether to run test.sh, the
time budget, a random name for its private scratch), then:

1. makes itself non-dumpable (no /proc/PID/mem, environ or fd access, no ptrace by the same uid),
   closes stdin (the key lives only in this process's memory) and keeps a private copy of stdout
   as the verdict channel; fds 1 and 2 go to /dev/null for everything the tests print;
2. runs pytest in this process over /tests (pytest comes read-only from the verifier's tools, on
   sys.path here only), with a plugin that records each test's outcome in this process: rootdir,
   confcutdir and the ini file are ours (/tests and an empty ini), so no conftest.py, pytest.ini,
   package __init__.py or module of /work is ever loaded here; plugin autoload and the cache
   plugin are off; HOME is a fresh private dir, not /work; pytest's basetemp is under an
   unlistable private dir; after every test, every other process of the sandbox is killed, so
   nothing a test started (a daemon of the agent's code) lives on into the next test;
3. runs tests/test.sh (its text, read now, as `bash -c`) with $REWARD_FILE naming the write end of
   a pipe this process reads: the reward is what was written there, and a channel written more
   than once (a program of the agent's that test.sh ran wrote it too) or a test.sh killed by a
   signal voids it;
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
_ERR = os.dup(2)  # the runner's own failures (a traceback), never the tests' output
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
os.close(_null)
_DEADLINE = time.monotonic() + float(_spec["timeout"])
_INSIDE = os.getppid() == 1  # the sandbox's pid 1 started us: we may kill everything else
_HOME = tempfile.mkdtemp(prefix="home-")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": _HOME, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
        "MALLOC_ARENA_MAX": "2"}
_TESTS = _spec["tests"]
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

    def pytest_runtest_logfinish(self, nodeid, location):
        if _INSIDE:  # a test's leftovers must not act during the next one
            kill_others()

    def pytest_runtest_logreport(self, report):
        if report.failed or (report.skipped and report.when == "call"):
            self.failed.setdefault(report.nodeid, _short(report))
        elif report.when == "call" and report.passed:
            self.passed.add(report.nodeid)


def _file_of(nodeid):
    return nodeid.split("::")[0]


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
    sys.path.insert(0, _spec["site"])
    os.environ.clear()
    os.environ.update(_ENV, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    import pytest

    conf = tempfile.mkdtemp(prefix="pytest-conf-")
    basetemp = os.path.join(_spec["private"], _spec["name"] + "-tmp")
    ini = os.path.join(conf, "pytest.ini")
    with open(ini, "w") as f:
        f.write("[pytest]\n")
    rec = Recorder()
    signal.signal(signal.SIGALRM, _timeout)
    signal.setitimer(signal.ITIMER_REAL, max(0.1, _DEADLINE - time.monotonic()))
    try:
        pytest.main(["-c", ini, f"--rootdir={_TESTS}", f"--confcutdir={_TESTS}", "--import-mode=importlib",
                     f"--basetemp={basetemp}", "-p", "no:cacheprovider", "-p", "no:pastebin", "-q", "--no-header",
                     *[f"{_TESTS}/{f}" for f in files]], plugins=[rec])
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
    with open(f"{_TESTS}/test.sh", "rb") as f:
        script = f.read().decode("utf-8", errors="replace")
    left = _DEADLINE - time.monotonic()
    if left <= 0:
        return {"error": "no time left for test.sh", "exit_code": None, "written": b""}
    if _INSIDE:
        kill_others()
    r, w = os.pipe()
    proc = subprocess.Popen(["/bin/bash", "-c", script, f"{_TESTS}/test.sh"], cwd="/work",
                            env={**_ENV, "REWARD_FILE": f"/dev/fd/{w}"}, stdin=subprocess.DEVNULL, pass_fds=(w,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(w)
    os.set_blocking(r, False)
    written, error, code = bytearray(), None, None
    while True:  # drain the channel while test.sh runs (a flood is cut at 4 KiB, then test.sh blocks)
        try:
            code = proc.wait(timeout=0.02)
        except subprocess.TimeoutExpired:
            if time.monotonic() > _DEADLINE:
                events.append("verifier_timeout")
                error = "test.sh timed out"
                break
        _drain(r, written)
        if code is not None:
            break
    if _INSIDE:
        kill_others()  # every other holder of the channel is gone: what is in the pipe is all there is
    _drain(r, written)
    os.close(r)
    if error is None and code is not None and code < 0:
        events.append("test_sh_killed")
        error = f"test.sh was killed by signal {-code}: no reward"
    return {"error": error, "exit_code": code, "written": bytes(written)}


def _drain(fd, buf):
    while len(buf) < 4096:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        if not data:
            return
        buf += data


def read_reward(written):
    """(reward, error): the channel must hold exactly one number in [0, 1], written once."""
    words = written.decode("ascii", errors="replace").split()
    if not words:
        return None, "test.sh wrote no reward"
    if len(words) > 1:
        events.append("reward_channel_written_twice")
        return None, f"the reward channel holds more than one value: {' '.join(words)[:40]!r}"
    try:
        value = float(words[0])
    except ValueError:
        return None, f"the reward is not a number: {words[0][:40]!r}"
    if not 0.0 <= value <= 1.0:  # also rejects nan
        return None, f"the reward {words[0][:40]!r} is not in [0, 1]"
    return value, None


def kill_others():
    """SIGKILL every process of the sandbox but pid 1 and this one (kill(-1) spares both), until
    none is left, reaping what were our children."""
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:  # ESRCH: nothing left to signal
            return
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.002)
    events.append("processes_survived_kill")


def main():
    verdict = {"pytest": {}, "test_sh": None}
    if _spec["pytest_files"]:
        verdict["pytest"] = run_pytest(_spec["pytest_files"])
    sh = run_test_sh() if _spec["test_sh"] else None
    if _INSIDE:  # nothing else may outlive the tests
        kill_others()
    if sh is not None:
        reward, error = read_reward(sh["written"]) if sh["error"] is None else (None, sh["error"])
        verdict["test_sh"] = {"reward": reward, "error": error, "exit_code": sh["exit_code"]}
    verdict["events"] = sorted(set(events))
    payload = json.dumps(verdict, sort_keys=True).encode()
    mac = hmac.new(_KEY, payload, hashlib.sha256).hexdigest().encode()
    os.write(_OUT, b"\nPOSTTRAIN-TERMINAL-VERDICT " + mac + b" " + payload + b"\n")


try:
    main()
except BaseException:  # noqa: BLE001 - a bug of ours: the host reports it (no verdict line)
    import traceback

    os.write(_ERR, traceback.format_exc().encode())
    raise SystemExit(1)
