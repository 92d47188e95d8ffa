"""scheduler/draw.py: effective domain weights (value on/off, the exploration floor, paused and zero-weight
domains), quota-respecting seeded domain draws in proportion to their weights, and steer's skipping of
settled tasks (its probability, unseen tasks kept, the bound on extra candidates) on a small fake source."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from posttrain.config.sched import ValueConfig
from posttrain.core.errors import ConfigError
from posttrain.rl.draw import domain_weights, draw_domains, steer
from posttrain.rl.stats import PassRates, signal_value
from posttrain.core.types import Task

K = 8


def rates_at(**p: float) -> PassRates:
    """Domain estimates set to exactly p (one folded step of 100 trials each)."""
    rates = PassRates()
    for d, v in p.items():
        rates.observe_group(d, f"{d}/0", passes=round(v * 100), trials=100)
    rates.end_step()
    return rates


# ---------------------------------------------------------------- domain weights


def test_domain_weights_value_on_applies_the_floor():
    rates = rates_at(solved=1.0, half=0.5, hopeless=0.0, some=0.25)
    base = {"solved": 2.0, "half": 3.0, "hopeless": 1.0, "some": 1.0, "fresh": 4.0}
    w = domain_weights(list(base), base, rates, K, ValueConfig(floor=0.1), {})
    assert w["solved"] == pytest.approx(0.1 * 2.0)   # p = 1: floor x weight
    assert w["hopeless"] == pytest.approx(0.1 * 1.0)  # p = 0: likewise
    assert w["half"] == pytest.approx(3.0)           # p = 0.5: its full weight
    assert w["fresh"] == pytest.approx(4.0)          # unseen: the prior 0.5
    assert w["some"] == pytest.approx(0.1 + 0.9 * signal_value(0.25, K))
    assert 0.1 < w["some"] < 1.0


def test_domain_weights_value_off_keeps_configured_weights():
    rates = rates_at(solved=1.0, half=0.5)
    base = {"solved": 2.0, "half": 3.0}
    assert domain_weights(list(base), base, rates, K, ValueConfig(enabled=False), {}) == {"solved": 2.0, "half": 3.0}


def test_domain_weights_drop_paused_and_zero_weight_domains():
    rates = rates_at()
    base = {"a": 1.0, "paused": 5.0, "zero": 0.0, "b": 2.0}
    w = domain_weights(list(base), base, rates, K, ValueConfig(), {"paused": False, "a": True})
    assert set(w) == {"a", "b"}
    # only the listed domains are considered
    assert set(domain_weights(["b"], base, rates, K, ValueConfig(), {})) == {"b"}


# ---------------------------------------------------------------- draw_domains


def test_draw_domains_quota_counts_items_already_taken():
    weights = {"a": 10.0, "b": 1.0}
    picks = draw_domains(20, weights, {"a": 3, "b": None}, {"a": 1}, random.Random(0))
    assert len(picks) == 20
    assert picks.count("a") == 2  # quota 3, 1 already taken this step; heavy weight draws it out
    assert picks.count("b") == 18
    # a quota already used up: the domain is not drawn at all
    assert draw_domains(5, weights, {"a": 2}, {"a": 2}, random.Random(0)) == ["b"] * 5


def test_draw_domains_returns_fewer_when_quotas_run_out():
    picks = draw_domains(10, {"a": 1.0, "b": 1.0}, {"a": 2, "b": 1}, {}, random.Random(1))
    assert Counter(picks) == {"a": 2, "b": 1}
    assert draw_domains(4, {"a": 1.0}, {"a": 0}, {}, random.Random(1)) == []
    assert draw_domains(3, {}, {}, {}, random.Random(1)) == []
    assert draw_domains(0, {"a": 1.0}, {}, {}, random.Random(1)) == []


def test_draw_domains_is_deterministic_for_a_seeded_rng():
    weights = {"c": 1.0, "a": 2.0, "b": 0.5}
    one = draw_domains(50, weights, {"a": 10}, {}, random.Random("seed:3"))
    two = draw_domains(50, dict(reversed(list(weights.items()))), {"a": 10}, {}, random.Random("seed:3"))
    assert one == two  # nor does the weights' insertion order matter
    other = draw_domains(50, weights, {"a": 10}, {}, random.Random("seed:4"))
    assert one != other


def test_draw_domains_in_proportion_to_weights():
    weights = {"a": 1.0, "b": 3.0, "c": 6.0}
    n = 10_000
    counts = Counter(draw_domains(n, weights, {}, {}, random.Random(12345)))
    assert sum(counts.values()) == n
    total = sum(weights.values())
    for d, w in weights.items():
        p = w / total
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(counts[d] - n * p) < 3 * sigma, (d, counts[d], n * p)


def test_draw_domains_skips_zero_weights():
    assert set(draw_domains(200, {"a": 1.0, "z": 0.0}, {}, {}, random.Random(0))) == {"a"}


# ---------------------------------------------------------------- steer


class FakeSource:
    """Yields the tasks named by `ids` in order, then none; counts how many were looked at."""

    def __init__(self, ids: list[str], domain: str = "d"):
        self.ids, self.domain, self.taken, self.calls = ids, domain, 0, 0

    def take(self, n: int) -> list[Task]:
        self.calls += 1
        out = [Task(id=i, domain=self.domain, prompt=(), reference=None) for i in self.ids[self.taken:self.taken + n]]
        self.taken += len(out)
        return out


def settled(*ids: str, passes: int = K, trials: int = K) -> PassRates:
    rates = PassRates()
    for t in ids:
        rates.observe_group("d", t, passes=passes, trials=trials)
    return rates


def test_steer_never_skips_unseen_tasks():
    src = FakeSource([f"u{i}" for i in range(5)])
    out = steer(src, 5, PassRates(), K, ValueConfig(floor=0.0), random.Random(0))
    assert [t.id for t in out] == ["u0", "u1", "u2", "u3", "u4"]
    assert src.taken == 5 and src.calls == 1


def test_steer_skips_settled_tasks_with_probability_one_minus_floor():
    floor, runs = 0.25, 4000
    rates = settled("s")  # s: 8 trials, all passing
    kept = 0
    rng = random.Random(7)
    for _ in range(runs):
        out = steer(FakeSource(["s", "u"]), 1, rates, K, ValueConfig(floor=floor), rng)
        assert len(out) == 1
        kept += out[0].id == "s"
    sigma = math.sqrt(runs * floor * (1 - floor))
    assert abs(kept - runs * floor) < 3 * sigma, kept


def test_steer_settled_means_k_trials_all_passing_or_all_failing():
    value = ValueConfig(floor=0.0)  # a settled task is always skipped while extras are left
    cases = {
        "all_pass": (settled("x", passes=K, trials=K), True),
        "all_fail": (settled("x", passes=0, trials=K), True),
        "too_few_trials": (settled("x", passes=K - 1, trials=K - 1), False),
        "mixed": (settled("x", passes=K - 1, trials=K), False),
    }
    for name, (rates, skipped) in cases.items():
        out = steer(FakeSource(["x", "u"]), 1, rates, K, value, random.Random(0))
        assert out[0].id == ("u" if skipped else "x"), name
    # value off: nothing is skipped
    out = steer(FakeSource(["x", "u"]), 1, settled("x"), K, ValueConfig(enabled=False, floor=0.0), random.Random(0))
    assert out[0].id == "x"


def test_steer_looks_at_no_more_than_m_extra_candidates():
    m = 3
    src = FakeSource(["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"])
    rates = settled(*src.ids)
    out = steer(src, m, rates, K, ValueConfig(floor=0.0), random.Random(0))
    # every candidate is settled and floor 0 skips each while it can: m skipped, then m kept
    assert src.taken == 2 * m
    assert [t.id for t in out] == ["s4", "s5", "s6"]
    # mixed: unseen tasks fill the rest without spending the extra budget
    src = FakeSource(["s1", "u1", "s2", "u2", "u3"])
    out = steer(src, 3, settled("s1", "s2"), K, ValueConfig(floor=0.0), random.Random(0))
    assert [t.id for t in out] == ["u1", "u2", "u3"] and src.taken == 5


def test_steer_empty_cases():
    src = FakeSource(["a"])
    assert steer(src, 0, PassRates(), K, ValueConfig(), random.Random(0)) == [] and src.taken == 0
    with pytest.raises(ConfigError, match="'dry'.*gave no tasks"):
        steer(FakeSource([], domain="dry"), 2, PassRates(), K, ValueConfig(), random.Random(0))
