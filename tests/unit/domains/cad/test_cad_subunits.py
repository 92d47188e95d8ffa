"""cad sub-units (option unit: step): one step of a part, the earlier steps given; its oracle, step-k-only reward, ids, limits."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from posttrain.envs.env import Resources
from posttrain.domains.cad.env import CadEnv
from posttrain.domains.cad.checks import expect, own_checks, run_checks, unit_value
from posttrain.domains.cad.inspect import measure_solid
from posttrain.domains.cad.levels import build, sample
from posttrain.domains.cad.spec import gold, probes_upto, script
from posttrain.core.errors import ConfigError
from posttrain.domains.cad.source import subunit_step
from posttrain.tasks.generated import HELD_OUT_SEED
from posttrain.tasks.registry import make_source_tasks
from posttrain.tasks.validate import _generated_task
from tests.unit.domains.cad.cad_helpers import act, episode, task

STEPS = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6}


def sub(level: int, k: int, split: str = "train", **options):
    """The first sub-unit task of `level` (split seeds from 0) that covers step k."""
    base = HELD_OUT_SEED if split == "test" else 0
    seed = next(s for s in range(200) if subunit_step(base + s, level, STEPS[level]) == k)
    t = task(level, seed=seed, split=split, unit="step", **options)
    assert t.reference["step"] == k
    return t


def part_of(t):
    return build(t.reference["level"], t.reference["params"], t.reference["fn"])


def _score(t, code):
    return CadEnv(Resources()).score(t, {"script": code, "confirmed": 0})[0]


def failing(score) -> set[str]:
    return {name for name, ok in score.details["checks"].items() if not ok}


# every level; the first step, a middle one and the last (at level 5: the washer, 2 bodies, the final checks)
CASES = [(1, 1, "train"), (1, 1, "test"), (2, 1, "test"), (2, 2, "train"), (2, 2, "test"), (3, 2, "train"),
         (3, 3, "test"), (4, 1, "train"), (4, 2, "test"), (4, 3, "train"), (4, 4, "test"), (5, 2, "test"),
         (5, 6, "train")]


@pytest.mark.parametrize("level,k,split", CASES)
def test_the_validator_passes_the_oracle_on_subunits(level, k, split):
    t = sub(level, k, split, fn=16 if level == 5 else 32)  # level 5's renders: ~3x faster at $fn 16
    result = asyncio.run(_generated_task(t, Resources()))  # what `posttrain tasks validate --source cad` runs
    assert result.ok and result.initial == 0.0 and result.oracle == 1.0, result.reason
    final = CadEnv(Resources()).score(t, {"script": script(part_of(t), k), "confirmed": k})[0]
    assert final.details["unit"] == "step" and final.details["step"] == k and final.details["steps"] == STEPS[level]
    # step k's checks are those of the part after step k: the final ones only at the last step
    assert len(final.details["checks"]) == 8 + sum(len(s.probes) for s in part_of(t).steps[:k])


def test_a_subunit_starts_with_the_earlier_steps_given_and_ends_at_its_step():
    t = sub(3, 2)
    part = part_of(t)
    text = t.prompt[0]["content"]
    assert "step 2 of 3 only" in text and script(part, 1) in text and part.steps[0].text in text
    assert part.steps[1].text in text and part.steps[2].text not in text
    given = script(part, 1)
    boss = script(part, 2).split("\n")[3]  # the boss's line, after the plate's
    steps, state = episode(
        t, act(("render", {}), ("confirm_step", {"step": 1}), ("confirm_step", {"step": 3})),
        act(("confirm_step", {"step": 2})),
        act(("edit_script", {"old": "cube([", "new": f"{boss.strip()}\n  cube(["}), ("render", {}),
            ("confirm_step", {"step": 2}), ("confirm_step", {"step": 2})))
    r, one, three = steps[0].observations
    assert not r.error and "already confirmed" in one.content and "covers step 2 of 3 only" in three.content
    partial = steps[1].observations[0]  # the given part is rendered: step 2's boss is missing
    assert not partial.error and "not confirmed" in partial.content and "boss" in partial.content
    edited, _, done, again = steps[2].observations
    assert not edited.error and "Step 2 confirmed" in done.content and "step 2 of 3 only" in done.content
    assert part.steps[2].text not in done.content  # the next step is not this task's
    assert "covers step 2 only" in again.content and again.error == "tool_failed"
    assert state["confirmed"] == 2 and state["script"] != given
    assert _score(t, state["script"]).value == 1.0


def test_own_checks_are_step_ks_probes_and_the_global_checks_it_changes():
    """On the gold solids: the part after step k-1 scores 0 (nothing broken), after step k 1, at every step."""
    for level, fn, seeds in ((2, 32, 20), (3, 32, 20), (4, 32, 20), (5, 16, 8)):
        for seed in range(seeds):
            part = build(level, sample(seed, level), fn)
            assert own_checks(part, 1) == tuple(expect(part, 1).names)  # nothing given: every check counts
            for k in range(2, len(part.steps) + 1):
                e, own = expect(part, k), own_checks(part, k)
                mine = {p.name for p in part.steps[k - 1].probes}
                earlier = {p.name for p in probes_upto(part, k - 1)}
                assert mine <= set(own) and not earlier & set(own) and "watertight" not in own
                before = unit_value(part, k, run_checks(e, measure_solid(gold(part, k - 1))))
                after = unit_value(part, k, run_checks(e, measure_solid(gold(part, k))))
                assert (before.value, before.broken) == (0.0, ()), (level, seed, k, before)
                assert (after.value, after.broken) == (1.0, ()), (level, seed, k, after)
    # what step k changes: the wall raises size_z and the volume; the washer adds a body and a hole
    bracket, flange = build(4, sample(0, 4), 32), build(5, sample(0, 5), 16)
    assert {"size_z", "volume"} <= set(own_checks(bracket, 2)) and "size_x" not in own_checks(bracket, 2)
    assert {"bodies", "holes", "size_x"} <= set(own_checks(flange, 6)) and "hub" not in own_checks(flange, 6)


@pytest.mark.parametrize("level,k,split", [(2, 2, "train"), (2, 2, "test"), (3, 2, "test"), (3, 3, "train"),
                                           (4, 2, "train"), (4, 3, "test"), (4, 4, "train"), (5, 3, "test"),
                                           (5, 5, "train"), (5, 6, "test")])
def test_the_given_script_rendered_unchanged_scores_zero(level, k, split):
    t = sub(level, k, split, fn=16 if level == 5 else 32)
    lazy = _score(t, script(part_of(t), k - 1))
    assert lazy.value == 0.0 and lazy.details["broken"] == [] and lazy.details["counted"]
    assert set(lazy.details["counted"]) == failing(lazy)  # every check it fails is step k's, every other passes


def test_breaking_given_work_scores_zero_and_half_a_step_scores_between():
    t = sub(3, 3)
    part = part_of(t)
    good = script(part, 3)
    assert _score(t, good).value == 1.0
    boss = good.split("\n")[4]  # steps 1..3 as difference(union(plate, boss), holes): the boss's line
    assert "cylinder" in boss and "translate" in boss
    no_boss = _score(t, good.replace(boss + "\n", ""))  # step 3 done, the given boss edited away
    assert no_boss.value == 0.0 and {"boss", "size_z", "volume"} <= set(no_boss.details["broken"])
    assert all(no_boss.details["checks"][f"hole_{i + 1}"] for i in range(len(part.steps[2].probes)))
    assert _score(t, "cube(1);").value == 0 and _score(t, "sphere(").value == 0

    w = sub(4, 3)
    wp = part_of(w)
    wall = script(wp, 2).split("\n")[3]  # base then wall
    only_mine = _score(w, script(wp, 3).replace(wall + "\n", ""))  # the holes drilled, the wall gone
    assert only_mine.value == 0.0 and "wall" in only_mine.details["broken"]
    # half the hole pattern: the first hole drilled, the others not
    cuts = [line for line in script(wp, 3).split("\n") if line.startswith("  translate")]  # the cuts: step 3's
    assert len(cuts) == len(wp.steps[2].probes) >= 2 and all("cylinder" in c for c in cuts)
    half = _score(w, script(wp, 3).replace("\n".join(cuts[1:]) + "\n", ""))
    assert 0 < half.value < 1 and half.details["broken"] == []
    assert half.details["checks"]["hole_1"] and not half.details["checks"]["hole_2"]
    assert half.value == sum(half.details["checks"][n] for n in half.details["counted"]) / len(half.details["counted"])


def test_ids_metadata_and_references_tell_subunits_apart():
    whole = make_source_tasks("cad", 12, 0, {"level": [4, 5]})
    subs = make_source_tasks("cad", 12, 0, {"level": [4, 5], "unit": "step"})
    for w, s in zip(whole, subs):
        k = s.reference["step"]
        assert s.id == f"{w.id}/s{k}" and w.id == f"cad/L{w.metadata['level']}/{w.metadata['seed']}"
        assert s.metadata["unit"] == "step" and s.metadata["step"] == k and s.metadata["steps"] == w.metadata["steps"]
        assert w.metadata["unit"] == "whole" and "step" not in w.metadata and "step" not in w.reference
        assert {**w.reference, "step": k} == s.reference and len(json.dumps(s.reference)) < 400
        assert 1 <= k <= s.metadata["steps"]
    assert len({s.id for s in subs}) == len(subs)
    again = make_source_tasks("cad", 12, 0, {"level": [4, 5], "unit": "step"})
    assert [(s.id, s.prompt, s.limits) for s in again] == [(s.id, s.prompt, s.limits) for s in subs]
    # the step is drawn per (seed, level), not from the level cycle: every step comes up at both levels
    many = make_source_tasks("cad", 120, 0, {"level": [4, 5], "unit": "step"})
    for level in (4, 5):
        assert {s.reference["step"] for s in many if s.metadata["level"] == level} == set(range(1, STEPS[level] + 1))


def test_subunit_limits_are_those_of_one_step():
    for level in (1, 2, 3, 4, 5):
        whole = make_source_tasks("cad", 30, 0, {"level": level})
        subs = make_source_tasks("cad", 30, 0, {"level": level, "unit": "step"})
        for w, s in zip(whole, subs):
            a, b = s.limits, w.limits
            assert a.max_turns < b.max_turns and a.seconds < b.seconds and a.max_new_tokens <= b.max_new_tokens
            assert a.max_turns * a.max_new_tokens < b.max_turns * b.max_new_tokens
            assert a.tool_timeout == b.tool_timeout
            if s.reference["step"] == 1:  # one primitive's script: a shorter turn than the whole part's
                assert a.max_new_tokens < b.max_new_tokens
        # a turn is sized by the script after step k: shorter on average at every level
        assert sum(s.limits.max_new_tokens for s in subs) < sum(w.limits.max_new_tokens for w in whole)
        assert any(s.reference["step"] == 1 for s in subs)


@pytest.mark.parametrize("options,match", [({"unit": "half"}, "unit must be 'whole' or 'step'"),
                                           ({"unit": 2}, "option unit must be str")])
def test_a_bad_unit_is_one_config_error(options, match):
    with pytest.raises(ConfigError, match=match):
        make_source_tasks("cad", 1, 0, {"level": 2, **options})


def test_a_reference_with_a_bad_step_is_refused():
    t = sub(2, 2)
    bad = replace(t, reference={**t.reference, "step": 3})
    with pytest.raises(ValueError, match="reference step must be an integer in 1..2"):
        CadEnv(Resources()).score(bad, {"script": "cube(1);"})
