"""The judge's stdin/stdout mode and its work-dir housekeeping between jobs. Not a module of its
own: harness/__init__.py appends this source to judge.py's (so the names of judge.py, such as
`events`, DECOYS and the imports, are in scope here) and ends the program with `main()`.
"""

# ruff: noqa: F821  (names defined by judge.py, which precedes this source in the program)
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import time


def _normal(text, tol):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return [line.split() for line in lines] if tol is not None else lines


def _same(got, want, tol):
    g, w = _normal(got, tol), _normal(want, tol)
    if tol is None or len(g) != len(w):
        return g == w
    for gl, wl in zip(g, w):
        if len(gl) != len(wl):
            return False
        for a, b in zip(gl, wl):
            if a == b:
                continue
            try:
                if not math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol):
                    return False
            except ValueError:
                return False
    return True


def _run_case(path, stdin, timeout, cap):
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True, cwd=os.path.dirname(path),
    )
    out, pending, deadline = b"", stdin.encode(), time.monotonic() + timeout
    fd_in, fd_out = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(fd_in, False)
    if not pending:
        proc.stdin.close()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                events.append("timeout")
                return None
            ready_r, ready_w, _ = select.select([fd_out], [fd_in] if pending else [], [], left)
            if ready_w:
                try:
                    pending = pending[os.write(fd_in, pending[: 1 << 16]) :]
                except BlockingIOError:
                    pass
                except BrokenPipeError:  # the program stopped reading: fine
                    pending = b""
                if not pending:
                    proc.stdin.close()
            if ready_r:
                chunk = os.read(fd_out, 1 << 16)
                if not chunk:
                    try:
                        proc.wait(timeout=max(0.01, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        events.append("timeout")
                        return None
                    return out.decode("utf-8", errors="replace") if proc.returncode == 0 else None
                out += chunk
                if len(out) > cap:
                    events.append("output_limit")
                    return None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


def run_stdio(spec):
    path = "/work/solution.py" if os.path.isdir("/work") else os.path.abspath("solution.py")
    with open(path, "w") as f:
        f.write(spec["program"])
    tol = spec.get("float_tol")
    results = []
    for case in spec["io"]:
        got = _run_case(path, case["input"], float(spec.get("timeout", 3.0)), int(spec.get("output_cap", 1 << 22)))
        results.append(got is not None and _same(got, case["output"], tol))
    return results, None


def _clean():
    """Empty the work dir, /tmp and /dev/shm between jobs (the previous solution's leftovers)."""
    for top in ("/work", "/tmp", "/dev/shm"):
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            path = os.path.join(top, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=_force)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def _force(func, path, exc_info):
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def _kill_others():
    """SIGKILL every process of this sandbox but pid 1 and this one (daemons included), reap them."""
    me = os.getpid()
    for _ in range(20):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            break
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
        time.sleep(0.001)


def _plant_decoys():
    for rel, content in DECOYS.items():
        os.makedirs(os.path.dirname(os.path.join("/work", rel)), exist_ok=True)
        with open(os.path.join("/work", rel), "wb") as f:
            f.write(content)


def _touched_tests():
    for rel, content in DECOYS.items():
        try:
            with open(os.path.join("/work", rel), "rb") as f:
                if f.read(len(content) + 1) != content:
                    return True
        except OSError:
            return True
    seen = 0
    for root, dirs, files in os.walk("/work"):
        for name in files:
            seen += 1
            rel = os.path.relpath(os.path.join(root, name), "/work")
            if rel in DECOYS:
                continue
            if name in TEST_NAMES or (name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))):
                return True
        if seen > 5000:
            return False
    return False
