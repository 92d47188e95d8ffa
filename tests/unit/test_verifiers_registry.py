"""Verifier registry (lookup, error isolation, score checks, task score) and the built-in verifiers."""

from __future__ import annotations

import pytest

from posttrain.core.errors import ConfigError
from posttrain.domains.reasoning_gym.source import gold_answer, make_tasks
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers import VERIFIERS, get_verifier, register, run_verifiers, task_score
from posttrain.verifiers.basic import parse_number


def traj(text: str) -> Trajectory:
    return Trajectory(task_id="t/0", token_ids=(1, 2), loss_mask=(0, 1), logprobs=(0.0, -0.5), prompt_len=1, text=text)


def task(answer, verifiers=("exact",), metadata=None) -> Task:
    return Task(id="t/0", domain="t", prompt=({"role": "user", "content": "q"},), reference=answer,
                verifiers=tuple(verifiers), metadata=metadata or {})


@pytest.fixture
def temp_verifiers():
    """Registers test verifiers and removes them afterwards (the registry is global)."""
    added = []

    def add(name, fn):
        register(name)(fn)
        added.append(name)

    yield add
    for name in added:
        VERIFIERS.pop(name, None)


# ---------------------------------------------------------------- registry


def test_builtins_are_registered():
    for name in ("exact", "numeric", "reasoning_gym"):
        assert callable(get_verifier(name))


def test_unknown_verifier_is_config_error_with_suggestion():
    with pytest.raises(ConfigError) as e:
        get_verifier("numerc")
    msg = str(e.value)
    assert "unknown verifier 'numerc'" in msg
    assert "did you mean numeric" in msg
    assert "exact" in msg  # the known names are listed


def test_register_twice_with_another_function_fails(temp_verifiers):
    temp_verifiers("_t_dup", lambda t, tr: None)
    register("_t_dup")(VERIFIERS["_t_dup"])  # the same function again is fine
    with pytest.raises(ValueError, match="already registered"):
        register("_t_dup")(lambda t, tr: None)


def test_run_verifiers_isolates_failures_and_checks_range(temp_verifiers):
    def boom(t, tr):
        raise RuntimeError("checker crashed")

    temp_verifiers("_t_boom", boom)
    temp_verifiers("_t_high", lambda t, tr: Score(1.5, "_t_high"))
    temp_verifiers("_t_nan", lambda t, tr: Score(float("nan"), "_t_nan"))
    temp_verifiers("_t_none", lambda t, tr: None)
    temp_verifiers("_t_half", lambda t, tr: Score(0.5, "_t_half"))
    t = task("5", verifiers=("_t_boom", "exact", "_t_high", "_t_none", "_t_nan", "_t_half"))
    scores, errors = run_verifiers(t, traj("Answer: 5"))
    assert [(s.verifier, s.value) for s in scores] == [("exact", 1.0), ("_t_half", 0.5)]
    assert len(errors) == 3
    assert errors[0] == "_t_boom: RuntimeError: checker crashed"
    assert errors[1].startswith("_t_high: score 1.5 outside [0, 1]")
    assert errors[2].startswith("_t_nan: score nan outside")
    assert task_score(scores) == pytest.approx(0.75)


def test_a_verifier_returning_a_non_score_is_an_error_not_a_crash(temp_verifiers):
    temp_verifiers("_t_float", lambda t, tr: 1.0)
    temp_verifiers("_t_str", lambda t, tr: Score("1", "_t_str"))
    scores, errors = run_verifiers(task("5", verifiers=("_t_float", "_t_str", "exact")), traj("Answer: 5"))
    assert [s.verifier for s in scores] == ["exact"]
    assert errors[0].startswith("_t_float: returned float, expected Score or None")
    assert errors[1].startswith("_t_str: score '1' is not a number")


def test_run_verifiers_with_an_unknown_name_is_config_error():
    with pytest.raises(ConfigError, match="unknown verifier 'nope'"):
        run_verifiers(task("5", verifiers=("nope",)), traj("5"))


def test_task_score():
    assert task_score([]) is None
    assert task_score([Score(1.0, "a")]) == 1.0
    assert task_score([Score(1.0, "a"), Score(0.0, "b"), Score(0.5, "c")]) == pytest.approx(0.5)


def test_task_score_reads_the_tasks_verifier_thresholds():
    judged = [Score(0.6, "judge"), Score(1.0, "numeric")]
    all_rule = task("4", metadata={"combine": "all"})
    calibrated = task("4", metadata={"combine": "all", "verifier_thresholds": {"judge": 0.7}})
    lenient = task("4", metadata={"combine": "all", "verifier_thresholds": {"judge": 0.5}})
    assert task_score(judged, all_rule) == 1.0  # 0.6 >= 0.5 by default
    assert task_score(judged, calibrated) == 0.0  # 0.6 < 0.7
    assert task_score(judged, lenient) == 1.0
    # the default rule (mean): a thresholded verifier counts 0/1 at its threshold
    assert task_score(judged, task("4")) == pytest.approx(0.8)
    assert task_score(judged, task("4", metadata={"verifier_thresholds": {"judge": 0.7}})) == 0.5
    assert task_score(judged, task("4", metadata={"verifier_thresholds": {"judge": 0.5}})) == 1.0


# ---------------------------------------------------------------- exact


@pytest.mark.parametrize(
    "text, gold, ok",
    [
        ("blah\nAnswer: Paris", "Paris", True),
        ("Answer:   paris. ", "Paris", True),  # case, spaces, trailing period
        ("Answer: `New   York`", "new york", True),  # backticks, inner whitespace
        ("reasoning\nparis", "Paris", True),  # no Answer: line -> last non-empty line
        ("Answer: Lyon\nAnswer: Paris", "Paris", True),  # the last Answer: counts
        ("Answer: Paris\nAnswer: Lyon", "Paris", False),
        ("Answer: Parisian", "Paris", False),
        ("", "Paris", False),
        ("Answer: 42", 42, True),  # non-string gold compared as text
    ],
)
def test_exact(text, gold, ok):
    s = get_verifier("exact")(task(gold), traj(text))
    assert s.verifier == "exact" and s.value == float(ok)


def test_exact_reads_answer_from_dict_reference_and_skips_without_one():
    assert get_verifier("exact")(task({"answer": "B"}), traj("Answer: b")).value == 1.0
    assert get_verifier("exact")(task(None), traj("Answer: b")) is None
    assert get_verifier("exact")(task({"question": "q"}), traj("Answer: b")) is None


# ---------------------------------------------------------------- numeric


@pytest.mark.parametrize(
    "text, expected",
    [("12 apples and 7 pears", 7.0), ("total: 1,234,567", 1234567.0), ("-3.5", -3.5), ("x=.25", 0.25),
     ("1e3", 1000.0), ("it is 42.", 42.0), ("no digits here", None), ("", None)],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    "text, gold, ok",
    [
        ("so the total is\nAnswer: 1,234", "1234", True),
        ("Answer: 3 + 4 = 7", "7", True),  # last number of the answer line
        ("Answer: 7.0", "7", True),
        ("Answer: -12", "-12", True),
        ("Answer: 12", "-12", False),
        ("Answer: 8", "7", False),
        ("Answer: seven", "7", False),  # no number -> 0, not None
        ("Answer: 1e999", "7", False),  # inf is never right
        ("Answer: 1000000.5", "1000000", True),  # within the default rel_tol 1e-6
        ("Answer: 1000002", "1000000", False),
    ],
)
def test_numeric(text, gold, ok):
    s = get_verifier("numeric")(task(gold), traj(text))
    assert s is not None and s.verifier == "numeric" and s.value == float(ok)


def test_numeric_tolerance_from_metadata_and_no_gold():
    v = get_verifier("numeric")
    assert v(task("3.14159"), traj("Answer: 3.14")).value == 0.0
    assert v(task("3.14159", metadata={"rel_tol": 1e-3}), traj("Answer: 3.14")).value == 1.0
    assert v(task("#### 72"), traj("Answer: 72")).value == 1.0  # gold's last number
    assert v(task("no number"), traj("Answer: 72")) is None
    assert v(task(None), traj("Answer: 72")) is None


# ---------------------------------------------------------------- reasoning_gym


@pytest.mark.parametrize("domain", ["chain_sum", "leg_counting"])
def test_reasoning_gym_verifier_on_real_tasks(domain):
    t = make_tasks(domain, 1, seed=7)[0]
    assert t.verifiers == ("reasoning_gym",)
    gold = gold_answer(t)
    scores, errors = run_verifiers(t, traj(f"Let me think.\nAnswer: {gold}"))
    assert errors == [] and [(s.verifier, s.value) for s in scores] == [("reasoning_gym", 1.0)]
    wrong = str(int(gold) + 1)
    scores, errors = run_verifiers(t, traj(f"Answer: {wrong}"))
    assert errors == [] and scores[0].value == 0.0
    scores, _ = run_verifiers(t, traj("I have no idea"))
    assert scores[0].value == 0.0


def test_run_verifiers_many_uses_a_verifiers_group_form_and_isolates_its_failures():
    from posttrain.verifiers import run_verifiers_many
    from posttrain.core.types import Trajectory

    seen = []

    def one(task, traj):
        return Score(1.0, "grp")

    one.many = lambda task, trajs: seen.append(len(trajs)) or [Score(0.5, "grp") for _ in trajs]
    VERIFIERS["grp_test"] = one
    VERIFIERS["grp_short"] = lambda task, traj: None
    VERIFIERS["grp_short"].many = lambda task, trajs: [Score(1.0, "grp_short")]  # too few: an error for each
    trajs = [Trajectory(task_id="t", token_ids=[1], loss_mask=[0], logprobs=[0.0], prompt_len=1, text=str(i))
             for i in range(3)]
    got = run_verifiers_many(task("x", verifiers=("grp_test", "grp_short")), trajs)
    assert seen == [3]
    assert [[s.value for s in scores] for scores, _ in got] == [[0.5]] * 3
    assert all(len(errors) == 1 and "grp_short" in errors[0] and "1 scores for 3" in errors[0] for _, errors in got)
