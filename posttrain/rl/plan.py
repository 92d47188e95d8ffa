"""The planner: which work items an RL step runs next, and what the step's outcome teaches it.

    planner = Planner(ctx, make_curricula(cfg.tasks, mixture))   # ctx: rl/scoring.py StepContext
    plan = planner.plan(step)                      # the step's replay plan; breakers begin the step
    items = planner.replay(plan, attempt, short, started) + planner.fresh(plan, attempt, n, started)
    planner.requeue(items)                         # cancelled: back to the queue (ledger.py)
    metrics = planner.settle(plan, trained, dropped, carried, ready)   # ledger, pass rates, curricula
    planner.save(dir, prefetched); prefetched = planner.load(dir, step)

A work item is one group: a task, its k samples (replay groups: some stored successes and k - m
fresh samples) and its serial number, from which its sampling seeds derive (seed, serial), so a
re-queued item samples with the same seeds. Replay items follow rl/buffer.py's plan; fresh items
are re-queued ones first, then new draws (draw.py: domain weight x expected GRPO signal with a
floor, quotas, open breakers skipped; settled recurring tasks skipped), each put in a lane by its
domain's predicted cost (lanes.py). After the step: pass rates per domain and task (value),
breakers (breaker.py) and curriculum levels (curriculum.py) are updated, the curricula moving
their task sources' options. rl/collect.py runs the items.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.core.errors import ConfigError
from posttrain.core.types import Group, Task
from posttrain.domains.reasoning_gym.build import skipped_items
from posttrain.rl.breaker import Breakers
from posttrain.rl.buffer import replay_plan
from posttrain.rl.curriculum import make_curriculum
from posttrain.rl.draw import domain_weights, draw_domains, steer
from posttrain.rl.lanes import classify
from posttrain.rl.ledger import Ledger
from posttrain.rl.scoring import StepContext
from posttrain.rl.stats import Costs, PassRates


@dataclass
class Item:
    serial: int
    task: Task
    k: int  # fresh samples
    stored: list = field(default_factory=list)  # replay entries (buffer.Entry), their trajectories first
    lane: str = "fast"
    version: int = 0  # policy version its episodes started at
    enqueued: float = 0.0
    started: float | None = None
    runner: asyncio.Task | None = None
    done_seq: int | None = None  # order its rollout finished in
    group: Group | None = None  # once verified
    failed: list = field(default_factory=list)  # (task, trajectory) of episodes whose env failed

    @property
    def domain(self) -> str:
        return self.task.domain


@dataclass
class Plan:
    """One step's plan: `want` groups of `k` samples; `target` replayed trajectories, at most
    `per_group` in a replay group."""
    step: int
    want: int
    k: int
    target: int
    per_group: int


def make_curricula(domains, mixture) -> dict:
    """The curricula of the domains that configure one, their sources set to the starting level."""
    sources = {src.domain: src for src in mixture.sources}
    out = {}
    for i, d in enumerate(domains):
        if d.curriculum is not None:
            if d.path is not None:
                raise ConfigError(f"tasks[{i}].curriculum: domain {d.name!r} is a JSONL file ({d.path}); "
                                  f"only reasoning-gym, generated (sql, document, cad) and terminal domains have levels")
            out[d.name] = make_curriculum(d.name, d.curriculum, dict(d.options), f"tasks[{i}].curriculum")
            sources[d.name].set_options(out[d.name].options())
    return out


class Planner:
    def __init__(self, ctx: StepContext, curricula: dict | None = None):
        self.ctx, cfg = ctx, ctx.cfg
        self.sc = s = cfg.scheduler
        self.rates = PassRates(s.value.prior, s.value.decay, s.value.task_memory)
        self.costs = Costs()
        self.breakers = Breakers(s.breaker.failures, s.breaker.cooldown_steps)
        self.curricula = dict(curricula or {})  # domain -> rl/curriculum.py DomainCurriculum
        self.sources = {src.domain: src for src in ctx.mixture.sources}
        self.weights = {d.name: d.weight for d in cfg.tasks}
        self.quotas = {d.name: d.quota for d in cfg.tasks}
        self.ledger = Ledger(cfg.out_dir)
        self.events: list[str] = []  # breaker trips and recoveries of the step, for the log
        self._buffer_dry = True
        self._skipped_before: dict = {}

    # ------------------------------------------------------------ before and during the step

    def plan(self, step: int) -> Plan:
        cfg = self.ctx.cfg
        want, k = cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt
        self.events = []
        self.breakers.begin_step(step)
        self._skipped_before = skipped_items()
        replay_on = self.ctx.buffer is not None and cfg.buffer.replay_ratio > 0
        target, per_group = replay_plan(cfg.buffer.replay_ratio if replay_on else 0.0, want, k)
        self._buffer_dry = not replay_on or not len(self.ctx.buffer)
        return Plan(step, want, k, target, per_group)

    def replay_short(self, plan: Plan, replayed: int) -> int:
        """Replayed trajectories the step still wants (0 once the buffer ran dry)."""
        return 0 if self._buffer_dry else plan.target - replayed

    def replay(self, plan: Plan, attempt: int, short: int, items: list[Item]) -> list[Item]:
        """Replay items holding `short` stored successes of tasks not in `items`."""
        buffer = self.ctx.buffer
        if self._buffer_dry or short <= 0:
            return []
        n = math.ceil(short / plan.per_group)
        rng = random.Random(f"replay:{self.ctx.cfg.train.seed}:{plan.step}:{attempt}")
        stored = buffer.sample(n, rng, exclude_task_ids={i.task.id for i in items}, per_task=plan.per_group)
        self._buffer_dry = len(stored) < n
        m = max(1, len(stored))  # the short count spread over the drawn tasks, m_i <= per_group
        out = []
        for j, entries in enumerate(stored):
            entries = entries[: max(1, short // m + (j < short % m))]
            out.append(Item(self.ledger.next_serial(), entries[0].task, plan.k - len(entries), list(entries)))
        return out

    def fresh(self, plan: Plan, attempt: int, n: int, items: list[Item]) -> list[Item]:
        """`n` fresh items: re-queued ones first, then new draws (quotas count `items`)."""
        step, k = plan.step, plan.k
        out = [Item(serial, task, k) for serial, task in self.ledger.take(n)]
        if len(out) < n:
            allowed = {d: self.breakers.allowed(d, step) for d in self.sources}
            weights = domain_weights(list(self.sources), self.weights, self.rates, k, self.sc.value, allowed)
            if not weights:
                self.events.append("every domain is paused by its breaker: this step has no new work")
            taken = Counter(i.task.domain for i in items + out if not i.stored)
            rng = random.Random(f"mix:{self.ctx.cfg.train.seed}:{step}:{attempt}")
            quotas = {**self.quotas, **{d: 1 for d in self.breakers.half_open}}  # one trial group each
            picks = draw_domains(n - len(out), weights, quotas, taken, rng)
            drawn = {d: iter(steer(self.sources[d], picks.count(d), self.rates, k, self.sc.value, rng))
                     for d in sorted(set(picks))}
            out += [Item(self.ledger.next_serial(), next(drawn[d]), k) for d in picks]
        for item in out:
            item.lane = classify(self.costs.predict(item.task.domain), self.sc.lanes)
        return out

    def requeue(self, items: list[Item]) -> int:
        """Cancelled items back to the queue's front, in their order; the number re-queued."""
        return sum(self.ledger.requeue(item) for item in reversed(items))

    def episode(self, domain: str, seconds: float, traj, failed: bool) -> None:
        """One finished episode: its domain's breaker and (when the env did not fail) cost."""
        why = next((e for e in traj.events if e.startswith(traj.stop_reason)), traj.stop_reason)
        self.breakers.record(domain, ok=not failed, why=why[:200])
        if not failed:
            self.costs.observe(domain, tokens=len(traj.token_ids) - traj.prompt_len, turns=traj.turns,
                               env_seconds=traj.stats.get("env_seconds", 0.0), seconds=seconds)

    # ------------------------------------------------------------ after the step

    def settle(self, plan: Plan, finished: list[tuple[Item, bool]], carried: list[Item],
               ready: list[Item]) -> dict[str, float]:
        """The step's outcome, its finished items in order with whether each was trained: ledger
        rows, pass rates, curriculum levels (moving their sources' options); the planner's metrics."""
        for item, trained in finished:
            self.ledger.settle(item.serial, "trained" if trained else "dropped")
        self.ledger.log_step(plan.step, carried, ready)
        for item, _ in finished:
            g = item.group
            fresh = [r for r in g.raw[g.replayed:] if r is not None]
            self.rates.observe_group(g.task.domain, g.task.id, sum(r >= 1.0 for r in fresh), len(fresh))
        step_rates = self.rates.end_step()
        for domain, cur in self.curricula.items():
            if cur.observe(step_rates.get(domain)) is not None:
                self.sources[domain].set_options(cur.options())
        out: dict[str, Any] = {}
        for domain in self.sources:
            out[f"value/pass_est/{domain}"] = self.rates.domain(domain)
            if self.breakers.trips.get(domain):
                out[f"breaker/open/{domain}"] = float(self.breakers.is_open(domain))
        out.update({f"level/{d}": float(cur.level) for d, cur in self.curricula.items()})
        groups = [item.group for item, trained in finished if trained]
        shares = Counter(g.task.domain for g in groups)
        out.update({f"sched/share/{d}": n / len(groups) for d, n in sorted(shares.items())})
        out.update({f"sched/trained/{d}": float(n) for d, n in sorted(shares.items())})
        after = skipped_items()  # reasoning-gym items whose generator raised, skipped during this step's draws
        out.update({f"skipped_items/{d}": float(n - self._skipped_before.get(d, 0)) for d, n in after.items()
                    if n > self._skipped_before.get(d, 0)})
        self.events += self.breakers.end_step()
        return out

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {"serial": self.ledger.serial, "rates": self.rates.state_dict(), "costs": self.costs.state_dict(),
                "breakers": self.breakers.state_dict(), "ledger": dict(self.ledger.counts),
                "curricula": {d: c.state_dict() for d, c in self.curricula.items()}}

    def save(self, directory: Path, prefetched=None) -> None:
        """The checkpoint's scheduler/ (ledger.py); the collector is drained first."""
        self.ledger.save(directory, self.state_dict(), prefetched)

    def load(self, directory: Path, step: int):
        """Restore the state saved at `step`; returns the prefetched batch saved with it, or None."""
        state, prefetched = self.ledger.load(directory, step)
        if state is None:  # a checkpoint from before the scheduler: fresh state
            return prefetched
        self.rates.load_state_dict(state["rates"])
        self.costs.load_state_dict(state["costs"])
        self.breakers.load_state_dict(state["breakers"])
        for d, c in state["curricula"].items():
            if d not in self.curricula:
                raise ConfigError(f"the checkpoint has a curriculum for domain {d!r}, the config does not")
            self.curricula[d].load_state_dict(c)
            self.sources[d].set_options(self.curricula[d].options())
        return prefetched
