"""scheduler/stats.py (expected_signal, signal_value, PassRates, Costs) and utilisation.quantile against
values worked out by hand: the GRPO signal formula, the two-step decay, task-memory eviction order and
JSON round trips of both tables."""

from __future__ import annotations

import json

import pytest

from posttrain.rl.stats import Costs, PassRates, expected_signal, signal_value
from posttrain.rl.utilisation import quantile


# ---------------------------------------------------------------- expected signal


def test_expected_signal_hand_values():
    # k = 8 at p = 0.5: all pass 1/256, all fail 1/256
    assert expected_signal(0.5, 8) == pytest.approx(1 - 2 / 256)
    # p = 0.25, k = 2: mixed = 2 * 0.25 * 0.75
    assert expected_signal(0.25, 2) == pytest.approx(0.375)
    # p = 0.1, k = 3: 1 - 0.001 - 0.729
    assert expected_signal(0.1, 3) == pytest.approx(0.27)
    for k in (1, 2, 8, 16):
        assert expected_signal(0.0, k) == 0.0
        assert expected_signal(1.0, k) == 0.0
    # one sample always "agrees with itself": no signal at any p
    assert expected_signal(0.3, 1) == pytest.approx(0.0)


def test_expected_signal_clamps_p_outside_unit_interval():
    assert expected_signal(-0.5, 4) == 0.0
    assert expected_signal(1.7, 4) == 0.0


def test_signal_value_is_one_at_half_and_below_elsewhere():
    for k in (2, 4, 8):
        assert signal_value(0.5, k) == pytest.approx(1.0)
        grid = [i / 100 for i in range(101)]
        values = [signal_value(p, k) for p in grid]
        assert max(values) == pytest.approx(1.0)
        assert grid[values.index(max(values))] == 0.5
        assert all(0.0 <= v <= 1.0 + 1e-12 for v in values)
        assert signal_value(0.0, k) == 0.0 and signal_value(1.0, k) == 0.0
    # symmetric in p <-> 1 - p, and scaled by the k = 8 maximum
    assert signal_value(0.2, 8) == pytest.approx(signal_value(0.8, 8))
    assert signal_value(0.25, 2) == pytest.approx(0.375 / 0.5)
    # k = 1 has no maximum to scale by: 0, not a division by zero
    assert signal_value(0.5, 1) == 0.0


# ---------------------------------------------------------------- pass rates


def test_pass_rates_prior_before_any_observation():
    rates = PassRates(prior=0.3, decay=0.7)
    assert rates.domain("never_seen") == 0.3
    assert rates.task("never_seen/1") is None
    # observed this step but not folded yet: still the prior
    rates.observe_group("a", "a/1", passes=8, trials=8)
    assert rates.domain("a") == 0.3
    # a group with no trials is ignored entirely
    rates.observe_group("b", "b/1", passes=0, trials=0)
    assert rates.end_step() == {"a": 1.0}
    assert rates.domain("b") == 0.3 and rates.task("b/1") is None


def test_pass_rates_decay_over_two_steps():
    rates = PassRates(prior=0.5, decay=0.7)
    # step 1: two groups of domain a pooled: (1 + 3) / (8 + 8) = 0.25; b = 6 / 8
    rates.observe_group("a", "a/1", passes=1, trials=8)
    rates.observe_group("a", "a/2", passes=3, trials=8)
    rates.observe_group("b", "b/1", passes=6, trials=8)
    assert rates.end_step() == pytest.approx({"a": 0.25, "b": 0.75})
    # the first observation replaces the prior
    assert rates.domain("a") == pytest.approx(0.25)
    assert rates.domain("b") == pytest.approx(0.75)
    # step 2: a at 0.75 -> 0.7 * 0.25 + 0.3 * 0.75 = 0.4; b unobserved keeps its estimate
    rates.observe_group("a", "a/3", passes=6, trials=8)
    assert rates.end_step() == pytest.approx({"a": 0.75})
    assert rates.domain("a") == pytest.approx(0.4)
    assert rates.domain("b") == pytest.approx(0.75)
    # an empty step changes nothing
    assert rates.end_step() == {}
    assert rates.domain("a") == pytest.approx(0.4)


def test_task_counts_accumulate_and_memory_evicts_least_recently_observed():
    rates = PassRates(task_memory=2)
    rates.observe_group("d", "t1", passes=1, trials=4)
    rates.observe_group("d", "t2", passes=4, trials=4)
    rates.observe_group("d", "t1", passes=3, trials=4)  # t1 seen again: now the most recent
    assert rates.task("t1") == (pytest.approx(0.5), 8)
    rates.observe_group("d", "t3", passes=0, trials=4)  # over memory: t2 (oldest) goes
    assert rates.task("t2") is None
    assert rates.task("t1") == (pytest.approx(0.5), 8)
    assert rates.task("t3") == (0.0, 4)
    assert list(rates.tasks) == ["t1", "t3"]
    rates.observe_group("d", "t4", passes=2, trials=4)  # next eviction: t1
    assert list(rates.tasks) == ["t3", "t4"]


def test_task_memory_zero_keeps_no_tasks_but_still_counts_domains():
    rates = PassRates(task_memory=0)
    rates.observe_group("d", "t1", passes=2, trials=4)
    assert rates.task("t1") is None and not rates.tasks
    rates.end_step()
    assert rates.domain("d") == pytest.approx(0.5)


def test_pass_rates_state_dict_round_trip_through_json():
    rates = PassRates(prior=0.5, decay=0.6, task_memory=3)
    for i, (p, n) in enumerate([(1, 8), (8, 8), (0, 8), (5, 8)]):
        rates.observe_group("a" if i % 2 else "b", f"t{i}", passes=p, trials=n)
    rates.end_step()
    rates.observe_group("a", "t1", passes=2, trials=8)
    rates.end_step()
    state = json.loads(json.dumps(rates.state_dict()))
    back = PassRates(prior=0.5, decay=0.6, task_memory=3)
    back.load_state_dict(state)
    assert back.state_dict() == rates.state_dict()
    assert back.domain("a") == rates.domain("a") and back.domain("b") == rates.domain("b")
    assert [back.task(f"t{i}") for i in range(4)] == [rates.task(f"t{i}") for i in range(4)]
    # the order survives too: both evict the same task next
    for r in (rates, back):
        r.observe_group("a", "t9", passes=1, trials=8)
    assert list(back.tasks) == list(rates.tasks)
    # an unfolded step is not part of the state: loading drops it
    back.observe_group("c", "c/1", passes=8, trials=8)
    back.load_state_dict(state)
    assert back.end_step() == {}


# ---------------------------------------------------------------- costs


def test_costs_decay_and_predict():
    costs = Costs(decay=0.5)
    assert costs.predict("sql") is None
    costs.observe("sql", tokens=100, turns=2, env_seconds=1.0, seconds=4.0)
    assert costs.predict("sql") == {"tokens": 100.0, "turns": 2.0, "env_seconds": 1.0, "seconds": 4.0}
    costs.observe("sql", tokens=300, turns=6, env_seconds=0.0, seconds=2.0)
    assert costs.predict("sql") == pytest.approx({"tokens": 200.0, "turns": 4.0, "env_seconds": 0.5, "seconds": 3.0})
    costs.observe("sql", tokens=0, turns=0, env_seconds=0.5, seconds=1.0)
    assert costs.predict("sql") == pytest.approx({"tokens": 100.0, "turns": 2.0, "env_seconds": 0.5, "seconds": 2.0})
    assert costs.predict("other") is None


def test_costs_round_trip_through_json():
    costs = Costs(decay=0.7)
    costs.observe("a", tokens=900, turns=6, env_seconds=0.4, seconds=3.1)
    costs.observe("a", tokens=100, turns=1, env_seconds=0.0, seconds=0.5)
    costs.observe("b", tokens=50, turns=1, env_seconds=0.0, seconds=0.2)
    back = Costs(decay=0.7)
    back.load_state_dict(json.loads(json.dumps(costs.state_dict())))
    assert back.predict("a") == costs.predict("a") and back.predict("b") == costs.predict("b")
    # and they keep decaying alike
    for c in (costs, back):
        c.observe("a", tokens=500, turns=3, env_seconds=1.0, seconds=2.0)
    assert back.predict("a") == pytest.approx(costs.predict("a"))


# ---------------------------------------------------------------- utilisation.quantile


def test_quantile_hand_values():
    assert quantile([], 0.5) == 0.0
    assert quantile([7.0], 0.95) == 7.0
    xs = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4
    assert quantile(xs, 0.5) == pytest.approx(2.5)
    assert quantile(xs, 0.95) == pytest.approx(3.85)  # pos 2.85: 3 + 0.85 * (4 - 3)
    assert quantile(xs, 0.0) == 1.0 and quantile(xs, 1.0) == 4.0
    assert quantile([10.0, 0.0, 20.0], 0.25) == pytest.approx(5.0)
    assert xs == [4.0, 1.0, 3.0, 2.0]  # the caller's list is not sorted in place
