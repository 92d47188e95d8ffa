"""Generated environment domains (tasks/generated.py): options, held-out seeds, levels, the mixture's
cursor, eval's test split, and `validate_generated` through a real env (the scripted test_calc env)."""

from __future__ import annotations

import asyncio

import pytest

import tests.unit.envs.scripted  # noqa: F401  (registers the test_calc env)
from posttrain.core.errors import ConfigError
from posttrain.eval.sources import load_spec
from posttrain.tasks.generated import HELD_OUT_SEED, GENERATORS, OracleTurn, calls, register_generated
from posttrain.tasks.mixture import GeneratedSource
from posttrain.tasks.registry import SOURCES, make_source_tasks
from posttrain.tasks.validate import validate_generated
from posttrain.core.types import Limits, Task


def add_oracle(task):
    a, b = task.reference["a"], task.reference["b"]
    return [OracleTurn(calls(("add", {"a": a, "b": b}))), OracleTurn(content=str(a + b))]


def no_oracle(task):  # never calls add: the test_calc env scores it 0
    return [OracleTurn(content="no idea")]


def _task(name, seed, level, options):
    a, b = seed % 97, level * options["scale"]
    return Task(id=f"{name}/L{level}/{seed}", domain=name, prompt=({"role": "user", "content": f"{a}+{b}?"},),
                reference={"seed": seed, "level": level, "a": a, "b": b}, verifiers=("env_score",),
                env="test_calc", limits=Limits(max_turns=3), metadata={"level": level, "seed": seed})


if "test_gen_add" not in GENERATORS:
    register_generated("test_gen_add", levels=3, oracle=add_oracle, description="tests",
                       options={"scale": (int, 10)})(lambda s, lv, o: _task("test_gen_add", s, lv, o))
    register_generated("test_gen_bad", levels=1, oracle=no_oracle, description="tests")(
        lambda s, lv, o: _task("test_gen_bad", s, lv, {"scale": 1}))


def test_options_are_checked_in_one_line():
    for options, words in (({"level": 4}, "level must be an integer in 1..3"),
                           ({"level": [1, 0]}, "level must be"), ({"level": True}, "level must be"),
                           ({"scale": "x"}, "option scale must be int"), ({"rows": 3}, "unknown option 'rows'"),
                           ({"split": "dev"}, "split must be 'train' or 'test'")):
        with pytest.raises(ConfigError) as e:
            make_source_tasks("test_gen_add", 2, 0, options)
        assert words in str(e.value) and "test_gen_add" in str(e.value) and "\n" not in str(e.value)
    assert SOURCES["test_gen_add"].levels == 3


def test_train_and_test_seeds_never_meet_and_levels_cycle_by_seed():
    train = make_source_tasks("test_gen_add", 6, 5, {"level": [1, 3]})
    test = make_source_tasks("test_gen_add", 6, 5, {"level": [1, 3], "split": "test"})
    assert [t.metadata["seed"] for t in train] == list(range(5, 11))
    assert [t.metadata["seed"] for t in test] == list(range(HELD_OUT_SEED + 5, HELD_OUT_SEED + 11))
    assert [t.metadata["level"] for t in train] == [[1, 3][s % 2] for s in range(5, 11)]
    assert train[0].id == "test_gen_add/L3/5" and train[0].reference["b"] == 30
    # the same seed gives the same task whichever call makes it
    assert make_source_tasks("test_gen_add", 1, 7, {"level": [1, 3]})[0] == train[2]
    with pytest.raises(ConfigError, match="reach the held-out seeds"):
        make_source_tasks("test_gen_add", 3, HELD_OUT_SEED - 2, {})


def test_mixture_cursor_resumes_and_eval_takes_the_test_split():
    src = GeneratedSource("test_gen_add", {"level": 2}, task_seed=500, n_eval=3)
    first = src.take(4) + src.take(2)
    assert [t.metadata["seed"] for t in first] == list(range(500, 506))
    saved = src.state_dict()
    nxt = src.take(3)
    again = GeneratedSource("test_gen_add", {"level": 2}, task_seed=500, n_eval=3)
    again.load_state_dict(saved)
    assert again.take(3) == nxt
    held = src.eval_tasks()
    assert [t.metadata["seed"] for t in held] == [HELD_OUT_SEED, HELD_OUT_SEED + 1, HELD_OUT_SEED + 2]
    # `posttrain eval --tasks test_gen_add:3` scores the same held-out tasks the in-loop eval does
    spec = [{"name": "test_gen_add", "n": 3, "options": {"level": 2}}]
    assert load_spec(spec, default_n=10, seed=1_000_000, task_options=None) == held
    with pytest.raises(ConfigError, match="level"):
        GeneratedSource("test_gen_add", {"level": 9}, task_seed=0, n_eval=0)


def test_validate_generated_runs_each_oracle_through_its_env():
    good = asyncio.run(validate_generated("test_gen_add", n=2))
    assert [r.task for r in good] == [f"test_gen_add/L{lv}/{HELD_OUT_SEED + i}" for lv in (1, 2, 3) for i in (0, 1)]
    assert all(r.ok and r.initial == 0.0 and r.oracle == 1.0 for r in good), good
    bad = asyncio.run(validate_generated("test_gen_bad", n=1))
    assert len(bad) == 1 and not bad[0].ok and "the oracle scores 0.00" in bad[0].reason
    with pytest.raises(ConfigError, match="not a generated domain"):
        asyncio.run(validate_generated("humaneval"))
