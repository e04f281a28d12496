"""A raster of the lane network for O(1) "which lane am I on, and which way does it run" queries.

Built once per map with OpenCV polygon fills. Junction connectors overlap each other, so their
cells are marked ``JUNCTION`` instead of naming one lane: wrong-way is not judged inside junctions.
"""

from __future__ import annotations

import cv2
import numpy as np

from scenarios import geometry as geo
from scenarios.maps import RoadMap

NONE = -1
JUNCTION = -2


class LaneGrid:
    def __init__(self, road_map: RoadMap, lane_index: dict[str, int], resolution: float = 0.5) -> None:
        x0, y0, x1, y1 = road_map.bounds
        self.origin = np.array([x0 - 5.0, y0 - 5.0])
        self.res = resolution
        w = int(np.ceil((x1 - x0 + 10.0) / resolution))
        h = int(np.ceil((y1 - y0 + 10.0) / resolution))
        self.lane = np.full((h, w), NONE, np.int32)
        self.heading = np.zeros((h, w), np.float32)
        junction_mask = np.zeros((h, w), np.uint8)
        for lane_id, lane in road_map.lanes.items():
            left = self._px(geo.offset(lane.centerline, lane.width / 2))
            right = self._px(geo.offset(lane.centerline, -lane.width / 2))
            if lane.junction is not None:
                cv2.fillPoly(junction_mask, [np.concatenate([left, right[::-1]])], 1)
                continue
            idx = lane_index[lane_id]
            for k in range(len(left) - 1):
                quad = np.array([left[k], left[k + 1], right[k + 1], right[k]])
                cv2.fillConvexPoly(self.lane, quad, idx)
                cv2.fillConvexPoly(self.heading, quad, float(lane.heading[k]))
        for poly in road_map.extra_drivable:
            cv2.fillPoly(junction_mask, [self._px(poly)], 1)
        self.lane[junction_mask.astype(bool)] = JUNCTION

    def _px(self, pts: np.ndarray) -> np.ndarray:
        return np.round((np.asarray(pts) - self.origin) / self.res).astype(np.int32)

    def lookup(self, x: float, y: float) -> tuple[int, float]:
        """Lane index (or NONE / JUNCTION) and lane heading at a world point."""
        c = int((x - self.origin[0]) / self.res + 0.5)
        r = int((y - self.origin[1]) / self.res + 0.5)
        if 0 <= r < self.lane.shape[0] and 0 <= c < self.lane.shape[1]:
            return int(self.lane[r, c]), float(self.heading[r, c])
        return NONE, 0.0


class AreaGrid:
    """A fine raster (default 0.1 m) of a shapely area, for O(1) "are these points inside" tests."""

    def __init__(self, area, resolution: float = 0.1) -> None:
        x0, y0, x1, y1 = area.bounds
        self.origin = np.array([x0 - 1.0, y0 - 1.0])
        self.res = resolution
        w = int(np.ceil((x1 - x0 + 2.0) / resolution))
        h = int(np.ceil((y1 - y0 + 2.0) / resolution))
        self.mask = np.zeros((h, w), np.uint8)
        polys = list(area.geoms) if hasattr(area, "geoms") else [area]
        for poly in polys:
            cv2.fillPoly(self.mask, [self._px(np.asarray(poly.exterior.coords))], 1)
            for hole in poly.interiors:
                cv2.fillPoly(self.mask, [self._px(np.asarray(hole.coords))], 0)

    def _px(self, pts: np.ndarray) -> np.ndarray:
        return np.round((pts[:, :2] - self.origin) / self.res).astype(np.int32)
