"""Routes on a CARLA map's road topology, with our own planner (the client wheel ships no ``agents``).

``Map.get_topology()`` gives lane segments as (entry, exit) waypoint pairs; the session samples each
segment into a polyline (``Waypoint.next``). Here, with plain arrays: segment ends that coincide
(within ``snap`` m) become graph nodes, segments become edges weighted by their length, and A* with
the straight-line heuristic finds the shortest drivable route between two points. The route is the
concatenated polyline, resampled every ``spacing`` m, in LoopDrive's frame.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np


class NoRouteError(ValueError):
    pass


class RoadGraph:
    def __init__(self, segments: Sequence[np.ndarray], snap: float = 0.5) -> None:
        """``segments``: directed lane polylines [n_i, 2] (n_i >= 2), in driving order."""
        self.segments = [np.asarray(s, float) for s in segments]
        if not self.segments or any(s.ndim != 2 or len(s) < 2 or s.shape[1] != 2 for s in self.segments):
            raise ValueError("segments must be a non-empty list of [n >= 2, 2] polylines")
        ends = np.array([p for s in self.segments for p in (s[0], s[-1])])
        self.nodes: list[np.ndarray] = []
        node_of = []
        for p in ends:  # snap coinciding ends to one node
            for i, q in enumerate(self.nodes):
                if np.hypot(*(p - q)) <= snap:
                    node_of.append(i)
                    break
            else:
                self.nodes.append(p)
                node_of.append(len(self.nodes) - 1)
        self.edges: dict[int, list[tuple[int, int]]] = {}  # node -> [(next node, segment)]
        for k in range(len(self.segments)):
            self.edges.setdefault(node_of[2 * k], []).append((node_of[2 * k + 1], k))
        self.length = [float(np.linalg.norm(np.diff(s, axis=0), axis=1).sum()) for s in self.segments]
        self._node_of = node_of

    def nearest_segment(self, point: np.ndarray) -> tuple[int, float]:
        """(segment, distance along it) of the closest point on any segment."""
        best = (0, 0.0, np.inf)
        for k, s in enumerate(self.segments):
            a, b = s[:-1], s[1:]
            ab = b - a
            t = np.clip(np.einsum("ij,ij->i", np.asarray(point) - a, ab) / np.maximum((ab**2).sum(1), 1e-12), 0, 1)
            proj = a + t[:, None] * ab
            d = np.hypot(*(proj - point).T)
            i = int(np.argmin(d))
            if d[i] < best[2]:
                along = float(np.linalg.norm(ab[:i], axis=1).sum() + t[i] * np.linalg.norm(ab[i]))
                best = (k, along, float(d[i]))
        return best[0], best[1]

    def plan(self, start: np.ndarray, goal: np.ndarray, spacing: float = 1.0) -> np.ndarray:
        """The shortest drivable polyline [n, 2] from the lane point nearest ``start`` to that nearest
        ``goal``; raises :class:`NoRouteError` when the goal cannot be reached."""
        s_seg, s_along = self.nearest_segment(np.asarray(start, float))
        g_seg, g_along = self.nearest_segment(np.asarray(goal, float))
        if s_seg == g_seg and g_along >= s_along:
            path = [s_seg]
        else:
            path = self._astar(self._node_of[2 * s_seg + 1], self._node_of[2 * g_seg], g_seg)
            path = [s_seg, *path, g_seg]
        line = np.concatenate([self.segments[k] for k in path])
        keep = np.concatenate([[True], np.hypot(*np.diff(line, axis=0).T) > 1e-6])
        line = line[keep]
        arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
        end = arc[-1] - (self.length[g_seg] - g_along)
        s = np.arange(s_along, max(end, s_along) + 1e-9, spacing)
        return np.stack([np.interp(s, arc, line[:, 0]), np.interp(s, arc, line[:, 1])], 1)

    def _astar(self, start: int, goal: int, goal_seg: int) -> list[int]:
        """Segments between node ``start`` and node ``goal`` (the entry of ``goal_seg``)."""
        if start == goal:
            return []
        target = self.nodes[goal]
        frontier = [(float(np.hypot(*(self.nodes[start] - target))), 0.0, start)]
        came: dict[int, tuple[int, int]] = {}
        cost = {start: 0.0}
        while frontier:
            _, g, n = heapq.heappop(frontier)
            if n == goal:
                out = []
                while n != start:
                    n, k = came[n]
                    out.append(k)
                return out[::-1]
            if g > cost.get(n, np.inf):
                continue
            for m, k in self.edges.get(n, []):
                c = g + self.length[k]
                if c < cost.get(m, np.inf):
                    cost[m], came[m] = c, (n, k)
                    heapq.heappush(frontier, (c + float(np.hypot(*(self.nodes[m] - target))), c, m))
        raise NoRouteError(f"no drivable route reaches segment {goal_seg}")
