"""The collector: runs a step's work items over the engine and closes the step -> a StepBatch.

    collector = Collector(ctx, planner)                      # rl/plan.py's Planner draws the items
    batch = collector.collect(planner.plan(step), temperature)   # -> StepBatch(kept, generated, stats, ...)
    collector.drain()                                        # before a checkpoint: in-flight work re-queued
    collector.run(coroutine)                                 # on its loop (rl/sync.py's weight swaps)
    collector.close()

Every episode of every item runs as an asyncio task in one persistent event loop over one
AsyncEngine: the engine batches turns from all episodes while others wait on tools (the unit of
scheduling is the turn); at most `rollout.max_concurrent_episodes` run at once, split into lanes
(lanes.py: fast lane for short work, fixed slots for long episodes, engine priorities); an
episode whose environment fails for infrastructure is retried (`scheduler.infra_retries`).
Each step:

1. carried-over items (started in an earlier step, `close: enough`) older than
   `scheduler.max_staleness` versions are cancelled and re-queued; the rest keep running;
2. the planner's replay and fresh items, `over_provision` x what the step needs, are launched;
3. a finished item is verified in a worker thread and becomes a Group (rl/scoring.py); groups
   count in the order their rollouts finished. `close: all` waits for every started item (a rerun
   or a resumed run repeats the step exactly); `close: enough` closes the step as soon as
   `prompts_per_step` groups with signal are done, keeping `over_provision` x prompts_per_step
   items in flight until then (each finished item is replaced at once: the engine always has
   work); the unfinished tail is carried over to the next step (its turns in flight are aborted
   for the weight sync and re-sent after it; finished surplus groups wait for the next step), not
   waited for. `close: all` draws more only when everything started is done and the step is
   short, over-provisioned by the keep rate seen (at most `dynamic_sampling.max_attempts` rounds).
   Either way at most `max_groups_factor` x prompts_per_step items start in a step;
4. the step closes: successes go to the replay buffer, the planner settles the outcome (ledger,
   pass rates, breakers, curricula), utilisation metrics are logged. The batch carries the step's
   verifier errors and the planner's events (breaker trips and recoveries).

`drain()` before each checkpoint re-queues whatever is in flight (`close: enough`; `all` has
nothing in flight between steps), so a checkpoint holds pending items, never half-run episodes,
and no prompt is lost or trained twice across a resume.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from posttrain.core.types import Group, Task, Trajectory
from posttrain.engine.client import AsyncEngine
from posttrain.engine.protocol import SamplingParams
from posttrain.envs.env import Resources
from posttrain.envs.rollout import chat_format, run_episodes
from posttrain.envs.stats import FAILED, episode_metrics, is_episode_domain
from posttrain.rl.lanes import LaneGate
from posttrain.rl.plan import Item, Plan, Planner
from posttrain.rl.scoring import StepBatch, StepContext, add_to_buffer, prefix_counts, prefix_metrics, score_group
from posttrain.rl.utilisation import Utilisation
from posttrain.verifiers import run_verifiers_many


def _replayed(items: list[Item]) -> int:
    return sum(i.group.replayed for i in items)


def _seed(seed: int, serial: int) -> int:
    return random.Random(f"rollout:{seed}:{serial}").getrandbits(48)


class Collector:
    def __init__(self, ctx: StepContext, planner: Planner):
        self.ctx, self.planner, cfg = ctx, planner, ctx.cfg
        self.sc = s = cfg.scheduler
        self.carried: list[Item] = []  # started in an earlier step, still running (close: enough)
        self.ready: list[Item] = []  # finished in an earlier step with signal, not trained yet (close: enough)
        self.loop = asyncio.new_event_loop()
        self._client: AsyncEngine | None = None
        self.resources = Resources()
        self.gate = LaneGate(cfg.rollout.max_concurrent_episodes, s.lanes.long_share)
        self.pool = ThreadPoolExecutor(cfg.reward.verify_workers or 4, thread_name_prefix="posttrain-verify")
        self.util = Utilisation()
        self._formats: dict = {}
        self._done = 0  # rollouts finished so far (their order)
        self._counts: Counter = Counter()
        self._errors: list[str] = []

    @property
    def client(self) -> AsyncEngine:
        """The AsyncEngine over ctx.engine, opened at first use (only its runner thread touches the
        engine while it is open and not suspended: engine/client.py)."""
        if self._client is None:
            self._client = AsyncEngine(self.ctx.engine)
        return self._client

    @property
    def opened(self) -> bool:
        return self._client is not None

    def run(self, coroutine):
        """Run a coroutine on the collector's loop (where its episodes live)."""
        return self.loop.run_until_complete(coroutine)

    def collect(self, plan: Plan, temperature: float) -> StepBatch:
        return self.run(self.collecting(plan, temperature))

    # ------------------------------------------------------------ one step

    async def collecting(self, plan: Plan, temperature: float) -> StepBatch:
        ctx, cfg, s, planner = self.ctx, self.ctx.cfg, self.sc, self.planner
        want, target = plan.want, plan.target
        client = self.client
        if client.suspended:  # the tail carried over from the last step waited out the weight sync
            client.resume()
        self._counts, self._errors = Counter(), []
        self.util.begin(client, self.resources)
        counts_before = prefix_counts(ctx.engine)
        self._params = SamplingParams(temperature=temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                                      max_tokens=cfg.rollout.max_tokens, stop_token_ids=tuple(ctx.stop_ids))
        await self._cancel([i for i in self.carried if ctx.version - i.version > s.max_staleness], "stale")
        items: list[Item] = self.ready + [i for i in self.carried if i.runner is not None]
        self.ready, self.carried = [], []
        fresh = [i for i in items if not i.stored]
        new = planner.replay(plan, 0, target - sum(len(i.stored) for i in items), items)
        n_fresh = math.ceil((want - sum(1 for i in items + new if i.stored)) * s.over_provision) - len(fresh)
        new += planner.fresh(plan, 0, n_fresh, items + new)
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
            replay_short = planner.replay_short(plan, _replayed(replay_kept))
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
                more = planner.replay(plan, attempt, replay_short - in_flight, items)
                more += planner.fresh(plan, attempt, max(0, n - len(more)), items + more)
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
        self._counts["attempts"] = attempt + 1
        batch = self._close(plan, items, kept + replay_kept, counts_before)
        if self.carried:
            await client.suspend()  # the turns in flight wait out the weight sync (re-sent after it)
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

    def _launch(self, item: Item) -> None:
        item.version, item.enqueued = self.ctx.version, time.perf_counter()
        item.runner = self.loop.create_task(self._run_item(item))
        self._counts["started"] += 1

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
                params = replace(base, seed=seed + j, priority=priority)
                t0 = time.perf_counter()
                traj = (await run_episodes(self.client, fmt, [(task, params)], version=ctx.version,
                                           resources=self.resources, sampler_weights=weights, max_concurrent=1,
                                           infra_retries=self.sc.infra_retries,
                                           retry_backoff_s=self.sc.retry_backoff_s))[0]
                seconds = time.perf_counter() - t0
                self.util.episode(task.domain, seconds)
                self.planner.episode(task.domain, seconds, traj, failed=traj.stop_reason in FAILED)
                return replace(traj, timings={**traj.timings, "rollout": seconds})

        trajs = list(await asyncio.gather(*(one(j) for j in range(item.k))))
        item.done_seq, self._done = self._done, self._done + 1
        item.failed = [(item.task, t) for t in trajs if t.stop_reason in FAILED]
        members = [e.trajectory for e in item.stored] + [t for t in trajs if t.stop_reason not in FAILED]
        t0 = time.perf_counter()
        verdicts = await self.loop.run_in_executor(self.pool, run_verifiers_many, item.task, members)
        seconds = time.perf_counter() - t0
        self.util.verify_seconds += seconds
        item.group = score_group(ctx, item.task, members, len(item.stored), verdicts, seconds,
                                 version=item.version, errors=self._errors)

    def _format(self, task: Task):
        """The model's ChatFormat for this kind of task (tool parser or not, multi-turn or not), made once."""
        multi = task.env != "single_turn" or bool(task.limits and task.limits.max_turns > 1)
        key = (is_episode_domain(task), multi)
        if key not in self._formats:
            r = self.ctx.cfg.rollout
            self._formats[key] = chat_format(self.ctx.tokenizer, [task], r.tool_parser, r.template_check)
        return self._formats[key]

    async def _cancel(self, items: list[Item], why: str) -> None:
        """Stop items' episodes and hand them back to the planner (fresh ones re-run later with
        the same serials and seeds; replay ones are dropped, their successes stay in the buffer)."""
        runners = [i.runner for i in items if i.runner is not None and not i.runner.done()]
        for r in runners:
            r.cancel()
        if runners:
            await asyncio.gather(*runners, return_exceptions=True)
        if items:
            self._counts["requeued"] += self.planner.requeue(items)
            self._counts["cancelled"] += len(items)
            self._counts[f"cancelled/{why}"] += len(items)
        for item in items:
            item.runner = None
        self.carried = [i for i in self.carried if i not in items]

    # ------------------------------------------------------------ the step's outcome

    def _close(self, plan: Plan, items: list[Item], trained: list[Item], counts_before) -> StepBatch:
        ctx, s = self.ctx, self.sc
        taken = {id(i) for i in trained}
        finished: list[tuple[Item, bool]] = []
        failed: list = []
        for item in items:
            if id(item) not in taken and s.close == "enough":
                if item.group is None:
                    self.carried.append(item)  # the tail: not waited for
                    continue
                if item.group.has_signal and item.group.trajectories:
                    self.ready.append(item)  # surplus with signal: trained next step
                    continue
            finished.append((item, id(item) in taken))
            failed += item.failed
        generated: list[Group] = [item.group for item, _ in finished]
        add_to_buffer(ctx, generated, plan.step, plan.per_group)
        planned = self.planner.settle(plan, finished, self.carried, self.ready)
        groups = [i.group for i in trained]
        c = self._counts
        out: dict[str, Any] = {
            "time/rollout": self.util.rollout_seconds(), "time/verify": self.util.verify_seconds,
            "generated_groups": len(generated), "filtered_groups": sum(not g.has_signal for g in generated),
            "rollout_attempts": c["attempts"], "replay_groups": sum(1 for g in groups if g.replayed),
            "sched/groups_started": float(c["started"]), "sched/signal_groups": float(sum(g.has_signal for g in generated)),
            "sched/carried_over": float(len(self.carried) + len(self.ready)), "sched/cancelled": float(c["cancelled"]),
            "sched/requeued": float(c["requeued"]),
            "sched/pending": float(len(self.planner.ledger.pending)), **self.util.metrics(items, self.gate),
            **planned,
        }
        out.update(episode_metrics([(g.task, t) for g in generated for t in g.fresh] + failed))
        out.update(prefix_metrics(counts_before, prefix_counts(ctx.engine)))
        return StepBatch(groups, generated, out, tuple(self._errors), tuple(self.planner.events))

    # ------------------------------------------------------------ checkpoints and the end

    def drain(self) -> None:
        """Before a checkpoint: re-queue what is in flight or finished but untrained, so the saved
        state is whole (pending items only)."""
        if self.carried or self.ready:
            if self._client is not None:
                self._client.resume()  # a no-op when not suspended
            self.run(self._cancel(self.carried + self.ready, "checkpoint"))
            self.carried, self.ready = [], []
            ledger = self.planner.ledger
            ledger.log_step(ledger.logged_step, [], [], drained=True)

    def __enter__(self) -> "Collector":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.carried or self.ready:
            self.drain()
        if self._client is not None:
            self._client.close()
            self._client = None
        self.pool.shutdown(wait=False)
        self.loop.close()
