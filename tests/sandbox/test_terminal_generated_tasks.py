"""Generated terminal tasks (domains/terminal/generate/) pass the real `posttrain tasks validate`: through the
terminal env in the bubblewrap sandbox the untouched workspace fails and the oracle passes, for every family
and level; and an oracle with one step left out fails (the tests check the work, not a marker)."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.domains.terminal.generate import FAMILIES, generate, write_task
from posttrain.domains.terminal.validate import validate_dir
from posttrain.tasks.validate import validate_generated


def test_every_family_and_level_validates(tmp_path):
    for family in FAMILIES:
        for level in (1, 2, 3):
            write_task(generate(family, level, 1000 + level), tmp_path)
    results = asyncio.run(validate_dir(tmp_path, jobs=2))
    assert len(results) == 12
    bad = [f"{r.task}: {r.reason}" for r in results if not r.ok]
    assert not bad, bad
    assert all(r.initial < 1.0 and r.oracle == 1.0 for r in results)


def test_an_oracle_without_one_of_its_steps_fails(tmp_path):
    names = []
    for i, family in enumerate(sorted(FAMILIES)):
        gen = generate(family, 2 + i % 2, 77)
        drop = i % len(gen.steps)  # a different step from family to family
        steps = gen.steps[:drop] + gen.steps[drop + 1:]
        names.append(write_task(gen, tmp_path, steps=steps, name=f"{gen.name}-without-{drop + 1}").name)
    results = asyncio.run(validate_dir(tmp_path, jobs=2))
    assert [r.task for r in results] == sorted(names)
    for r in results:
        assert not r.ok and r.oracle is not None and r.oracle < 1.0, (r.task, r.reason)


@pytest.mark.slow
def test_forty_held_out_tasks_validate_through_the_source(tmp_path, monkeypatch):
    """`posttrain tasks validate --source terminal_gen`: the test split's tasks, the oracle as shell calls (one a step)."""
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    results = asyncio.run(validate_generated("terminal_gen", n=14, levels=[1, 2, 3], split="test", jobs=2))
    assert len(results) == 42
    bad = [f"{r.task}: {r.reason}" for r in results if not r.ok]
    assert not bad, bad
