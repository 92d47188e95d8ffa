"""The scheduler: one RL step's work items, from the draw to the groups the trainer gets.

    sched = Scheduler(ctx, curricula)            # ctx: scheduler/groups.py StepContext
    batch = sched.run_step(step, temperature)    # -> StepBatch(kept, generated, stats)
    sched.drain()                                # before a checkpoint: in-flight work re-queued
    sched.save(dir); sched.load(dir, step)       # its whole state, in the checkpoint's scheduler/ (persist.py)
    sched.close()

A work item is one group: a task, its k samples (replay groups: some stored successes and k - m
fresh samples) and its serial number, from which its sampling seeds derive (seed, serial), so a
re-queued item samples with the same seeds. Each step:

1. carried-over items (started in an earlier step, `close: enough`) older than
   `scheduler.max_staleness` versions are cancelled and re-queued; the rest keep running;
2. replay items (buffer.py's plan) and fresh items: re-queued ones first, then new draws
   (draw.py: domain weight x expected GRPO signal with a floor, quotas, open breakers skipped;
   settled recurring tasks skipped), `over_provision` x what the step needs;
3. every episode of every item runs as an asyncio task in one persistent event loop over one
   AsyncEngine: the engine batches turns from all episodes while others wait on tools (the unit
   of scheduling is the turn); at most `rollout.max_concurrent_episodes` run at once, split into
   lanes (lanes.py: fast lane for short work, fixed slots for long episodes, engine priorities);
4. a finished item is verified in a worker thread and becomes a Group; groups count in the order
   their rollouts finished. `close: all` waits for every started item (a rerun or a resumed run
   repeats the step exactly); `close: enough` closes the step as soon as `prompts_per_step`
   groups with signal are done, keeping `over_provision` x prompts_per_step items in flight until
   then (each finished item is replaced at once: the engine always has work); the unfinished tail
   is carried over to the next step (its turns in flight are aborted for the weight sync and
   re-sent after it; finished surplus groups wait for the next step), not waited for. `close:
   all` draws more only when everything started is done and the step is short, over-provisioned
   by the keep rate seen (at most `dynamic_sampling.max_attempts` rounds). Either way at most
   `max_groups_factor` x prompts_per_step items start in a step;
5. statistics: pass rates per domain and task (value), episode costs per domain (lanes), breakers
   (breaker.py) and curriculum levels (curriculum.py) are updated; utilisation metrics are logged.

Every drawn item is accounted for in `ledger`: trained, dropped (no signal or failed), re-queued,
pending or in flight; `drain()` before each checkpoint re-queues whatever is in flight (`close:
enough`; `all` has nothing in flight between steps), so a checkpoint holds pending items, never
half-run episodes, and no prompt is lost or trained twice across a resume.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from posttrain.rl.buffer import replay_plan
from posttrain.envs.env import Resources
from posttrain.envs.stats import FAILED, episode_metrics, is_episode_domain
from posttrain.envs.rollout import chat_format, run_episodes
from posttrain.core.errors import ConfigError
from posttrain.engine.client import AsyncEngine
from posttrain.engine.protocol import SamplingParams
from posttrain.rl.breaker import Breakers
from posttrain.rl.draw import domain_weights, draw_domains, steer
from posttrain.rl.scoring import StepBatch, StepContext, add_to_buffer, prefix_counts, prefix_metrics, score_group
from posttrain.rl.lanes import LaneGate, classify
from posttrain.rl.ledger import ITEMS_LOG, Persistence
from posttrain.rl.stats import Costs, PassRates
from posttrain.rl.utilisation import Utilisation
from posttrain.domains.reasoning_gym.build import skipped_items
from posttrain.core.types import Group, Task, Trajectory
from posttrain.verifiers import run_verifiers_many



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


def make_curricula(domains, mixture) -> dict:
    """The curricula of the domains that configure one, their sources set to the starting level."""
    from posttrain.rl.curriculum import make_curriculum

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


def _replayed(items: list[Item]) -> int:
    return sum(i.group.replayed for i in items)


def _seed(seed: int, serial: int) -> int:
    return random.Random(f"rollout:{seed}:{serial}").getrandbits(48)


class Scheduler(Persistence):
    def __init__(self, ctx: StepContext, curricula: dict | None = None):
        self.ctx, cfg = ctx, ctx.cfg
        self.sc = s = cfg.scheduler
        self.rates = PassRates(s.value.prior, s.value.decay, s.value.task_memory)
        self.costs = Costs()
        self.breakers = Breakers(s.breaker.failures, s.breaker.cooldown_steps)
        self.curricula = dict(curricula or {})  # domain -> scheduler.curriculum.DomainCurriculum
        self.sources = {src.domain: src for src in ctx.mixture.sources}
        self.weights = {d.name: d.weight for d in cfg.tasks}
        self.quotas = {d.name: d.quota for d in cfg.tasks}
        self.serial = 0  # items drawn so far (the next one's serial)
        self.pending: deque[tuple[int, Task]] = deque()  # re-queued (serial, task): drawn, never trained
        self.carried: list[Item] = []  # started in an earlier step, still running (close: enough)
        self.ready: list[Item] = []  # finished in an earlier step with signal, not trained yet (close: enough)
        self.ledger: Counter = Counter()  # items: trained, dropped, requeued (over the run)
        self.events: list[str] = []  # breaker trips and recoveries of the last step, for the log
        self.loop = asyncio.new_event_loop()
        self.client: AsyncEngine | None = None
        self.resources = Resources()
        self.gate = LaneGate(cfg.rollout.max_concurrent_episodes, s.lanes.long_share)
        self.pool = ThreadPoolExecutor(cfg.reward.verify_workers or 4, thread_name_prefix="posttrain-verify")
        self.trainer = ThreadPoolExecutor(1, thread_name_prefix="posttrain-train")  # asynchronous RL's updates
        self.overlap: dict[str, float] = {}
        self.prefetched: StepBatch | None = None  # asynchronous RL: the next step's batch, rolled out, not trained
        self.util = Utilisation()
        self.items_log = Path(cfg.out_dir) / ITEMS_LOG
        self.items_log.parent.mkdir(parents=True, exist_ok=True)
        self._step_serials = {"trained": [], "dropped": [], "requeued": []}
        self._logged_step = -1
        self._formats: dict = {}
        self._suspended = False
        self._done = 0  # rollouts finished so far (their order)
        self._step_counts: Counter = Counter()

    # ------------------------------------------------------------ one step

    def run_step(self, step: int, temperature: float) -> StepBatch:
        return self.loop.run_until_complete(self._step(step, temperature))

    def run_step_overlapped(self, step: int, temperature: float, train, pause: str = "abort") -> tuple[StepBatch, Any]:
        """Asynchronous RL, one step ahead: step `step`'s rollout runs while `train()` (the update of
        the step before) runs in a thread. `train()` returns (result, engine_state, version); once it
        has, the new weights are swapped into the engine with `pause` (cluster.weight_sync.pause:
        finish | abort | continue, rollout/client.py) and `ctx.version` moves on, so items launched
        before were sampled by the previous version (staleness 1, their tokens carry it) and those
        launched after by the new one. Returns (batch, result); `overlap` holds the timings."""
        return self.loop.run_until_complete(self._overlapped(step, temperature, train, pause))

    async def _overlapped(self, step: int, temperature: float, train, pause: str) -> tuple[StepBatch, Any]:
        if self.client is None:
            self.client = AsyncEngine(self.ctx.engine)
        started = time.perf_counter()
        trained = self.loop.run_in_executor(self.trainer, train)
        marks: dict[str, float] = {}

        async def swap():
            result, state, version = await trained
            marks["trained"] = time.perf_counter()
            await self.client.sync_weights(state, version, pause=pause)
            self.ctx.version = version
            marks["synced"] = time.perf_counter()
            return result

        swapping = asyncio.ensure_future(swap())
        try:
            batch = await self._step(step, temperature)
        except BaseException:
            await asyncio.gather(swapping, return_exceptions=True)
            raise
        marks["rolled_out"] = time.perf_counter()
        result = await swapping
        end = time.perf_counter()
        train_s, rollout_s = marks["trained"] - started, marks["rolled_out"] - started
        self.overlap = {"time/overlap": min(train_s, rollout_s), "time/train_thread": train_s,
                        "time/rollout_overlapped": rollout_s, "time/sync": marks["synced"] - marks["trained"],
                        "async/overlap_fraction": min(train_s, rollout_s) / max(1e-9, end - started)}
        return batch, result

    async def _step(self, step: int, temperature: float) -> StepBatch:
        ctx, cfg, s = self.ctx, self.ctx.cfg, self.sc
        want, k = cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt
        if self.client is None:
            self.client = AsyncEngine(ctx.engine)
        elif self._suspended:
            self.client.resume()
            self._suspended = False
        self._step_counts = Counter()
        self._step_serials = {"trained": [], "dropped": [], "requeued": []}
        self.events = []
        self.breakers.begin_step(step)
        self.util.begin(self.client, self.resources)
        counts_before = prefix_counts(ctx.engine)
        self._skipped_before = skipped_items()
        self._params = SamplingParams(temperature=temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                                      max_tokens=cfg.rollout.max_tokens, stop_token_ids=tuple(ctx.stop_ids))
        await self._cancel([i for i in self.carried if ctx.version - i.version > s.max_staleness], "stale")
        items: list[Item] = self.ready + [i for i in self.carried if i.runner is not None]
        self.ready, self.carried = [], []
        replay_on = ctx.buffer is not None and cfg.buffer.replay_ratio > 0
        target, per_group = replay_plan(cfg.buffer.replay_ratio if replay_on else 0.0, want, k)
        self._buffer_dry = not replay_on or not len(ctx.buffer)
        fresh = [i for i in items if not i.stored]
        new = self._replay_items(step, 0, target - sum(len(i.stored) for i in items), per_group, items)
        n_fresh = math.ceil((want - sum(1 for i in items + new if i.stored)) * s.over_provision) - len(fresh)
        new += self._fresh_items(step, 0, n_fresh, items + new)
        items += new
        for item in new:
            self._launch(item)
        limit, attempt = math.ceil(s.max_groups_factor * want), 0
        window = math.ceil(want * s.over_provision)  # close: enough keeps this many items in flight
        signal = cfg.dynamic_sampling.enabled  # dynamic sampling off: every finished group counts
        while True:
            done, kept, replay_kept = self._tally(items, want, target, need_signal=signal)
            live = [i for i in items if i.group is None]
            short = want - len(kept) - len(replay_kept)
            replay_short = 0 if self._buffer_dry else target - _replayed(replay_kept)
            if s.close == "enough" and short <= 0 and replay_short <= 0:
                break  # enough groups with signal: the tail is carried over
            keep_rate = max(0.25, (len(kept) + len(replay_kept)) / len(done)) if done else 1.0
            if s.close == "enough":  # keep the window full while the step is short (surplus: next step's)
                n = min(limit - len(items), window - len(live))
                draw = signal and n > 0
            else:  # all: when everything started is done and the step is short, draw what should make it up
                n = min(limit - len(items), math.ceil(max(0, short) / keep_rate))
                draw = (signal and not live and (short > 0 or replay_short > 0)
                        and attempt + 1 < cfg.dynamic_sampling.max_attempts and n > 0)
            if draw:
                attempt += 1
                in_flight = sum(len(i.stored) for i in live)  # stored successes already on their way
                more = self._replay_items(step, attempt, replay_short - in_flight, per_group, items)
                more += self._fresh_items(step, attempt, max(0, n - len(more)), items + more)
                for item in more:
                    self._launch(item)
                items += more
                if more:
                    continue
            if not live:
                break
            await asyncio.wait([i.runner for i in live], return_when=asyncio.FIRST_COMPLETED)
            for i in live:  # a user error (ConfigError, a model that cannot load) stops the run
                if i.runner.done() and not i.runner.cancelled() and i.runner.exception() is not None:
                    raise i.runner.exception()
        verifying = [i.runner for i in items if i.done_seq is not None and i.group is None]
        if verifying:  # rollouts already done are not the tail: their verdicts are waited for
            await asyncio.gather(*verifying)
        self._step_counts["attempts"] = attempt + 1
        batch = self._finish(step, items, kept + replay_kept, counts_before, per_group)
        if self.carried and hasattr(self.client, "suspend"):
            await self.client.suspend()  # the turns in flight wait out the weight sync (re-sent after it)
            self._suspended = True
        elif self.carried:
            await self._cancel(self.carried, "unfinished")
            self.carried = []
        return batch

    def _order(self, items: list[Item]) -> list[Item]:
        """Finished items in the order the step counts them: by rollout end (close: enough), by serial
        (close: all: the order of the draw, whatever the timing)."""
        if self.sc.close == "all":
            return sorted((i for i in items if i.group is not None), key=lambda i: i.serial)
        order = sorted((i for i in items if i.done_seq is not None), key=lambda i: i.done_seq)
        out = []
        for item in order:  # the prefix whose verification is complete
            if item.group is None:
                break
            out.append(item)
        return out

    def _tally(self, items, want, target, need_signal=True):
        done = self._order(items)
        kept, replay_kept = [], []
        for item in done:
            g = item.group
            if (need_signal and not g.has_signal) or not g.trajectories:
                continue
            if g.replayed:
                if _replayed(replay_kept) < target:
                    replay_kept.append(item)
            elif len(kept) < want:
                kept.append(item)
        replay_kept = replay_kept[:want]
        return done, kept[: want - len(replay_kept)], replay_kept

    # ------------------------------------------------------------ items

    def _replay_items(self, step: int, attempt: int, short: int, per_group: int, items: list[Item]) -> list[Item]:
        buffer = self.ctx.buffer
        if self._buffer_dry or short <= 0:
            return []
        n = math.ceil(short / per_group)
        rng = random.Random(f"replay:{self.ctx.cfg.train.seed}:{step}:{attempt}")
        stored = buffer.sample(n, rng, exclude_task_ids={i.task.id for i in items}, per_task=per_group)
        self._buffer_dry = len(stored) < n
        m = max(1, len(stored))  # the short count spread over the drawn tasks, m_i <= per_group
        k = self.ctx.cfg.rollout.samples_per_prompt
        out = []
        for j, entries in enumerate(stored):
            entries = entries[: max(1, short // m + (j < short % m))]
            out.append(Item(self._next_serial(), entries[0].task, k - len(entries), list(entries)))
        return out

    def _fresh_items(self, step: int, attempt: int, n: int, items: list[Item]) -> list[Item]:
        cfg, k = self.ctx.cfg, self.ctx.cfg.rollout.samples_per_prompt
        out: list[Item] = []
        while self.pending and len(out) < n:
            serial, task = self.pending.popleft()
            out.append(Item(serial, task, k))
        if len(out) < n:
            allowed = {d: self.breakers.allowed(d, step) for d in self.sources}
            weights = domain_weights(list(self.sources), self.weights, self.rates, k, self.sc.value, allowed)
            if not weights:
                self.events.append("every domain is paused by its breaker: this step has no new work")
            taken = Counter(i.task.domain for i in items + out if not i.stored)
            rng = random.Random(f"mix:{cfg.train.seed}:{step}:{attempt}")
            quotas = {**self.quotas, **{d: 1 for d in self.breakers.half_open}}  # one trial group each
            picks = draw_domains(n - len(out), weights, quotas, taken, rng)
            drawn = {d: iter(steer(self.sources[d], picks.count(d), self.rates, k, self.sc.value, rng))
                     for d in sorted(set(picks))}
            out += [Item(self._next_serial(), next(drawn[d]), k) for d in picks]
        for item in out:
            item.lane = classify(self.costs.predict(item.task.domain), self.sc.lanes)
        return out

    def _next_serial(self) -> int:
        self.serial += 1
        return self.serial - 1

    def _launch(self, item: Item) -> None:
        item.version, item.enqueued = self.ctx.version, time.perf_counter()
        item.runner = self.loop.create_task(self._run_item(item))
        self._step_counts["started"] += 1

    async def _run_item(self, item: Item) -> None:
        ctx, cfg, task = self.ctx, self.ctx.cfg, item.task
        fmt = self._format(task)
        max_tokens = min(self._params.max_tokens, task.limits.max_new_tokens) if task.limits else self._params.max_tokens
        base = replace(self._params, max_tokens=max_tokens)
        if self.sc.episode_seconds is not None:
            task = replace(task, limits=replace(task.limits, seconds=self.sc.episode_seconds))
        seed = _seed(cfg.train.seed, item.serial)
        weights = str(getattr(ctx.engine, "weights_precision", "exact"))

        async def one(j: int) -> Trajectory:
            async with self.gate.slot(item.lane) as priority:
                if item.started is None:
                    item.started = time.perf_counter()
                params = replace(base, seed=seed + j)
                if hasattr(params, "priority"):
                    params = replace(params, priority=priority)
                t0 = time.perf_counter()
                traj = (await run_episodes(self.client, fmt, [(task, params)], version=ctx.version,
                                           resources=self.resources, sampler_weights=weights, max_concurrent=1,
                                           infra_retries=self.sc.infra_retries,
                                           retry_backoff_s=self.sc.retry_backoff_s))[0]
                seconds = time.perf_counter() - t0
                self.util.episode(task.domain, seconds)
                failed = traj.stop_reason in FAILED
                why = next((e for e in traj.events if e.startswith(traj.stop_reason)), traj.stop_reason)
                self.breakers.record(task.domain, ok=not failed, why=why[:200])
                if not failed:
                    self.costs.observe(task.domain, tokens=len(traj.token_ids) - traj.prompt_len, turns=traj.turns,
                                       env_seconds=traj.stats.get("env_seconds", 0.0), seconds=seconds)
                return replace(traj, timings={**traj.timings, "rollout": seconds})

        trajs = list(await asyncio.gather(*(one(j) for j in range(item.k))))
        item.done_seq, self._done = self._done, self._done + 1
        item.failed = [(item.task, t) for t in trajs if t.stop_reason in FAILED]
        members = [e.trajectory for e in item.stored] + [t for t in trajs if t.stop_reason not in FAILED]
        t0 = time.perf_counter()
        verdicts = await self.loop.run_in_executor(self.pool, run_verifiers_many, item.task, members)
        seconds = time.perf_counter() - t0
        self.util.verify_seconds += seconds
        item.group = score_group(ctx, item.task, members, len(item.stored), verdicts, seconds, version=item.version)

    def _format(self, task: Task):
        """The model's ChatFormat for this kind of task (tool parser or not, multi-turn or not), made once."""
        multi = task.env != "single_turn" or bool(task.limits and task.limits.max_turns > 1)
        key = (is_episode_domain(task), multi)
        if key not in self._formats:
            r = self.ctx.cfg.rollout
            self._formats[key] = chat_format(self.ctx.tokenizer, [task], r.tool_parser, r.template_check)
        return self._formats[key]

    async def _cancel(self, items: list[Item], why: str) -> None:
        """Stop items' episodes; fresh ones go back to the queue's front with their serials (re-run
        with the same seeds), replay ones are dropped (their stored successes stay in the buffer)."""
        runners = [i.runner for i in items if i.runner is not None and not i.runner.done()]
        for r in runners:
            r.cancel()
        if runners:
            await asyncio.gather(*runners, return_exceptions=True)
        for item in reversed(items):
            if not item.stored:
                self.pending.appendleft((item.serial, item.task))
                self._step_counts["requeued"] += 1
                self._step_serials["requeued"].append(item.serial)
            self.ledger["requeued"] += 1
            self._step_counts["cancelled"] += 1
            self._step_counts[f"cancelled/{why}"] += 1
            item.runner = None
        self.carried = [i for i in self.carried if i not in items]

    # ------------------------------------------------------------ the step's outcome

    def _finish(self, step: int, items: list[Item], trained: list[Item], counts_before, per_group: int) -> StepBatch:
        ctx, s = self.ctx, self.sc
        taken = {id(i) for i in trained}
        generated: list[Group] = []
        failed: list = []
        for item in items:
            if id(item) not in taken and s.close == "enough":
                if item.group is None:
                    self.carried.append(item)  # the tail: not waited for
                    continue
                if item.group.has_signal and item.group.trajectories:
                    self.ready.append(item)  # surplus with signal: trained next step
                    continue
            generated.append(item.group)
            failed += item.failed
            self.ledger["trained" if id(item) in taken else "dropped"] += 1
            self._step_serials["trained" if id(item) in taken else "dropped"].append(item.serial)
        self._log_items(step)
        add_to_buffer(ctx, generated, step, per_group)
        for g in generated:
            fresh = [r for r in g.raw[g.replayed:] if r is not None]
            self.rates.observe_group(g.task.domain, g.task.id, sum(r >= 1.0 for r in fresh), len(fresh))
        step_rates = self.rates.end_step()
        for domain, cur in self.curricula.items():
            if cur.observe(step_rates.get(domain)) is not None:
                self.sources[domain].set_options(cur.options())
        groups = [i.group for i in trained]
        c = self._step_counts
        out: dict[str, Any] = {
            "time/rollout": self.util.rollout_seconds(), "time/verify": self.util.verify_seconds,
            "generated_groups": len(generated), "filtered_groups": sum(not g.has_signal for g in generated),
            "rollout_attempts": c["attempts"], "replay_groups": sum(1 for g in groups if g.replayed),
            "sched/groups_started": float(c["started"]), "sched/signal_groups": float(sum(g.has_signal for g in generated)),
            "sched/carried_over": float(len(self.carried) + len(self.ready)), "sched/cancelled": float(c["cancelled"]),
            "sched/requeued": float(c["requeued"]),
            "sched/pending": float(len(self.pending)), **self.util.metrics(items, self.gate),
        }
        for domain in self.sources:
            out[f"value/pass_est/{domain}"] = self.rates.domain(domain)
            if self.breakers.trips.get(domain):
                out[f"breaker/open/{domain}"] = float(self.breakers.is_open(domain))
        out.update({f"level/{d}": float(cur.level) for d, cur in self.curricula.items()})
        shares = Counter(g.task.domain for g in groups)
        out.update({f"sched/share/{d}": n / len(groups) for d, n in sorted(shares.items())})
        out.update({f"sched/trained/{d}": float(n) for d, n in sorted(shares.items())})
        after = skipped_items()  # reasoning-gym items whose generator raised, skipped during this step's draws
        out.update({f"skipped_items/{d}": float(n - self._skipped_before.get(d, 0)) for d, n in after.items()
                    if n > self._skipped_before.get(d, 0)})
        out.update(episode_metrics([(g.task, t) for g in generated for t in g.fresh] + failed))
        out.update(prefix_metrics(counts_before, prefix_counts(ctx.engine)))
        self.events += self.breakers.end_step()
        return StepBatch(groups, generated, out)

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.carried or self.ready:
            self.drain()
        if self.client is not None:
            self.client.close()
            self.client = None
        self.pool.shutdown(wait=False)
        self.trainer.shutdown(wait=True)
        self.loop.close()
