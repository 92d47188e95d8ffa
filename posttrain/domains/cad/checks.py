"""A step's checks: the part after steps 1..k, measured, against the gold part after step k.

    expected = expect(part, k)                 # cached: the gold's measurement and the probes of steps 1..k
    results = run_checks(expected, measured)   # [Check(name, ok, expected, measured)] in a fixed order
    text = failures(results)                   # "size_x: measured 45, expected 40 ± 0.4; ..."

Global checks, recomputed for the state after step k: watertight, bodies, holes (through-holes:
the sum of the bodies' genus), size_x / size_y / size_z and position (the bounding box's minimum
corner) within max(0.3 mm, 1% of that size), volume within 2%. Then one check per probe of steps
1..k: the section must hold a contour of the probe's kind (an outline, or a hole's rim) whose
centre is within 0.5 mm and whose area is within 4% of the probe's. The volume and areas are the
$fn-gons' (spec.py), so a part made with the stated $fn matches to rounding; the tolerances also
cover a coarser $fn of about 24.

What a check EARNS (`earned`, the reward's view; `run_checks` reports what each measured): the
envelope checks (size_x / size_y / size_z, position) say nothing about the part on their own: two
tiny cubes at a bounding box's corners, or a solid block, pass them all. They earn only when the
geometry inside the box is the part's too: the volume matches, or both the body count and the
through-hole count do. `watertight` earns only with something else earned beyond the envelope (a
closed mesh alone is no progress). So a right-bounding-box block without holes earns watertight,
bodies and the outline probes, not the box it was built to match.

A sub-unit's reward (one step k of a part, steps 1..k-1 given):

    v = unit_value(part, k, results)          # UnitValue(value, counted, broken)

counts only step k's own checks, `own_checks(part, k)`: step k's probes and the checks the gold
part after step k-1 fails against `expect(part, k)` (the global checks step k changes: bodies,
holes, a size, the position, the volume). The reward is the share of those that pass; but when
any other check fails (one the part after step k-1 already passes: earlier steps' probes,
watertight, the global checks step k leaves alone), given work was broken and the reward is 0.
For k = 1 (nothing given) every check counts. So the given script rendered unchanged scores 0
and only a finished step k scores 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from posttrain.domains.cad.inspect import Measurement, measure_solid
from posttrain.domains.cad.spec import Part, Probe, gold, num, probes_upto

SIZE_ABS_MM = 0.3
SIZE_REL = 0.01
VOLUME_REL = 0.02
CENTER_MM = 0.5
AREA_REL = 0.04
GLOBAL = ("watertight", "bodies", "holes", "size_x", "size_y", "size_z", "position", "volume")
ENVELOPE = ("size_x", "size_y", "size_z", "position")


@dataclass(frozen=True)
class Expected:
    bbox_min: tuple[float, float, float]
    size: tuple[float, float, float]
    volume: float
    bodies: int
    holes: int
    probes: tuple[Probe, ...]

    @property
    def names(self) -> list[str]:
        return list(GLOBAL) + [p.name for p in self.probes]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: str
    measured: str


@lru_cache(maxsize=512)
def expect(part: Part, k: int) -> Expected:
    m = measure_solid(gold(part, k))
    return Expected(m.bbox_min, m.size, m.volume, m.bodies, m.holes, tuple(probes_upto(part, k)))


def size_tol(size: float) -> float:
    return max(SIZE_ABS_MM, SIZE_REL * abs(size))


def _vec(v) -> str:
    return "[" + ", ".join(num(round(x, 3)) for x in v) + "]"


def _probe(p: Probe, m: Measurement) -> Check:
    want = f"{'an outline' if p.kind == 'outer' else 'a hole'} of area {p.area:.1f} mm^2 centred at " \
           f"{_vec(p.center)} in the section at {p.axis} = {num(round(p.offset, 3))}"
    sign = 1 if p.kind == "outer" else -1
    found = [c for c in m.contours(p.axis, p.offset) if c.area * sign > 0]
    if not found:
        return Check(p.name, False, want, "not watertight" if m.solid is None else "no such contour there")
    best = min(found, key=lambda c: math.dist(c.center, p.center))
    dist, area = math.dist(best.center, p.center), abs(best.area)
    ok = dist <= CENTER_MM and abs(area - p.area) <= AREA_REL * p.area
    return Check(p.name, ok, want, f"nearest: area {area:.1f} mm^2 centred at {_vec(best.center)}")


def run_checks(e: Expected, m: Measurement) -> list[Check]:
    out = [Check("watertight", m.watertight, "a closed 2-manifold mesh", "yes" if m.watertight else "no")]
    for name, want, got in (("bodies", e.bodies, m.bodies), ("holes", e.holes, m.holes)):
        out.append(Check(name, got == want, str(want), "not measurable (not watertight)" if got is None else str(got)))
    for axis, want, got in zip("xyz", e.size, m.size):
        tol = size_tol(want)
        out.append(Check(f"size_{axis}", abs(got - want) <= tol, f"{num(round(want, 3))} ± {num(round(tol, 3))}",
                         num(round(got, 3))))
    tols = [size_tol(s) for s in e.size]
    ok = all(abs(a - b) <= t for a, b, t in zip(m.bbox_min, e.bbox_min, tols))
    out.append(Check("position", ok, f"minimum corner {_vec(e.bbox_min)}", _vec(m.bbox_min)))
    tol = VOLUME_REL * e.volume
    out.append(Check("volume", abs(m.volume - e.volume) <= tol, f"{e.volume:.1f} ± {tol:.1f} mm^3",
                     f"{m.volume:.1f} mm^3"))
    out += [_probe(p, m) for p in e.probes]
    return out


def earned(checks: list[Check]) -> dict[str, bool]:
    """name -> whether the check earns reward (module docstring: envelope and watertight are gated)."""
    ok = {c.name: c.ok for c in checks}
    inside = ok.get("volume", False) or (ok.get("bodies", False) and ok.get("holes", False))
    out = {n: v and (n not in ENVELOPE or inside) for n, v in ok.items()}
    if "watertight" in out:
        out["watertight"] = out["watertight"] and any(v for n, v in out.items() if n not in (*ENVELOPE, "watertight"))
    return out


def share(checks: list[Check]) -> float:
    """The reward of a whole part: the share of its checks that earn."""
    got = earned(checks)
    return sum(got.values()) / len(got) if got else 0.0


def failures(checks: list[Check]) -> str:
    return "; ".join(f"{c.name}: expected {c.expected}, measured {c.measured}" for c in checks if not c.ok)


@lru_cache(maxsize=512)
def own_checks(part: Part, k: int) -> tuple[str, ...]:
    """The names of the checks of expect(part, k) that measure step k's work (every check when k = 1)."""
    e = expect(part, k)
    if k == 1:
        return tuple(e.names)
    before = {c.name: c.ok for c in run_checks(e, measure_solid(gold(part, k - 1)))}
    mine = {p.name for p in part.steps[k - 1].probes}
    return tuple(n for n in e.names if n in mine or not before[n])


@dataclass(frozen=True)
class UnitValue:
    value: float  # the share of `counted` that passes; 0 when `broken` is not empty
    counted: tuple[str, ...]  # step k's own checks
    broken: tuple[str, ...]  # the other checks that fail: given work broken


def unit_value(part: Part, k: int, checks: list[Check]) -> UnitValue:
    """The sub-unit reward of `checks` (run_checks(expect(part, k), measured)) for step k."""
    own = own_checks(part, k)
    broken = tuple(c.name for c in checks if c.name not in own and not c.ok)
    got = earned(checks)
    passed = sum(got[c.name] for c in checks if c.name in own)
    return UnitValue(0.0 if broken or not own else passed / len(own), own, broken)
