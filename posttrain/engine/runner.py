"""The one thread that calls an engine: what the HTTP server and the in-process async client share.

    runner = EngineRunner(engine)
    req = runner.submit(prompt_ids, params, sink)      # sink(StepOutput | exception) on the engine thread
    runner.cancel(req); runner.call(fn) -> Future; runner.suspend() -> Future; runner.resume(); runner.close()
    runner.suspend(drain=True)                         # the same, but in-flight requests finish first

A `SteppingEngine` (the paged engine) takes each request as it arrives and is stepped while any is
unfinished; a plain `Engine` gets what arrived within `batch_window_s` as one `generate` call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from posttrain.engine.protocol import Engine, SamplingParams, StepOutput, SteppingEngine

log = logging.getLogger(__name__)

Sink = Callable[[StepOutput | BaseException], None]  # called on the engine thread


class _Request:
    __slots__ = ("prompt", "params", "sink", "cancelled", "engine_id")

    def __init__(self, prompt: list[int], params: SamplingParams, sink: Sink):
        self.prompt, self.params, self.sink = prompt, params, sink
        self.cancelled = False
        self.engine_id: int | None = None


class EngineRunner:
    """The one thread that calls the engine. `submit`, `cancel`, `call`, `suspend` and `resume` are
    safe from any thread.

    `suspend()` stops the engine between two steps (or batches) for a weight sync: every request in
    flight in a stepping engine is aborted (no further event reaches its sink), requests submitted
    from then on are held until `resume()`. Its future resolves to the aborted requests once the
    engine has nothing unfinished and the thread is waiting; from then until `resume()` the thread
    touches the engine only to run `call`s, so any one other thread may use the engine meanwhile
    (e.g. `update_weights`). A plain `Engine`'s batch in progress finishes first (its requests
    complete as usual); its queued requests are held, none aborted.

    `suspend(drain=True)` aborts nothing: requests submitted from then on are held, the ones in
    flight keep being stepped until they finish (on the weights of that moment), then the engine
    is idle as above and the future resolves to []. A plain `suspend()` arriving meanwhile aborts
    what is still in flight and resolves both. For a plain `Engine` both forms are the same."""

    def __init__(self, engine: Engine, *, batch_window_s: float = 0.005):
        self.engine = engine
        self.stepping = isinstance(engine, SteppingEngine)
        self.batch_window_s = batch_window_s
        self.busy_seconds = 0.0  # wall time inside engine.step / generate (the engine idles the rest)
        self.started = time.perf_counter()
        self._inbox: queue.Queue = queue.Queue()
        loop = self._run_stepping if self.stepping else self._run_batching
        self._thread = threading.Thread(target=loop, name="posttrain-engine", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], params: SamplingParams, sink: Sink) -> _Request:
        req = _Request(prompt, params, sink)
        self._inbox.put(("add", req))
        return req

    def submit_many(self, items: list[tuple[list[int], SamplingParams, Sink]]) -> list[_Request]:
        """Requests the engine takes together, before its next step (a deterministic first batch)."""
        reqs = [_Request(prompt, params, sink) for prompt, params, sink in items]
        self._inbox.put(("add_many", reqs))
        return reqs

    def cancel(self, req: _Request) -> None:
        req.cancelled = True
        self._inbox.put(("abort", req))

    def call(self, fn: Callable[[Engine], Any]) -> Future:
        """Run fn(engine) on the engine thread between steps / batches (suspended or not)."""
        fut: Future = Future()
        self._inbox.put(("call", (fn, fut)))
        return fut

    def suspend(self, *, drain: bool = False) -> Future:
        """Future of the list of `_Request`s aborted (see the class docstring); [] if already
        suspended, and always [] with drain=True."""
        fut: Future = Future()
        self._inbox.put(("suspend", (fut, drain)))
        return fut

    def resume(self) -> None:
        """Let the engine run again: the held requests are taken first, in the order they came."""
        self._inbox.put(("resume", None))

    def close(self) -> None:
        self._inbox.put(("stop", None))
        self._thread.join(timeout=10)

    # ---- engine thread ----

    def _drain(self, items: list) -> list:
        try:
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            return items

    def _do_call(self, item) -> None:
        fn, fut = item
        try:
            fut.set_result(fn(self.engine))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            fut.set_exception(exc)

    def _suspended(self, items: list, held: list) -> list | None:
        """The thread while suspended: runs calls, holds adds, until "resume" (returns the items to
        take next: the held ones, then what followed the resume) or "stop" (returns None)."""
        while True:
            kind, item = items.pop(0) if items else self._inbox.get()
            if kind == "stop":
                return None
            if kind == "resume":
                return held + items
            if kind == "call":
                self._do_call(item)
            elif kind == "suspend":
                item[0].set_result([])
            elif kind in ("add", "add_many"):
                held.append((kind, item))
            # "abort": the request is a held one (nothing is live): its cancelled flag drops it later

    def _timed_step(self, eng: Any) -> list[StepOutput]:
        t0 = time.perf_counter()
        try:
            return eng.step()
        finally:
            self.busy_seconds += time.perf_counter() - t0

    def _run_stepping(self) -> None:
        eng: Any = self.engine
        live: dict[int, _Request] = {}
        carry: list = []
        draining: list[Future] = []  # suspend(drain=True)s waiting for the requests in flight to finish
        held: list = []  # what was submitted meanwhile
        while True:
            if draining and not carry and not live and not eng.has_unfinished():
                for fut in draining:
                    fut.set_result([])
                draining = []
                resumed, held = self._suspended([], held), []
                if resumed is None:
                    return
                carry = resumed
            items, carry = self._drain(carry or ([] if eng.has_unfinished() else [self._inbox.get()])), []
            for n, (kind, item) in enumerate(items):
                if kind == "stop":
                    return
                if kind == "suspend" and item[1]:
                    draining.append(item[0])
                    continue
                if draining and kind in ("add", "add_many"):
                    held.append((kind, item))
                    continue
                if kind == "suspend":
                    item = item[0]
                    aborted = list(live.values())
                    live.clear()
                    for req in aborted:
                        eng.abort(req.engine_id)
                    try:
                        while eng.has_unfinished():  # reports the aborts; nothing reaches a sink
                            self._timed_step(eng)
                    except Exception:  # noqa: BLE001 - the engine is idle either way
                        log.exception("engine step failed while suspending")
                    item.set_result(aborted)
                    for fut in draining:
                        fut.set_result([])
                    draining = []
                    resumed, held = self._suspended(items[n + 1:], held), []
                    if resumed is None:
                        return
                    carry = resumed
                    break
                if kind == "call":
                    self._do_call(item)
                elif kind in ("add", "add_many"):
                    for req in item if kind == "add_many" else [item]:
                        if req.cancelled:
                            continue
                        try:
                            req.engine_id = eng.add_request(req.prompt, req.params)
                            live[req.engine_id] = req
                        except Exception as exc:  # noqa: BLE001 - a bad request fails alone
                            req.sink(exc)
                elif kind == "abort" and item.engine_id is not None and live.pop(item.engine_id, None) is not None:
                    eng.abort(item.engine_id)
            if carry or not eng.has_unfinished():
                continue
            try:
                outputs = self._timed_step(eng)
            except Exception as exc:  # noqa: BLE001 - fail what is in flight, keep serving
                log.exception("engine step failed")
                for rid, req in list(live.items()):
                    req.sink(exc)
                    eng.abort(rid)
                live.clear()
                continue
            for out in outputs:
                req = live.get(out.request_id)
                if req is None:
                    continue
                if out.finished:
                    del live[out.request_id]
                req.sink(out)

    def _run_batching(self) -> None:
        carry: list = []
        while True:
            items, carry = carry or [self._inbox.get()], []
            deadline = time.monotonic() + self.batch_window_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    items.append(self._inbox.get(timeout=left))
                except queue.Empty:
                    break
            batch = []
            items = self._drain(items)  # and whatever else is already waiting
            for n, (kind, item) in enumerate(items):
                if kind == "stop":
                    return
                if kind == "suspend":  # the last batch has finished: nothing is in flight
                    item[0].set_result([])
                    resumed = self._suspended(items[n + 1:], [("add_many", batch)])
                    if resumed is None:
                        return
                    carry, batch = resumed, []
                    break
                if kind == "call":
                    self._do_call(item)
                elif kind == "add":
                    batch.append(item)
                elif kind == "add_many":
                    batch.extend(item)
            batch = [r for r in batch if not r.cancelled]
            if batch:
                self._generate(batch)

    def _generate(self, batch: list[_Request]) -> None:
        t0 = time.perf_counter()
        try:
            outs = self.engine.generate([r.prompt for r in batch], [r.params for r in batch])
        except Exception as exc:  # noqa: BLE001
            self.busy_seconds += time.perf_counter() - t0
            if len(batch) > 1:  # find the request that breaks it; the others still get served
                for r in batch:
                    self._generate([r])
                return
            log.warning("engine.generate failed for one request: %s", exc)
            batch[0].sink(exc)
            return
        self.busy_seconds += time.perf_counter() - t0
        for r, c in zip(batch, outs):
            r.sink(StepOutput(0, list(c.token_ids), list(c.logprobs), True, c.finish_reason))


# ---- the HTTP side ----
