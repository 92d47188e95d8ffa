"""The RL loop's bookkeeping, kept out of recipes/rl.py so the loop reads as its phases.

- `Threads`: torch's thread count for rollout and for the update, each tuned by measured time
  when `train.threads` is "auto" (small decode batches often run faster on one thread, the
  update's matmuls on two), fixed otherwise;
- `BadSteps`: the streak of steps whose every update was skipped for a non-finite loss or
  gradient; `train.max_bad_steps` in a row stop the run, naming the last checkpoint;
- `TimeCap`: `train.max_seconds` since the loop started;
- `step_metrics`: one step's metric dict, assembled from the parts' own dicts.
"""

from __future__ import annotations

import time

import torch
from rich.console import Console

from posttrain.checkpoint import latest_checkpoint
from posttrain.core.errors import TrainingError
from posttrain.train.threads import ThreadTuner

console = Console(stderr=True, highlight=False, soft_wrap=True)


class Threads:
    def __init__(self, setting) -> None:
        self.auto = setting == "auto"
        self.rollout_tuner, self.update_tuner = (ThreadTuner(), ThreadTuner()) if self.auto else (None, None)
        if isinstance(setting, int):
            torch.set_num_threads(setting)
        self.used: dict[str, int] = {}

    def for_phase(self, phase: str, index: int) -> None:
        """Set the thread count for `phase` ("rollout" | "update") of step `index`."""
        tuner = self.rollout_tuner if phase == "rollout" else self.update_tuner
        self.used[phase] = tuner.start(index) if tuner is not None else torch.get_num_threads()

    def record(self, index: int, metrics: dict) -> dict:
        """Feed the step's timings to the tuners; returns the thread metrics."""
        if self.auto:
            rollout = metrics["time/rollout"]
            self.rollout_tuner.record(index, self.used["rollout"], rollout)
            rest = metrics["time/step"] - metrics.get("time/eval", 0.0) - rollout
            self.update_tuner.record(index, self.used["update"], rest)
        return {"threads": self.used.get("update", 0), "rollout_threads": self.used.get("rollout", 0)}


class BadSteps:
    def __init__(self, limit: int, streak: int = 0) -> None:
        self.limit, self.streak = limit, streak

    def observe(self, step: int, metrics: dict, updates_per_step: int, trained: bool, out_dir) -> None:
        """Count a step whose every update was skipped as non-finite; raise past the limit."""
        skipped_all = trained and metrics.get("skipped_updates", 0) >= updates_per_step
        nonfinite = skipped_all and "non-finite" in metrics.get("skip_reason", "")
        self.streak = self.streak + 1 if nonfinite else 0
        if self.streak:
            console.print(f"[yellow]warning:[/] step {step}: update skipped: {metrics['skip_reason']}")
        if self.streak >= self.limit:
            raise TrainingError(f"{self.streak} steps in a row had a non-finite loss or gradient "
                                f"({metrics['skip_reason']}); stopped at step {step}. "
                                f"Last checkpoint: {latest_checkpoint(out_dir)}")


class TimeCap:
    def __init__(self, max_seconds: float | None) -> None:
        self.max_seconds, self.started = max_seconds, time.perf_counter()

    def reached(self) -> bool:
        return self.max_seconds is not None and time.perf_counter() - self.started > self.max_seconds


def step_metrics(*parts: dict, **values) -> dict:
    """Merge the parts' metric dicts (later ones win) and the named values."""
    out: dict = {}
    for part in parts:
        out.update(part)
    out.update(values)
    return out


def warn(step: int, lines: list[str]) -> None:
    for line in lines:
        console.print(f"[yellow]warning:[/] step {step}: {line}", highlight=False)


def staleness_metrics(groups, version: int) -> dict[str, float]:
    """How many versions behind `version` (the trainer's, at this update) the fresh trajectories'
    tokens were sampled: async/staleness_mean (over tokens) and async/staleness_max; 0 when synchronous."""
    lags: list[int] = []
    for g in groups:
        for t in g.fresh:
            sampled = [v for v, m in zip(t.token_versions, t.loss_mask) if m and v >= 0]
            lags += [version - v for v in sampled] or [version - t.policy_version]
    if not lags:
        return {}
    return {"async/staleness_mean": sum(lags) / len(lags), "async/staleness_max": float(max(lags))}
