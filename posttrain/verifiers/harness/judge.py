"""The TRUSTED side of the code verifier: the sandbox's main program. It reads the task (tests,
key) from stdin, runs the solution in a separate process (`runner.py`), runs the tests itself
and prints one verdict line authenticated with an HMAC under the per-run key.

Why the solution cannot forge a pass (see posttrain/verifiers/code.py for the whole argument):
- the tests and the key exist only in this process's memory; it is made non-dumpable first
  thing, so the solution (same uid) can neither read its memory nor reopen its fds via /proc;
- the solution runs in another process started by exec (no copy of this memory) and sends only
  plain data, decoded here into fresh builtins: no `__eq__` override, no stack frames to walk;
- its stdout and stderr go to /dev/null; the verdict is the HMAC'd line this process writes
  after every other process in the sandbox has been killed.

Modes: "function" (HumanEval `check(candidate)`, MBPP assert lists, module-level asserts) and
"stdio" (input/expected-output pairs; the program's output is compared here, in `judge_stdio.py`).
The program sent is this file, codec.py (`_enc`, `_dec`), judge_stdio.py, then `main()` (see
harness/__init__.py).
"""

# ruff: noqa: F821  (codec.py and judge_stdio.py follow this source in the program)
import ctypes
import os
import sys

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no /proc/PID/{mem,fd}, no ptrace
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != _here and not p.startswith("/work")]

import ast  # noqa: E402  (after the path is cleaned: nothing importable from the work dir)
import builtins  # noqa: E402
import hashlib  # noqa: E402
import hmac  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

_spec = json.loads(sys.stdin.buffer.read())
os.close(0)
_KEY = bytes.fromhex(_spec.pop("key"))
_OUT = os.dup(1)  # the verdict channel; fd 1 itself goes to /dev/null for the tests' prints
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 1)
os.dup2(_null, 2)
events: list[str] = []
MAX_MESSAGE = 64 << 20
DECOYS = {"tests/test_solution.py": b"# The tests of this task do not run from this file.\n", "conftest.py": b""}
TEST_NAMES = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "sitecustomize.py", "usercustomize.py")


class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout("test timed out")


signal.signal(signal.SIGALRM, _alarm)


def _raise(name, msg):
    cls = getattr(builtins, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    try:
        exc = cls(msg)
    except Exception:  # noqa: BLE001 - exception classes with other signatures
        exc = RuntimeError(f"{name}: {msg}")
    raise exc


class SolutionGone(Exception):
    """The solution process exited (sys.exit, os._exit, a crash) or stopped answering."""


class Child:
    """The runner process, restarted (the program re-run) after it dies, a few times at most."""

    def __init__(self, runner: str, program: str):
        self.runner, self.program, self.proc, self.names, self.starts = runner, program, None, {}, 0
        self.buf = b""

    def start(self):
        if self.starts >= 4:
            raise SolutionGone("the solution died too often")
        self.starts += 1
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", self.runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True, cwd="/work" if os.path.isdir("/work") else None,
        )
        self.buf = b""
        reply = self.ask({"program": self.program})
        if not reply.get("ok"):
            self.kill()
            raise SolutionGone(f"the program failed: {reply.get('raise')}: {reply.get('msg')}")
        names = reply.get("names")
        self.names = {k: v for k, v in names.items() if isinstance(k, str)} if isinstance(names, dict) else {}

    def ask(self, msg):
        if self.proc is None:
            self.start()
        try:
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._gone("exited")
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._gone("exited")
            self.buf += chunk
            if len(self.buf) > MAX_MESSAGE:
                self._gone("message_too_large")
        line, self.buf = self.buf.split(b"\n", 1)
        reply = json.loads(line)
        if type(reply) is not dict:
            raise ValueError("malformed reply from the solution")
        return reply

    def _gone(self, why):
        events.append("early_exit" if why == "exited" else why)
        self.kill()
        raise SolutionGone(f"the solution {why}")

    def kill(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            self.proc = None

    def value(self, reply):
        if "raise" in reply:
            _raise(reply["raise"], str(reply.get("msg", ""))[:500])
        return _dec(reply.get("value"))


class Remote:
    """A name defined by the solution; calling it asks the runner."""

    def __init__(self, child, name):
        self._child, self.__name__ = child, name

    def __call__(self, *args, **kwargs):
        msg = {"call": self.__name__, "args": [_enc(a) for a in args], "kwargs": [[k, _enc(v)] for k, v in kwargs.items()]}
        try:
            return self._child.value(self._child.ask(msg))
        except TestTimeout:
            events.append("timeout")
            self._child.kill()
            raise

    def __repr__(self):
        return f"<solution function {self.__name__}>"


def _has_assert(node):
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def _steps(spec, tree):
    """([(statement source, is_test)], the name of check's candidate parameter or None).
    A statement is a test when it contains an assert; the others set up (a failing one ends the run)."""
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if spec.get("tests") is not None:
        return [(t, True) for t in spec["tests"]], None
    if check is not None and check.args.args:
        body = [(ast.unparse(s), _has_assert(s)) for s in check.body]
        if not any(is_test for _, is_test in body):
            return [(f"check({check.args.args[0].arg})", True)], check.args.args[0].arg
        return body, check.args.args[0].arg
    return [(ast.unparse(s), _has_assert(s)) for s in tree.body if _has_assert(s)], None


def _referenced(sources):
    names = set()
    for src in sources:
        try:
            names |= {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
        except SyntaxError:
            pass
    return names


def _bind(ns, child, entry_point, wanted):
    for name, kind in child.names.items():
        if name == entry_point or (name in wanted and name not in ns and not hasattr(builtins, name)):
            ns[name] = Remote(child, name) if kind == "call" else child.value(child.ask({"get": name}))


def run_function(spec):
    timeout = float(spec.get("timeout", 3.0))
    test_src = spec.get("test") or ""
    ns = {"__name__": "__test__"}
    tree = ast.parse(test_src)
    if spec.get("prompt"):
        try:  # the task's own prompt code is trusted: its helpers (e.g. HumanEval/32's poly) stay ours
            exec(compile(spec["prompt"], "prompt.py", "exec"), ns)
        except Exception:  # noqa: BLE001 - a prompt that is not a complete module
            pass
    entry = spec.get("entry_point")
    ns.pop(entry, None)
    exec(compile(spec.get("setup") or "", "setup.py", "exec"), ns)
    exec(compile(tree, "test.py", "exec"), ns)
    steps, param = _steps(spec, tree)
    n_tests = sum(1 for _, t in steps if t)
    child = Child(spec["runner"], spec["program"])
    results, error = [], None
    try:
        child.start()
        if entry and entry not in child.names:
            raise SolutionGone(f"the program defines no {entry!r}")
        _bind(ns, child, entry, _referenced([s for s, _ in steps]))
        if param is not None:
            ns[param] = ns[entry] if entry else None
        for src, is_test in steps:
            ok = _run_step(src, ns, timeout, child, entry, param)
            if is_test:
                results.append(ok)
            elif not ok:
                error = "a setup statement of the tests failed"
                break
    except SolutionGone as e:
        error = str(e)
    except TestTimeout:
        error = "timed out"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        child.kill()
    results += [False] * (n_tests - len(results))
    return results, error


def _run_step(src, ns, timeout, child, entry, param):
    if child.proc is None:  # killed after a timeout or an exit: start it again for the next test
        child.start()
        _bind(ns, child, entry, _referenced([src]))
        if param is not None:
            ns[param] = ns[entry]
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        exec(compile(src, "test.py", "exec"), ns)
        return True
    except SolutionGone:
        raise
    except TestTimeout:
        events.append("timeout")
        child.kill()
        return False
    except BaseException:  # noqa: BLE001 - assertion failures and the solution's own errors
        return False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_job(job):
    events.clear()
    try:
        if job.get("mode") == "stdio":
            return run_stdio(job)
        return run_function(job)
    except Exception as e:  # noqa: BLE001 - the task's own test code failed: not the solution's fault
        events.append("task_error")
        return None, f"task: {type(e).__name__}: {str(e)[:300]}"


def main():
    namespaced = bool(_spec.get("namespaced")) and os.getppid() == 1 and os.path.isdir("/work")
    for i, job in enumerate(_spec["jobs"]):
        job = {**job, "runner": _spec["runner"], "timeout": _spec.get("timeout", 3.0)}
        if namespaced:
            _clean()
            _plant_decoys()
        results, error = run_job(job)
        if namespaced:
            _kill_others()
            if _touched_tests():
                events.append("touched_tests")
        payload = json.dumps({"job": i, "results": results, "error": error, "events": sorted(set(events))}).encode()
        mac = hmac.new(_KEY, payload, hashlib.sha256).hexdigest().encode()
        os.write(_OUT, b"\nPOSTTRAIN-VERDICT " + mac + b" " + payload + b"\n")

