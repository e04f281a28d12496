"""Road-network construction kit used by the procedural families.

A ``MapBuilder`` collects roads (a reference line with forward lanes on its right and backward lanes
on its left, like an OpenDRIVE road), junction connectors between lane ends, signals, stop lines
and crosswalks, then freezes them into a ``RoadMap``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from scenarios import geometry as geo
from scenarios.maps import Crosswalk, Lane, RoadMap, Signal, StopLine

LANE_WIDTH = 3.5
SIDEWALK_WIDTH = 2.5


@dataclass
class Road:
    name: str
    ref: np.ndarray
    fwd: list[str] = field(default_factory=list)  # inner -> outer, travelling along ref
    bwd: list[str] = field(default_factory=list)  # inner -> outer, travelling against ref
    width: float = LANE_WIDTH


class MapBuilder:
    def __init__(self) -> None:
        self.lanes: dict[str, Lane] = {}
        self.signals: dict[str, Signal] = {}
        self.stop_lines: list[StopLine] = []
        self.crosswalks: list[Crosswalk] = []
        self.sidewalks: list[np.ndarray] = []
        self.extra_drivable: list[np.ndarray] = []

    # --- roads and lanes --------------------------------------------------------------------------
    def road(
        self,
        name: str,
        ref: np.ndarray,
        n_fwd: int,
        n_bwd: int,
        speed_limit: float,
        width: float = LANE_WIDTH,
        sidewalks: bool = True,
    ) -> Road:
        road = Road(name, ref, width=width)
        for direction, n, sign in (("f", n_fwd, -1.0), ("b", n_bwd, 1.0)):
            for i in range(n):
                centre = geo.offset(ref, sign * (i + 0.5) * width)
                if direction == "b":
                    centre = centre[::-1].copy()
                lane_id = f"{name}_{direction}{i}"
                has_oncoming = (n_bwd if direction == "f" else n_fwd) > 0
                inner = "double_solid" if has_oncoming else "solid"
                self.lanes[lane_id] = Lane(
                    id=lane_id,
                    centerline=centre,
                    width=width,
                    speed_limit=speed_limit,
                    left_marking=inner if i == 0 else "dashed",
                    right_marking="dashed" if i < n - 1 else "solid",
                )
                (road.fwd if direction == "f" else road.bwd).append(lane_id)
        for ids in (road.fwd, road.bwd):
            for a, b in itertools.pairwise(ids):
                self.lanes[a].right, self.lanes[b].left = b, a
        if road.fwd and road.bwd:
            self.lanes[road.fwd[0]].opposite, self.lanes[road.bwd[0]].opposite = road.bwd[0], road.fwd[0]
        if sidewalks:
            for side, n in ((-1.0, n_fwd), (1.0, n_bwd)):
                inner = geo.offset(ref, side * n * width)
                outer = geo.offset(ref, side * (n * width + SIDEWALK_WIDTH))
                self.sidewalks.append(np.concatenate([inner, outer[::-1]]))
        return road

    def link(self, a: str, b: str) -> None:
        if b not in self.lanes[a].successors:
            self.lanes[a].successors.append(b)
        if a not in self.lanes[b].predecessors:
            self.lanes[b].predecessors.append(a)

    def connector(self, a: str, b: str, junction: str, speed_limit: float | None = None) -> str:
        """A junction lane from the end of ``a`` to the start of ``b`` (Bezier), linked both ways."""
        la, lb = self.lanes[a], self.lanes[b]
        p0, h0 = geo.end_pose(la.centerline)
        h1 = float(lb.heading[0])
        turn = geo.wrap_angle(h1 - h0)
        line = geo.bezier(p0, h0, lb.centerline[0], h1)
        limit = speed_limit if speed_limit is not None else (la.speed_limit if abs(turn) < 0.3 else 8.0)
        lane_id = f"{junction}:{a}->{b}"
        self.lanes[lane_id] = Lane(
            id=lane_id,
            centerline=line,
            width=la.width,
            speed_limit=limit,
            junction=junction,
            left_marking="none",
            right_marking="none",
        )
        self.link(a, lane_id)
        self.link(lane_id, b)
        return lane_id

    # --- control and furniture --------------------------------------------------------------------
    def signal(self, signal_id: str, lanes: list[str], stop_back: float = 1.0) -> None:
        """A light for incoming ``lanes`` (which end at the junction), mounted on the far-side right."""
        last = self.lanes[lanes[-1]]  # outermost incoming lane
        p, h = geo.end_pose(last.centerline)
        right = np.array([np.sin(h), -np.cos(h)])
        fwd = np.array([np.cos(h), np.sin(h)])
        n = len(lanes)
        span = n * last.width
        pos = p + right * (last.width / 2 + 1.5) + fwd * (2 * span + 4.0)
        self.signals[signal_id] = Signal(signal_id, (float(pos[0]), float(pos[1])), float(h + np.pi), list(lanes))
        for lane_id in lanes:
            lane = self.lanes[lane_id]
            self.stop_lines.append(
                StopLine(f"{signal_id}:{lane_id}", lane_id, max(0.0, lane.length - stop_back), signal_id)
            )

    def stop_sign(self, lane_id: str, stop_back: float = 1.0) -> None:
        lane = self.lanes[lane_id]
        self.stop_lines.append(StopLine(f"stop:{lane_id}", lane_id, max(0.0, lane.length - stop_back), None))

    def crosswalk_across(self, road: Road, s0: float, depth: float = 3.0, cw_id: str | None = None) -> Crosswalk:
        """A zebra crossing across the whole road, from arc length ``s0`` to ``s0 + depth`` on its ref."""
        s = geo.arc_lengths(road.ref)
        a, h = geo.interpolate(road.ref, s, s0)
        b, _ = geo.interpolate(road.ref, s, s0 + depth)
        n = np.array([-np.sin(h), np.cos(h)])
        half_l = len(road.bwd) * road.width + 0.3
        half_r = len(road.fwd) * road.width + 0.3
        poly = np.array([a - n * half_r, b - n * half_r, b + n * half_l, a + n * half_l])
        cw = Crosswalk(cw_id or f"cw{len(self.crosswalks)}", poly)
        self.crosswalks.append(cw)
        return cw

    def build(self) -> RoadMap:
        return RoadMap(self.lanes, self.signals, self.stop_lines, self.crosswalks, self.sidewalks, self.extra_drivable)


# --- junction templates ---------------------------------------------------------------------------
ARM_HEADINGS = {"E": 0.0, "N": np.pi / 2, "W": np.pi, "S": -np.pi / 2}
LEFT_OF = {"E": "S", "N": "E", "W": "N", "S": "W"}  # arriving from arm X, a left turn exits on LEFT_OF[X]
RIGHT_OF = {"E": "N", "N": "W", "W": "S", "S": "E"}
OPPOSITE = {"E": "W", "W": "E", "N": "S", "S": "N"}


def junction(
    b: MapBuilder,
    arms: list[str],
    lanes_per_dir: int,
    arm_length: float,
    speed_limit: float,
    crosswalks: bool = True,
    name: str = "j",
) -> dict[str, Road]:
    """A 3- or 4-way junction centred at the origin; returns the arm roads (fwd = leaving the box)."""
    w = LANE_WIDTH
    half = lanes_per_dir * w + 5.0  # junction box half-size (sets the turning radii)
    roads = {}
    for arm in arms:
        h = ARM_HEADINGS[arm]
        d = np.array([np.cos(h), np.sin(h)])
        ref = geo.straight(d * half, h, arm_length)
        roads[arm] = b.road(f"{arm}", ref, lanes_per_dir, lanes_per_dir, speed_limit)
        if crosswalks:
            b.crosswalk_across(roads[arm], 0.5, 3.0, cw_id=f"cw_{arm}")
    b.extra_drivable.append(np.array([[-half, -half], [half, -half], [half, half], [-half, half]]))
    for arm in arms:
        incoming = roads[arm].bwd
        for target, pairs in (
            (OPPOSITE[arm], [(i, i) for i in range(lanes_per_dir)]),
            (LEFT_OF[arm], [(0, 0)]),
            (RIGHT_OF[arm], [(lanes_per_dir - 1, lanes_per_dir - 1)]),
        ):
            if target not in roads:
                continue
            for i, o in pairs:
                b.connector(incoming[i], roads[target].fwd[o], junction=name)
    return roads
