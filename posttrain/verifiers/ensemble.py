"""Several verifiers on one trajectory: how their scores combine, and how often they disagree.

    combine(scores, "mean")                     # today's raw task score (the mean), None if no scores
    combine(scores, "majority", threshold=0.5)  # 1.0 / 0.0 verdict
    combine(scores, "all", thresholds={"llm_judge": 0.7})   # per-verifier pass thresholds
    pairwise_agreement(score_sets)              # {("a", "b"): (agreements, comparisons)}
    disagreement_rate(score_sets)               # share of multi-verdict trajectories not unanimous
    tracker = DisagreementTracker(); tracker.add(domain, task_id, completion, scores)
    tracker.metrics(); tracker.warnings(); tracker.reset()      # once per RL step

A verifier's verdict is pass when its value >= its threshold: `thresholds[name]` when given
(per-verifier thresholds, e.g. from `posttrain verify calibrate`, see calibrate.py), else the
common `threshold` (0.5). Everything here is pure (no I/O).

What a per-verifier threshold means for the score rules (mean, weights): the value of a verifier
that has a threshold is binarised there (1.0 when value >= threshold, else 0.0) before it is
averaged; a verifier without one enters with its raw value, as before. Why binarise rather than
leave mean/weights alone: a calibrated threshold is a statement that this verifier's value means
"correct" at and above t and "wrong" below it, as measured against human labels. Passing the raw
0.6 of a verifier calibrated at 0.7 into a mean would pay partial credit for an answer the
calibration says is wrong, and a threshold that silently does nothing under the default rule
would be a setting that looks applied but is not. A verifier whose partial credit is wanted (e.g.
code's fraction of tests passed) should simply not be given a threshold.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Mapping, Sequence

from posttrain.core.errors import ConfigError
from posttrain.core.types import Score

RULES = ("mean", "all", "any", "majority", "weights")


def _passes(scores: Sequence[Score], threshold: float, thresholds: Mapping[str, float] | None = None) -> list[bool]:
    t = thresholds or {}
    return [s.value >= t.get(s.verifier, threshold) for s in scores]


def _value(s: Score, thresholds: Mapping[str, float] | None) -> float:
    """The value a score rule uses: binarised at the verifier's own threshold when it has one."""
    if thresholds and s.verifier in thresholds:
        return float(s.value >= thresholds[s.verifier])
    return s.value


def combine(
    scores: Sequence[Score],
    rule: str = "mean",
    *,
    weights: Mapping[str, float] | None = None,
    threshold: float = 0.5,
    thresholds: Mapping[str, float] | None = None,
) -> float | None:
    """One task score from the verifiers' scores, None when no verifier judged.

    mean      the plain mean of the values (the default of the registry's `task_score`)
    all       1.0 iff every value >= its threshold, else 0.0
    any       1.0 iff some value >= its threshold
    majority  1.0 iff strictly more than half the values >= their thresholds (a tie fails)
    weights   sum(w[v] * value) / sum(w[v]) over the verifiers present; every verifier present
              must have a weight (ConfigError naming it); weights are >= 0 and must not all be 0.
    `weights` is read only by the "weights" rule. A verifier's threshold is `thresholds[name]`,
    else `threshold`; under mean/weights a verifier named in `thresholds` counts as 1.0/0.0 at
    its threshold (module docstring), the others with their raw values.
    """
    if rule not in RULES:
        raise ConfigError(f"unknown verifier combine rule {rule!r}; known: {', '.join(RULES)}")
    if rule == "weights" and weights is None:
        raise ConfigError("combine rule 'weights' needs per-verifier weights")
    if not scores:
        return None
    if rule == "mean":
        return sum(_value(s, thresholds) for s in scores) / len(scores)
    if rule == "weights":
        total = num = 0.0
        for s in scores:
            if s.verifier not in weights:
                raise ConfigError(f"verifier {s.verifier!r} has no weight in the combine weights "
                                  f"(weights given for: {', '.join(sorted(weights)) or 'none'})")
            w = float(weights[s.verifier])
            if not w >= 0:
                raise ConfigError(f"combine weight of verifier {s.verifier!r} is {w}, must be >= 0")
            total += w
            num += w * _value(s, thresholds)
        if total == 0:
            names = ", ".join(sorted({s.verifier for s in scores}))
            raise ConfigError(f"combine weights of the verifiers present ({names}) sum to 0")
        return num / total
    passed = _passes(scores, threshold, thresholds)
    if rule == "all":
        return float(all(passed))
    if rule == "any":
        return float(any(passed))
    return float(2 * sum(passed) > len(passed))  # majority


def _verdicts(scores: Sequence[Score], threshold: float,
              thresholds: Mapping[str, float] | None = None) -> dict[str, bool]:
    """verifier -> pass/fail (a verifier listed twice keeps its last score)."""
    t = thresholds or {}
    return {s.verifier: s.value >= t.get(s.verifier, threshold) for s in scores}


def pairwise_agreement(
    score_sets: Sequence[Sequence[Score]], threshold: float = 0.5, thresholds: Mapping[str, float] | None = None
) -> dict[tuple[str, str], tuple[int, int]]:
    """For each pair of verifiers (names sorted) that judged the same trajectory at least once:
    (trajectories where their verdicts agree, trajectories both judged)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for scores in score_sets:
        v = _verdicts(scores, threshold, thresholds)
        for a, b in combinations(sorted(v), 2):
            c = counts[(a, b)]
            c[0] += v[a] == v[b]
            c[1] += 1
    return {pair: (c[0], c[1]) for pair, c in sorted(counts.items())}


def disagreement_rate(score_sets: Sequence[Sequence[Score]], threshold: float = 0.5,
                      thresholds: Mapping[str, float] | None = None) -> float | None:
    """Among trajectories with >= 2 verdicts, the fraction whose verdicts are not unanimous;
    None when no trajectory had 2 verdicts."""
    judged = split = 0
    for scores in score_sets:
        v = _verdicts(scores, threshold, thresholds)
        if len(v) < 2:
            continue
        judged += 1
        split += len(set(v.values())) > 1
    return split / judged if judged else None


def _snippet(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _fmt_value(x: float) -> str:
    return f"{x:.3g}"


class DisagreementTracker:
    """Counts verifier disagreement per domain over a window (one RL step).

    A trajectory counts toward its domain only when >= 2 distinct verifiers judged it.
    `metrics()`:  verify/disagreement/<domain> = split / counted trajectories of that domain;
                  verify/agreement/<a>~<b>     = agreements / comparisons of that pair (all domains).
    `warnings()`: one line per domain with >= min_count counted trajectories whose rate is
                  strictly above threshold_rate, with up to max_examples disagreeing task ids,
                  each verifier's value and the start of the completion.
    """

    def __init__(self, threshold_rate: float = 0.2, min_count: int = 20, max_examples: int = 3,
                 threshold: float = 0.5):
        self.threshold_rate = threshold_rate
        self.min_count = min_count
        self.max_examples = max_examples
        self.threshold = threshold  # a verifier passes when its value >= threshold
        self.reset()

    def reset(self) -> None:
        """Start a new window."""
        self._counted: dict[str, int] = defaultdict(int)
        self._split: dict[str, int] = defaultdict(int)
        self._examples: dict[str, list[tuple[str, str, dict[str, float]]]] = defaultdict(list)
        self._pairs: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])

    def add(self, domain: str, task_id: str, completion: str, scores: Sequence[Score],
            thresholds: Mapping[str, float] | None = None) -> None:
        """Count one trajectory; `thresholds`: its task's per-verifier thresholds (metadata
        "verifier_thresholds"), over the tracker's common `threshold`."""
        verdicts = _verdicts(scores, self.threshold, thresholds)
        if len(verdicts) < 2:
            return
        for a, b in combinations(sorted(verdicts), 2):
            c = self._pairs[(a, b)]
            c[0] += verdicts[a] == verdicts[b]
            c[1] += 1
        self._counted[domain] += 1
        if len(set(verdicts.values())) > 1:
            self._split[domain] += 1
            if len(self._examples[domain]) < self.max_examples:
                values = {s.verifier: float(s.value) for s in scores}
                self._examples[domain].append((task_id, _snippet(completion), values))

    def rates(self) -> dict[str, tuple[float, int]]:
        """domain -> (disagreement rate, counted trajectories) for this window."""
        return {d: (self._split[d] / n, n) for d, n in sorted(self._counted.items())}

    def metrics(self) -> dict[str, float]:
        out = {f"verify/disagreement/{d}": rate for d, (rate, _) in self.rates().items()}
        for (a, b), (agree, total) in sorted(self._pairs.items()):
            out[f"verify/agreement/{a}~{b}"] = agree / total
        return out

    def warnings(self) -> list[str]:
        lines = []
        for domain, (rate, n) in self.rates().items():
            if n < self.min_count or not rate > self.threshold_rate:
                continue
            examples = "; ".join(
                f"{tid} [{', '.join(f'{v}={_fmt_value(x)}' for v, x in values.items())}] {snip}"
                for tid, snip, values in self._examples[domain]
            )
            lines.append(
                f"verifiers disagree on domain {domain!r}: {rate:.1%} of {n} trajectories "
                f"(> {self.threshold_rate:.0%}); e.g. {examples}"
            )
        return lines
