"""Measurements of a rendered part: bounding box, volume, watertightness, bodies, through-holes, sections.

    m = measure_stl(stl_bytes)         # the model's render (ValueError: not a readable STL)
    m = measure_solid(gold(part, k))   # the expected part, measured the same way
    m.summary()                        # JSON: bbox_min/max, size, volume, watertight, bodies, holes
    m.contours("z", 2.5)               # [Contour(signed area, centre)] of the section at z = 2.5

The STL is read with trimesh (vertices merged), then handed to manifold3d: a mesh it accepts is
watertight (every edge shared by exactly two triangles, consistently oriented), and only then are
bodies (connected components) and holes counted. A body's through-holes are its genus, from its
Euler characteristic: genus = (2 - V + E - F) / 2; the part's holes are the sum over its bodies.
Section contours come from manifold3d's slice: counter-clockwise outlines have a positive area,
holes' rims a negative one.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import manifold3d as mf
import numpy as np
import trimesh

# (x, y, z) -> a frame whose z is the section normal; contours come out in the named plane coordinates
_TO_Z = {"z": None, "y": [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0]]}  # y-normal: (x, z) in the plane, z' = -y


@dataclass(frozen=True)
class Contour:
    area: float  # signed: > 0 an outline, < 0 a hole's rim
    center: tuple[float, float]


@dataclass
class Measurement:
    triangles: int
    bbox_min: tuple[float, float, float]
    bbox_max: tuple[float, float, float]
    volume: float
    watertight: bool
    bodies: int | None  # None when not watertight (not measurable)
    holes: int | None
    solid: Any = field(default=None, repr=False)  # the manifold3d solid, for sections

    @property
    def size(self) -> tuple[float, float, float]:
        return tuple(b - a for a, b in zip(self.bbox_min, self.bbox_max))

    def contours(self, axis: str, offset: float) -> list[Contour]:
        if self.solid is None:
            return []
        matrix = _TO_Z[axis]
        solid = self.solid if matrix is None else self.solid.transform(np.array(matrix, dtype=float))
        height = offset if axis == "z" else -offset
        return [_contour(np.asarray(ring, dtype=float)) for ring in solid.slice(height).to_polygons()]

    def summary(self) -> dict:
        return {"bbox_min": _round(self.bbox_min), "bbox_max": _round(self.bbox_max), "size": _round(self.size),
                "volume": round(self.volume, 3), "watertight": self.watertight, "bodies": self.bodies,
                "holes": self.holes, "triangles": self.triangles}


def _round(v) -> list[float]:
    return [round(float(x), 4) + 0.0 for x in v]


def _contour(ring: np.ndarray) -> Contour:
    x, y = ring[:, 0], ring[:, 1]
    x1, y1 = np.roll(x, -1), np.roll(y, -1)
    cross = x * y1 - x1 * y
    area = cross.sum() / 2
    if abs(area) < 1e-12:
        return Contour(0.0, (float(x.mean()), float(y.mean())))
    cx = ((x + x1) * cross).sum() / (6 * area)
    cy = ((y + y1) * cross).sum() / (6 * area)
    return Contour(float(area), (float(cx), float(cy)))


def measure_solid(solid: mf.Manifold) -> Measurement:
    """Measure a manifold3d solid (an accepted mesh or the gold part)."""
    bodies = solid.decompose()
    lo, hi = solid.bounding_box()[:3], solid.bounding_box()[3:]
    return Measurement(triangles=solid.num_tri(), bbox_min=tuple(lo), bbox_max=tuple(hi), volume=solid.volume(),
                       watertight=True, bodies=len(bodies), holes=sum(b.genus() for b in bodies), solid=solid)


def measure_stl(data: bytes) -> Measurement:
    """Measure an STL file's bytes; ValueError (one line) when they hold no triangles."""
    try:
        mesh = trimesh.load_mesh(io.BytesIO(data), file_type="stl", process=True)
    except Exception as e:  # a malformed file is data, not a bug: any parser failure is "unreadable"
        raise ValueError(f"the STL could not be read ({type(e).__name__})") from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise ValueError("the STL holds no triangles")
    if mesh.is_watertight:
        solid = mf.Manifold(mf.Mesh(vert_properties=np.asarray(mesh.vertices, dtype=np.float32),
                                    tri_verts=np.asarray(mesh.faces, dtype=np.uint32)))
        if solid.status() == mf.Error.NoError and not solid.is_empty():
            return measure_solid(solid)
    lo, hi = mesh.bounds
    return Measurement(triangles=len(mesh.faces), bbox_min=tuple(map(float, lo)), bbox_max=tuple(map(float, hi)),
                       volume=abs(float(mesh.volume)), watertight=False, bodies=None, holes=None)
