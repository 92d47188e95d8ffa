"""An in-process async client of any rollout engine: what episodes await while others wait on tools.

    async with AsyncEngine(engine) as client:
        c = await client.generate(prompt_ids, SamplingParams(max_tokens=64, seed=1))   # a Completion
        c, version = await client.generate_versioned(prompt_ids, params)                # + the weights' version
        await client.suspend()                       # the weight sync between two RL steps:
        engine.update_weights(state, version + 1)    #   episodes stay alive on the loop meanwhile
        client.resume()
        await client.sync_weights(transport, pause="finish")   # or all of that in one call (below)
        c, versions = await client.generate_tagged(prompt_ids, params)  # the version behind each token
        client.busy_seconds, client.wall_seconds()   # differences over any interval: the busy fraction
        client.requeued_turns, client.idle_fraction()

The client owns one `EngineRunner` (engine/runner.py, also the server's engine thread): a
`SteppingEngine` (the paged engine) takes each request as it arrives and is stepped while any is
unfinished, so turns of hundreds of episodes are batched continuously while other episodes run
tools; a plain `Engine` (HF, scripted) gets what arrived within `batch_window_s` as one
`generate` call. Cancelling the awaiting task (an episode past its wall time) aborts the request
in the engine. The same seed gives the same completion whatever else is in flight (the engine
contract), so episodes stay reproducible; the requests made in one event-loop tick (a rollout's
first turns) reach the engine as one batch, so its first steps, and the float rounding of their
logprobs, do not depend on thread timing. Later turns join whenever their tools finish: their
tokens are the same on a rerun, their logprobs equal up to float rounding. `SamplingParams.priority`
orders admission in the paged engine and never changes a completion.

Suspend / resume. `await client.suspend()` (from a coroutine on the client's loop) holds every
request not yet in the engine, aborts every request in flight in a stepping engine (a plain
engine's batch in progress is waited for and completes as usual) and returns once the engine
thread is idle. A `generate` whose request was aborted this way does not raise: it waits, and
after `client.resume()` submits the same prompt and params again and returns that completion,
computed from scratch under the weights of that moment (its partial tokens are discarded;
`requeued_turns` counts these resubmissions). Requests made while suspended wait too. A
cancelled `generate` still aborts its request, suspended or not.

Who may touch the engine, when:
- client open, not suspended: only the runner's engine thread. Other threads must not call it;
  `client.runner.call(fn)` runs fn(engine) on that thread between two steps;
- from `await client.suspend()` returning until `client.resume()`: the engine thread waits (it
  runs only `runner.call`s), so one thread at a time may call the engine directly, e.g.
  `engine.update_weights(state, version)` on the loop or via `asyncio.to_thread`; do not mix
  that with `runner.call`s still in flight;
- after `close()`: the caller's.

Weight sync with a pause mode (in RL, rl/sync.py's WeightSync is its one caller):
`await client.sync_weights(source, version, pause=...)` first
receives and verifies the transfer (engine/weight_sync.py: a Transport, a Delivery, or a plain
state dict with its version) off the loop while the engine keeps serving; a failed transfer
raises WeightSyncError and nothing is paused or swapped. Then, by `pause`:
- "finish": requests made from then on are held; those in flight run to the end on the old
  weights; the engine, now idle, takes the new weights; the held requests go in;
- "abort": `suspend()`, `update_weights`, `resume()` as above: in-flight requests are re-queued
  and computed from scratch on the new weights (their partial tokens are lost);
- "continue": `update_weights` runs on the engine thread between two steps; in-flight requests
  keep their tokens and go on under the new weights (the paged engine recomputes their K/V), so
  one completion can hold tokens of two versions. A plain (non-stepping) engine has no step to
  swap between: its batch in progress finishes on the old weights first, i.e. "continue"
  degrades to "finish".
`generate_tagged` returns the version of the weights that sampled each token (read on the
engine thread right after the step that sampled it; every swap happens on that thread or while
it is idle). `generate_versioned` returns the version of the first token (the version when it
finished, for a completion without tokens): under "finish" and "abort", that of every token.
"""

from __future__ import annotations

import asyncio
import time
from typing import Sequence

from posttrain.core.errors import ConfigError
from posttrain.engine.protocol import Completion, Engine, SamplingParams, StepOutput
from posttrain.engine.runner import EngineRunner
from posttrain.engine.weight_sync import as_delivery

PAUSE_MODES = ("finish", "abort", "continue")

_REQUEUE = object()  # what an attempt's future holds when suspend() aborted its request


class AsyncEngine:
    def __init__(self, engine: Engine, *, batch_window_s: float = 0.002):
        self.engine = engine
        self.runner = EngineRunner(engine, batch_window_s=batch_window_s)
        self.requests = 0  # generate calls
        self.requeued_turns = 0  # requests aborted by suspend() and submitted again
        self._pending: list[tuple] = []  # requests of this loop tick, handed over together (_flush)
        self._live: dict = {}  # runner request -> its attempt's future, while in the runner's hands
        self._suspension: asyncio.Future | None = None

    @property
    def version(self) -> int:
        return int(getattr(self.engine, "version", 0))

    @property
    def suspended(self) -> bool:
        """True from `suspend()` being called until `resume()`."""
        return self._suspension is not None

    @property
    def busy_seconds(self) -> float:
        """Engine-thread seconds spent inside engine.step / generate since the client opened
        (updated when each step or batch ends)."""
        return self.runner.busy_seconds

    def wall_seconds(self) -> float:
        """Seconds since the client opened (the clock `busy_seconds` is measured against)."""
        return time.perf_counter() - self.runner.started

    async def generate(self, prompt: Sequence[int], params: SamplingParams) -> Completion:
        return (await self.generate_versioned(prompt, params))[0]

    async def generate_versioned(self, prompt: Sequence[int], params: SamplingParams) -> tuple[Completion, int]:
        """The completion and the version of the weights that sampled its first token."""
        completion, versions, finished = await self._generate(prompt, params)
        return completion, versions[0] if versions else finished

    async def generate_tagged(self, prompt: Sequence[int], params: SamplingParams) -> tuple[Completion, tuple[int, ...]]:
        """The completion and, for each of its tokens, the version of the weights that sampled it."""
        completion, versions, _ = await self._generate(prompt, params)
        return completion, versions

    async def _generate(self, prompt: Sequence[int], params: SamplingParams) -> tuple[Completion, tuple[int, ...], int]:
        self.requests += 1
        prompt = list(prompt)
        while True:
            result = await self._attempt(prompt, params)
            if result is not _REQUEUE:
                return result
            self.requeued_turns += 1

    async def _attempt(self, prompt: list[int], params: SamplingParams):
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []

        def finish(result) -> None:  # on the loop
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
                result: tuple | BaseException = ev
            else:
                ids.extend(ev.token_ids)
                logprobs.extend(ev.logprobs)
                now = self.version
                versions.extend([now] * len(ev.token_ids))
                if not ev.finished:
                    return
                result = (Completion(tuple(ids), tuple(logprobs), ev.finish_reason or "stop"), tuple(versions), now)
            try:
                loop.call_soon_threadsafe(finish, result)
            except RuntimeError:  # the loop has closed: nobody is waiting
                pass

        slot: list = []
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((prompt, params, sink, slot, done))
        try:
            return await done
        except asyncio.CancelledError:
            if slot:
                self.runner.cancel(slot[0])
            else:  # not handed to the engine yet
                self._pending = [p for p in self._pending if p[3] is not slot]
            raise
        finally:
            if slot:
                self._live.pop(slot[0], None)

    def _flush(self) -> None:
        """Hand every request of this loop tick to the engine as one batch: the episodes that start
        together (a rollout's first turns) share the engine's first step whatever the thread timing."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        for (*_, slot, done), req in zip(pending, self.runner.submit_many([p[:3] for p in pending])):
            slot.append(req)
            self._live[req] = done

    async def suspend(self, *, drain: bool = False) -> None:
        """Stop the engine for a weight sync (module docstring); returns once its thread is idle.
        drain=True: in-flight requests finish first instead of being aborted and re-queued.
        Calling it again while suspended waits for the same suspension."""
        if self._suspension is None:
            self._suspension = asyncio.ensure_future(self._suspend(drain))
        await asyncio.shield(self._suspension)

    async def _suspend(self, drain: bool = False) -> None:
        aborted = await asyncio.wrap_future(self.runner.suspend(drain=drain))
        for req in aborted:
            done = self._live.pop(req, None)
            if done is not None and not done.done():
                done.set_result(_REQUEUE)

    def resume(self) -> None:
        """Let the engine run again: held and requeued requests are handed over first. A no-op
        when not suspended."""
        if self._suspension is not None:
            self._suspension = None
            self.runner.resume()

    async def sync_weights(self, source, version: int | None = None, *, pause: str = "abort") -> int:
        """Receive, verify and swap in new weights with a pause mode (module docstring); returns
        the version now served. Called while already suspended, it swaps and stays suspended."""
        if pause not in PAUSE_MODES:
            raise ConfigError(f"cluster.weight_sync.pause must be one of {', '.join(PAUSE_MODES)}, got {pause!r}")
        delivery = await asyncio.to_thread(as_delivery, source, version)  # raises before anything pauses
        state, new = delivery.state, delivery.version
        if pause == "continue" and not self.suspended:
            await asyncio.wrap_future(self.runner.call(lambda engine: engine.update_weights(state, new)))
            return new
        was_suspended = self.suspended
        await self.suspend(drain=pause == "finish")
        try:
            await asyncio.to_thread(self.engine.update_weights, state, new)
        finally:
            if not was_suspended:
                self.resume()
        return new

    def idle_fraction(self) -> float:
        """The share of wall time since the client opened that the engine was not computing."""
        wall = self.wall_seconds()
        return max(0.0, 1.0 - self.busy_seconds / wall) if wall > 0 else 0.0

    def close(self) -> None:
        self.runner.close()

    async def __aenter__(self) -> "AsyncEngine":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()
