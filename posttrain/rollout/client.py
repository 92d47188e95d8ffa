"""An in-process async client of any rollout engine: what episodes await while others wait on tools.

    async with AsyncEngine(engine) as client:
        c = await client.generate(prompt_ids, SamplingParams(max_tokens=64, seed=1))   # a Completion
        client.idle_fraction()                                                            # engine idle share

The client owns one `EngineRunner` (rollout/server.py, the server's engine thread): a
`SteppingEngine` (the paged engine) takes each request as it arrives and is stepped while any is
unfinished, so turns of hundreds of episodes are batched continuously while other episodes run
tools; a plain `Engine` (HF, scripted) gets what arrived within `batch_window_s` as one
`generate` call. Cancelling the awaiting task (an episode past its wall time) aborts the request
in the engine. The same seed gives the same completion whatever else is in flight (the engine
contract), so episodes stay reproducible.

The engine belongs to the runner's thread while the client is open: weights are updated
between rollouts (after `close`), never during one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Sequence

from posttrain.rollout.engine import Completion, Engine, SamplingParams, StepOutput
from posttrain.rollout.server import EngineRunner


class AsyncEngine:
    def __init__(self, engine: Engine, *, batch_window_s: float = 0.002):
        self.engine = engine
        self.runner = EngineRunner(engine, batch_window_s=batch_window_s)
        self.requests = 0

    @property
    def version(self) -> int:
        return int(getattr(self.engine, "version", 0))

    async def generate(self, prompt: Sequence[int], params: SamplingParams) -> Completion:
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        ids: list[int] = []
        logprobs: list[float] = []

        def on_event(ev: StepOutput | BaseException) -> None:  # on the loop
            if done.done():
                return
            if isinstance(ev, BaseException):
                done.set_exception(ev)
                return
            ids.extend(ev.token_ids)
            logprobs.extend(ev.logprobs)
            if ev.finished:
                done.set_result(Completion(tuple(ids), tuple(logprobs), ev.finish_reason or "stop"))

        def sink(ev: StepOutput | BaseException) -> None:  # on the engine thread
            try:
                loop.call_soon_threadsafe(on_event, ev)
            except RuntimeError:  # the loop has closed: nobody is waiting
                pass

        self.requests += 1
        handle = self.runner.submit(list(prompt), params, sink)
        try:
            return await done
        except asyncio.CancelledError:
            self.runner.cancel(handle)
            raise

    def idle_fraction(self) -> float:
        """The share of wall time since the client opened that the engine was not computing."""
        wall = time.perf_counter() - self.runner.started
        return max(0.0, 1.0 - self.runner.busy_seconds / wall) if wall > 0 else 0.0

    def close(self) -> None:
        self.runner.close()

    async def __aenter__(self) -> "AsyncEngine":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()
