"""The one eval path: Tasks through an Engine and the verifier registry, to pass@k per domain.

    result = evaluate_tasks(engine, tokenizer, tasks, samples=8, temperature=1.0, max_tokens=128,
                            stop_ids=[2], seed=1_000_000)
    result.domains["chain_sum"]["pass@8"], result.domains["chain_sum"]["pass@8_ci95"], result.records[0]
    metrics = evaluate_in_loop(engine, tokenizer, {"chain_sum": tasks}, stop_ids=[2], max_tokens=64)

`posttrain eval` (harness.py) and the RL loop's held-out eval both call `evaluate_tasks`; the
loop's flat metrics (`pass@1/<domain>`, `pass@1`) are `flat_metrics` of the same result.

Sampling: sample j of task i is the request seeded `seed + i*K + j` through the single-turn
environment (`envs/rollout.rollout`: chat template, token-in token-out, a task's own
`limits.max_new_tokens` caps `max_tokens`). Verification: each task's K samples go to
`run_verifiers_many` together (the `code` verifier runs a group in one sandbox run), tasks on a
thread pool. A sample is correct when no verifier errored and `task_score(scores, task) >= CORRECT`;
a verifier that raises is counted in `verifier_errors`, its sample is wrong, the eval goes on.

Per domain (`EvalResult.domains[NAME]`):

    {"n": tasks, "pass@1": mean over tasks of c/K, "pass@1_ci95": [lo, hi],
     "pass@K": mean over tasks of the unbiased pass@K (passk.py), "pass@K_ci95": [lo, hi],   # K > 1 only
     "mean_length": mean completion tokens per sample, "verifier_errors": samples with an error}

`overall` has the same keys: n = all tasks, pass@k = the mean over domains (each domain counts
once), mean_length over all samples, verifier_errors summed.

The 95% interval is the Wilson score interval (z = 1.96) on the mean of the per-task estimates
over the n tasks. For K = 1 the per-task outcomes are 0/1 and it is the textbook Wilson interval
for a binomial proportion (5 of 10 -> [0.2366, 0.7634]; it stays inside [0, 1] and does not
collapse to a point at 0 or 1, unlike mean +- 1.96 sd/sqrt(n)). For K > 1 the per-task values lie
in [0, 1]; such a value with mean p has variance at most p(1 - p), the variance Wilson assumes, so
the interval is conservative (it covers the task-sampling uncertainty; K samples per task only
make each task's estimate less noisy). For `overall` the same formula uses the macro mean and
n_eff = D^2 / sum_d(1/n_d) (D domains), the n at which the mean of D domain means has the
variance of one proportion; with equal n_d that is the total number of tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from posttrain.eval.passk import pass_at_k
from posttrain.core.types import Task, Trajectory

CORRECT = 1.0 - 1e-9  # a sample is correct when its task score reaches full marks
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class SampleRecord:
    task_id: str
    domain: str
    sample: int  # index j among the task's K samples
    completion: str
    score: float | None  # task_score of the verifiers' scores; None when no verifier could judge
    correct: bool
    finish_reason: str  # "stop" | "length" | ...
    num_tokens: int  # completion tokens (the stop token included)
    scores: dict[str, float] = field(default_factory=dict)  # per verifier
    errors: tuple[str, ...] = ()  # verifier errors ("name: message")
    events: tuple[str, ...] = ()  # violations the verifiers / sandbox reported (verifiers.events_of)
    prompt_tokens: int = 0  # the rendered prompt's tokens
    stop_reason: str = "done"  # the episode's (envs.base.STOP_REASONS)
    turns: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"id": self.task_id, "domain": self.domain, "sample": self.sample, "completion": self.completion,
                "score": self.score, "correct": self.correct, "finish_reason": self.finish_reason,
                "num_tokens": self.num_tokens, "prompt_tokens": self.prompt_tokens, "scores": self.scores,
                "errors": list(self.errors), "events": list(self.events), "stop_reason": self.stop_reason,
                "turns": self.turns}


@dataclass(frozen=True)
class EvalResult:
    samples: int  # K
    domains: dict[str, dict[str, Any]]  # NAME -> row (module docstring), in first-seen task order
    overall: dict[str, Any]
    records: list[SampleRecord]  # task order, then sample order
    keys: list[str] = field(default_factory=lambda: ["pass@1"])  # the pass@k reported

    def per_task(self) -> dict[str, dict[str, Any]]:
        """task id -> {"domain", "correct": samples correct, "samples": K}: what paired tests compare."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records:
            row = out.setdefault(r.task_id, {"domain": r.domain, "correct": 0, "samples": 0})
            row["correct"] += int(r.correct)
            row["samples"] += 1
        return out


def wilson_interval(p: float, n: float, z: float = Z95) -> list[float]:
    """[lo, hi] of the Wilson score interval for a proportion p observed over n trials (n > 0)."""
    if n <= 0:
        return [0.0, 1.0]
    p = min(1.0, max(0.0, p))
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [min(p, max(0.0, center - half)), max(p, min(1.0, center + half))]  # p inside, despite rounding


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def metric_keys(samples: int, ks: Sequence[int] | None = None) -> list[str]:
    """["pass@1", "pass@k", ...] for each k in ks (default: 1 and K); k = 1 always comes first."""
    return [f"pass@{k}" for k in sorted({1, *(ks if ks is not None else [samples])})]


def summarize(groups: Sequence[Sequence[SampleRecord]], samples: int,
              ks: Sequence[int] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(per-domain rows, overall) from each task's sample records (K per task); see the module docstring."""
    by_domain: dict[str, list[Sequence[SampleRecord]]] = {}
    for rows in groups:
        by_domain.setdefault(rows[0].domain, []).append(rows)
    domains: dict[str, dict[str, Any]] = {}
    for name, tasks in by_domain.items():
        row: dict[str, Any] = {"n": len(tasks)}
        for key in metric_keys(samples, ks):
            k = int(key.split("@")[1])
            value = _mean([pass_at_k(len(t), sum(r.correct for r in t), k) for t in tasks])
            row[key], row[f"{key}_ci95"] = value, wilson_interval(value, len(tasks))
        row["mean_length"] = _mean([r.num_tokens for t in tasks for r in t])
        row["verifier_errors"] = sum(bool(r.errors) for t in tasks for r in t)
        domains[name] = row
    return domains, overall(domains, [r for rows in groups for r in rows], samples, ks)


def overall(domains: dict[str, dict[str, Any]], records: Sequence[SampleRecord], samples: int,
            ks: Sequence[int] | None = None) -> dict[str, Any]:
    if not domains:
        return {}
    n_eff = len(domains) ** 2 / sum(1.0 / d["n"] for d in domains.values())
    out: dict[str, Any] = {"n": sum(d["n"] for d in domains.values())}
    for key in metric_keys(samples, ks):
        value = _mean([d[key] for d in domains.values()])
        out[key], out[f"{key}_ci95"] = value, wilson_interval(value, n_eff)
    out["mean_length"] = _mean([r.num_tokens for r in records])
    out["verifier_errors"] = sum(d["verifier_errors"] for d in domains.values())
    return out


def verify_samples(tasks: Sequence[Task], trajs: list[list[Trajectory]],
                   workers: int | None = None) -> list[list[SampleRecord]]:
    """Each task's samples through its verifiers, as SampleRecords (correct: no error and full marks)."""
    from posttrain.verifiers import events_of, task_score, verify_groups

    from posttrain.envs.stats import FAILED

    out = []
    ran = [[t for t in group if t.stop_reason not in FAILED] for group in trajs]
    for task, group, (verdicts, _) in zip(tasks, trajs, verify_groups(list(zip(tasks, ran)), workers)):
        rows = []
        verdicts = iter(verdicts)  # a failed episode (env / infrastructure) is not verified: its error says why
        for j, traj in enumerate(group):
            scores, errors = ([], list(traj.events[:1])) if traj.stop_reason in FAILED else next(verdicts)
            value = task_score(scores, task)
            rows.append(SampleRecord(
                task_id=task.id, domain=task.domain, sample=j, completion=traj.text, score=value,
                correct=not errors and value is not None and value >= CORRECT, finish_reason=traj.finish_reason,
                num_tokens=len(traj.token_ids) - traj.prompt_len, scores={s.verifier: s.value for s in scores},
                errors=tuple(errors), events=events_of(scores), prompt_tokens=traj.prompt_len,
                stop_reason=traj.stop_reason, turns=traj.turns))
        out.append(rows)
    return out


def evaluate_tasks(
    engine,
    tokenizer,
    tasks: Sequence[Task],
    *,
    samples: int = 1,
    ks: Sequence[int] | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_tokens: int = 128,
    stop_ids: Sequence[int] = (),
    seed: int = 0,
    tasks_per_call: int | None = None,
    verify_workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EvalResult:
    """K = `samples` completions of every task, verified and summarised (module docstring).

    `tasks_per_call` tasks go to the engine at a time (None: all at once); `on_progress(n)` is
    called after each such chunk is verified. Greedy (temperature 0) needs samples == 1."""
    from posttrain.envs.rollout import rollout
    from posttrain.engine.protocol import SamplingParams

    if samples < 1:
        raise ValueError(f"evaluate_tasks: samples must be >= 1, got {samples}")
    if temperature == 0 and samples > 1:
        raise ValueError("evaluate_tasks: greedy decoding gives identical samples; use temperature > 0 with samples > 1")
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                            stop_token_ids=tuple(stop_ids))
    step = tasks_per_call or max(1, len(tasks))
    groups: list[list[SampleRecord]] = []
    for start in range(0, len(tasks), step):
        chunk = list(tasks[start : start + step])
        seeds = [seed + (start + i) * samples for i in range(len(chunk))]
        trajs = rollout(engine, tokenizer, chunk, [samples] * len(chunk), params, seeds, engine.version)
        groups += verify_samples(chunk, trajs, verify_workers)
        if on_progress is not None:
            on_progress(len(chunk))
    domains, total = summarize(groups, samples, ks)
    return EvalResult(samples, domains, total, [r for rows in groups for r in rows], metric_keys(samples, ks))


def flat_metrics(result: EvalResult) -> dict[str, float]:
    """The RL loop's keys: `pass@k/<domain>` (sorted by domain) and `pass@k` (the mean over domains)."""
    out: dict[str, float] = {}
    for key in result.keys:
        out.update({f"{key}/{d}": row[key] for d, row in sorted(result.domains.items())})
        if result.overall:
            out[key] = result.overall[key]
    return out


def evaluate_in_loop(engine, tokenizer, eval_sets: dict[str, list[Task]], stop_ids: Sequence[int],
                     max_tokens: int) -> dict[str, float]:
    """The RL loop's held-out eval: greedy pass@1 (K = 1) of every eval set, as flat metrics."""
    tasks = [t for domain in sorted(eval_sets) for t in eval_sets[domain]]
    if not tasks:
        return {}
    result = evaluate_tasks(engine, tokenizer, tasks, samples=1, temperature=0.0, max_tokens=max_tokens,
                            stop_ids=stop_ids, seed=0)
    return flat_metrics(result)
