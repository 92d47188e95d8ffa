"""Hand-computed cases for posttrain.verifiers.ensemble: combine rules, agreement, the tracker."""

import pytest

from posttrain.core.errors import ConfigError
from posttrain.core.types import Score
from posttrain.verifiers.ensemble import (RULES, DisagreementTracker, combine, disagreement_rate,
                                          pairwise_agreement)
from posttrain.verifiers.registry import task_score


def S(value, name):
    return Score(value, name)


THREE = [S(1.0, "a"), S(0.4, "b"), S(0.6, "c")]


def test_combine_rules_hand_computed():
    assert combine(THREE) == pytest.approx(2.0 / 3)
    assert combine(THREE) == task_score(THREE)  # "mean" is today's behaviour
    assert combine(THREE, "all") == 0.0  # b = 0.4 < 0.5
    assert combine(THREE, "any") == 1.0
    assert combine(THREE, "majority") == 1.0  # 2 of 3 pass
    assert combine(THREE, "weights", weights={"a": 1, "b": 2, "c": 1}) == pytest.approx((1 + 0.8 + 0.6) / 4)
    # a higher threshold: only a passes
    assert combine(THREE, "majority", threshold=0.7) == 0.0
    assert combine(THREE, "any", threshold=0.7) == 1.0
    assert combine(THREE, "all", threshold=0.3) == 1.0
    # value == threshold passes; a 1-1 tie fails majority
    assert combine([S(0.5, "a")], "all") == 1.0
    assert combine([S(1.0, "a"), S(0.0, "b")], "majority") == 0.0
    assert combine([S(1.0, "a"), S(0.0, "b")], "weights", weights={"a": 3, "b": 1}) == 0.75
    assert set(RULES) == {"mean", "all", "any", "majority", "weights"}
    for rule in RULES:
        assert combine([], rule, weights={}) is None


def test_combine_errors_name_the_problem():
    with pytest.raises(ConfigError, match="majority"):
        combine(THREE, "vote")
    with pytest.raises(ConfigError, match="'c'"):
        combine(THREE, "weights", weights={"a": 1, "b": 1})
    with pytest.raises(ConfigError, match="weights"):
        combine(THREE, "weights")
    with pytest.raises(ConfigError, match="sum to 0"):
        combine(THREE, "weights", weights={"a": 0, "b": 0, "c": 0})
    with pytest.raises(ConfigError, match=">= 0"):
        combine(THREE, "weights", weights={"a": -1, "b": 1, "c": 1})


SETS = [
    [S(1.0, "a"), S(1.0, "b"), S(0.0, "c")],  # a~b agree, a~c and b~c disagree
    [S(0.0, "a"), S(1.0, "b")],  # a~b disagree
    [S(0.9, "a"), S(0.7, "c")],  # a~c agree
    [S(0.2, "b")],  # alone: no comparison
]


def test_pairwise_agreement_and_disagreement_rate():
    assert pairwise_agreement(SETS) == {("a", "b"): (1, 2), ("a", "c"): (1, 2), ("b", "c"): (0, 1)}
    assert disagreement_rate(SETS) == pytest.approx(2 / 3)
    # at threshold 0.8 the third trajectory splits too (a 0.9 pass, c 0.7 fail)
    assert pairwise_agreement(SETS, threshold=0.8)[("a", "c")] == (0, 2)
    assert disagreement_rate(SETS, threshold=0.8) == 1.0
    assert disagreement_rate([[S(1.0, "a")], []]) is None
    assert pairwise_agreement([]) == {}


def _feed(tr, domain, n, n_split):
    for i in range(n):
        split = i % 2 == 1 and i // 2 < n_split  # disagreements at odd positions
        scores = [S(1.0, "numeric"), S(0.0 if split else 1.0, "math")]
        tr.add(domain, f"{domain}/{i}", f"Answer: {i} <completion of {domain}>", scores)


def test_tracker_metrics_warnings_and_reset():
    tr = DisagreementTracker(threshold_rate=0.2, min_count=5, max_examples=2)
    _feed(tr, "arith", 6, 3)  # 3/6 = 50% > 20%, 6 >= 5: warns, examples arith/1, arith/3 (not /5)
    _feed(tr, "code", 3, 1)  # 33% but only 3 trajectories: no warning
    _feed(tr, "logic", 10, 2)  # exactly 20%: not above the threshold
    tr.add("arith", "arith/99", "x", [S(0.0, "numeric")])  # one verdict: not counted
    m = tr.metrics()
    assert m["verify/disagreement/arith"] == 0.5
    assert m["verify/disagreement/code"] == pytest.approx(1 / 3)
    assert m["verify/disagreement/logic"] == 0.2
    assert m["verify/agreement/math~numeric"] == pytest.approx((3 + 2 + 8) / 19)
    assert len(m) == 4

    warns = tr.warnings()
    assert len(warns) == 1
    w = warns[0]
    assert "arith" in w and "50.0%" in w and "of 6" in w
    assert "arith/1 " in w and "arith/3 " in w and "arith/5" not in w
    assert "numeric=1" in w and "math=0" in w and "Answer: 1" in w
    assert "code" not in w and "logic" not in w

    tr.reset()
    assert tr.metrics() == {} and tr.warnings() == []
    _feed(tr, "code", 20, 10)
    assert len(tr.warnings()) == 1 and "'code'" in tr.warnings()[0]


def test_tracker_snippet_is_short_and_one_line():
    tr = DisagreementTracker(min_count=1)
    tr.add("d", "d/0", "line1\nline2 " + "x" * 10_000, [S(1.0, "a"), S(0.0, "b")])
    (w,) = tr.warnings()
    assert "\n" not in w and len(w) < 300


# ---------------------------------------------------------------- per-verifier thresholds


def test_a_per_verifier_threshold_changes_the_verdict():
    one = [S(0.6, "judge")]
    assert combine(one, "all") == 1.0  # 0.6 >= 0.5 (the default)
    assert combine(one, "all", thresholds={"judge": 0.7}) == 0.0  # 0.6 < 0.7 fails
    assert combine(one, "all", thresholds={"judge": 0.6}) == 1.0  # equal passes
    assert combine(one, "all", thresholds={"other": 0.7}) == 1.0  # another verifier's threshold
    # THREE = a 1.0, b 0.4, c 0.6; b's threshold 0.3 makes all pass, c's 0.7 leaves only a
    assert combine(THREE, "all", thresholds={"b": 0.3}) == 1.0
    assert combine(THREE, "all") == 0.0
    assert combine(THREE, "majority", thresholds={"c": 0.7}) == 0.0  # 1 of 3 pass
    assert combine(THREE, "majority", thresholds={"b": 0.3, "c": 0.7}) == 1.0  # a, b pass: 2 of 3
    assert combine(THREE, "any", thresholds={"a": 1.0, "b": 0.9, "c": 0.9}) == 1.0  # a = 1.0 >= 1.0
    assert combine([S(0.99, "a")], "any", thresholds={"a": 1.0}) == 0.0
    # per-verifier thresholds override the common one for the verifiers they name only
    assert combine(THREE, "all", threshold=0.7, thresholds={"b": 0.3, "c": 0.6}) == 1.0
    assert combine(THREE, "all", threshold=0.7, thresholds={"b": 0.3}) == 0.0  # c 0.6 < 0.7


def test_thresholds_binarise_values_under_mean_and_weights():
    # c 0.6 at threshold 0.7 counts 0.0, b and a keep their raw values: (1.0 + 0.4 + 0.0) / 3
    assert combine(THREE, "mean", thresholds={"c": 0.7}) == pytest.approx(1.4 / 3)
    # c at threshold 0.5 counts 1.0: (1.0 + 0.4 + 1.0) / 3
    assert combine(THREE, "mean", thresholds={"c": 0.5}) == pytest.approx(2.4 / 3)
    assert combine(THREE, "mean", thresholds={}) == pytest.approx(2.0 / 3)  # none set: raw mean
    w = {"a": 1, "b": 2, "c": 1}
    # b 0.4 at 0.3 -> 1.0 (weight 2), c 0.6 at 0.7 -> 0.0: (1 + 2 + 0) / 4
    assert combine(THREE, "weights", weights=w, thresholds={"b": 0.3, "c": 0.7}) == pytest.approx(0.75)
    assert task_score(THREE) == pytest.approx(2.0 / 3)  # no task: no thresholds


def test_agreement_and_tracker_use_per_verifier_thresholds():
    # SETS[2] = a 0.9, c 0.7: c's threshold 0.8 splits it, as the common 0.8 did above
    assert pairwise_agreement(SETS, thresholds={"c": 0.8})[("a", "c")] == (0, 2)
    assert disagreement_rate(SETS, thresholds={"c": 0.8}) == 1.0
    # a's threshold 0.1 makes SETS[1] (a 0.0) still fail: unchanged, a~b disagree there
    assert pairwise_agreement(SETS, thresholds={"a": 0.1})[("a", "b")] == (1, 2)
    tr = DisagreementTracker(min_count=1)
    tr.add("d", "d/0", "x", [S(0.6, "judge"), S(1.0, "numeric")])  # both pass at 0.5: agree
    tr.add("d", "d/1", "y", [S(0.6, "judge"), S(1.0, "numeric")], thresholds={"judge": 0.7})  # split
    assert tr.metrics() == {"verify/disagreement/d": 0.5, "verify/agreement/judge~numeric": 0.5}
    assert "d/1 " in tr.warnings()[0] and "d/0 " not in tr.warnings()[0]
