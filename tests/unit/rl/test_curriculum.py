"""Curriculum levels (scheduler/curriculum.py) and sources switching level (tasks/mixture.py set_options):
reasoning-gym's real basic_arithmetic curriculum, the pass-rate window, bounds, state round trips,
training at a new level kept away from held-out eval questions, generated (sql) and terminal levels,
and the one-line config errors."""

from __future__ import annotations

import json

import pytest

from posttrain.config.sched import CurriculumConfig
from posttrain.core.errors import ConfigError
from posttrain.rl.curriculum import make_curriculum
from posttrain.domains.reasoning_gym import source as rg
from posttrain.domains.reasoning_gym.mixture import GymSource
from posttrain.tasks.mixture import GeneratedSource, Mixture, registry_source
from posttrain.tasks.registry import make_source_tasks

ARITH = "basic_arithmetic"
WHERE = "tasks[0].curriculum"


def arith(**cfg):
    return make_curriculum(ARITH, CurriculumConfig(**cfg), {}, WHERE)


# ---------------------------------------------------------------- levels and options


def test_basic_arithmetic_levels_follow_its_reasoning_gym_curriculum():
    # reasoning-gym: num_terms levels [2, 3, 4, 5, 6] (min_terms/max_terms), num_digits [1, 2, 3, 4]
    # (min_digits/max_digits); a range spans its first level up to the current one
    curr = make_curriculum(ARITH, CurriculumConfig(), {"allow_negation": False, "max_terms": 9}, WHERE)
    assert curr.levels == 5 and curr.level == 1
    assert curr.options() == {"allow_negation": False, "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    assert curr.options_at(2) == {"allow_negation": False, "min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
    # past num_digits' last level it stays there (index min(L-1, last))
    assert curr.options_at(5) == {"allow_negation": False, "min_terms": 2, "max_terms": 6, "min_digits": 1, "max_digits": 4}
    only_terms = make_curriculum(ARITH, CurriculumConfig(attributes=["num_terms"]), {"max_digits": 2}, WHERE)
    assert only_terms.levels == 5
    assert only_terms.options_at(3) == {"max_digits": 2, "min_terms": 2, "max_terms": 4}
    assert make_curriculum(ARITH, CurriculumConfig(attributes=["num_digits"]), {}, WHERE).levels == 4


# ---------------------------------------------------------------- observe


def test_observe_raises_after_a_full_window_of_high_pass_rates_then_waits_again():
    curr = arith(window=3, raise_at=0.8, lower_at=0.2)
    assert [curr.observe(r) for r in (0.9, 0.9)] == [None, None] and curr.level == 1  # window not full
    assert curr.observe(0.9) == 2 and curr.level == 2
    assert curr.state_dict()["window"] == []  # cleared: the next move waits another window
    assert [curr.observe(r) for r in (1.0, 1.0)] == [None, None]
    assert curr.observe(0.8) == 3  # mean exactly raise_at moves


def test_observe_slides_its_window_and_lowers_at_low_pass_rates():
    curr = arith(start=3, window=3, raise_at=0.8, lower_at=0.2)
    # means 0.6, 0.6, 0.6 (0.9, 0.9, 0.0 sliding out) stay; then 0.9, 0.9, 0.9 raises
    assert [curr.observe(r) for r in (0.9, 0.9, 0.0, 0.9, 0.9)] == [None] * 5
    assert curr.observe(0.9) == 4
    assert curr.observe(None) is None and curr.state_dict()["window"] == []  # no groups: nothing recorded
    assert [curr.observe(r) for r in (0.1, 0.3, 0.2)] == [None, None, 3]  # mean 0.2 <= lower_at
    assert [curr.observe(r) for r in (0.0, 0.0, 0.0)] == [None, None, 2]
    with pytest.raises(ValueError, match="pass rate must be a number in"):
        curr.observe(1.5)


def test_observe_stays_within_min_and_max_level():
    curr = arith(start=3, min_level=2, max_level=3, window=2)
    assert [curr.observe(1.0) for _ in range(6)] == [None] * 6 and curr.level == 3  # at max_level
    assert curr.observe(0.0) is None and curr.observe(0.0) == 2
    assert [curr.observe(0.0) for _ in range(6)] == [None] * 6 and curr.level == 2  # at min_level
    top = arith(start=5, window=1)  # max_level None: the domain's highest (5)
    assert top.observe(1.0) is None and top.level == 5


def test_state_round_trips_through_json_and_resumes_the_same_moves():
    a = arith(window=3)
    for r in (0.9, 0.9, 0.9, 0.85):
        a.observe(r)
    state = json.loads(json.dumps(a.state_dict()))
    assert state == {"level": 2, "window": [0.85]}
    b = arith(window=3)
    b.load_state_dict(state)
    assert (b.level, b.options()) == (2, a.options())
    rates = (0.9, 0.95, 0.1, 0.0, 0.0, 0.1)
    assert [b.observe(r) for r in rates] == [a.observe(r) for r in rates] == [None, 3, None, None, 2, None]
    with pytest.raises(ConfigError, match=r"tasks\[0\]\.curriculum: the saved level 5 .* outside min_level..max_level = 1..3"):
        arith(max_level=3).load_state_dict({"level": 5, "window": []})


# ---------------------------------------------------------------- sources at a new level


def n_terms(task) -> int:
    return task.reference["metadata"]["num_terms"]


def test_gym_source_switched_to_level_2_draws_that_config_and_no_held_out_question():
    curr = arith()
    src = GymSource(ARITH, {}, task_seed=500_000, n_eval=4)
    eval_before = [t.id for t in src.eval_tasks()]
    src.set_options(curr.options_at(1))
    easy = src.take(32)
    assert {n_terms(t) for t in easy} == {2}
    curr.level = 2
    src.set_options(curr.options())
    cursor = src.cursor
    hard = src.take(96)
    key = rg._config_key(ARITH, curr.options())
    assert all(t.metadata["config"] == key for t in hard)
    assert {n_terms(t) for t in hard} == {2, 3}  # level 2: two or three terms, some of them three
    assert all(t.reference["metadata"]["num_digits"] <= 2 for t in hard)
    held = {t.reference["question"] for t in rg.make_tasks(ARITH, src.holdout, rg.EVAL_SEED_START, config=curr.options())}
    held |= {t.reference["question"] for t in rg.make_tasks(ARITH, src.holdout, rg.EVAL_SEED_START)}
    assert not any(t.reference["question"] in held for t in hard)
    raw = rg.make_tasks(ARITH, src.cursor - cursor, 500_000 + cursor, config=curr.options())
    assert len(raw) > len(hard) and sum(t.reference["question"] in held for t in raw) == len(raw) - len(hard)
    # eval stays at the configured options, and the state restores the level's options exactly
    assert [t.id for t in src.eval_tasks()] == eval_before
    state = json.loads(json.dumps(src.state_dict()))
    assert state == {"cursor": src.cursor, "options": curr.options()}
    again = GymSource(ARITH, {}, task_seed=500_000, n_eval=4)
    again.load_state_dict(state)
    assert [t.id for t in again.take(8)] == [t.id for t in src.take(8)]
    # back at the configured options, the state is the old format; an old state loads as before
    src.set_options({})
    assert src.state_dict() == {"cursor": src.cursor}
    again.load_state_dict({"cursor": 3})
    assert again.train_options is None and [t.id for t in again.take(1)] == [f"{ARITH}/500003"]


def test_sql_level_switch_gives_tasks_of_the_new_level():
    curr = make_curriculum("sql", CurriculumConfig(window=1), {"rows": 20}, "tasks[1].curriculum")
    assert curr.levels == 5 and curr.options() == {"rows": 20, "level": 1}
    src = GeneratedSource("sql", {"rows": 20}, task_seed=500_000, n_eval=2)
    assert curr.observe(0.9) == 2
    mix = Mixture([src], [1.0], seed=0)
    mix.set_options("sql", curr.options())
    tasks = mix.sample(3, step=0)
    assert [t.metadata["level"] for t in tasks] == [2, 2, 2]
    assert all(t.reference["rows"] == 20 for t in tasks)
    assert [t.metadata["level"] for t in src.eval_tasks()] == [1, 1]  # eval at the configured level
    state = mix.state_dict()
    assert state == {"sql": {"cursor": 3, "options": {"rows": 20, "level": 2}}}
    fresh = GeneratedSource("sql", {"rows": 20}, task_seed=500_000, n_eval=2)
    fresh.load_state_dict(state["sql"])
    assert [t.id for t in fresh.take(2)] == [t.id for t in src.take(2)] == ["sql/L2/500003", "sql/L2/500004"]
    fresh.load_state_dict({"cursor": 0})  # an old checkpoint: the configured options
    assert fresh.take(1)[0].id == "sql/L1/500000"


def test_terminal_levels_are_its_difficulties():
    curr = make_curriculum("terminal", CurriculumConfig(start=2), {}, "tasks[3].curriculum")
    assert (curr.levels, curr.options()) == (3, {"level": 2})
    every = make_source_tasks("terminal", None, 0, {})
    src = registry_source("terminal", {}, task_seed=0, seed=0, n_eval=2)
    held = {t.id for t in src.eval_tasks()}
    src.set_options(curr.options_at(3))
    hard = src.take(10)
    expected = {t.id for t in every if t.metadata["difficulty"] == "hard"} - held
    assert expected and {t.id for t in hard} == expected  # every hard task, none held out
    assert all(t.metadata["level"] == 3 for t in hard)
    assert src.state_dict() == {"cursor": 10, "options": {"level": 3}}
    assert {t.id for t in src.eval_tasks()} == held
    with pytest.raises(ConfigError, match="terminal: option level must be an integer in 1..3"):
        make_source_tasks("terminal", None, 0, {"level": 4})


# ---------------------------------------------------------------- config errors


def test_an_unknown_attribute_is_one_line_naming_where_and_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        make_curriculum(ARITH, CurriculumConfig(attributes=["num_termz"]), {}, "tasks[2].curriculum")
    assert str(e.value) == ("tasks[2].curriculum.attributes: unknown attribute 'num_termz' for 'basic_arithmetic' "
                            "(valid: num_digits, num_terms)")


@pytest.mark.parametrize("domain, cfg, match", [
    ("gsm_symbolic", {}, r"^tasks\[2\]\.curriculum: reasoning-gym domain 'gsm_symbolic' has no curriculum"),
    ("humaneval", {}, r"^tasks\[2\]\.curriculum: domain 'humaneval' has no difficulty levels"),
    ("sql", {"max_level": 6}, r"^tasks\[2\]\.curriculum\.max_level=6: domain 'sql' has 5 levels$"),
    ("sql", {"attributes": ["level"]}, r"^tasks\[2\]\.curriculum\.attributes: domain 'sql' moves only its `level`"),
])
def test_domains_without_those_levels_are_config_errors(domain, cfg, match):
    with pytest.raises(ConfigError, match=match) as e:
        make_curriculum(domain, CurriculumConfig(**cfg), {}, "tasks[2].curriculum")
    assert "\n" not in str(e.value)


def test_levels_that_do_not_build_cap_max_level_or_fail_at_build_time():
    # simple_equations moves min_terms alone ([2, 3, 4, 5]): level 3's 4 is above the configured max_terms=3
    capped = make_curriculum("simple_equations", CurriculumConfig(attributes=["min_terms"]), {"max_terms": 3}, WHERE)
    assert (capped.levels, capped.max_level, capped.capped_at) == (4, 2, 3)
    assert capped.options_at(2) == {"max_terms": 3, "min_terms": 3}
    assert [capped.observe(1.0) for _ in range(9)].count(2) == 1 and capped.level == 2  # never to level 3
    with pytest.raises(ConfigError, match=r"^tasks\[0\]\.curriculum: level 3 does not build \(lower max_level\): "
                                          r".*max_terms must be >= min_terms"):
        make_curriculum("simple_equations", CurriculumConfig(attributes=["min_terms"], max_level=4), {"max_terms": 3}, WHERE)
    # reasoning-gym's own caesar_cipher curriculum asks for rotation 50 at level 3 (its dataset allows 1..25)
    caesar = make_curriculum("caesar_cipher", CurriculumConfig(), {}, WHERE)
    assert (caesar.levels, caesar.max_level, caesar.capped_at) == (4, 2, 3)
    # ... and knight_swap's level 1 has 4 nodes (its dataset wants 6): a start that does not build fails
    with pytest.raises(ConfigError, match=r"^tasks\[0\]\.curriculum: level 1 does not build: .*min_nodes must be >= 6"):
        make_curriculum("knight_swap", CurriculumConfig(), {}, WHERE)


def test_a_terminal_dir_without_harder_tasks_caps_its_levels(tmp_path):
    from tests.unit.domains.terminal.test_terminal_task import TOML, write_task

    write_task(tmp_path, name="alpha", toml=TOML.replace('"medium"', '"easy"'))
    write_task(tmp_path, name="beta", toml=TOML.replace('"medium"', '"easy"'))
    curr = make_curriculum("terminal", CurriculumConfig(), {"dir": str(tmp_path)}, WHERE)
    assert (curr.max_level, curr.capped_at, curr.options()) == (1, 2, {"dir": str(tmp_path), "level": 1})
    with pytest.raises(ConfigError, match=r"level 2 does not build \(lower max_level\): terminal: no task of "
                                          r"difficulty medium \(level 2\) in"):
        make_curriculum("terminal", CurriculumConfig(max_level=3), {"dir": str(tmp_path)}, WHERE)
    write_task(tmp_path, name="gamma")  # medium, and the last by name: the one eval holds out
    src = registry_source("terminal", {"dir": str(tmp_path)}, task_seed=0, seed=0, n_eval=1)
    with pytest.raises(ConfigError, match="no training tasks left with options"):
        src.set_options({"dir": str(tmp_path), "level": 2})
