"""A bounded pool: at most `max_workers` sandboxes at once, at most `max_queue` waiting.

A request past both bounds is refused at once with SandboxError("sandbox queue full ...")
instead of piling up threads or processes (backpressure for the caller). Metrics cover the
most recent `window` requests: queue wait, run time, and violations counted by kind.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Callable

from posttrain.sandbox.types import RunRequest, RunResult, SandboxError


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


class Pool:
    def __init__(
        self,
        work: Callable[[RunRequest], RunResult],
        max_workers: int,
        max_queue: int,
        window: int = 1000,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers: must be at least 1, got {max_workers}")
        if max_queue < 0:
            raise ValueError(f"max_queue: must be 0 or more, got {max_queue}")
        self._work = work
        self.max_workers = max_workers
        self.max_queue = max_queue
        self._threads = ThreadPoolExecutor(max_workers, thread_name_prefix="sandbox")
        self._lock = threading.Lock()
        self._closed = False
        self._queued = 0
        self._in_flight = 0
        self._runs = 0
        self._errors = 0
        self._rejected = 0
        self._violations: Counter[str] = Counter()
        self._waits: deque[float] = deque(maxlen=window)
        self._run_times: deque[float] = deque(maxlen=window)

    def submit(self, request: RunRequest) -> Future[RunResult]:
        with self._lock:
            if self._closed:
                raise SandboxError("sandbox is closed")
            if self._queued + self._in_flight >= self.max_workers + self.max_queue:
                self._rejected += 1
                raise SandboxError(
                    f"sandbox queue full: {self._in_flight} running, {self._queued} waiting "
                    f"(max_workers={self.max_workers}, max_queue={self.max_queue})"
                )
            self._queued += 1
        submitted = time.monotonic()
        try:
            return self._threads.submit(self._one, request, submitted)
        except RuntimeError as e:  # shut down between the check and the submit
            with self._lock:
                self._queued -= 1
            raise SandboxError("sandbox is closed") from e

    def _one(self, request: RunRequest, submitted: float) -> RunResult:
        started = time.monotonic()
        with self._lock:
            self._queued -= 1
            self._in_flight += 1
            self._waits.append(started - submitted)
        result = None
        try:
            result = self._work(request)
            return result
        finally:
            with self._lock:
                self._in_flight -= 1
                self._run_times.append(time.monotonic() - started)
                if result is None:
                    self._errors += 1
                else:
                    self._runs += 1
                    for event in result.events:
                        self._violations[event.split(":", 1)[0]] += 1

    def run(self, request: RunRequest) -> RunResult:
        future = self.submit(request)
        try:
            return future.result()
        except CancelledError as e:
            raise SandboxError("sandbox closed before this request ran") from e

    async def arun(self, request: RunRequest) -> RunResult:
        future = self.submit(request)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError as e:
            if self._closed and future.cancelled():
                raise SandboxError("sandbox closed before this request ran") from e
            raise  # the caller's own task was cancelled

    def metrics(self) -> dict:
        with self._lock:
            waits, times = list(self._waits), list(self._run_times)
            return {
                "runs": self._runs,
                "errors": self._errors,
                "rejected": self._rejected,
                "in_flight": self._in_flight,
                "queued": self._queued,
                "max_workers": self.max_workers,
                "max_queue": self.max_queue,
                "queue_wait_s_p50": percentile(waits, 50),
                "queue_wait_s_p99": percentile(waits, 99),
                "run_s_p50": percentile(times, 50),
                "run_s_p99": percentile(times, 99),
                "violations": dict(self._violations),
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._threads.shutdown(wait=True, cancel_futures=True)
