"""The five part families: parameters drawn from (seed, level), and the Part they describe.

    params = sample(seed, level)            # a small JSON dict of dimensions (deterministic)
    part = build(level, params, fn)         # spec.Part: the steps, their primitives and probes

L1 a block (1 step); L2 a plate with 1-4 through-holes (2 steps); L3 a plate, a cylindrical boss
on top and 2-4 holes beside it (3 steps); L4 an L-shaped bracket: base plate, upright wall, a
hole pattern (a row or a 2 x 2 grid through the base, or a row through the wall along y) and a
blind rectangular pocket in the base (4 steps); L5 a flange: disc, hub, bore, a bolt circle of
3-8 holes, their counterbores, and a separate washer beside it (6 steps, 2 bodies).
Dimensions are whole or half millimetres (bolt-circle positions excepted), laid out with at
least 2 mm of material between features, so later steps never disturb earlier probes.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

from posttrain.domains.cad.spec import Box, Cyl, Part, Probe, Step, circle_probe, num

HOLE_DIAMETERS = (3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
BOLT_DIAMETERS = (4.0, 5.0, 5.5, 6.5, 8.5)


def _xy(x: float, y: float) -> str:
    return f"(x {num(x)}, y {num(y)})"


def _holes_z(holes: list[list[float]], d: float, t: float, fn: int, first: int = 1,
             z0: float = 0.0) -> tuple[tuple[Cyl, ...], tuple[Probe, ...]]:
    cuts = tuple(Cyl((x, y, z0 - 1), d, t + 2) for x, y in holes)
    probes = tuple(circle_probe(f"hole_{first + i}", "z", z0 + 0.37 * t, "inner", (x, y), d, fn,
                                f"hole {first + i} (d {num(d)} at {_xy(x, y)})") for i, (x, y) in enumerate(holes))
    return cuts, probes


def _plate_step(w: float, d: float, t: float, what: str = "base plate") -> Step:
    return Step(f"Create the {what}: a box {num(w)} x {num(d)} x {num(t)} mm (x by y by z) with its minimum "
                f"corner at the origin (x 0..{num(w)}, y 0..{num(d)}, z 0..{num(t)}).",
                add=(Box((0, 0, 0), (w, d, t)),))


def _holes_text(holes: list[list[float]], d: float, where: str) -> str:
    at = ", ".join(_xy(x, y) for x, y in holes)
    n = len(holes)
    return f"Drill {n} vertical through-hole{'s' if n > 1 else ''} of diameter {num(d)} mm through {where}, " \
           f"centred at {at}."


def _free(rng: random.Random, n: int, d: float, box: tuple[float, float, float, float],
          avoid: list[tuple[float, float, float]]) -> list[list[float]] | None:
    """n hole centres (whole mm) inside box = (x0, y0, x1, y1) with 2 mm of material around each."""
    x0, y0, x1, y1 = box[0] + d / 2 + 2, box[1] + d / 2 + 2, box[2] - d / 2 - 2, box[3] - d / 2 - 2
    if x1 < x0 or y1 < y0:
        return None
    out: list[list[float]] = []
    for _ in range(400):
        x, y = rng.randint(math.ceil(x0), math.floor(x1)), rng.randint(math.ceil(y0), math.floor(y1))
        others = [(a, b, d / 2) for a, b in out] + avoid
        if all(math.hypot(x - a, y - b) >= d / 2 + r + 2 for a, b, r in others):
            out.append([x, y])
            if len(out) == n:
                return out
    return None


# -- L1 ------------------------------------------------------------------------------------------
def sample_block(rng: random.Random) -> dict:
    corner = [0, 0, 0] if rng.random() < 0.5 else [rng.randrange(-30, 31, 5), rng.randrange(-30, 31, 5),
                                                    rng.choice([0, 0, 5, 10, -5])]
    return {"size": [rng.randint(10, 80), rng.randint(10, 60), rng.randint(3, 40)], "corner": corner}


def build_block(p: dict, fn: int) -> Part:
    (w, d, h), (x, y, z) = p["size"], p["corner"]
    step = Step(f"Create a rectangular block {num(w)} x {num(d)} x {num(h)} mm (x by y by z) with its minimum "
                f"corner at (x {num(x)}, y {num(y)}, z {num(z)}).", add=(Box((x, y, z), (w, d, h)),))
    return Part(f"a block of {num(w)} x {num(d)} x {num(h)} mm", fn, (step,))


# -- L2 ------------------------------------------------------------------------------------------
def sample_plate(rng: random.Random) -> dict | None:
    w, d, t = rng.randint(30, 100), rng.randint(20, 70), rng.choice(range(6, 21)) / 2
    dia = rng.choice([x for x in HOLE_DIAMETERS if x <= min(w, d) / 4])
    holes = _free(rng, rng.randint(1, 4), dia, (0, 0, w, d), [])
    return None if holes is None else {"plate": [w, d, t], "d": dia, "holes": holes}


def build_plate(p: dict, fn: int) -> Part:
    (w, d, t), dia, holes = p["plate"], p["d"], p["holes"]
    cuts, probes = _holes_z(holes, dia, t, fn)
    return Part(f"a plate of {num(w)} x {num(d)} x {num(t)} mm with {len(holes)} through-hole(s)", fn,
                (_plate_step(w, d, t, "plate"), Step(_holes_text(holes, dia, "the plate"), cut=cuts, probes=probes)))


# -- L3 ------------------------------------------------------------------------------------------
def sample_boss(rng: random.Random) -> dict | None:
    w, d, t = rng.randint(40, 100), rng.randint(30, 80), float(rng.randint(3, 8))
    bd = rng.randint(8, min(w, d) // 2)
    bx, by = rng.randint(bd // 2 + 3, w - bd // 2 - 3), rng.randint(bd // 2 + 3, d - bd // 2 - 3)
    dia = rng.choice([x for x in HOLE_DIAMETERS if x <= min(w, d) / 5])
    holes = _free(rng, rng.randint(2, 4), dia, (0, 0, w, d), [(bx, by, bd / 2)])
    if holes is None:
        return None
    return {"plate": [w, d, t], "boss": [bx, by, bd, rng.randint(4, 20)], "d": dia, "holes": holes}


def build_boss(p: dict, fn: int) -> Part:
    (w, d, t), (bx, by, bd, bh), dia, holes = p["plate"], p["boss"], p["d"], p["holes"]
    boss = Step(f"Add a cylindrical boss of diameter {num(bd)} mm and height {num(bh)} mm standing on the top face "
                f"of the plate (z {num(t)}..{num(t + bh)}), its axis at {_xy(bx, by)}, united with the plate.",
                add=(Cyl((bx, by, t), bd, bh),),
                probes=(circle_probe("boss", "z", t + 0.5 * bh, "outer", (bx, by), bd, fn,
                                     f"the boss (d {num(bd)} at {_xy(bx, by)})"),))
    cuts, probes = _holes_z(holes, dia, t, fn)
    return Part(f"a plate with a boss and {len(holes)} holes", fn,
                (_plate_step(w, d, t), boss, Step(_holes_text(holes, dia, "the plate (not through the boss)"),
                                                  cut=cuts, probes=probes)))


# -- L4 ------------------------------------------------------------------------------------------
def sample_bracket(rng: random.Random) -> dict | None:
    w, d, t = rng.randint(40, 100), rng.randint(35, 70), float(rng.randint(4, 10))
    u, h = float(rng.randint(4, 10)), float(rng.randint(int(t) + 20, 70))
    dia = rng.choice([x for x in HOLE_DIAMETERS if x <= 6])
    mode = rng.choice(["row", "grid", "wall"])
    inset = rng.randint(math.ceil(dia / 2) + 3, math.ceil(dia / 2) + 8)
    if mode == "wall":
        n, hz = rng.randint(2, 3), float(rng.randint(int(t + dia / 2 + 4), int(h - dia / 2 - 3)))
        holes = [[inset + i * (w - 2 * inset) / (n - 1), hz] for i in range(n)]
    else:
        ys = [inset] if mode == "row" else [inset, inset + rng.randint(math.ceil(dia) + 6, 20)]
        n = rng.randint(2, 4) if mode == "row" else 2
        holes = [[inset + i * (w - 2 * inset) / (n - 1), y] for y in ys for i in range(n)]
    if (w - 2 * inset) / (n - 1) < dia + 3:
        return None
    holes = [[round(x * 2) / 2, y] for x, y in holes]
    # the pocket lies between the holes (or the front edge) and the wall
    bottom, front = (3.0 if mode == "wall" else max(y for _, y in holes) + dia / 2 + 3), d - u - 3
    pl, pw = rng.randint(6, 30), rng.randint(10, 40)
    if front - bottom < pl or w - 6 < pw:
        return None
    px, py = rng.randint(3, int(w - 3 - pw)), rng.randint(math.ceil(bottom), int(front - pl))
    depth = rng.choice([x / 2 for x in range(3, int(2 * t) - 2)])
    return {"base": [w, d, t], "wall": [u, h], "d": dia, "mode": mode, "holes": holes,
            "pocket": [px, py, pw, pl, depth]}


def build_bracket(p: dict, fn: int) -> Part:
    (w, d, t), (u, h), dia, mode, holes = p["base"], p["wall"], p["d"], p["mode"], p["holes"]
    px, py, pw, pl, depth = p["pocket"]
    wall_z = (t + min(z for _, z in holes) - dia / 2) / 2 if mode == "wall" else (t + h) / 2
    wall = Step(f"Add the upright wall along the back edge: a box {num(w)} x {num(u)} x {num(h)} mm spanning "
                f"x 0..{num(w)}, y {num(d - u)}..{num(d)}, z 0..{num(h)}, united with the base (an L-shaped "
                "bracket).", add=(Box((0, d - u, 0), (w, u, h)),),
                probes=(Probe("wall", "z", wall_z, "outer", (w / 2, d - u / 2), w * u, "the wall's outline"),))
    if mode == "wall":
        cuts = tuple(Cyl((x, d - u - 1, z), dia, u + 2, "y") for x, z in holes)
        probes = tuple(circle_probe(f"hole_{i + 1}", "y", d - u / 2, "inner", (x, z), dia, fn,
                                    f"wall hole {i + 1} (d {num(dia)} at x {num(x)}, z {num(z)})")
                       for i, (x, z) in enumerate(holes))
        at = ", ".join(f"(x {num(x)}, z {num(z)})" for x, z in holes)
        text = (f"Drill {len(holes)} horizontal through-holes of diameter {num(dia)} mm through the wall, along "
                f"the y axis, centred at {at}.")
    else:
        cuts, probes = _holes_z(holes, dia, t, fn)
        text = _holes_text(holes, dia, "the base plate")
    pocket = Step(f"Cut a rectangular pocket (a blind recess, not through) {num(pw)} x {num(pl)} mm and "
                  f"{num(depth)} mm deep into the top face of the base: x {num(px)}..{num(px + pw)}, "
                  f"y {num(py)}..{num(py + pl)}, z {num(t - depth)}..{num(t)}.",
                  cut=(Box((px, py, t - depth), (pw, pl, depth + 1)),),
                  probes=(Probe("pocket", "z", t - depth / 2, "inner", (px + pw / 2, py + pl / 2), pw * pl,
                                f"the pocket ({num(pw)} x {num(pl)} at x {num(px)}, y {num(py)})"),))
    return Part(f"an L-shaped bracket with {len(holes)} holes and a pocket", fn,
                (_plate_step(w, d, t), wall, Step(text, cut=cuts, probes=probes), pocket))


# -- L5 ------------------------------------------------------------------------------------------
def sample_flange(rng: random.Random) -> dict | None:
    df, tf = 2 * rng.randint(25, 60), float(rng.randint(6, 14))
    dh = rng.randint(math.ceil(0.3 * df), int(0.45 * df))
    db = rng.randint(max(5, math.ceil(0.3 * dh)), int(0.6 * dh))
    n, dia = rng.choice([3, 4, 5, 6, 8]), rng.choice(BOLT_DIAMETERS)
    dc = round(dia * rng.uniform(1.6, 2.0) * 2) / 2
    lo, hi = math.ceil(dh / 2 + dc / 2 + 2), math.floor(df / 2 - dc / 2 - 2)
    if hi < lo:
        return None
    r = rng.randint(lo, hi)
    if 2 * r * math.sin(math.pi / n) < dc + 2:
        return None
    dw = rng.randint(12, 30)
    washer = [df / 2 + rng.randint(5, 15) + dw / 2, dw, round(dw * rng.uniform(0.4, 0.6)), rng.randint(2, 5)]
    return {"disc": [df, tf], "hub": [dh, rng.randint(5, 25)], "bore": db,
            "bolts": [n, r, dia, rng.choice([0, 180 / n])], "counterbore": [dc, rng.randint(2, int(tf // 2))],
            "washer": washer}


def bolt_centres(n: int, r: float, start: float) -> list[tuple[float, float]]:
    a = [math.radians(start + 360 * i / n) for i in range(n)]
    return [(round(r * math.cos(x), 6) + 0.0, round(r * math.sin(x), 6) + 0.0) for x in a]


def build_flange(p: dict, fn: int) -> Part:
    (df, tf), (dh, hh), db = p["disc"], p["hub"], p["bore"]
    (n, r, dia, start), (dc, depth), (wx, dw, dwi, tw) = p["bolts"], p["counterbore"], p["washer"]
    centres = bolt_centres(n, r, start)
    disc = Step(f"Create the flange disc: a cylinder of diameter {num(df)} mm and thickness {num(tf)} mm, its axis "
                f"on the z axis, from z 0 to z {num(tf)}.", add=(Cyl((0, 0, 0), df, tf),))
    hub = Step(f"Add a hub on top of the disc: a cylinder of diameter {num(dh)} mm and height {num(hh)} mm on the "
               f"same axis (z {num(tf)}..{num(tf + hh)}), united with the disc.", add=(Cyl((0, 0, tf), dh, hh),),
               probes=(circle_probe("hub", "z", tf + 0.5 * hh, "outer", (0, 0), dh, fn, f"the hub (d {num(dh)})"),))
    bore = Step(f"Bore a hole of diameter {num(db)} mm along the axis through the disc and the hub.",
                cut=(Cyl((0, 0, -1), db, tf + hh + 2),),
                probes=(circle_probe("bore", "z", 0.37 * tf, "inner", (0, 0), db, fn, f"the bore (d {num(db)})"),))
    bolts = Step(f"Drill {n} bolt holes of diameter {num(dia)} mm through the disc, equally spaced on a bolt circle "
                 f"of radius {num(r)} mm around the axis, the first at {num(start)} degrees from +x "
                 f"(counter-clockwise).", cut=tuple(Cyl((x, y, -1), dia, tf + 2) for x, y in centres),
                 probes=tuple(circle_probe(f"bolt_{i + 1}", "z", 0.3 * tf, "inner", c, dia, fn,
                                           f"bolt hole {i + 1} (d {num(dia)} at {_xy(*c)})")
                              for i, c in enumerate(centres)))
    cbore = Step(f"Counterbore every bolt hole from the top face of the disc: diameter {num(dc)} mm, {num(depth)} mm "
                 f"deep (z {num(tf - depth)}..{num(tf)}).",
                 cut=tuple(Cyl((x, y, tf - depth), dc, depth + 1) for x, y in centres),
                 probes=tuple(circle_probe(f"counterbore_{i + 1}", "z", tf - depth / 2, "inner", c, dc, fn,
                                           f"counterbore {i + 1} (d {num(dc)} at {_xy(*c)})")
                              for i, c in enumerate(centres)))
    washer = Step(f"Add a separate washer beside the flange (a second body that does not touch it): outer diameter "
                  f"{num(dw)} mm, inner diameter {num(dwi)} mm, {num(tw)} mm thick, lying on z 0, centred at "
                  f"{_xy(wx, 0)}.", add=(Cyl((wx, 0, 0), dw, tw),), cut=(Cyl((wx, 0, -1), dwi, tw + 2),),
                  probes=(circle_probe("washer", "z", tw / 2, "outer", (wx, 0), dw, fn, f"the washer (d {num(dw)})"),
                          circle_probe("washer_hole", "z", tw / 2, "inner", (wx, 0), dwi, fn,
                                       f"the washer's hole (d {num(dwi)})")))
    return Part(f"a flange with a hub, a bore, {n} counterbored bolt holes and a separate washer", fn,
                (disc, hub, bore, bolts, cbore, washer))


FAMILIES: dict[int, tuple[Callable[[random.Random], dict | None], Callable[[dict, int], Part]]] = {
    1: (sample_block, build_block), 2: (sample_plate, build_plate), 3: (sample_boss, build_boss),
    4: (sample_bracket, build_bracket), 5: (sample_flange, build_flange)}


def sample(seed: int, level: int) -> dict[str, Any]:
    """The parameters of task (seed, level): redrawn from the same stream until they fit."""
    rng = random.Random(f"cad/{level}/{seed}")
    draw = FAMILIES[level][0]
    for _ in range(1000):
        params = draw(rng)
        if params is not None:
            return params
    raise RuntimeError(f"cad: no level-{level} part fits for seed {seed}")  # a generator bug


def build(level: int, params: dict, fn: int) -> Part:
    return FAMILIES[level][1](params, fn)
