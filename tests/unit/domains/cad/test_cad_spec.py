"""The cad generator, the gold geometry, the mesh inspection and the checks (no OpenSCAD run here)."""

from __future__ import annotations

import json
import math

import pytest
import trimesh

from posttrain.domains.cad.checks import expect, run_checks
from posttrain.domains.cad.inspect import measure_solid, measure_stl
from posttrain.domains.cad.levels import bolt_centres, build, sample
from posttrain.domains.cad.render import refusal
from posttrain.domains.cad.spec import Box, Cyl, Part, Step, gold, ngon_area
from posttrain.core.errors import ConfigError
from posttrain.tasks.generated import HELD_OUT_SEED
from posttrain.tasks.registry import make_source_tasks
from tests.unit.domains.cad.cad_helpers import solid_stl, stl_of


def test_tasks_are_deterministic_and_the_test_split_is_held_out():
    a = make_source_tasks("cad", 4, 7, {"level": [2, 4]})
    b = make_source_tasks("cad", 4, 7, {"level": [2, 4]})
    assert [(t.id, t.prompt, t.reference, t.limits) for t in a] == [(t.id, t.prompt, t.reference, t.limits) for t in b]
    assert [t.id for t in a] == [f"cad/L{t.metadata['level']}/{s}" for t, s in zip(a, range(7, 11))]
    assert sorted(t.metadata["level"] for t in a) == [2, 2, 4, 4]
    test = make_source_tasks("cad", 2, 0, {"level": 3, "split": "test"})
    assert [t.metadata["seed"] for t in test] == [HELD_OUT_SEED, HELD_OUT_SEED + 1]
    t = next(t for t in a if t.metadata["level"] == 2)
    assert t.env == "cad" and t.verifiers == ("env_score",) and t.metadata["steps"] == 2
    assert len(json.dumps(t.reference)) < 400  # the part is rebuilt from its parameters
    assert "Step 1 of 2" in t.prompt[0]["content"] and "Step 2" not in t.prompt[0]["content"]


def test_levels_vary_and_grow_in_steps_and_checks():
    steps, checks = [], []
    for level in range(1, 6):
        params = [json.dumps(sample(s, level), sort_keys=True) for s in range(150)]
        assert len(set(params)) >= 148, level  # tens of thousands of variants: no repeats in 150 draws
        parts = [build(level, sample(s, level), 32) for s in range(20)]
        steps.append(len(parts[0].steps))
        checks.append(sum(len(expect(p, len(p.steps)).names) for p in parts) / len(parts))
    assert steps == [1, 2, 3, 4, 6]
    assert all(a < b for a, b in zip(checks, checks[1:])), checks


def test_gold_volumes_match_the_analytic_polygon_volumes():
    fn = 32
    plate = Part("p", fn, (Step("plate", add=(Box((0, 0, 0), (40, 30, 5)),)),
                          Step("holes", cut=(Cyl((10, 15, -1), 4, 7), Cyl((30, 15, -1), 4, 7)))))
    assert gold(plate, 2).volume() == pytest.approx(40 * 30 * 5 - 2 * 5 * ngon_area(4, fn), rel=1e-9)
    assert ngon_area(10, 4) == pytest.approx(50.0)  # a square of diagonal 10
    p = sample(3, 5)
    (df, tf), (dh, hh), db = p["disc"], p["hub"], p["bore"]
    (n, r, d, start), (dc, c), (_, dw, dwi, tw) = p["bolts"], p["counterbore"], p["washer"]
    a = lambda x: ngon_area(x, fn)  # noqa: E731
    want = a(df) * tf + a(dh) * hh - a(db) * (tf + hh) - n * a(d) * tf - n * (a(dc) - a(d)) * c + (a(dw) - a(dwi)) * tw
    part = build(5, p, fn)
    assert gold(part, 6).volume() == pytest.approx(want, rel=1e-6)
    assert len(bolt_centres(n, r, start)) == n and all(math.hypot(x, y) == pytest.approx(r) for x, y in
                                                       bolt_centres(n, r, start))


def test_inspection_of_known_shapes():
    cube = measure_stl(stl_of(trimesh.creation.box(extents=(10, 20, 30))))
    assert cube.watertight and cube.bodies == 1 and cube.holes == 0
    assert cube.volume == pytest.approx(6000) and cube.size == pytest.approx((10, 20, 30))
    two = measure_stl(stl_of(trimesh.creation.box(extents=(5, 5, 5)),
                             trimesh.creation.box(extents=(5, 5, 5)).apply_translation((20, 0, 0))))
    assert two.bodies == 2 and two.holes == 0 and two.volume == pytest.approx(250)
    plate = Part("p", 32, (Step("plate", add=(Box((0, 0, 0), (40, 30, 5)),)),
                           Step("holes", cut=(Cyl((10, 15, -1), 4, 7), Cyl((30, 15, -1), 4, 7)))))
    m = measure_stl(solid_stl(gold(plate, 2)))
    assert m.watertight and m.bodies == 1 and m.holes == 2  # genus 2 from the Euler characteristic
    rims = sorted((c for c in m.contours("z", 2.5) if c.area < 0), key=lambda c: c.center)
    assert [round(c.center[0], 3) for c in rims] == [10, 30] and rims[0].area == pytest.approx(-ngon_area(4, 32), 1e-4)
    open_box = trimesh.creation.box(extents=(5, 5, 5))
    open_box.update_faces(list(range(2, 12)))  # two triangles gone: a hole in the surface
    leaky = measure_stl(stl_of(open_box))
    assert not leaky.watertight and leaky.bodies is None and leaky.holes is None
    with pytest.raises(ValueError, match="STL"):
        measure_stl(b"solid nothing\nendsolid nothing\n")


def _names_failing(part_good: Part, part_made: Part) -> set[str]:
    k = len(part_good.steps)
    return {c.name for c in run_checks(expect(part_good, k), measure_solid(gold(part_made, k))) if not c.ok}


def test_checks_name_exactly_what_is_wrong():
    p = sample(0, 2)
    good = build(2, p, 32)
    assert _names_failing(good, good) == set()
    w, d, t = p["plate"]
    assert _names_failing(good, build(2, {**p, "plate": [w + 5, d, t]}, 32)) == {"size_x", "volume"}
    small = build(2, {**p, "d": p["d"] - 1}, 32)  # every hole 1 mm too small: only the hole probes see it
    assert _names_failing(good, small) == {f"hole_{i + 1}" for i in range(len(p["holes"]))}
    coarse = build(2, p, 24)  # a coarser $fn than asked stays within the tolerances
    assert _names_failing(good, coarse) == set()
    b = sample(1, 4)
    bracket = build(4, b, 32)
    px, py, pw, pl, depth = b["pocket"]
    through = build(4, {**b, "pocket": [px, py, pw, pl, b["base"][2] + 1]}, 32)  # a hole, not a pocket
    assert "holes" in _names_failing(bracket, through)


@pytest.mark.parametrize("code", [
    "include </etc/passwd>\ncube(1);", "use <../lib.scad>\ncube(1);", 'import("/etc/passwd");',
    'import(file = "../../x.stl");', 'surface(file="/etc/hosts");', 'import("\\x2fetc/passwd");',
    'import(str("/e", "tc/passwd"));', 'f = "a.stl"; import(f);', "include<  /abs/x.scad>",
    'import /* a comment */ ("/etc/passwd");', 'import_stl("/etc/x.stl");', 'linear_extrude("/etc/a.dxf", height=1);',
    'rotate_extrude(file = "../a.dxf");', 'x = dxf_dim(file = "/etc/a.dxf", name = "a");', "module m(f) import(f);",
])
def test_file_references_outside_the_work_dir_are_refused(code):
    why = refusal(code)
    assert why is not None and ("outside the work dir" in why or "string literal" in why)


def test_what_stays_inside_is_not_refused():
    for code in ["cube(1);", "// include </etc/passwd>\ncube(1);", '/* import("/x") */ cube(1);',
                 'echo("include </etc/passwd>"); cube(1);', "include <MCAD/units.scad>\ncube(1);",
                 'import("part.stl");', 'surface(file = "heights.dat", center = true);',
                 "linear_extrude(height = h) square(2);", "rotate_extrude($fn = 32) translate([5, 0]) circle(1);"]:
        assert refusal(code) is None, code


@pytest.mark.parametrize("options,match", [
    ({"level": 0}, "level"), ({"level": 6}, "level"), ({"fn": 10}, "fn"), ({"fn": 50}, "fn"),
    ({"fn": "x"}, "fn"), ({"rows": 3}, "unknown option"), ({"split": "dev"}, "split"),
])
def test_bad_options_are_one_config_error(options, match):
    with pytest.raises(ConfigError, match=match) as e:
        make_source_tasks("cad", 1, 0, options)
    assert "\n" not in str(e.value)
