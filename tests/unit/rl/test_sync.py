"""rl/sync.py: WeightSync is the one place the policy version moves, on every path."""

from __future__ import annotations

import asyncio

import torch

from posttrain.config.rl import RLConfig
from posttrain.engine.weight_sync import InProcessTransport
from posttrain.rl.collect import Collector
from posttrain.rl.scoring import StepBatch, StepContext
from posttrain.rl.sync import WeightSync


class Engine:
    version = 0

    def generate(self, prompts, params):
        raise AssertionError("no generation here")

    def update_weights(self, state, version: int) -> None:
        self.state, self.version = dict(state), version


def _sync(tmp_path):
    cfg = RLConfig(out_dir=str(tmp_path), tasks=[{"name": "toy"}], buffer={"enabled": False})
    ctx = StepContext(cfg, Engine(), None, None, None)
    collector = Collector(ctx, None)  # no planner: nothing is collected here
    return ctx, collector, WeightSync(ctx, collector, InProcessTransport(), pause="abort")


def test_push_swaps_and_moves_the_version_with_or_without_a_client(tmp_path):
    ctx, collector, sync = _sync(tmp_path)
    with collector:
        sync.push({"w": torch.ones(2)}, 1)  # nothing ran yet: the bare engine takes it
        assert (ctx.engine.version, ctx.version) == (1, 1)
        collector.client  # opened, as after a rollout
        sync.push({"w": torch.zeros(2)}, 2)
        assert (ctx.engine.version, ctx.version) == (2, 2) and torch.equal(ctx.engine.state["w"], torch.zeros(2))
    sync.close()


def test_overlapped_trains_in_a_thread_while_the_rollout_runs(tmp_path):
    ctx, collector, sync = _sync(tmp_path)
    seen = []

    async def rollout():
        await asyncio.sleep(0.05)
        seen.append(ctx.version)  # the swap waits for the update; the rollout does not
        return StepBatch([], [], {})

    with collector:
        batch, trained = sync.overlapped(lambda: {"loss": 1.0}, lambda: {"w": torch.ones(1)}, 3, rollout())
        assert batch.kept == [] and trained["loss"] == 1.0 and "async/overlap_fraction" in trained
        assert (ctx.engine.version, ctx.version) == (3, 3)
    sync.close()
