"""Collecting one RL step's scored groups: rollout, verify, shape, filter, backfill, replay.

    batch = collect_groups(ctx, step, temperature)
    batch.kept        the step's training groups (types.Group), at most prompts_per_step
    batch.generated   every group generated this step, dropped ones included (for metrics)
    batch.stats       timings and counters (plain numbers)

1. replay (the plan and its advantage math: posttrain/buffer.py): `buffer.replay_ratio` of the
   step's trajectories are stored successes of past tasks, placed in replay groups of
   m <= K/2 stored successes + K - m fresh samples of the same task;
2. fresh tasks from the mixture fill the rest, K = `samples_per_prompt` samples each;
3. every trajectory is verified (a verifier that raises counts as an error and the sample
   gets no score: it is excluded from the group) and its reward shaped; the raw task score
   is kept apart, and what the verifiers report as violations goes into `Trajectory.events`;
4. dynamic sampling: a group whose raw scores all agree carries no signal: it is dropped
   and new groups are drawn (at most `max_attempts` rounds in all), replay groups first while
   the step's replayed share is short, so the batch keeps its size and its replay share when it can.

Seeds of every sampling request and of the replay picks come from (seed, step, attempt),
so a step is reproducible without any saved generator state.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from posttrain.algos.shaping import format_reward, length_penalty, overlong_penalty
from posttrain.buffer import ReplayBuffer, replay_plan
from posttrain.config import RewardConfig, RLConfig
from posttrain.envs.metrics import FAILED, episode_metrics
from posttrain.envs.rollout import rollout
from posttrain.rollout.engine import SamplingParams
from posttrain.tasks.mixture import Mixture
from posttrain.types import Group, Score, Task, Trajectory
from posttrain.verifiers import events_of, task_score, verify_groups


@dataclass
class StepContext:
    cfg: RLConfig
    engine: object
    tokenizer: object
    mixture: Mixture
    buffer: ReplayBuffer | None
    stop_ids: tuple[int, ...] = ()
    version: int = 0
    verifier_errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StepBatch:
    kept: list[Group]
    generated: list[Group]
    stats: dict


def shaped_reward(raw: float, traj: Trajectory, cfg: RewardConfig, max_tokens: int) -> float:
    n = sum(traj.loss_mask)
    reward = raw
    if cfg.format_pattern and cfg.format_weight:
        reward += format_reward(traj.text, cfg.format_pattern, cfg.format_weight)
    if cfg.overlong_buffer:
        reward += overlong_penalty(n, max_tokens, cfg.overlong_buffer, cfg.overlong_penalty)
    if cfg.length_target is not None and cfg.length_weight:
        reward += length_penalty(n, cfg.length_target, cfg.length_weight)
    return reward


def score_group(ctx: StepContext, task: Task, trajs: list[Trajectory], replayed: int, verdicts, seconds: float) -> Group:
    raw: list[float | None] = []
    done: list[Trajectory] = []
    for traj, (scores, errors) in zip(trajs, verdicts):
        ctx.verifier_errors.extend(f"{task.id}: {e}" for e in errors)
        value = None if errors else task_score(scores, task)
        reward = None if value is None else shaped_reward(value, traj, ctx.cfg.reward, ctx.cfg.rollout.max_tokens)
        raw.append(value)
        timings = {**traj.timings, "verify": seconds}
        done.append(replace(traj, scores=tuple(scores), reward=reward, events=events_of(scores), timings=timings))
    return Group(task, tuple(done), tuple(raw), replayed, ctx.version)


def violations(groups: list[Group]) -> Counter:
    """Counts of the fresh trajectories' violation events by kind (the text before any ':')."""
    return Counter(e.split(":")[0] for g in groups for traj in g.fresh for e in traj.events)


def _seed(cfg: RLConfig, step: int, attempt: int) -> int:
    return random.Random(f"rollout:{cfg.train.seed}:{step}:{attempt}").getrandbits(48)


def _drop_failed(task: Task, trajs: list[Trajectory], stats: dict) -> list[Trajectory]:
    """Episodes whose env or infrastructure failed are dropped (never scored as model failures)
    and counted; they stay in `stats["failed_episodes"]` for the step's episode metrics."""
    kept = [t for t in trajs if t.stop_reason not in FAILED]
    if len(kept) < len(trajs):
        stats.setdefault("failed_episodes", []).extend((task, t) for t in trajs if t.stop_reason in FAILED)
    return kept


def _replayed_count(groups: list[Group]) -> int:
    return sum(g.replayed for g in groups)


def collect_groups(ctx: StepContext, step: int, temperature: float) -> StepBatch:
    cfg, k = ctx.cfg, ctx.cfg.rollout.samples_per_prompt
    want = cfg.rollout.prompts_per_step
    params = SamplingParams(temperature=temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                            max_tokens=cfg.rollout.max_tokens, stop_token_ids=tuple(ctx.stop_ids))
    replay_on = ctx.buffer is not None and cfg.buffer.replay_ratio > 0
    target, per_group = replay_plan(cfg.buffer.replay_ratio if replay_on else 0.0, want, k)
    slots = math.ceil(target / per_group) if target else 0  # groups reserved for replay
    fresh_kept: list[Group] = []
    replay_kept: list[Group] = []
    generated: list[Group] = []
    used: set[str] = set()  # task ids of this step's groups (a task is not in two groups)
    exhausted = not replay_on or not len(ctx.buffer)  # no more stored tasks to draw: fresh groups fill in
    stats = {"time/rollout": 0.0, "time/verify": 0.0, "filtered_groups": 0, "rollout_attempts": 0,
             "generated_groups": 0, "replay_groups": 0}
    counts_before = _prefix_counts(ctx.engine)
    for attempt in range(cfg.dynamic_sampling.max_attempts):
        short = target - _replayed_count(replay_kept)
        n_replay = 0 if exhausted or short <= 0 else max(0, slots - len(replay_kept))
        stored = []
        if n_replay:
            rng = random.Random(f"replay:{cfg.train.seed}:{step}:{attempt}")
            stored = ctx.buffer.sample(n_replay, rng, exclude_task_ids=used, per_task=per_group)
            exhausted = len(stored) < n_replay
            # the short count spread over the drawn tasks, m_i <= per_group (and what each task has)
            n = max(1, len(stored))
            stored = [entries[: max(1, short // n + (i < short % n))] for i, entries in enumerate(stored)]
            used.update(entries[0].task.id for entries in stored)
        reserved = len(replay_kept) + len(stored)  # the replay slots still open are all drawn now
        n_fresh = max(0, want - reserved - len(fresh_kept))
        if attempt > 0 and n_fresh > 0:  # over-provision by the keep rate seen so far
            kept_so_far = len(fresh_kept) + len(replay_kept)
            keep_rate = max(0.25, kept_so_far / max(1, stats["generated_groups"]))
            n_fresh = min(2 * want, math.ceil(n_fresh / keep_rate))
        fresh = ctx.mixture.sample(n_fresh, step, attempt) if n_fresh > 0 else []
        used.update(t.id for t in fresh)
        if not fresh and not stored:
            break
        tasks = fresh + [entries[0].task for entries in stored]
        counts = [k] * len(fresh) + [k - len(entries) for entries in stored]
        seed = _seed(cfg, step, attempt)
        seeds = [seed + i * k for i in range(len(tasks))]
        t0 = time.perf_counter()
        trajs = rollout(ctx.engine, ctx.tokenizer, tasks, counts, params, seeds, ctx.version,
                        parser=cfg.rollout.tool_parser, template_check=cfg.rollout.template_check,
                        max_concurrent=cfg.rollout.max_concurrent_episodes)
        trajs = [_drop_failed(t, g, stats) for t, g in zip(tasks, trajs)]
        t1 = time.perf_counter()
        members = [(t, list(g), 0) for t, g in zip(fresh, trajs)]
        members += [(entries[0].task, [e.trajectory for e in entries] + list(g), len(entries))
                    for entries, g in zip(stored, trajs[len(fresh):])]
        verdicts = verify_groups([(t, g) for t, g, _ in members], ctx.cfg.reward.verify_workers)
        groups = [score_group(ctx, t, g, r, v, s) for (t, g, r), (v, s) in zip(members, verdicts)]
        stats["time/rollout"] += t1 - t0
        stats["time/verify"] += time.perf_counter() - t1
        stats["rollout_attempts"] += 1
        stats["generated_groups"] += len(groups)
        add_to_buffer(ctx, groups, step, per_group)
        generated += groups
        for g in groups:
            if cfg.dynamic_sampling.enabled and not g.has_signal:
                stats["filtered_groups"] += 1
            else:
                (replay_kept if g.replayed else fresh_kept).append(g)
        replay_done = exhausted or _replayed_count(replay_kept) >= target
        if not cfg.dynamic_sampling.enabled or (replay_done and len(fresh_kept) + len(replay_kept) >= want):
            break
    replay_kept = replay_kept[:want]
    kept = fresh_kept[: want - len(replay_kept)] + replay_kept
    stats["replay_groups"] = len(replay_kept)
    failed = stats.pop("failed_episodes", [])
    stats.update(episode_metrics([(g.task, t) for g in generated for t in g.fresh] + failed))
    stats.update(prefix_metrics(counts_before, _prefix_counts(ctx.engine)))
    return StepBatch(kept, generated, stats)


def _prefix_counts(engine) -> tuple[int, int] | None:
    kv = engine.kv_stats() if hasattr(engine, "kv_stats") else {}
    return (kv["prompt_tokens"], kv["prefill_tokens_saved"]) if "prompt_tokens" in kv else None


def prefix_metrics(before: tuple[int, int] | None, after: tuple[int, int] | None) -> dict[str, float]:
    """The step's prompt tokens admitted by the paged engine and the share found in its prefix cache
    (a multi-turn episode's later turns prefill only their new tokens). Performance counters, like
    timings: a resumed run starts with a cold cache, so they are `perf/` keys, not replayed exactly."""
    if before is None or after is None:
        return {}
    total, saved = after[0] - before[0], after[1] - before[1]
    return {"perf/prompt_tokens": float(total), "perf/prefill_tokens_saved": float(saved),
            "perf/prefill_saved_share": saved / total if total else 0.0}


def add_to_buffer(ctx: StepContext, groups: list[Group], step: int, per_group: int) -> None:
    """Up to `per_group` distinct fresh successes of each group go into the buffer (replayed
    trajectories are never re-added), so a later replay group can hold several of them."""
    if ctx.buffer is None:
        return
    for g in groups:
        seen: set[tuple[int, ...]] = set()
        for traj, raw in list(zip(g.trajectories, g.raw))[g.replayed:]:
            if len(seen) >= max(1, per_group):
                break
            ids = tuple(traj.token_ids)
            if raw is not None and ids not in seen and ctx.buffer.add(g.task, traj, raw, step):
                seen.add(ids)


def replay_metrics(kept: list[Group], step: int) -> dict[str, float]:
    """The share of the step's trained trajectories (and of their trained tokens) that were replayed,
    and the replayed ones' mean age in policy versions."""
    trained = [(t, j < g.replayed) for g in kept for j, t in enumerate(g.trajectories) if t.reward is not None]
    replayed = [t for t, r in trained if r]
    tokens = sum(sum(t.loss_mask) for t, _ in trained)
    return {
        "replay/share_trajectories": len(replayed) / len(trained) if trained else 0.0,
        "replay/share_tokens": sum(sum(t.loss_mask) for t in replayed) / tokens if tokens else 0.0,
        "replay/mean_age": sum(step - t.policy_version for t in replayed) / len(replayed) if replayed else 0.0,
    }
