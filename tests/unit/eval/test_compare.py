"""Paired significance between evals and the gates on them, against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posttrain.config.eval import GateConfig
from posttrain.core.errors import ConfigError
from posttrain.eval.compare import bootstrap_p, check_gates, compare, mcnemar_p, paired_delta


def _result(label: str, outcomes: dict[str, list[int]], samples: int = 1) -> dict:
    """An eval JSON with per-task correct counts (outcomes: domain -> correct count per task)."""
    per_task, domains = {}, {}
    for domain, counts in outcomes.items():
        for i, c in enumerate(counts):
            per_task[f"{domain}/{i}"] = {"domain": domain, "correct": c, "samples": samples}
        mean = sum(c / samples for c in counts) / len(counts)
        domains[domain] = {"n": len(counts), "pass@1": mean}
    overall = {"pass@1": sum(d["pass@1"] for d in domains.values()) / len(domains)}
    return {"label": label, "model": f"/m/{label}", "metrics": ["pass@1"], "domains": domains, "overall": overall,
            "per_task": per_task}


def test_mcnemar_matches_the_binomial_tail_by_hand():
    # b=1, c=9: 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * (1 + 10) / 1024
    assert mcnemar_p(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_p(9, 1) == mcnemar_p(1, 9)
    assert mcnemar_p(5, 5) == 1.0 and mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(0, 6) == pytest.approx(2 / 64)  # 0.03125: significant at 0.05
    assert mcnemar_p(0, 5) == pytest.approx(2 / 32)  # 0.0625: not


def test_paired_delta_uses_mcnemar_for_single_samples_and_counts_only_discordant_tasks():
    # 20 tasks: both right on 8, both wrong on 3, only B right on 8, only A right on 1
    a = [1] * 8 + [0] * 3 + [0] * 8 + [1]
    b = [1] * 8 + [0] * 3 + [1] * 8 + [0]
    row = paired_delta(_result("a", {"d": a}), _result("b", {"d": b}), "pass@1", "d")
    assert row["test"] == "mcnemar" and row["n"] == 20
    assert row["delta"] == pytest.approx(7 / 20)
    assert row["p_value"] == pytest.approx(2 * (1 + 9) / 2**9)  # b=1, c=8: 0.039
    assert row["significant"] is True


def test_identical_models_are_never_significant_and_a_consistent_gain_is():
    same = _result("x", {"d": [1, 0, 1, 1, 0, 0, 1, 0]}, samples=1)
    assert paired_delta(same, same, "pass@1", None)["p_value"] == 1.0
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, size=60).tolist()  # of 4 samples: never above 2
    b = [c + 2 for c in a]  # every task gains two correct samples
    row = paired_delta(_result("a", {"d": a}, 4), _result("b", {"d": b}, 4), "pass@1", "d")
    assert row["test"] == "paired_bootstrap" and row["delta"] == pytest.approx(0.5)
    assert row["p_value"] < 0.001 and row["significant"]


def test_bootstrap_p_is_about_the_normal_tail_for_a_noisy_gain():
    rng = np.random.default_rng(0)
    diff = rng.normal(0.1, 1.0, size=400)  # z = 0.1 / (1 / sqrt(400)) = 2 -> two-sided p ~ 0.046
    zeros = np.zeros_like(diff)
    mean = diff.mean()
    z = mean / (diff.std(ddof=1) / math.sqrt(len(diff)))
    expected = math.erfc(abs(z) / math.sqrt(2))
    assert bootstrap_p([(zeros, diff)]) == pytest.approx(expected, abs=0.02)


def test_overall_delta_is_the_mean_of_domain_deltas():
    a = _result("a", {"x": [0, 0, 0, 0], "y": [1, 1]})
    b = _result("b", {"x": [1, 1, 1, 1], "y": [1, 0]})
    row = paired_delta(a, b, "pass@1", None)
    assert row["domain"] == "overall" and row["test"] == "paired_bootstrap"
    assert row["delta"] == pytest.approx((1.0 + -0.5) / 2)


def test_compare_lists_consecutive_deltas_and_refuses_different_tasks():
    a, b, c = (_result(x, {"d": v}) for x, v in (("a", [0, 0, 1]), ("b", [1, 0, 1]), ("c", [1, 1, 1])))
    cmp = compare([("a", a), ("b", b), ("c", c)], suite="s")
    assert [(d["from"], d["to"], d["domain"]) for d in cmp["deltas"]] == [
        ("a", "b", "d"), ("a", "b", "overall"), ("b", "c", "d"), ("b", "c", "overall")]
    assert [(d["from"], d["to"], d["domain"], d["delta"]) for d in cmp["span"]] == [
        ("a", "c", "d", pytest.approx(2 / 3)), ("a", "c", "overall", pytest.approx(2 / 3))]
    assert "span" not in compare([("a", a), ("b", b)])
    other = _result("z", {"e": [1, 0, 1]})
    with pytest.raises(ConfigError, match="different tasks"):
        compare([("a", a), ("z", other)])


def test_gate_fails_on_a_drop_beyond_max_drop_against_the_first_model():
    base, good, bad = (_result(x, {"d": v}) for x, v in (("base", [1] * 50 + [0] * 50), ("ok", [1] * 49 + [0] * 51),
                                                        ("bad", [1] * 47 + [0] * 53)))
    gate = GateConfig(suite="s", metric="pass@1", max_drop=0.02)
    [row] = check_gates([gate], "s", [("base", base), ("ok", good)])
    assert row["passed"] and row["drop"] == pytest.approx(0.01)
    [row] = check_gates([gate], "s", [("base", base), ("ok", good), ("bad", bad)])
    assert not row["passed"] and row["model"] == "bad" and row["baseline"] == "base"
    assert row["drop"] == pytest.approx(0.03)
    assert check_gates([gate], "other", [("base", base)]) == []
    with pytest.raises(ConfigError, match="baseline 'nope'"):
        check_gates([GateConfig(suite="s", max_drop=0.0, baseline="nope")], "s", [("base", base)])
