"""All actor paths in one padded table, so every actor's pose is found with a few array ops.

A path is a lane sequence (or a walker's polyline). Rows are padded to the longest path, so the
kernels in ``kernels.py`` find any actor's pose with a binary search in its own row.
"""

from __future__ import annotations

import numpy as np

from envs.world import kernels
from scenarios import geometry as geo
from scenarios.maps import RoadMap


class PathTable:
    def __init__(self) -> None:
        self._polylines: list[np.ndarray] = []
        self._lanes: list[list[int]] = []
        self._lane_starts: list[list[float]] = []
        self._heights: list[np.ndarray | None] = []
        self._keys: dict[tuple, int] = {}
        self.frozen = False

    def add(
        self,
        points: np.ndarray,
        lanes: list[int] | None = None,
        lane_starts: list[float] | None = None,
        key: tuple | None = None,
        z: np.ndarray | None = None,
    ) -> int:
        if key is not None and key in self._keys:
            return self._keys[key]
        assert not self.frozen, "paths are added before the world starts"
        self._polylines.append(np.asarray(points, float))
        self._lanes.append(lanes or [])
        self._lane_starts.append(lane_starts or [])
        self._heights.append(None if z is None else np.asarray(z, float))
        if key is not None:
            self._keys[key] = len(self._polylines) - 1
        return len(self._polylines) - 1

    def add_lanes(self, road_map: RoadMap, lane_ids: list[str], lane_index: dict[str, int]) -> int:
        key = ("lanes", *lane_ids)
        if key in self._keys:
            return self._keys[key]
        pts, z, starts = road_map.lane_sequence(lane_ids)
        return self.add(pts, [lane_index[x] for x in lane_ids], starts, key, z)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed arrays (padded to the longest path: a route's); 0 before ``freeze``."""
        if not self.frozen:
            return 0
        packed = (self.xy, self.s, self.heading, self.z, self.length, self.n_points, self.lanes, self.lane_start)
        return sum(a.nbytes for a in packed)

    def freeze(self) -> None:
        """Pack into padded arrays: xy [P, M, 2], s [P, M], heading [P, M], z [P, M], lane tables [P, K]."""
        self.frozen = True
        P = len(self._polylines)
        M = max((len(p) for p in self._polylines), default=2)
        K = max((len(x) for x in self._lanes), default=1) or 1
        self.xy = np.zeros((P, M, 2))
        self.s = np.zeros((P, M))
        self.heading = np.zeros((P, M))
        self.z = np.zeros((P, M))  # heights (0 on a flat map)
        self.length = np.zeros(P)
        self.n_points = np.zeros(P, int)
        self.lanes = np.full((P, K), -1, int)
        self.lane_start = np.full((P, K), np.inf)
        for i, pts in enumerate(self._polylines):
            n = len(pts)
            s = geo.arc_lengths(pts)
            self.xy[i, :n], self.xy[i, n:] = pts, pts[-1]
            self.s[i, :n], self.s[i, n:] = s, s[-1]
            self.heading[i, :n] = geo.headings(pts)
            self.heading[i, n:] = self.heading[i, n - 1]
            if self._heights[i] is not None:
                self.z[i, :n], self.z[i, n:] = self._heights[i], self._heights[i][-1]
            self.length[i] = s[-1]
            self.n_points[i] = n
            k = len(self._lanes[i])
            self.lanes[i, :k] = self._lanes[i]
            self.lane_start[i, :k] = self._lane_starts[i]

    def pose(self, path: np.ndarray, s: np.ndarray, d: np.ndarray | None = None):
        """World x, y and heading at arc length ``s`` (and lateral offset ``d``) on rows ``path``."""
        n = len(path)
        x, y, h = np.empty(n), np.empty(n), np.empty(n)
        d = np.zeros(n) if d is None else np.asarray(d, float)
        kernels.path_pose(
            self.xy,
            self.s,
            self.heading,
            self.n_points,
            np.asarray(path, np.int64),
            np.asarray(s, float),
            d,
            x,
            y,
            h,
            np.arange(n),
        )
        return x, y, h

    @property
    def has_heights(self) -> bool:
        """Whether any path leaves the ground plane by more than a few centimetres."""
        return bool(len(self.z)) and float(np.ptp(self.z)) > 0.05

    def height(self, path: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Height at arc length ``s`` on rows ``path``."""
        out = np.empty(len(path))
        kernels.path_height(self.z, self.s, self.n_points, np.asarray(path, np.int64), np.asarray(s, float), out)
        return out

    def lane_at(self, path: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lane index each actor is on and its arc length within that lane."""
        starts = self.lane_start[path]  # [N, K]
        k = np.maximum((starts <= s[:, None]).sum(1) - 1, 0)
        rows = np.arange(len(path))
        return self.lanes[path, k], s - starts[rows, k]

    def project(self, path: int, xy: np.ndarray) -> tuple[float, float]:
        n = self.n_points[path]
        s, d, _ = geo.project(self.xy[path, :n], self.s[path, :n], xy)
        return s, d
