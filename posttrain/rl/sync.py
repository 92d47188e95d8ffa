"""Weight sync: the one owner of moving the trainer's weights into the rollout engine.

    sync = WeightSync(ctx, collector, make_transport(cfg.cluster.weight_sync, out_dir), pause="abort")
    sync.push(trainer.engine_weights(), version)          # synchronous: send, then swap (nothing in flight)
    batch, trained = sync.overlapped(train, trainer.engine_weights, version, rollout)   # asynchronous RL
    sync.load(weights, version)                           # a resumed run: before anything runs
    sync.close()

Every path ends the same way: the transfer (engine/weight_sync.py: a Transport, verified before
the engine is touched) is swapped in through the collector's AsyncEngine with a pause mode
(engine/client.py: finish | abort | continue), and `ctx.version`, the version the next items are
sampled by, is written here and nowhere else.

- synchronous (`scheduler.max_staleness: 0`, or the last step): `push` sends, then swaps with
  pause "finish"; nothing is in flight (`close: all`), or the carried-over tail (`close: enough`)
  is suspended and stays so until the next step resumes it;
- asynchronous (`max_staleness >= 1`): `overlapped` runs `train()` (the update of the step before)
  and the send in a trainer thread while `rollout` (the next step's collection) runs on the
  collector's loop; once trained, the new weights go in with `cluster.weight_sync.pause`, so items
  launched before were sampled by the previous version (staleness 1, their tokens carry it) and
  those launched after by the new one. The timings come back as time/overlap, time/train_thread,
  time/rollout_overlapped, time/sync and async/overlap_fraction;
- the distributed trainer (train/trainer.py `DistTrainer`) gathers its weights on rank 0 in
  `engine_weights`; a Ray engine (scale/engine.py) takes them in its `update_weights`: both go
  through the same calls.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

from posttrain.engine.weight_sync import Transport, receive_and_swap
from posttrain.rl.collect import Collector
from posttrain.rl.scoring import StepBatch, StepContext


class WeightSync:
    def __init__(self, ctx: StepContext, collector: Collector, transport: Transport, pause: str = "abort"):
        self.ctx, self.collector, self.transport, self.pause = ctx, collector, transport, pause
        self.trainer = ThreadPoolExecutor(1, thread_name_prefix="posttrain-train")  # asynchronous RL's updates

    def _served(self, version: int) -> None:
        self.ctx.version = version  # the one place the policy version moves

    def load(self, weights: dict, version: int) -> None:
        """A resumed run's weights, before any rollout (the engine is not shared yet)."""
        self.ctx.engine.update_weights(weights, version)
        self._served(version)

    async def _swap(self, version: int, pause: str) -> None:
        await self.collector.client.sync_weights(self.transport, version, pause=pause)
        self._served(version)

    def push(self, weights: dict, version: int) -> None:
        """Send `weights` as `version` and swap them in (pause "finish": nothing in flight is cut)."""
        self.transport.send(weights, version)
        if not self.collector.opened:  # nothing has run on the engine yet: no client to pause
            receive_and_swap(self.ctx.engine, self.transport, version)
            self._served(version)
            return
        self.collector.run(self._swap(version, "finish"))

    def overlapped(self, train: Callable[[], dict], weights: Callable[[], dict], version: int,
                   rollout: Awaitable[StepBatch]) -> tuple[StepBatch, dict]:
        """Asynchronous RL, one step ahead (module docstring): `rollout` runs while `train()` and
        the send of `weights()` as `version` run in a thread; returns (batch, train metrics + timings)."""
        return self.collector.run(self._overlapped(train, weights, version, rollout))

    async def _overlapped(self, train, weights, version: int, rollout) -> tuple[StepBatch, dict]:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()

        def update() -> dict:
            out = train()
            self.transport.send(weights(), version)
            return out

        trained = loop.run_in_executor(self.trainer, update)
        marks: dict[str, float] = {}

        async def swap() -> Any:
            result = await trained
            marks["trained"] = time.perf_counter()
            await self._swap(version, self.pause)
            marks["synced"] = time.perf_counter()
            return result

        swapping = asyncio.ensure_future(swap())
        try:
            batch = await rollout
        except BaseException:
            await asyncio.gather(swapping, return_exceptions=True)
            raise
        marks["rolled_out"] = time.perf_counter()
        result = await swapping
        end = time.perf_counter()
        train_s, rollout_s = marks["trained"] - started, marks["rolled_out"] - started
        result.update({"time/overlap": min(train_s, rollout_s), "time/train_thread": train_s,
                       "time/rollout_overlapped": rollout_s, "time/sync": marks["synced"] - marks["trained"],
                       "async/overlap_fraction": min(train_s, rollout_s) / max(1e-9, end - started)})
        return batch, result

    def close(self) -> None:
        self.trainer.shutdown(wait=True)
