"""The Scheduler on a plain engine whose completions are set by their seeds: breakers, quotas, value,
staleness, the ledger and the saved state. Every group of the `parity` engine has mixed outcomes
(sample j's first token is even exactly when its seed is), so what each step keeps is known."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from posttrain.config.rl import RLConfig
from posttrain.envs.env import InfraError, register_env, ENVS
from posttrain.envs.single_turn import SingleTurnEnv
from posttrain.engine.protocol import Completion
from posttrain.rl.collect import Collector
from posttrain.rl.plan import Planner
from posttrain.rl.scoring import StepContext
from posttrain.tasks.mixture import ListSource, Mixture
from posttrain.core.types import Limits, Task
from tests.recipes import rl_toy  # noqa: F401 - registers first_token_even


class ParityEngine:
    """Two tokens per request: the first even exactly when the request's seed is."""

    version = 0

    def generate(self, prompts, params):
        return [Completion(token_ids=(4 + (p.seed % 2), 7), logprobs=(-0.5, -0.5), finish_reason="stop")
                for p in params]

    def update_weights(self, state_dict, version: int) -> None:
        self.version = version


class BrokenEnv(SingleTurnEnv):
    async def reset(self, task):
        raise InfraError("sandbox unreachable")


class SlowEnv(SingleTurnEnv):
    async def reset(self, task):
        await asyncio.sleep(float(task.metadata.get("delay", 0.0)))
        return await super().reset(task)


if "test_broken" not in ENVS:
    register_env("test_broken")(BrokenEnv)
    register_env("test_slow")(SlowEnv)


def _tasks(domain: str, n: int, env: str = "single_turn", **meta) -> list[Task]:
    return [Task(f"{domain}/{i}", domain, ({"role": "user", "content": f"{domain} question {i}"},), "x",
                 verifiers=("first_token_even",), env=env, limits=Limits(seconds=30), metadata=dict(meta))
            for i in range(n)]


def _scheduler(tmp_path: Path, tokenizer, sources, domains: list[dict], **sched) -> Collector:
    cfg = RLConfig(out_dir=str(tmp_path), tasks=domains, scheduler=sched,
                   rollout={"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 4},
                   buffer={"enabled": False})
    mix = Mixture(sources, [d.get("weight", 1.0) for d in domains], seed=0)
    ctx = StepContext(cfg, ParityEngine(), tokenizer, mix, None)
    return Collector(ctx, Planner(ctx))


def _run_step(sched: Collector, step: int, temperature: float):
    return sched.collect(sched.planner.plan(step), temperature)


def test_a_failing_domain_trips_its_breaker_and_the_run_goes_on(tmp_path, tiny_tokenizer):
    sources = [ListSource("toy", _tasks("toy", 20), [], 0), ListSource("broken", _tasks("broken", 20, "test_broken"), [], 0)]
    domains = [{"name": "toy"}, {"name": "broken", "weight": 3.0}]
    with _scheduler(tmp_path, tiny_tokenizer, sources, domains, infra_retries=0,
                    breaker={"failures": 2, "cooldown_steps": 3}) as sched:
        first = _run_step(sched, 0, 1.0)
        assert any("paused" in e and "'broken'" in e and "infra_error" in e for e in first.events)
        assert first.stats["breaker/open/broken"] == 1.0
        assert first.stats["episodes/infra_error"] > 0
        later = [_run_step(sched, s, 1.0) for s in (1, 2)]
        for batch in later:  # paused: no broken work drawn, the toy domain fills the step
            assert {g.task.domain for g in batch.generated} == {"toy"}
            assert len(batch.kept) == 2
        assert sched.planner.breakers.trips == {"broken": 1}


def test_quotas_cap_a_domain_per_step(tmp_path, tiny_tokenizer):
    sources = [ListSource("a", _tasks("a", 30), [], 0), ListSource("b", _tasks("b", 30), [], 0)]
    domains = [{"name": "a", "weight": 50.0, "quota": 1}, {"name": "b"}]
    with _scheduler(tmp_path, tiny_tokenizer, sources, domains) as sched:
        for step in range(4):
            batch = _run_step(sched, step, 1.0)
            assert sum(g.task.domain == "a" for g in batch.generated) <= 1
            assert sum(g.task.domain == "a" for g in batch.kept) == 1  # its weight would take every slot


def test_stale_tail_is_requeued_with_its_serials_and_trained_later(tmp_path, tiny_tokenizer):
    fast = _tasks("fast", 10, "test_slow", delay=0.0)
    slow = _tasks("slow", 10, "test_slow", delay=0.6)
    sources = [ListSource("fast", fast, [], 0), ListSource("slow", slow, [], 0)]
    domains = [{"name": "fast"}, {"name": "slow", "quota": 2}]  # >= 4 of the 6 items are fast
    with _scheduler(tmp_path, tiny_tokenizer, sources, domains, close="enough", over_provision=3.0,
                    max_staleness=0, value={"enabled": False}) as sched:
        first = _run_step(sched, 0, 1.0)
        assert {g.task.domain for g in first.kept} == {"fast"}  # closed before the slow tail
        carried = {i.serial for i in sched.carried}  # every slow item (fast ones may be in flight too)
        assert {"slow"} <= {i.task.domain for i in sched.carried}
        assert not any(g.task.domain == "slow" for g in first.generated)
        sched.ctx.version = 1  # the weights moved on: the carried tail is now too old
        second = _run_step(sched, 1, 1.0)
        assert second.stats["sched/requeued"] == len(carried)
        sched.ctx.version = 1
        trained = set()
        for step in range(2, 6):
            _run_step(sched, step, 1.0)
        import json

        rows = [json.loads(line) for line in sched.planner.ledger.items_log.read_text().splitlines()]
        for r in rows:
            assert not trained & set(r["trained"])
            trained |= set(r["trained"])
        requeued = set().union(*(set(r["requeued"]) for r in rows))
        assert carried <= requeued
        assert carried <= trained | set(rows[-1]["pending"]) | set(rows[-1]["carried"]) | set(rows[-1]["ready"])


def test_value_steers_draws_away_from_a_solved_domain(tmp_path, tiny_tokenizer):
    sources = [ListSource("solved", _tasks("solved", 30), [], 0), ListSource("open", _tasks("open", 30), [], 0)]
    domains = [{"name": "solved"}, {"name": "open"}]
    with _scheduler(tmp_path, tiny_tokenizer, sources, domains, value={"floor": 0.1}) as sched:
        planner = sched.planner
        planner.rates.domains = {"solved": 1.0, "open": 0.5}
        planner.rates.decay = 0.999  # keep the estimates where they are
        drawn = [i.task.domain for step in range(40) for i in planner.fresh(planner.plan(step), 0, 2, [])]
        share = drawn.count("solved") / len(drawn)
        assert 0.02 < share < 0.2, share  # weight 1 x 0.1 against 1 x 1: ~0.09, never zero


def test_state_round_trips_through_a_checkpoint_folder(tmp_path, tiny_tokenizer):
    sources = [ListSource("toy", _tasks("toy", 20), [], 0)]
    with _scheduler(tmp_path / "a", tiny_tokenizer, sources, [{"name": "toy"}]) as sched:
        for step in range(3):
            _run_step(sched, step, 1.0)
        sched.planner.ledger.pending.append((99, _tasks("toy", 1)[0]))
        sched.drain()
        sched.planner.save(tmp_path / "ckpt")
        state = sched.planner.state_dict()
        pending = list(sched.planner.ledger.pending)
    with _scheduler(tmp_path / "b", tiny_tokenizer, sources, [{"name": "toy"}]) as again:
        again.planner.load(tmp_path / "ckpt", 3)
        assert again.planner.state_dict() == state
        assert list(again.planner.ledger.pending) == pending
    (tmp_path / "ckpt" / "pending.pkl").write_bytes(b"garbage")
    with _scheduler(tmp_path / "c", tiny_tokenizer, sources, [{"name": "toy"}]) as broken:
        with pytest.raises(Exception, match="scheduler queue file .* is not a posttrain scheduler queue"):
            broken.planner.load(tmp_path / "ckpt", 3)
