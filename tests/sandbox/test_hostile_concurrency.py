"""Hostile programs against other runs: leftovers for the next run, starving concurrent
runs, and more requests than the pool may run at once.

Each test asserts both that the host is unharmed (`host.check()`) and that every result is
reported correctly.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from posttrain.sandbox import RunRequest, Status


def test_every_run_starts_from_the_same_files(sandbox, host):
    code = (
        "import os\n"
        "print(sorted(os.listdir('.')), sorted(os.listdir('/tmp')), open('state.txt').read())\n"
        "open('state.txt', 'a').write(' changed')\n"
        "open('leftover.txt', 'w').write('from an earlier run')\n"
        "open('/tmp/leftover', 'w').write('x')\n"
        "os.makedirs('/dev/shm/x', exist_ok=True)\n"
    )
    req = RunRequest(code=code, files={"state.txt": b"initial"}, fetch_files=("state.txt",), run_timeout=2)
    first, second = sandbox.run(req), sandbox.run(req)
    assert first.ok and second.ok, (first, second)
    assert first.run.stdout == second.run.stdout == "['main.py', 'state.txt'] [] initial\n"
    assert first.files == second.files == {"state.txt": b"initial changed"}
    host.check()


def test_cpu_hog_does_not_make_a_concurrent_short_run_fail(sandbox, host):
    with ThreadPoolExecutor(8) as ex:
        hog = ex.submit(sandbox.run, RunRequest(code="while True:\n    pass", run_timeout=2))
        time.sleep(0.2)
        shorts = [ex.submit(sandbox.run, RunRequest(code=f"print({i} ** 2)", run_timeout=2)) for i in range(6)]
        results = [f.result() for f in shorts]
    assert [r.run.stdout for r in results] == [f"{i ** 2}\n" for i in range(6)]
    assert all(r.ok for r in results)
    assert hog.result().run.status is Status.TIME_LIMIT
    host.check()


def test_fork_bomb_does_not_starve_a_concurrent_run_of_processes(sandbox, host):
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
    spawner = "import subprocess\nfor _ in range(10):\n    subprocess.run(['true'], check=True)\nprint('spawned 10')\n"
    with ThreadPoolExecutor(2) as ex:
        b = ex.submit(sandbox.run, RunRequest(code=bomb, run_timeout=2))
        time.sleep(0.5)  # the bomb has used up its own process limit by now
        ok = sandbox.run(RunRequest(code=spawner, run_timeout=5))
        assert b.result().run.status is Status.TIME_LIMIT
    assert ok.ok and ok.run.stdout == "spawned 10\n", ok  # process limits are per sandbox
    host.check()


def children_of(parent: int) -> list[int]:
    """Live child processes of `parent` (each sandbox is one child: setpriv, then bwrap)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except (OSError, ValueError):
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if int(fields[1]) == parent and fields[0] != b"Z":
            found.append(int(name))
    return found


def test_burst_of_requests_never_runs_more_sandboxes_than_workers(sandbox, host):
    peak = 0
    stop = threading.Event()
    already = set(children_of(os.getpid()))  # whatever earlier tests in this process left is not a sandbox

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, len(set(children_of(os.getpid())) - already))
            time.sleep(0.005)

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        with ThreadPoolExecutor(10) as ex:
            futures = [ex.submit(sandbox.run, RunRequest(code="import time\ntime.sleep(0.3)\nprint('done')")) for _ in range(8)]
            results = [f.result() for f in futures]
    finally:
        stop.set()
        watcher.join()
    assert all(r.ok and r.run.stdout == "done\n" for r in results)
    assert 1 <= peak <= sandbox.metrics()["max_workers"] == 2
    assert sandbox.metrics()["queue_wait_s_p99"] > 0.2  # the others waited for a slot
    host.check()
