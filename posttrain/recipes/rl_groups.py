"""Collecting one RL step's scored groups: rollout, verify, shape, filter, backfill, replay.

    groups, stats = collect_groups(ctx, step, temperature)

1. replay: `replay_ratio` of the step's groups are past tasks from the buffer, each group
   = one stored successful trajectory (with its old policy version and sampler logprobs)
   + `samples_per_prompt - 1` fresh samples (ExGRPO-style mixing: the group's advantage
   stays relative to the current policy, the PPO ratio corrects for the stale sample);
2. fresh tasks from the mixture fill the rest, `samples_per_prompt` samples each;
3. every trajectory is verified (a verifier that raises counts as an error and the sample
   gets no score: it is excluded from the group) and its reward shaped; the raw task score
   is kept apart;
4. dynamic sampling: a group whose raw scores all agree carries no signal: it is dropped
   and new groups are drawn (at most `max_attempts` rounds in all), so the batch keeps its
   size when it can; `filtered_groups` counts the dropped ones.

Seeds of every sampling request and of the replay pick come from (seed, step, attempt),
so a step is reproducible without any saved generator state.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from posttrain.algos.shaping import format_reward, length_penalty, overlong_penalty
from posttrain.buffer import ReplayBuffer
from posttrain.config import RewardConfig, RLConfig
from posttrain.envs.single_turn import rollout
from posttrain.rollout.engine import SamplingParams
from posttrain.tasks.mixture import Mixture
from posttrain.types import Score, Task, Trajectory
from posttrain.verifiers import run_verifiers_many, task_score


@dataclass
class ScoredGroup:
    task: Task
    trajectories: list[Trajectory]  # rewards and scores filled in; replayed ones first
    raw: list[float | None]  # raw task score per trajectory (None: no verifier could judge it)
    replayed: int = 0  # how many of the trajectories came from the buffer

    @property
    def has_signal(self) -> bool:
        valid = [r for r in self.raw if r is not None]
        return len(valid) >= 2 and max(valid) > min(valid)


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


def verify_all(ctx: StepContext, groups: list[tuple[Task, list[Trajectory]]]) -> list[list[tuple[list[Score], list[str]]]]:
    """run_verifiers_many on every group, `reward.verify_workers` groups at a time (sandboxed and
    process-backed verifiers wait on other processes, so threads overlap them), in order."""
    workers = ctx.cfg.reward.verify_workers or 2 * (os.cpu_count() or 1)
    if workers == 1 or len(groups) < 2:
        return [run_verifiers_many(t, trajs) for t, trajs in groups]
    with ThreadPoolExecutor(min(workers, len(groups))) as pool:
        return list(pool.map(lambda g: run_verifiers_many(*g), groups))


def score_group(ctx: StepContext, task: Task, trajs: list[Trajectory], replayed: int,
                verdicts: list[tuple[list[Score], list[str]]]) -> ScoredGroup:
    raw: list[float | None] = []
    done: list[Trajectory] = []
    for traj, (scores, errors) in zip(trajs, verdicts):
        ctx.verifier_errors.extend(f"{task.id}: {e}" for e in errors)
        value = None if errors else task_score(scores, task)
        reward = None if value is None else shaped_reward(value, traj, ctx.cfg.reward, ctx.cfg.rollout.max_tokens)
        raw.append(value)
        done.append(replace(traj, scores=tuple(scores), reward=reward))
    return ScoredGroup(task, done, raw, replayed)


def violations(groups: list[ScoredGroup]) -> Counter:
    """Counts of what verifiers reported as violations (`details["events"]`: sandbox limits,
    early exits, touched tests, forged verdicts; `details["injection"]`: judge injections)."""
    found: Counter = Counter()
    for g in groups:
        for traj in g.trajectories[g.replayed:]:
            for s in traj.scores:
                found.update(str(e).split(":")[0] for e in s.details.get("events", ()) or ())
                if s.details.get("injection"):
                    found["judge_injection"] += 1
    return found


def _seed(cfg: RLConfig, step: int, attempt: int) -> int:
    return random.Random(f"rollout:{cfg.train.seed}:{step}:{attempt}").getrandbits(48)


def collect_groups(ctx: StepContext, step: int, temperature: float) -> tuple[list[ScoredGroup], dict]:
    cfg, k = ctx.cfg, ctx.cfg.rollout.samples_per_prompt
    want = cfg.rollout.prompts_per_step
    params = SamplingParams(temperature=temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                            max_tokens=cfg.rollout.max_tokens, stop_token_ids=tuple(ctx.stop_ids))
    replay = []
    if ctx.buffer is not None and len(ctx.buffer) and cfg.buffer.replay_ratio > 0:
        n_replay = min(round(cfg.buffer.replay_ratio * want), want - 1 if want > 1 else 0)
        replay = ctx.buffer.sample(n_replay, random.Random(f"replay:{cfg.train.seed}:{step}"))
    kept: list[ScoredGroup] = []
    generated: list[ScoredGroup] = []
    stats = {"time/rollout": 0.0, "time/verify": 0.0, "filtered_groups": 0, "rollout_attempts": 0,
             "generated_groups": 0, "replay_groups": 0}
    n_new = want - len(replay)
    for attempt in range(cfg.dynamic_sampling.max_attempts):
        fresh = ctx.mixture.sample(n_new, step, attempt) if n_new > 0 else []
        extra = replay if attempt == 0 else []
        tasks = fresh + [e.task for e in extra]
        counts = [k] * len(fresh) + [k - 1] * len(extra)
        seed = _seed(cfg, step, attempt)
        seeds = [seed + i * k for i in range(len(tasks))]
        t0 = time.perf_counter()
        trajs = rollout(ctx.engine, ctx.tokenizer, tasks, counts, params, seeds, ctx.version)
        t1 = time.perf_counter()
        members = [(t, list(g), 0) for t, g in zip(fresh, trajs)]
        members += [(e.task, [e.trajectory] + list(g), 1) for e, g in zip(extra, trajs[len(fresh):])]
        verdicts = verify_all(ctx, [(t, g) for t, g, _ in members])
        groups = [score_group(ctx, t, g, r, v) for (t, g, r), v in zip(members, verdicts)]
        stats["time/rollout"] += t1 - t0
        stats["time/verify"] += time.perf_counter() - t1
        stats["rollout_attempts"] += 1
        stats["generated_groups"] += len(groups)
        add_to_buffer(ctx, groups, step)
        generated += groups
        for g in groups:
            if cfg.dynamic_sampling.enabled and not g.has_signal:
                stats["filtered_groups"] += 1
            else:
                kept.append(g)
        missing = want - len(kept)
        if missing <= 0 or not cfg.dynamic_sampling.enabled:
            break
        keep_rate = max(0.25, len(kept) / max(1, stats["generated_groups"]))
        n_new = min(2 * want, math.ceil(missing / keep_rate))
    kept = kept[:want]
    stats["replay_groups"] = sum(1 for g in kept if g.replayed)
    stats["all_groups"] = generated  # for the per-domain metrics (popped by the recipe)
    return kept, stats


def add_to_buffer(ctx: StepContext, groups: list[ScoredGroup], step: int) -> None:
    """One fresh success per group goes into the buffer (replayed trajectories are not re-added)."""
    if ctx.buffer is None:
        return
    for g in groups:
        for traj, raw in list(zip(g.trajectories, g.raw))[g.replayed:]:
            if raw is not None and ctx.buffer.add(g.task, traj, raw, step):
                break
