"""Adversarial (issue 31): geometry that is not the part must not earn the global checks. Two tiny cubes
at the bounding box's corners scored 0.417 on a level-3 part; a solid block with the right bounding box
and no holes 0.778 on a level-2 part. Size and position now earn only with the volume, or the body and
hole counts, right too (checks.earned); a honest near-miss still gets its partial credit."""

from __future__ import annotations

import pytest

from posttrain.domains.cad.checks import expect
from posttrain.domains.cad.env import CadEnv
from posttrain.domains.cad.levels import build
from posttrain.domains.cad.spec import script
from posttrain.envs.env import Resources
from tests.unit.domains.cad.cad_helpers import task


def _part(t):
    return build(t.reference["level"], t.reference["params"], t.reference["fn"])


def _score(t, code):
    return CadEnv(Resources()).score(t, {"script": code, "confirmed": 0})[0]


def _box(t):
    part = _part(t)
    e = expect(part, len(part.steps))
    return e.bbox_min, e.size


@pytest.mark.parametrize("level", [2, 3])
def test_corner_cubes_spanning_the_box_earn_nothing(level):
    t = task(level, seed=1)
    (x, y, z), (a, b, c) = _box(t)
    cubes = f"translate([{x},{y},{z}]) cube(0.5); translate([{x + a - 0.5},{y + b - 0.5},{z + c - 0.5}]) cube(0.5);"
    s = _score(t, cubes)
    assert all(s.details["checks"][n] for n in ("size_x", "size_y", "size_z", "position"))  # measured as passing
    assert s.value == 0.0  # ... and earning nothing


@pytest.mark.parametrize("level", [2, 3])
def test_a_block_with_the_right_box_and_no_holes_earns_little(level):
    t = task(level, seed=1)
    (x, y, z), (a, b, c) = _box(t)
    s = _score(t, f"translate([{x},{y},{z}]) cube([{a},{b},{c}]);")
    assert s.value <= 0.25, s.details["checks"]


def test_a_near_miss_keeps_its_partial_credit():
    t = task(2, seed=1)
    good = script(_part(t), 2)
    w = t.reference["params"]["plate"][0]
    wide = _score(t, good.replace(f"cube([{w}, ", f"cube([{w + 5}, "))  # topology right, one size off
    assert wide.value == pytest.approx(1 - 2 / len(wide.details["checks"]))
