"""A part as ordered steps of solid primitives, its OpenSCAD script and its gold geometry.

    part = levels.build(level, params, fn)      # Part(title, fn, steps)
    script(part, k)                             # OpenSCAD source of the part after steps 1..k
    gold(part, k)                               # the same part as a manifold3d solid (the expected geometry)

A step adds primitives (united with the part) and cuts primitives (subtracted from everything),
and names the probes that check its features: a probe is a planar section of the part (normal to
z, or to y for holes drilled along y) in which a contour with a given centre and area must appear,
"inner" for a hole's rim, "outer" for a boss's outline. Cylinders are regular `fn`-gons with a
vertex at angle 0, exactly as OpenSCAD makes them, so the gold volume and section areas are the
polygons' own (the prompt states the $fn); through-cuts reach 1 mm past the faces they cross, so
no two faces are coplanar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import manifold3d as mf
import numpy as np

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class Box:
    at: Vec3  # minimum corner
    size: Vec3


@dataclass(frozen=True)
class Cyl:
    at: Vec3  # centre of the base face
    d: float
    h: float  # length along +axis
    axis: str = "z"  # "z" or "y"


Prim = Union[Box, Cyl]


@dataclass(frozen=True)
class Probe:
    name: str  # the check's name, e.g. "hole_1"
    axis: str  # the section plane's normal: "z" (contour in x, y) or "y" (contour in x, z)
    offset: float  # where the plane cuts that axis
    kind: str  # "inner" (a hole's rim) | "outer" (an outline)
    center: tuple[float, float]
    area: float  # mm^2 of the contour (the fn-gon's for a circle)
    what: str  # for messages: "hole 1 (d 4 at x 10, y 15)"


@dataclass(frozen=True)
class Step:
    text: str  # the instruction shown to the model
    add: tuple[Prim, ...] = ()
    cut: tuple[Prim, ...] = ()
    probes: tuple[Probe, ...] = ()


@dataclass(frozen=True)
class Part:
    title: str  # "a mounting plate with 3 holes"
    fn: int  # $fn of every cylinder
    steps: tuple[Step, ...]


def num(x: float) -> str:
    """A dimension as the prompt writes it: 40, 2.5, 13.8564 (no trailing zeros)."""
    text = f"{x:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def ngon_area(d: float, fn: int) -> float:
    """Area of OpenSCAD's circle of diameter d at $fn = fn: a regular fn-gon with circumradius d/2."""
    return fn / 2 * (d / 2) ** 2 * math.sin(2 * math.pi / fn)


def circle_probe(name: str, axis: str, offset: float, kind: str, center: tuple[float, float], d: float,
                 fn: int, what: str) -> Probe:
    return Probe(name, axis, offset, kind, center, ngon_area(d, fn), what)


# -- the OpenSCAD script -------------------------------------------------------------------------
def _scad(p: Prim) -> str:
    if isinstance(p, Box):
        return f"translate([{', '.join(map(num, p.at))}]) cube([{', '.join(map(num, p.size))}]);"
    rot = " rotate([-90, 0, 0])" if p.axis == "y" else ""
    return f"translate([{', '.join(map(num, p.at))}]){rot} cylinder(d = {num(p.d)}, h = {num(p.h)});"


def script(part: Part, k: int) -> str:
    """OpenSCAD source of the part after its first k steps (what the oracle writes at step k)."""
    adds = [p for s in part.steps[:k] for p in s.add]
    cuts = [p for s in part.steps[:k] for p in s.cut]
    lines = [f"$fn = {part.fn};"]
    if not cuts:
        lines += ["union() {", *[f"  {_scad(p)}" for p in adds], "}"]
    else:
        lines += ["difference() {", "  union() {", *[f"    {_scad(p)}" for p in adds], "  }",
                  *[f"  {_scad(p)}" for p in cuts], "}"]
    return "\n".join(lines) + "\n"


# -- the gold solid ------------------------------------------------------------------------------
def _ngon(d: float, fn: int, cx: float = 0.0, cy: float = 0.0) -> np.ndarray:
    a = 2 * np.pi * np.arange(fn) / fn
    return np.stack([cx + d / 2 * np.cos(a), cy + d / 2 * np.sin(a)], axis=1)


def _solid(p: Prim, fn: int) -> mf.Manifold:
    if isinstance(p, Box):
        return mf.Manifold.cube(p.size).translate(p.at)
    disc = mf.CrossSection([_ngon(p.d, fn)])
    body = mf.Manifold.extrude(disc, p.h)
    if p.axis == "y":  # OpenSCAD's rotate([-90, 0, 0]): +z becomes +y
        body = body.rotate((-90.0, 0.0, 0.0))
    return body.translate(p.at)


def gold(part: Part, k: int) -> mf.Manifold:
    """The part after its first k steps as an exact polygonal solid."""
    adds = [_solid(p, part.fn) for s in part.steps[:k] for p in s.add]
    cuts = [_solid(p, part.fn) for s in part.steps[:k] for p in s.cut]
    body = mf.Manifold.batch_boolean(adds, mf.OpType.Add) if len(adds) > 1 else adds[0]
    if cuts:
        body = body - (mf.Manifold.batch_boolean(cuts, mf.OpType.Add) if len(cuts) > 1 else cuts[0])
    return body


def probes_upto(part: Part, k: int) -> list[Probe]:
    return [p for s in part.steps[:k] for p in s.probes]
