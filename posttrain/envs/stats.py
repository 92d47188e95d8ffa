"""Per-domain episode metrics of a step's (or an eval's) trajectories, as flat numbers.

    episode_metrics(pairs)   # pairs: (task, trajectory) -> {"episode/terminal/turns": 3.2, ...}

For every domain whose tasks are episodes with an environment or tools (single-turn text tasks
add nothing): mean `turns`, `tokens` (the whole episode) and `env_seconds` per episode, the share
of episodes per stop reason (`stop/REASON`), tool calls per episode and each tool-call error
kind's rate per call (`tool_error_rate/KIND`). Failed episodes (env_error / infra_error) are
counted as `episodes/env_error` and `episodes/infra_error` over every domain.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from posttrain.envs.env import STOP_REASONS, TOOL_ERROR_KINDS
from posttrain.core.types import Task, Trajectory

FAILED = ("env_error", "infra_error")


def is_episode_domain(task: Task) -> bool:
    """Does the task run in an environment or offer tools (so its turns are parsed for calls)?"""
    return task.env != "single_turn" or bool((task.metadata or {}).get("tools"))


def episode_metrics(pairs: Iterable[tuple[Task, Trajectory]]) -> dict[str, float]:
    by_domain: dict[str, list[Trajectory]] = defaultdict(list)
    failed: Counter = Counter()
    for task, traj in pairs:
        if traj.stop_reason in FAILED:
            failed[traj.stop_reason] += 1
        if is_episode_domain(task):
            by_domain[task.domain].append(traj)
    out: dict[str, float] = {f"episodes/{r}": float(failed[r]) for r in FAILED}
    for domain, trajs in sorted(by_domain.items()):
        n = len(trajs)
        key = f"episode/{domain}"
        out[f"{key}/turns"] = sum(t.turns for t in trajs) / n
        out[f"{key}/tokens"] = sum(len(t.token_ids) for t in trajs) / n
        out[f"{key}/env_seconds"] = sum(t.stats.get("env_seconds", 0.0) for t in trajs) / n
        stops = Counter(t.stop_reason for t in trajs)
        out.update({f"{key}/stop/{r}": stops[r] / n for r in STOP_REASONS if stops[r]})
        calls = sum(t.stats.get("tool_calls", 0.0) for t in trajs)
        out[f"{key}/tool_calls"] = calls / n
        for kind in TOOL_ERROR_KINDS:
            errors = sum(t.stats.get(f"tool_errors/{kind}", 0.0) for t in trajs)
            out[f"{key}/tool_error_rate/{kind}"] = errors / calls if calls else 0.0
    return out
