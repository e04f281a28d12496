"""Rasters of the map for O(1) per-step queries: which lane is here (and which way it runs), and is
this point on the drivable area.

Both are ``TiledRaster``s, so a 10 km town costs memory in proportion to its roads, not its extent.
Junction connectors overlap each other, so their cells are marked ``JUNCTION`` instead of naming
one lane: wrong-way is not judged inside junctions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np
import shapely
from shapely.geometry import Polygon

from envs.world.kernels import LEVEL_GAP
from envs.world.raster import TiledRaster, rasterise
from scenarios.maps import RoadMap

NONE = -1
JUNCTION = -2
HEADING_STEPS = 4096


class LaneGrid:
    """Lane index and lane heading per 0.5 m cell, packed in one int32 (the heading in 4,096 steps),
    and on a map with heights the lane's height per cell."""

    def __init__(self, road_map: RoadMap, lane_index: dict[str, int], resolution: float = 0.5) -> None:
        lanes = list(road_map.lanes.values())
        edges = [(ln.centerline + ln.width / 2 * ln.normals, ln.centerline - ln.width / 2 * ln.normals) for ln in lanes]
        extra = [np.asarray(p, float) for p in road_map.extra_drivable]
        boxes = [_box(np.concatenate(e)) for e in edges] + [_box(p) for p in extra]
        x0, y0, x1, y1 = road_map.bounds

        def paint(canvas: dict[str, np.ndarray], block_origin: np.ndarray, items: np.ndarray) -> None:
            def px(pts: np.ndarray) -> np.ndarray:
                return np.round((np.asarray(pts) - block_origin) / resolution).astype(np.int32)

            junction = np.zeros(canvas["cell"].shape, np.uint8)
            for i in items:
                if i >= len(lanes):
                    cv2.fillPoly(junction, [px(extra[i - len(lanes)])], 1)
                    continue
                lane, (left, right) = lanes[i], edges[i]
                left, right = px(left), px(right)
                if lane.junction is not None:
                    cv2.fillPoly(junction, [np.concatenate([left, right[::-1]])], 1)
                    continue
                quads = np.stack([left[:-1], left[1:], right[1:], right[:-1]], 1)
                values = lane_index[lane.id] * HEADING_STEPS + _heading_step(lane.heading[:-1])
                for quad, value in zip(quads, values.tolist()):
                    cv2.fillConvexPoly(canvas["cell"], quad, value)
                if heights and lane.z is not None:
                    for quad, z in zip(quads, (0.5 * (lane.z[:-1] + lane.z[1:])).tolist()):
                        cv2.fillConvexPoly(canvas["z"], quad, z)
            canvas["cell"][junction.astype(bool)] = JUNCTION

        low, high = road_map.height_range()
        heights = high - low > 0.05  # a map with bridges or hills: each cell keeps its lane's height
        layers = {"cell": (np.int32, NONE)} | ({"z": (np.float32, 0.0)} if heights else {})
        self.raster: TiledRaster = rasterise(
            (x0 - 5.0, y0 - 5.0, x1 + 5.0, y1 + 5.0),
            resolution,
            layers,
            np.array(boxes).reshape(-1, 4),
            paint,
        )

    def lookup(self, x: float, y: float, z: float | None = None) -> tuple[int, float]:
        """Lane index (or NONE / JUNCTION) and lane heading at a world point. Where a lane of another
        level (a bridge over ``z``, a road under it) holds the cell, the answer is JUNCTION: no lane
        of this level is known there, so no wrong-way or off-route judgement is made."""
        cell = int(self.raster.lookup("cell", x, y))
        if cell >= 0 and z is not None and "z" in self.raster.layers:
            if abs(self.raster.lookup("z", x, y) - z) > LEVEL_GAP:
                return JUNCTION, 0.0
        if cell < 0:
            return cell, 0.0
        lane, step = divmod(cell, HEADING_STEPS)
        return lane, step * (2 * math.pi / HEADING_STEPS) - math.pi


def _heading_step(heading: np.ndarray) -> np.ndarray:
    return np.round((np.asarray(heading) + math.pi) * (HEADING_STEPS / (2 * math.pi))).astype(np.int64) % HEADING_STEPS


class AreaGrid:
    """A fine raster (default 0.1 m) of the union of polygons grown by ``grow`` metres, for O(1) "is
    this point inside" tests. The parts are painted one by one (the raster of a union is the union of
    the rasters), so a town's area never has to be unioned."""

    def __init__(self, parts: Sequence[Polygon], grow: float = 0.0, resolution: float = 0.1) -> None:
        grown = shapely.buffer(np.array(list(parts), dtype=object), grow) if grow else np.array(list(parts), object)
        polygons = [p for g in grown for p in getattr(g, "geoms", [g]) if p.geom_type == "Polygon" and not p.is_empty]
        box = shapely.bounds(np.array(polygons, dtype=object)).reshape(-1, 4)
        bounds = (box[:, 0].min() - 1.0, box[:, 1].min() - 1.0, box[:, 2].max() + 1.0, box[:, 3].max() + 1.0)

        def paint(canvas: dict[str, np.ndarray], block_origin: np.ndarray, items: np.ndarray) -> None:
            def px(ring) -> np.ndarray:
                return np.round((np.asarray(ring.coords)[:, :2] - block_origin) / resolution).astype(np.int32)

            inside = canvas["inside"]
            for i in items:
                poly = polygons[i]
                if not poly.interiors:
                    cv2.fillPoly(inside, [px(poly.exterior)], 1)
                    continue
                own = np.zeros_like(inside)  # a part's holes must not erase its neighbours
                cv2.fillPoly(own, [px(poly.exterior)], 1)
                for hole in poly.interiors:
                    cv2.fillPoly(own, [px(hole)], 0)
                inside |= own

        self.raster: TiledRaster = rasterise(bounds, resolution, {"inside": (np.uint8, 0)}, box, paint)

    def contains(self, x: float, y: float) -> bool:
        return bool(self.raster.lookup("inside", x, y))


def _box(points: np.ndarray) -> tuple[float, float, float, float]:
    return (*points.min(0)[:2].tolist(), *points.max(0)[:2].tolist())


class StackedAreas:
    """Where drivable lanes lie over each other (a bridge deck over a road), which of them an actor is
    on is a question of height: there a point is drivable for an actor at height z only if a lane at
    z's level (within ``LEVEL_GAP``) covers it. Elsewhere the flat raster answers."""

    def __init__(self, lanes: list, parts: list[Polygon], zones: Polygon) -> None:
        self.lanes, self.parts, self.zones = lanes, parts, zones
        pieces = getattr(zones, "geoms", [zones])
        self.boxes = np.array([p.bounds for p in pieces]).reshape(-1, 4) + [-5.0, -5.0, 5.0, 5.0]
        shapely.prepare(self.zones)
        for p in parts:
            shapely.prepare(p)

    @classmethod
    def of(cls, road_map: RoadMap, grow: float) -> StackedAreas | None:
        """The stacked zones of a map (None where no drivable lanes cross at different levels)."""
        lanes = [lane for lane in road_map.lanes.values() if lane.drivable and lane.z is not None]
        if len(lanes) < 2:
            return None
        z_lo = np.array([float(lane.z.min()) for lane in lanes])
        z_hi = np.array([float(lane.z.max()) for lane in lanes])
        polygons = np.array([lane.polygon for lane in lanes], dtype=object)
        a, b = shapely.STRtree(polygons).query(polygons, predicate="intersects")
        apart = (a < b) & ((z_hi[a] - z_lo[b] > LEVEL_GAP) | (z_hi[b] - z_lo[a] > LEVEL_GAP))
        zones, involved = [], set()
        for i, j in zip(a[apart].tolist(), b[apart].tolist()):
            overlap = polygons[i].intersection(polygons[j])
            if overlap.is_empty:
                continue
            at = np.asarray(overlap.representative_point().coords)[0]
            if abs(_height_near(lanes[i], at) - _height_near(lanes[j], at)) > LEVEL_GAP:
                zones.append(overlap.buffer(grow + 1.0))
                involved |= {i, j}
        if not zones:
            return None
        area = shapely.union_all(zones)
        near = [k for k in range(len(lanes)) if polygons[k].intersects(area)]
        return cls([lanes[k] for k in near], [polygons[k].buffer(grow) for k in near], area)

    def near(self, x: float, y: float) -> bool:
        """Whether (x, y) is within 5 m of a stacked zone's box (a cheap test before the exact one)."""
        b = self.boxes
        return bool(((b[:, 0] <= x) & (x <= b[:, 2]) & (b[:, 1] <= y) & (y <= b[:, 3])).any())

    def drivable(self, corners: np.ndarray, z: float, flat: np.ndarray) -> bool | None:
        """Whether all ``corners`` [4, 2] lie on lanes at height ``z``'s level, given the flat raster's
        verdict per corner (``flat``) for those outside the stacked zones; None when none is inside one
        (the flat raster decides alone)."""
        stacked = shapely.contains_xy(self.zones, corners[:, 0], corners[:, 1])
        if not stacked.any():
            return None
        covered = ~stacked & flat
        for lane, part in zip(self.lanes, self.parts):
            inside = shapely.contains_xy(part, corners[:, 0], corners[:, 1]) & ~covered
            for k in np.flatnonzero(inside):
                covered[k] = abs(_height_near(lane, corners[k]) - z) <= LEVEL_GAP
        return bool(covered.all())


def _height_near(lane, xy: np.ndarray) -> float:
    """Height of the lane's centreline point nearest to ``xy``."""
    return float(lane.z[int(np.argmin(np.hypot(*(lane.centerline - xy).T)))])
