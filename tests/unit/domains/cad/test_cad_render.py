"""OpenSCAD in the sandbox: a known part measures right, errors are typed, hangs and floods are stopped."""

from __future__ import annotations

import dataclasses
import time

import pytest

import posttrain.domains.cad.render as render_mod
from posttrain.domains.cad.inspect import measure_stl
from posttrain.domains.cad.render import render
from posttrain.domains.cad.spec import ngon_area
from posttrain.domains.terminal.session import shared_isolation
from tests.sandbox.procs import UID, processes_of
from tests.unit.domains.cad.cad_helpers import act, episode, task

PLATE = "$fn = 32;\ndifference() {\n  cube([40, 30, 5]);\n  translate([10, 15, -1]) cylinder(d = 4, h = 7);\n" \
        "  translate([30, 15, -1]) cylinder(d = 4, h = 7);\n}\n"


def test_a_plate_with_two_holes_renders_and_measures_right():
    out = render(PLATE, 10.0)
    assert out.error == "" and out.stl
    m = measure_stl(out.stl)
    assert m.watertight and m.bodies == 1 and m.holes == 2
    assert m.bbox_min == pytest.approx((0, 0, 0), abs=1e-5) and m.size == pytest.approx((40, 30, 5), abs=1e-5)
    assert m.volume == pytest.approx(40 * 30 * 5 - 2 * 5 * ngon_area(4, 32), rel=1e-5)
    two = measure_stl(render("cube(5); translate([20, 0, 0]) cube(5);", 10.0).stl)
    assert two.bodies == 2 and two.volume == pytest.approx(250)


def test_openscad_errors_are_tool_failed_with_the_line():
    t = task(1)
    (syntax, empty, flat), state = episode(
        t, act(("write_script", {"code": "cube([1, 2, 3]);\ncube([1, 2);\ncube(3);\n"}), ("render", {})),
        act(("write_script", {"code": 'echo("nothing");'}), ("render", {})),
        act(("write_script", {"code": "square(3);"}), ("render", {})))
    obs = syntax.observations[1]
    assert obs.error == "tool_failed" and "syntax error" in obs.content and "line 2" in obs.content
    assert empty.observations[1].error == "tool_failed" and "no geometry" in empty.observations[1].content
    assert flat.observations[1].error == "tool_failed" and "2D" in flat.observations[1].content
    assert state["script"] is None and state["renders"] == 3  # nothing rendered: no final part


def test_a_render_that_never_ends_is_a_tool_timeout_and_leaves_no_process():
    t = task(1)
    t = dataclasses.replace(t, limits=dataclasses.replace(t.limits, tool_timeout=2.5))  # openscad gets 2 s
    hang = "for (i = [0:3000]) translate([i * 0.5, 0, 0]) sphere(1, $fn = 30);"
    start = time.monotonic()
    (step,), _ = episode(t, act(("write_script", {"code": hang}), ("render", {})),
                         isolation=shared_isolation(uid=UID, gid=UID))
    took = time.monotonic() - start
    obs = step.observations[1]
    assert obs.error == "tool_timeout" and "did not finish within 2s" in obs.content
    assert took < 2 + 3.5  # the limit plus the kill's grace
    assert processes_of(UID) == []


def test_floods_and_oversized_meshes_are_stopped(monkeypatch):
    flood = render("for (i = [0:999], j = [0:999]) echo(i, j);\ncube(1);", 10.0)
    assert flood.error == "tool_failed" and "KiB" in flood.message
    monkeypatch.setattr(render_mod, "STL_LIMIT", 40_000)
    big = render("sphere(10, $fn = 64);", 10.0)
    assert big.error == "tool_failed" and "size limit" in big.message


def test_a_refused_script_never_renders():
    t = task(1)
    steps, state = episode(t, act(("write_script", {"code": "include </etc/passwd>\ncube(1);"}), ("render", {})),
                           act(("write_script", {"code": 'import("../../etc/passwd");'}), ("render", {})))
    for s in steps:
        assert s.observations[1].error == "tool_failed" and "outside the work dir" in s.observations[1].content
    assert state["renders"] == 0 and state["script"] is None
