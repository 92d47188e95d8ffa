"""Scoring one RL step's groups: verify, shape rewards, store successes; the step's context and batch.

    ctx = StepContext(cfg, engine, tokenizer, mixture, buffer, stop_ids=..., version=3)
    group = score_group(ctx, task, trajs, replayed, verdicts, seconds, errors=errs)   # -> types.Group
    batch = StepBatch(kept, generated, stats, verifier_errors, events)   # what rl/collect.py hands the trainer

Every trajectory is verified (a verifier that raises counts as an error, appended to `errors` and
carried by the step's batch, and the sample gets no score: it is excluded from the group) and its reward shaped; the raw task score is kept apart,
and what the verifiers report as violations goes into `Trajectory.events`. Up to `per_group`
distinct fresh successes of each group go into the replay buffer (rl/buffer.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from posttrain.algos.shaping import format_reward, length_penalty, overlong_penalty
from posttrain.rl.buffer import ReplayBuffer
from posttrain.config.rl import RewardConfig, RLConfig
from posttrain.tasks.mixture import Mixture
from posttrain.core.types import Group, Task, Trajectory
from posttrain.verifiers import events_of, task_score


@dataclass
class StepContext:
    cfg: RLConfig
    engine: object
    tokenizer: object
    mixture: Mixture
    buffer: ReplayBuffer | None
    stop_ids: tuple[int, ...] = ()
    version: int = 0  # the policy version the engine serves: written by rl/sync.py alone


@dataclass(frozen=True)
class StepBatch:
    kept: list[Group]  # what the trainer gets
    generated: list[Group]  # every group the step closed (trained or dropped)
    stats: dict
    verifier_errors: tuple[str, ...] = ()  # "task id: error" of each verifier that raised
    events: tuple[str, ...] = ()  # the planner's: breaker trips and recoveries, a step with no new work


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


def score_group(ctx: StepContext, task: Task, trajs: list[Trajectory], replayed: int, verdicts, seconds: float,
                version: int | None = None, errors: list[str] | None = None) -> Group:
    raw: list[float | None] = []
    done: list[Trajectory] = []
    errors_out = errors
    for traj, (scores, errors) in zip(trajs, verdicts):
        if errors_out is not None:
            errors_out.extend(f"{task.id}: {e}" for e in errors)
        value = None if errors else task_score(scores, task)
        reward = None if value is None else shaped_reward(value, traj, ctx.cfg.reward, ctx.cfg.rollout.max_tokens)
        raw.append(value)
        timings = {**traj.timings, "verify": seconds}
        done.append(replace(traj, scores=tuple(scores), reward=reward, events=events_of(scores), timings=timings))
    return Group(task, tuple(done), tuple(raw), replayed, ctx.version if version is None else version)


def violations(groups: list[Group]) -> Counter:
    """Counts of the fresh trajectories' violation events by kind (the text before any ':')."""
    return Counter(e.split(":")[0] for g in groups for traj in g.fresh for e in traj.events)


def prefix_counts(engine) -> tuple[int, int] | None:
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
