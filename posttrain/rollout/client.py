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
contract), so episodes stay reproducible; the requests made in one event-loop tick (a rollout's
first turns) reach the engine as one batch, so its first steps, and the float rounding of their
logprobs, do not depend on thread timing. Later turns join whenever their tools finish: their
tokens are the same on a rerun, their logprobs equal up to float rounding.

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
        self._pending: list[tuple] = []  # requests of this loop tick, handed over together (_flush)

    @property
    def version(self) -> int:
        return int(getattr(self.engine, "version", 0))

    async def generate(self, prompt: Sequence[int], params: SamplingParams) -> Completion:
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        ids: list[int] = []
        logprobs: list[float] = []

        def finish(result: Completion | BaseException) -> None:  # on the loop
            if done.done():
                return
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)

        def sink(ev: StepOutput | BaseException) -> None:  # on the engine thread
            # tokens gather here; the loop is woken once per request, not once per token (a wake-up
            # per token keeps the loop thread fighting the engine thread for the GIL)
            if isinstance(ev, BaseException):
                result: Completion | BaseException = ev
            else:
                ids.extend(ev.token_ids)
                logprobs.extend(ev.logprobs)
                if not ev.finished:
                    return
                result = Completion(tuple(ids), tuple(logprobs), ev.finish_reason or "stop")
            try:
                loop.call_soon_threadsafe(finish, result)
            except RuntimeError:  # the loop has closed: nobody is waiting
                pass

        self.requests += 1
        slot: list = []
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((list(prompt), params, sink, slot))
        try:
            return await done
        except asyncio.CancelledError:
            if slot:
                self.runner.cancel(slot[0])
            else:  # not handed to the engine yet
                self._pending = [p for p in self._pending if p[3] is not slot]
            raise

    def _flush(self) -> None:
        """Hand every request of this loop tick to the engine as one batch: the episodes that start
        together (a rollout's first turns) share the engine's first step whatever the thread timing."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        for (*_, slot), req in zip(pending, self.runner.submit_many([p[:3] for p in pending])):
            slot.append(req)

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
