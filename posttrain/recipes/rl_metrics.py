"""What the RL loop reports about its samples (its held-out eval is `eval/suite.evaluate_in_loop`,
the same code as `posttrain eval`).

- `domain_metrics`: per step, over every generated group (dropped ones included): mean raw
  `score`, `pass_rate`, `zero_variance_frac`, `completion_len`, and the mean shaped `reward`
  over the groups actually trained on; overall and per domain as `<metric>/<domain>` (so the
  report draws one plot per metric with a line per domain); and each reward source on its own:
  `verifier/<name>` (and `verifier/<name>/<domain>`), the mean value that verifier gave the
  current policy's samples (a reward model next to a verifiable reward shows as two lines);
- `staleness_metrics`: how many versions behind the trainer the trained tokens were sampled;
- `step_record`: one step's metric dict, assembled from the phases' own dicts;
- `Threads`: torch's thread count for rollout and for the update, each tuned by measured time
  when `train.threads` is "auto" (small decode batches often run faster on one thread, the
  update's matmuls on two), fixed otherwise;
- `BadSteps`: the streak of steps whose every update was skipped for a non-finite loss or
  gradient; `train.max_bad_steps` in a row stop the run, naming the last checkpoint.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from rich.console import Console

from posttrain.checkpoint import latest_checkpoint
from posttrain.core.errors import TrainingError
from posttrain.core.types import Group
from posttrain.eval.run import CORRECT
from posttrain.rl.scoring import StepBatch, replay_metrics
from posttrain.train.threads import ThreadTuner

console = Console(stderr=True, highlight=False, soft_wrap=True)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _summary(groups: list[Group]) -> dict[str, float]:
    raw = [r for g in groups for r in g.raw[g.replayed:] if r is not None]  # what the current policy did
    lengths = [sum(t.loss_mask) for g in groups for t in g.fresh]
    by_verifier: dict[str, list[float]] = defaultdict(list)
    for g in groups:
        for t in g.fresh:
            for s in t.scores:
                by_verifier[s.verifier].append(s.value)
    return {
        "score": _mean(raw),
        "pass_rate": _mean([float(r >= CORRECT) for r in raw]),
        "zero_variance_frac": _mean([float(not g.has_signal) for g in groups]),
        "completion_len": _mean([float(n) for n in lengths]),
        **{f"verifier/{name}": _mean(values) for name, values in sorted(by_verifier.items())},
    }


def domain_metrics(kept: list[Group], generated: list[Group]) -> dict[str, float]:
    out = _summary(generated)
    rewards = [t.reward for g in kept for t in g.trajectories if t.reward is not None]
    out["reward"] = _mean(rewards)
    by_domain: dict[str, list[Group]] = defaultdict(list)
    for g in generated:
        by_domain[g.task.domain].append(g)
    for domain, groups in sorted(by_domain.items()):
        out.update({f"{k}/{domain}": v for k, v in _summary(groups).items()})
        kept_rewards = [t.reward for g in kept if g.task.domain == domain for t in g.trajectories
                        if t.reward is not None]
        out[f"reward/{domain}"] = _mean(kept_rewards)
    return out


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


def step_record(step: int, batch: StepBatch, *parts: dict, buffer=None, **values) -> dict:
    """One step's metrics: the batch's and its replay shares, then `parts` (later ones win), the
    named values, the sample and verifier-error counts and the replay buffer's size and mean age."""
    out: dict = {**batch.stats, **replay_metrics(batch.kept, step)}
    for part in parts:
        out.update(part)
    trajs = [tr for g in batch.kept for tr in g.trajectories]
    out.update(values, verifier_errors=len(batch.verifier_errors),
               samples=sum(tr.reward is not None for tr in trajs), unscored_samples=sum(tr.reward is None for tr in trajs))
    if buffer is not None:
        out.update({"buffer/size": len(buffer), "buffer/mean_age": buffer.mean_age(step)})
    return out


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
