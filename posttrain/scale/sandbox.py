"""Sandbox (environment) workers as Ray actors, behind `RaySandbox`: a drop-in `Sandbox`.

    sandbox = RaySandbox(workers=2)                       # each actor holds a LocalSandbox (bubblewrap)
    result = sandbox.run(RunRequest(code="print(1)"))     # same call and result as LocalSandbox.run
    from posttrain.sandbox.default import set_sandbox; set_sandbox(sandbox)   # verifiers and envs use it

Each `SandboxWorker` actor runs a `LocalSandbox` on its node (its isolation, limits and
guarantees are the ones `posttrain/sandbox/isolation.py` states; nothing is added or lost here)
and takes up to `slots` requests at once. Requests are dealt to the workers round-robin.

Supervision: workers run with `max_restarts=0`. A call whose worker died (its process killed,
its node lost) is re-run once on a replacement actor, and the death is recorded as a `Fault`
and logged in one line ("sandbox worker 0 died (...): restarted, re-ran 1 request"); a second
death of the same call raises `SandboxError` (an infrastructure fault, which the scheduler's
retry policy already treats as such). Errors of the run itself (a bad request, a full queue, a
sandbox fault) reach the caller unchanged and are not re-run. A program that was running when
its worker died may have had side effects outside its work dir only as far as the isolation
allows (none under bubblewrap): re-running it is safe for the verifiers' stateless runs.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from typing import Any, Literal

import ray

from posttrain.scale.supervisor import Fault, cause_of, death_errors, not_started, record
from posttrain.sandbox import LocalSandbox, RunRequest, RunResult, SandboxError
from posttrain.sandbox.workdir import validate


@ray.remote(max_restarts=0, concurrency_groups={"control": 1})
class SandboxWorker:
    """One `LocalSandbox` in one actor process; `run` is called from up to `slots` actor threads."""

    def __init__(self, index: int, slots: int, max_queue: int, isolation: str):
        self.index = index
        self.sandbox = LocalSandbox(max_workers=slots, max_queue=max_queue, isolation=isolation)  # type: ignore[arg-type]

    def run(self, request: RunRequest) -> RunResult:
        return self.sandbox.run(request)

    @ray.method(concurrency_group="control")
    def info(self) -> dict:
        return {"index": self.index, "pid": os.getpid(), "node_ip": ray.util.get_node_ip_address(),
                "metrics": self.sandbox.metrics()}

    @ray.method(concurrency_group="control")
    def close(self) -> None:
        self.sandbox.close()


class RaySandbox:
    """Implements `Sandbox` (run, arun, metrics, close) over N `SandboxWorker` actors."""

    def __init__(self, workers: int = 2, *, slots: int = 1, max_queue: int = 64,
                 isolation: Literal["bwrap", "none"] = "bwrap", num_cpus: float = 1,
                 start_timeout_s: float = 120.0):
        if workers < 1 or slots < 1:
            raise ValueError("RaySandbox: workers and slots must be >= 1")
        self._args = (slots, max_queue, isolation)
        self._options = {"num_cpus": num_cpus, "max_concurrency": slots}
        self._lock = threading.Lock()
        self.start_timeout_s = start_timeout_s
        self._turn = itertools.count()
        self.faults: list[Fault] = []
        self.reran = 0  # calls re-run on a replacement, over this sandbox's life
        self._workers = [self._start(i) for i in range(workers)]
        self._generation = [0] * workers  # bumped at each replacement of that worker
        for i, actor in enumerate(self._workers):
            try:
                ray.get(actor.info.remote(), timeout=self.start_timeout_s)
            except ray.exceptions.GetTimeoutError:
                self.close()
                raise not_started("sandbox", i, self.start_timeout_s, self._options) from None
            except death_errors() as e:
                self.close()
                raise SandboxError(f"sandbox worker {i} could not start: {cause_of(e)}") from None

    def run(self, request: RunRequest) -> RunResult:
        validate(request)  # a bad request fails here, never on a worker
        w = next(self._turn) % len(self._workers)
        for attempt in (0, 1):
            actor, gen = self._workers[w], self._generation[w]
            try:
                return ray.get(actor.run.remote(request))
            except death_errors() as e:
                self._after_death(w, gen, e, attempt)
        raise AssertionError("unreachable")

    async def arun(self, request: RunRequest) -> RunResult:
        """`run` for asyncio callers: awaits the actor call without blocking the event loop."""
        validate(request)
        w = next(self._turn) % len(self._workers)
        for attempt in (0, 1):
            actor, gen = self._workers[w], self._generation[w]
            try:
                return await actor.run.remote(request)
            except death_errors() as e:
                await asyncio.to_thread(self._after_death, w, gen, e, attempt)
        raise AssertionError("unreachable")

    def metrics(self) -> dict:
        """Summed counters of the workers' pools (runs, errors, rejected, in_flight, queued), plus
        workers and restarts."""
        infos = self.worker_info()
        out: dict = {"workers": len(infos), "restarts": len(self.faults), "reran": self.reran}
        for key in ("runs", "errors", "rejected", "in_flight", "queued"):
            out[key] = sum(int(i["metrics"].get(key, 0)) for i in infos)
        return out

    def worker_info(self) -> list[dict]:
        """Per worker: index, pid, node_ip, metrics (its LocalSandbox's)."""
        return ray.get([a.info.remote() for a in self._workers])

    def close(self) -> None:
        for actor in self._workers:
            _stop(actor)

    def __enter__(self) -> "RaySandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, index: int) -> Any:
        return SandboxWorker.options(**self._options).remote(index, *self._args)

    def _after_death(self, w: int, gen: int, exc: BaseException, attempt: int) -> None:
        """Replace worker w (once per death, whichever call sees it first); count the re-run."""
        if attempt > 0:
            raise SandboxError(f"sandbox worker {w} died again on the same request ({cause_of(exc)}); "
                               "not re-run a second time")
        with self._lock:
            self.reran += 1
            if self._generation[w] != gen:  # another call already replaced this death's worker
                fault = next(f for f in reversed(self.faults) if f.worker == w)
                fault.requeued += 1
                return
            _stop(self._workers[w])
            actor = self._start(w)
            try:
                ray.get(actor.info.remote())
            except death_errors() as e:
                raise SandboxError(f"sandbox worker {w} died ({cause_of(exc)}) and its replacement did not "
                                   f"start ({cause_of(e)})") from None
            self._workers[w] = actor
            self._generation[w] += 1
            record(self.faults, Fault("sandbox", w, cause_of(exc), requeued=1))


def _stop(actor: Any) -> None:
    try:
        ray.get(actor.close.remote(), timeout=10)
    except Exception:  # dead already, or not answering: killed below either way
        pass
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass
