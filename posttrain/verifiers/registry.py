"""Verifiers by name: a verifier is a plain function `(task, trajectory) -> Score | None`.

    @register("exact")
    def exact(task, traj): ...
    register("needle", "posttrain.domains.longctx.needle:needle")   # by name, imported on first use
    scores, failures = run_verifiers(task, traj)   # one Score per verifier the task names

The generic verifiers are the table below (names -> "module:function"; this module imports none of
them); a domain registers its own from its package (posttrain/domains/<name>/__init__.py).

None means "cannot judge" (e.g. no reference); a verifier that raises is caught here: it
counts as a failure, its sample gets no score from it, and the step goes on. Each task names
its verifiers (`Task.verifiers`), so the RL loop never branches on the domain.
"""

from __future__ import annotations

import numbers
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from posttrain.core.registry import Registry
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.ensemble import combine
from posttrain.verifiers.options import verifier_options  # noqa: F401  (re-exported)

Verifier = Callable[[Task, Trajectory], "Score | None"]
VERIFIERS = Registry("verifier", {
    "exact": "posttrain.verifiers.basic:exact",
    "numeric": "posttrain.verifiers.basic:numeric",
    "code": "posttrain.verifiers.code:code",
    "math": "posttrain.verifiers.math:math_verifier",
    "regex": "posttrain.verifiers.text_checks:regex",
    "tags": "posttrain.verifiers.text_checks:tags",
    "json": "posttrain.verifiers.text_checks:json_verifier",
    "length": "posttrain.verifiers.text_checks:length",
    "reward_model": "posttrain.verifiers.reward_model:reward_model",
})


def register(name: str, fn: Verifier | str | None = None):
    """register(name)(fn) as a decorator, or register(name, fn_or_"module:function")."""
    return VERIFIERS.register(name, fn)


def get_verifier(name: str) -> Verifier:
    return VERIFIERS.get(name)


def _check(name: str, score: object) -> str | None:
    """Why `score` is not an acceptable verifier result (None: it is)."""
    if not isinstance(score, Score):
        return f"{name}: returned {type(score).__name__}, expected Score or None"
    if not isinstance(score.value, numbers.Real):
        return f"{name}: score {score.value!r} is not a number"
    if not (0.0 <= score.value <= 1.0):
        return f"{name}: score {score.value!r} outside [0, 1]"
    return None


def run_verifiers(task: Task, traj: Trajectory) -> tuple[list[Score], list[str]]:
    """Scores of every verifier `task` names, and the errors of those that raised (as 'name: message')."""
    return run_verifiers_many(task, [traj])[0]


def run_verifiers_many(task: Task, trajs: list[Trajectory]) -> list[tuple[list[Score], list[str]]]:
    """`run_verifiers` for several trajectories of one task. A verifier with a `many(task, trajs)`
    attribute (e.g. `code`, which runs a group's programs in one sandbox run) judges them together."""
    out: list[tuple[list[Score], list[str]]] = [([], []) for _ in trajs]
    for name in task.verifiers:
        fn = get_verifier(name)
        many = getattr(fn, "many", None)
        try:
            results = list(many(task, trajs)) if many is not None else None
            if results is not None and len(results) != len(trajs):
                raise ValueError(f"returned {len(results)} scores for {len(trajs)} trajectories")
        except Exception as e:  # a broken verifier must not stop the run
            for _, errors in out:
                errors.append(f"{name}: {type(e).__name__}: {e}")
            continue
        for i, traj in enumerate(trajs):
            scores, errors = out[i]
            if results is not None:
                score = results[i]
            else:
                try:
                    score = fn(task, traj)
                except Exception as e:  # a broken verifier must not stop the run
                    errors.append(f"{name}: {type(e).__name__}: {e}")
                    continue
            if score is None:
                continue
            problem = _check(name, score)
            if problem:
                errors.append(problem)
            else:
                scores.append(score)
    return out


def verify_groups(groups: list[tuple[Task, list[Trajectory]]], workers: int | None = None
                  ) -> list[tuple[list[tuple[list[Score], list[str]]], float]]:
    """`run_verifiers_many` on every (task, trajectories) group, `workers` groups at a time (default 2 per
    core: sandboxed and process-backed verifiers wait on other processes, so threads overlap them), in
    order; each group's verdicts come with the seconds its verification took."""
    def timed(group):
        started = time.perf_counter()
        return run_verifiers_many(*group), time.perf_counter() - started

    workers = workers or 2 * (os.cpu_count() or 1)
    if workers <= 1 or len(groups) < 2:
        return [timed(g) for g in groups]
    with ThreadPoolExecutor(min(workers, len(groups))) as pool:
        return list(pool.map(timed, groups))


def task_score(scores: list[Score], task: Task | None = None) -> float | None:
    """The raw task score: the verifiers' values combined by the task's rule (metadata `combine`:
    mean (default) | all | any | majority | weights, with `verifier_weights`); None when none judged.
    Metadata `verifier_thresholds` ({name: t}, a domain's calibrated thresholds) sets each named
    verifier's pass threshold (others: 0.5); under mean/weights a thresholded verifier counts
    1.0/0.0 at its threshold (see ensemble.py)."""
    meta = task.metadata if task is not None else {}
    return combine(scores, meta.get("combine", "mean"), weights=meta.get("verifier_weights"),
                   thresholds=meta.get("verifier_thresholds"))


def events_of(scores: list[Score]) -> tuple[str, ...]:
    """What verifiers reported as violations: `details["events"]` (sandbox limits, early exits,
    touched tests, forged verdicts) and `details["injection"]` (judge injections)."""
    found = [str(e) for s in scores for e in (s.details.get("events") or ())]
    found += ["judge_injection" for s in scores if s.details.get("injection")]
    return tuple(sorted(set(found)))
