"""RaySandbox: sandbox-worker actors (each a bubblewrap LocalSandbox) as a drop-in `Sandbox`; a
worker SIGKILLed during a run has that run re-run once on a replacement."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from posttrain.sandbox import RunRequest


@pytest.fixture(scope="module")
def sandbox(ray_cluster):
    from posttrain.scale.sandbox import RaySandbox

    with RaySandbox(workers=2, slots=1, num_cpus=0.5) as sb:
        yield sb


def test_runs_like_the_local_sandbox_on_both_workers(sandbox):
    results = [sandbox.run(RunRequest(code="import sys; print(sum(map(int, sys.stdin.read().split())))",
                                      stdin=f"{i} 40")) for i in range(4)]
    assert [r.run.stdout for r in results] == ["40\n", "41\n", "42\n", "43\n"]
    assert all(r.ok for r in results)
    info = sandbox.worker_info()
    assert [i["metrics"]["runs"] for i in info] == [2, 2]  # dealt round-robin
    assert {i["metrics"]["isolation"] for i in info} == {"bwrap"}
    failing = sandbox.run(RunRequest(code="raise SystemExit(3)"))
    assert not failing.ok and failing.run.return_code == 3  # the program's own failure is not a fault
    assert sandbox.faults == []


def test_a_bad_request_fails_on_the_driver_in_one_line(sandbox):
    with pytest.raises(ValueError) as e:
        sandbox.run(RunRequest(code="print(1)", files={"../escape": b"x"}))
    assert "\n" not in str(e.value) and str(e.value).startswith("files")
    assert sandbox.reran == 0 and sandbox.faults == []


def test_a_killed_worker_has_its_run_rerun_on_a_replacement(sandbox):
    pids = {i["index"]: i["pid"] for i in sandbox.worker_info()}
    out: dict = {}
    request = RunRequest(code="import time; time.sleep(1.5); print('done')", run_timeout=20)
    thread = threading.Thread(target=lambda: out.setdefault("result", sandbox.run(request)))
    thread.start()
    deadline = time.monotonic() + 30
    busy: list[int] = []
    while not busy:  # the program is running in one worker: that one is killed
        assert time.monotonic() < deadline, "the run never started"
        busy = [i["index"] for i in sandbox.worker_info() if i["metrics"]["in_flight"]]
        time.sleep(0.01)
    [w] = busy
    os.kill(pids[w], signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert out["result"].ok and out["result"].run.stdout == "done\n"
    [fault] = sandbox.faults
    assert (fault.role, fault.worker, fault.requeued) == ("sandbox", w, 1)
    assert fault.line().startswith(f"sandbox worker {w} died (") and fault.line().endswith("restarted, re-ran 1 request")
    after = {i["index"]: i for i in sandbox.worker_info()}
    assert after[w]["pid"] != pids[w] and after[w]["metrics"]["runs"] == 1  # the re-run, on the replacement
    assert after[1 - w]["pid"] == pids[1 - w]
    assert sandbox.metrics()["restarts"] == 1 and sandbox.reran == 1


def test_the_verifiers_use_it_through_set_sandbox(sandbox):
    from posttrain.sandbox import default as code_verifier

    code_verifier.set_sandbox(sandbox)
    try:
        assert code_verifier.get_sandbox() is sandbox
        runs = sandbox.metrics()["runs"]
        code_verifier.get_sandbox().run(RunRequest(code="print(2)"))
        assert sandbox.metrics()["runs"] == runs + 1
    finally:
        code_verifier.set_sandbox(None)

