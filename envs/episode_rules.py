"""The rules of an episode, one definition for every backend: what counts as a collision and whose
fault it is, when crossing a stop line is an infraction, and the ego's standing on its route
(wrong-way driving, driving outside the route's lanes, deviation, completion, standing still).

A backend measures (the embedded world from its arrays, CARLA from its sensors and map) and hands
the measurements to these functions once per 0.1 s step; they return the step's :class:`Event`
records. So an infraction means the same thing on every backend, and a metric cannot tell them apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping, MutableSequence
from dataclasses import dataclass

from rewards.events import Event, EventKind

WRONG_WAY_DISTANCE = 50.0  # metres against the lane direction before it counts as wrong-way driving
WRONG_WAY_ANGLE = 2.0  # rad between the ego's heading and its lane's that counts as "against"
ROUTE_DEVIATION = 12.0  # metres from the route centreline that end a bank scenario's route
LEADERBOARD_DEVIATION = 30.0  # ... and a route file's (the Leaderboard's InRouteTest, offroad_max)
STOPPED_BEFORE_M = 8.0  # a stop counts within this many metres before a stop sign's line
STOPPED_SPEED = 0.3  # m/s: slow enough to count as a stop at a stop sign
STANDSTILL_SPEED = 0.1  # m/s: below this the ego is standing still (blocked-time bookkeeping)
AGENT_BLOCKED_S = 180.0  # standing still this long ends the route (the Leaderboard 2.0's AgentBlockedTest)
MOVING_SPEED = 0.5  # m/s: a collision at or below this is not the ego's fault; nor is driving the wrong way


def classify_contact(
    ego_x: float, ego_y: float, ego_yaw: float, ego_length: float, ego_width: float, other_x: float, other_y: float
) -> str:
    """Where the other actor's centre lies around the ego: ``front``, ``rear`` or ``lateral`` (AlpaSim's
    classes; the sector boundaries pass through the ego's corners)."""
    dx, dy = other_x - ego_x, other_y - ego_y
    c, s = math.cos(ego_yaw), math.sin(ego_yaw)
    lon, lat = c * dx + s * dy, -s * dx + c * dy
    if lon > 0 and abs(lat) <= lon * (ego_width / ego_length):
        return "front"
    if lon < 0 and abs(lat) <= -lon * (ego_width / ego_length):
        return "rear"
    return "lateral"


def collision_event(
    t: float,
    ego: tuple[float, float, float, float],
    ego_size: tuple[float, float],
    actor: str,
    actor_kind: str,
    actor_xy: tuple[float, float],
    actor_speed: float,
) -> Event:
    """The event of a contact that begins now. ``ego`` is (x, y, yaw, speed), ``ego_size`` (length,
    width). At fault: the other actor is in front or beside, and the ego was moving."""
    x, y, yaw, speed = ego
    where = classify_contact(x, y, yaw, ego_size[0], ego_size[1], actor_xy[0], actor_xy[1])
    return Event(
        EventKind.COLLISION,
        t,
        actor=actor,
        actor_kind=actor_kind,
        where=where,
        at_fault=where in ("front", "lateral") and speed > MOVING_SPEED,
        ego_speed=float(speed),
        actor_speed=float(actor_speed),
    )


@dataclass(frozen=True)
class StopLine:
    """A stop line on the route at arc length ``s``: a signal's (``signal`` is its id) or a stop sign's."""

    key: object  # identifies the line across steps (for "has the ego stopped here yet")
    s: float
    signal: str | None = None
    red: bool = False  # the signal shows red now


def pass_stop_lines(
    t: float,
    prev_front: float,
    front: float,
    speed: float,
    lines: Iterable[StopLine],
    stopped: MutableSequence[bool] | MutableMapping[object, bool],
) -> list[Event]:
    """Red-light and stop-sign events of a step in which the ego's front moved from ``prev_front`` to
    ``front`` (route arc lengths). ``stopped[key]`` remembers the stop signs the ego has stopped at
    (within ``STOPPED_BEFORE_M`` before the line, slower than ``STOPPED_SPEED``; a bool array indexed
    by line, or a ``defaultdict(bool)``); crossing a stop sign's line without having stopped, or a
    signal's line on red, is an infraction."""
    events = []
    for line in lines:
        if line.s - STOPPED_BEFORE_M < front <= line.s + 0.5 and speed < STOPPED_SPEED:
            stopped[line.key] = True
        if prev_front < line.s <= front:
            if line.signal is not None and line.red:
                events.append(Event(EventKind.RED_LIGHT, t, signal=line.signal))
            elif line.signal is None and not stopped[line.key]:
                events.append(Event(EventKind.STOP_SIGN, t))
    return events


@dataclass
class RouteBook:
    """The ego's standing on its route, advanced once per 0.1 s step (``update``).

    ``wrong_way`` and ``off_route_lanes`` are this step's; the distances accumulate the route progress
    made while they held; ``time_stopped`` is how long the ego has been standing still.
    """

    goal_distance: float
    deviation: float = ROUTE_DEVIATION  # metres off the route that end it
    leaderboard_rules: bool = False  # a route file's episode (the Leaderboard's deviation, no standing time-out)
    wrong_way: bool = False
    off_route_lanes: bool = False
    wrong_way_run: float = 0.0  # metres driven against the lane since entering it
    distance_wrong_way: float = 0.0
    distance_outside_route_lanes: float = 0.0
    route_deviated: bool = False
    agent_blocked: bool = False
    route_completed: bool = False
    time_stopped: float = 0.0

    @classmethod
    def for_route(cls, goal_distance: float, leaderboard_rules: bool) -> RouteBook:
        """The book of a bank scenario's route, or of a route file's (``leaderboard_rules``)."""
        deviation = LEADERBOARD_DEVIATION if leaderboard_rules else ROUTE_DEVIATION
        return cls(goal_distance, deviation, leaderboard_rules)

    def update(
        self,
        t: float,
        dt: float,
        moved: float,
        route_progress: float,
        lateral: float,
        speed: float,
        wrong_way: bool,
        off_route_lanes: bool,
        lane: str | None = None,
    ) -> list[Event]:
        """Take one step's measurements (``moved``: route progress gained in the step) and return its
        events: wrong-way driving once the run against a lane passes ``WRONG_WAY_DISTANCE``, a route
        deviation past ``deviation`` m, the route's completion."""
        events = []
        run_before = self.wrong_way_run
        self.wrong_way_run = self.wrong_way_run + moved if wrong_way else 0.0
        if wrong_way and run_before < WRONG_WAY_DISTANCE <= self.wrong_way_run:
            events.append(Event(EventKind.WRONG_WAY, t, lane=lane))
        self.wrong_way, self.off_route_lanes = wrong_way, off_route_lanes
        if off_route_lanes:
            self.distance_outside_route_lanes += moved
        if wrong_way:
            self.distance_wrong_way += moved
        if abs(lateral) > self.deviation and not self.route_deviated:
            self.route_deviated = True
            events.append(Event(EventKind.ROUTE_DEVIATION, t, lateral=float(lateral)))
        if not self.route_completed and route_progress >= self.goal_distance:
            self.route_completed = True
            events.append(Event(EventKind.ROUTE_COMPLETE, t))
        self.time_stopped = self.time_stopped + dt if speed < STANDSTILL_SPEED else 0.0
        if self.time_stopped >= AGENT_BLOCKED_S - 1e-9 and not (self.agent_blocked or self.route_completed):
            self.agent_blocked = True
            events.append(Event(EventKind.AGENT_BLOCKED, t))
        return events

    def summary(self, t: float, distance: float, route_progress: float, route_completion: float) -> dict[str, float]:
        """The episode's statistics (``info["metrics"]`` has them): time, odometer, route standing."""
        return {
            "time": t,
            "distance": distance,
            "route_progress": route_progress,
            "route_length": self.goal_distance,
            "route_completion": route_completion,
            "distance_outside_route_lanes": self.distance_outside_route_lanes,
            "distance_wrong_way": self.distance_wrong_way,
        }

    @property
    def blocked(self) -> bool:
        """Standing still for 10 s before the route is done: the scenario timed out on the ego."""
        return self.time_stopped >= BLOCKED_S and not self.route_completed

    @property
    def timed_out(self) -> bool:
        """A bank scenario's time out (standing when its time runs out counts as a scenario time-out);
        a route file has the Leaderboard's scenario time-outs as events instead."""
        return self.blocked and not self.leaderboard_rules


BLOCKED_S = 10.0
MIN_SPEED_CHECKPOINTS = 4  # the Leaderboard 2.0 splits a route into this many stretches for its min-speed test
MIN_SPEED_LAST = 0.95  # a route that ends past this share of its length has its last stretch judged


@dataclass
class MinSpeedBook:
    """The Leaderboard 2.0's minimum-speed test of a route file (its ``MinimumSpeedRouteTest``): the
    route in ``checkpoints`` equal stretches; over each, the ego's mean speed against the mean speed of
    the background traffic, over the steps where there is any. Below 100 % it is an infraction that
    carries the percentage (the Leaderboard's score scales by it, Bench2Drive's does not)."""

    route_length: float
    checkpoints: int = MIN_SPEED_CHECKPOINTS
    judged: int = 0  # stretches judged so far
    ego_sum: float = 0.0
    traffic_sum: float = 0.0
    points: int = 0

    def update(self, t: float, progress: float, ego_speed: float, traffic_speed: float | None) -> list[Event]:
        """One step: ``progress`` is metres of route covered, ``traffic_speed`` the background vehicles'
        mean speed (None when there are none). Returns the infraction of a stretch the ego just left."""
        if traffic_speed is not None:
            self.ego_sum += ego_speed
            self.traffic_sum += traffic_speed
            self.points += 1
        reached = min(int(progress / (self.route_length / self.checkpoints) + 1e-9), self.checkpoints)
        return self._judge(t) if reached > self.judged else []

    def close(self, t: float, progress: float) -> list[Event]:
        """The route ended (blocked, deviated) before its last checkpoint: past ``MIN_SPEED_LAST`` of it,
        the stretch under way is judged, as the Leaderboard judges a route that ends at about 99 %."""
        if self.judged < self.checkpoints and progress > MIN_SPEED_LAST * self.route_length:
            return self._judge(t)
        return []

    def _judge(self, t: float) -> list[Event]:
        pct = round(100.0 * self.ego_sum / self.traffic_sum, 2) if self.points and self.traffic_sum > 0 else 100.0
        self.judged += 1
        self.ego_sum = self.traffic_sum = 0.0
        self.points = 0
        return [Event(EventKind.MIN_SPEED, t, percentage=pct)] if pct < 100.0 else []


def is_wrong_way(ego_yaw: float, lane_yaw: float | None, speed: float) -> bool:
    """Driving against the lane under the ego (moving, heading more than ``WRONG_WAY_ANGLE`` off it)."""
    if lane_yaw is None or speed <= MOVING_SPEED:
        return False
    return abs((ego_yaw - lane_yaw + math.pi) % (2 * math.pi) - math.pi) > WRONG_WAY_ANGLE
