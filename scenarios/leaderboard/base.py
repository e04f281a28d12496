"""What every scenario type builds on: the route as a line to place things along, the scenario's
parameters read with their defaults, and what a type adds to a route's scenario.

A type is a function ``(route, scenario) -> Played`` registered with :func:`scenario_type`. It places
actors in route coordinates (arc length along the route, lateral offset, left positive) the way
scenario_runner places them in waypoint steps, ties them to the ego's progress (they appear as the
ego comes near and leave once it is past), and raises :class:`NotPlaced` where the road has no room
for it (no lane beside, no junction ahead): that scenario is skipped and named in the run's summary,
as the Leaderboard skips a scenario it fails to build.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scenarios import geometry as geo
from scenarios.maps import Lane, RoadMap

KMH = 1 / 3.6


class NotPlaced(ValueError):
    """The scenario does not fit the road where its trigger lies (the reason is the message)."""


class BadParameter(ValueError):
    """A parameter of the scenario element that makes no sense (the message names it)."""


@dataclass
class Played:
    """What a scenario adds to its route: actors (``ActorSpec`` data), flows, front-brake events,
    stretches kept clear of background traffic, signal programs (by signal id) that replace the
    route's plan at one junction, and the windows in which the Leaderboard times and judges it."""

    actors: list[dict] = field(default_factory=list)
    flows: list[dict] = field(default_factory=list)
    front_brakes: list[dict] = field(default_factory=list)
    clear_background: list[dict] = field(default_factory=list)
    signals: dict[str, dict] = field(default_factory=dict)
    windows: list[dict] = field(default_factory=list)  # ``ScenarioWindow`` data (``play`` adds them)
    signal_holds: list[dict] = field(default_factory=list)  # ``SignalHold`` data: lights set as the ego comes


@dataclass(frozen=True)
class ScenarioType:
    name: str
    build: Callable[[RouteFrame, Placed], Played]
    behaviour: str  # what is played (for the README's table and the report)
    approximated: str  # what differs from scenario_runner
    group: str  # Bench2Drive's ability group


TYPES: dict[str, ScenarioType] = {}


def scenario_type(name: str, behaviour: str, approximated: str = "", group: str = ""):
    """Register a builder under the scenario type ``name`` (one builder may serve several names)."""

    def wrap(fn: Callable[[RouteFrame, Placed], Played]):
        TYPES[name] = ScenarioType(name, fn, behaviour, approximated, group)
        return fn

    return wrap


@dataclass
class Placed:
    """One scenario element of a route: its type, parameters, where its trigger lies along the route and a
    prefix for its actors' ids."""

    name: str
    type: str
    params: dict[str, Any]
    s: float  # route arc length of the trigger point
    prefix: str
    at: tuple[float, float] | None = None  # the trigger point (x, y), where the route file gives it

    def value(self, key: str, default: float, lo: float = 0.0, hi: float = 1e4) -> float:
        raw = self.params.get(key, default)
        if isinstance(raw, tuple) or not isinstance(raw, (int, float)) or not lo <= raw <= hi:
            raise BadParameter(f"{key}={raw!r} is not a number in [{lo:g}, {hi:g}]")
        return float(raw)

    def interval(self, key: str, default: tuple[float, float]) -> tuple[float, float]:
        raw = self.params.get(key, default)
        if isinstance(raw, (int, float)):
            raw = (float(raw), float(raw))
        if not isinstance(raw, tuple) or not 2.0 <= raw[0] <= raw[1] <= 1e4:
            raise BadParameter(f"{key}={raw!r} is not an interval from <= to within [2, 10000] m")
        return raw

    def direction(self, default: str = "right") -> str:
        raw = self.params.get("direction", default)
        if raw not in ("left", "right"):
            raise BadParameter(f"direction={raw!r} is neither 'left' nor 'right'")
        return str(raw)

    def location(self, key: str) -> np.ndarray:
        raw = self.params.get(key)
        try:
            return np.array([float(raw["x"]), float(raw["y"])])
        except (TypeError, KeyError, ValueError):
            raise BadParameter(f"{key} needs x and y, got {raw!r}") from None

    def id(self, what: str) -> str:
        return f"{self.prefix}.{what}"


class RouteFrame:
    """A planned route's lanes as one line: where an arc length lies (which lane, how far along it),
    poses beside the route, the next junction, lanes beside and across."""

    def __init__(self, road_map: RoadMap, lanes: list[str]) -> None:
        self.road_map, self.lanes = road_map, lanes
        self.line, _, starts = road_map.lane_sequence(lanes)
        self.s_line = geo.arc_lengths(self.line)
        self.starts = np.asarray(starts, float)
        self.length = float(self.s_line[-1])
        self.right = driver_right(road_map)
        # where the route changes lanes along a lane: (start, end) arc lengths, its line between the two
        self.blends = [
            (float(start), float(start) + road_map.lanes[a].length)
            for a, b, start in zip(lanes[:-1], lanes[1:], self.starts[1:])
            if road_map.is_lane_change(a, b)
        ]

    def slot(self, s: float) -> int:
        """Index into ``lanes`` of the lane holding arc length ``s`` (the later of a lane change's pair)."""
        return int(min(max(np.searchsorted(self.starts, s, side="right") - 1, 0), len(self.lanes) - 1))

    def lane_at(self, s: float) -> tuple[Lane, float]:
        k = self.slot(s)
        lane = self.road_map.lanes[self.lanes[k]]
        return lane, float(min(max(s - self.starts[k], 0.0), lane.length))

    def pose(self, s: float, lateral: float = 0.0) -> tuple[float, float, float]:
        """World (x, y, heading) at arc length ``s``, ``lateral`` metres left of the route."""
        return _beside(self.line, self.s_line, min(max(s, 0.0), self.length), lateral)

    def lane_pose(self, trigger: Placed, s: float, lateral: float = 0.0) -> tuple[float, float, float]:
        """World (x, y, heading) ``lateral`` metres left of the centre of the lane a scenario's trigger
        point lies in, walked on along its successors to abreast of arc length ``s``: where
        scenario_runner puts a scenario's props (the trigger's waypoint, then ``next`` along its lane).
        The same as ``pose`` but where a lane change lies between the two, whose line runs between two
        lanes (``RoadMap.lane_sequence``): there the props stand in a lane, not across both."""
        if not any(a < max(s, trigger.s) and b > min(s, trigger.s) for a, b in self.blends):
            return self.pose(s, lateral)
        line = self.road_map.lane_sequence(self._trigger_lanes(trigger, s))[0]
        s_line = geo.arc_lengths(line)
        on, _, _ = geo.project(line, s_line, np.array(self.pose(s)[:2]))
        if not 0.0 < on < s_line[-1]:
            return self.pose(s, lateral)  # (the trigger's lane ends before: beside the route as it goes on)
        return _beside(line, s_line, on, lateral)

    def _trigger_lanes(self, trigger: Placed, s: float) -> list[str]:
        """The route's lane whose centre the trigger point lies nearest (along a lane change, the nearer
        of its two: the file's trigger points stand on lane centres, as CARLA's waypoints do, where the
        route's line runs between two), then its successors (the route's where it takes one) past arc
        length ``s``."""
        k = self.slot(trigger.s)
        candidates = [k - 1, k] if k > 0 and self.road_map.is_lane_change(self.lanes[k - 1], self.lanes[k]) else [k]
        here = np.array(trigger.at if trigger.at is not None else self.pose(trigger.s)[:2], float)
        lanes = self.road_map.lanes

        def off_centre(j: int) -> float:
            lane = lanes[self.lanes[j]]
            return abs(geo.project(lane.centerline, lane.s, here)[1])

        j = min(candidates, key=off_centre)
        ids, total = [self.lanes[j]], float(self.starts[j]) + lanes[self.lanes[j]].length
        route_next = set(self.lanes[j + 1 :])
        while total < s + 10.0 and lanes[ids[-1]].successors:
            succ = lanes[ids[-1]].successors
            ids.append(next((x for x in succ if x in route_next), succ[0]))
            total += lanes[ids[-1]].length
        return ids

    def side(self, direction: str) -> float:
        """The lateral sign of a scenario's ``direction`` ("right": the kerb side of a driver on this map)."""
        return self.right if direction == "right" else -self.right

    def in_junction(self, s: float) -> bool:
        return self.lane_at(s)[0].junction is not None

    def forward(self, s: float, distance: float) -> float:
        """``distance`` metres on from ``s``, stopping a metre short of the next junction (as
        scenario_runner walks waypoints forward until one is in a junction)."""
        j = self.junction_after(s)
        end = min(s + distance, self.length - 1.0)
        return min(end, j[0] - 1.0) if j is not None and j[0] > s else end

    def junction_after(self, s: float, within: float = 1e9) -> tuple[float, float, int] | None:
        """(entry arc length, exit arc length, slot of its first junction lane) of the first junction
        the route enters after ``s`` (within ``within`` metres), or None."""
        k = self.slot(s)
        if self.road_map.lanes[self.lanes[k]].junction is not None:  # inside one: the next
            while k < len(self.lanes) and self.road_map.lanes[self.lanes[k]].junction is not None:
                k += 1
        for j in range(k, len(self.lanes)):
            if self.road_map.lanes[self.lanes[j]].junction is None:
                continue
            if self.starts[j] - s > within:
                return None
            e = j
            while e < len(self.lanes) and self.road_map.lanes[self.lanes[e]].junction is not None:
                e += 1
            exit_s = self.starts[e] if e < len(self.lanes) else self.length
            return float(self.starts[j]), float(exit_s), j
        return None

    def lanes_from(self, s: float, length: float) -> list[str]:
        """Route lanes from the one at ``s`` covering ``length`` metres (then successors, if the route ends)."""
        k = self.slot(s)
        out = [self.lanes[k]]
        while self.starts[min(k + 1, len(self.lanes) - 1)] < s + length and k + 1 < len(self.lanes):
            k += 1
            if self.road_map.is_lane_change(out[-1], self.lanes[k]):
                out[-1] = self.lanes[k]  # (an actor's path does not change lanes with the route)
            else:
                out.append(self.lanes[k])
        if self.starts[k] + self.road_map.lanes[out[-1]].length < s + length:
            more = self.road_map.follow(out[-1], s + length - self.starts[k])
            out += more[1:]
        return out

    def beside(self, s: float, side: str) -> Lane | None:
        """The same-direction driving lane beside the route lane at ``s`` on ``side``, if any."""
        lane, _ = self.lane_at(s)
        other = lane.left if side == "left" else lane.right
        found = self.road_map.lanes.get(other) if other is not None else None
        return found if found is not None and found.kind == "driving" else None

    def oncoming(self, s: float) -> Lane | None:
        lane, _ = self.lane_at(s)
        while lane.left is not None and lane.left in self.road_map.lanes:  # the innermost lane's opposite
            lane = self.road_map.lanes[lane.left]
        found = self.road_map.lanes.get(lane.opposite) if lane.opposite is not None else None
        return found if found is not None and found.kind == "driving" else None

    def width(self, s: float) -> float:
        lane, on = self.lane_at(s)
        return float(np.interp(on, lane.s, lane.widths)) if lane.widths is not None else float(lane.width)


def _beside(line: np.ndarray, s_line: np.ndarray, s: float, lateral: float) -> tuple[float, float, float]:
    """World (x, y, heading) ``lateral`` metres left of polyline ``line`` at arc length ``s``."""
    xy, h = geo.interpolate(line, s_line, s)
    h = float(h)
    return float(xy[0] - lateral * math.sin(h)), float(xy[1] + lateral * math.cos(h)), h


_RIGHT: dict[int, tuple[RoadMap, float]] = {}


def driver_right(road_map: RoadMap) -> float:
    """The lateral sign (left +) of a driver's right on this map: -1 where traffic keeps right in
    LoopDrive's right-handed frame (the procedural maps), +1 where the map is mirrored (the CARLA towns
    imported in CARLA's left-handed frame, as route files need: their oncoming lanes lie on the right).
    Decided by where the oncoming lanes lie; a scenario's ``direction`` ("right": the kerb side) is
    read through it."""
    hit = _RIGHT.get(id(road_map))
    if hit is None or hit[0] is not road_map:
        votes = 0.0
        pairs = [(ln, road_map.lanes[ln.opposite]) for ln in road_map.lanes.values() if ln.opposite in road_map.lanes]
        for lane, other in pairs[:: max(1, len(pairs) // 64)]:
            xy, h = lane.pose_at(lane.length / 2)
            d = other.centerline[np.argmin(np.hypot(*(other.centerline - xy).T))] - xy
            votes += np.sign(-math.sin(h) * d[0] + math.cos(h) * d[1])
        hit = _RIGHT[id(road_map)] = (road_map, 1.0 if votes < 0 else -1.0)
    return hit[1]


def on_lane(lane: Lane, xy: np.ndarray) -> float:
    """Arc length of ``xy``'s projection on ``lane``."""
    s, _, _ = geo.project(lane.centerline, lane.s, xy)
    return float(min(max(s, 0.0), lane.length))


def stretch(appear: float, leave: float) -> dict:
    """The ``appear_at`` / ``leave_at`` of an actor or flow: metres of the ego's route it exists between."""
    return {"appear_at": round(appear, 2), "leave_at": round(leave, 2)}


def static_actor(
    aid: str, pose: tuple[float, float, float], size: tuple[float, float, float], kind: str = "static"
) -> dict:
    """A standing object at a world pose: ``size`` = (length, width, height)."""
    length, width, height = size
    return {
        "id": aid,
        "kind": kind,
        "position": [round(pose[0], 3), round(pose[1], 3), round(_wrap(pose[2]), 4)],
        "length": length,
        "width": width,
        "height": height,
        "behaviour": {"type": "static"},
    }


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


CAR = (4.7, 1.9, 1.5)
VAN = (5.2, 2.0, 2.0)
BICYCLE = (1.8, 0.7, 1.7)
CONE = (0.4, 0.4, 0.7)
