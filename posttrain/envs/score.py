"""The `env_score` verifier: a multi-turn task's score, re-run from its episode's saved final state.
Registered by name by posttrain/domains/__init__.py (envs and verifiers never import each other).

    Task(..., env="terminal", verifiers=("env_score",))
    score = VERIFIERS["env_score"](task, traj)    # = ENVS[task.env](resources).score(task, traj.final_state)

Scoring is the environment's own (`Env.score`: e.g. the terminal env runs the task's tests in a
fresh sandbox over the final files; BFCL compares API states), computed by us after the episode,
from `Trajectory.final_state` alone: the same state scores the same whenever it is re-run, without
running the episode again. No final state (an episode that never ran) cannot be judged: None.
"""

from __future__ import annotations

from posttrain.envs.env import Resources, make_env
from posttrain.core.types import Score, Task, Trajectory

_resources = Resources()


def env_score(task: Task, traj: Trajectory) -> Score | None:
    if traj.final_state is None:
        return None
    scores = make_env(task.env, _resources).score(task, traj.final_state)
    if not scores:
        return None
    if len(scores) == 1:
        return scores[0]
    value = sum(s.value for s in scores) / len(scores)
    events = sorted({str(e) for s in scores for e in (s.details.get("events") or ())})
    return Score(value, "env_score", {"parts": {s.verifier: s.value for s in scores}, "events": events})
