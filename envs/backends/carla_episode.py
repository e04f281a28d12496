"""An episode on CARLA as our metrics see it: the ego on its planned route, and our event log.

The embedded world computes its events itself; on CARLA the server reports what happened (collision
and lane-invasion sensors, the traffic light the ego is at, the lane under it) and
:class:`CarlaEpisode` turns each 0.1 s of that (a :class:`FrameData`) into the same records the
embedded world writes: ``rewards.EgoState`` for the reward terms, and events ``collision`` (with
``actor_kind`` and ``at_fault`` by the same contact rule), ``offroad``, ``red_light`` (the ego's front
crossing the stop line of a red light), ``stop_sign`` (crossing a stop sign's line without having
stopped within 8 m before it), ``wrong_way`` (sustained driving against the lane),
``route_deviation`` and ``route_complete``, for ``rewards.compute_suites``, by the same rules
(:mod:`envs.episode_rules`). It needs no server.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.episode_rules import RouteBook, StopLine, collision_event, is_wrong_way, pass_stop_lines
from envs.world.kernels import Boxes, ego_threat
from envs.world.world import DT
from rewards import EgoState, EpisodeLog
from rewards.events import Event, EventKind
from scenarios import geometry as geo

GOAL_MARGIN_M = 2.0  # the route counts as complete this close to its end
CONTACT_GAP_S = 1.0  # a new collision with the same actor needs this long without contact
STOP_LINE_ON_ROUTE_M = 4.0  # a light's stop point farther than this from the route is another lane's
OFF_ROUTE_LATERAL_M = 5.0  # farther than this from the route centreline is outside the route's lanes


@dataclass
class TrafficLight:
    id: int
    red: bool
    stop_xy: np.ndarray  # [K, 2] the light's stop-line points, our frame


@dataclass
class FrameData:
    """One server frame as the session reads it (positions in our frame, speeds in m/s)."""

    frame: int
    images: dict[str, np.ndarray] = field(default_factory=dict)  # camera name -> [H, W, 3] uint8 RGB
    events: list[dict[str, Any]] = field(default_factory=list)  # the sensors' collision / lane_invasion
    ego: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # x, y, yaw, speed
    ego_size: tuple[float, float] = (4.9, 2.1)  # length, width
    speed_limit: float = 13.9
    on_road: bool = True  # a driving lane lies under the ego
    lane_yaw: float | None = None  # that lane's direction
    light: TrafficLight | None = None  # the traffic light that governs the ego's lane, if any
    stop_signs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # [K, 2] nearby stop signs' lines
    others: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))  # [M, 6] x, y, yaw, speed, length, width


def actor_kind(type_id: str) -> str:
    """CARLA blueprint id -> our actor kind (cyclists are vehicles, as in the embedded world)."""
    if type_id.startswith("walker."):
        return "pedestrian"
    if type_id.startswith("vehicle."):
        return "vehicle"
    return "static"


class CarlaEpisode:
    """Route bookkeeping and events for one episode; ``advance`` once per 0.1 s."""

    def __init__(self, route: np.ndarray, first: FrameData, leaderboard_rules: bool = False) -> None:
        route = np.asarray(route, float)
        if route.ndim != 2 or route.shape[1] != 2 or len(route) < 2:
            raise ValueError(f"a route must be [N >= 2, 2] points, got shape {route.shape}")
        self.route_xy = route
        self.route_s = geo.arc_lengths(route)
        self.route_heading = geo.headings(route)
        self.goal_distance = max(float(self.route_s[-1]) - GOAL_MARGIN_M, 0.0)
        self.t = 0.0
        self.log: list[Event] = []
        self.steer = 0.0
        self.segment = 0
        self.stop_lines: dict[int, float] = {}  # light id -> stop line's arc length on the route
        self.sign_lines: dict[tuple[int, int], float | None] = {}  # stop sign (decimetres) -> its line on the route
        self.signs_done: defaultdict[tuple[int, int], bool] = defaultdict(bool)  # stop signs the ego has stopped at
        self.contacts: dict[int, float] = {}  # actor id -> last time in contact
        self.frame = first
        self.start_s, self.lateral, self.heading_error = self._project(first.ego)
        self.route_s_now, self.progress = self.start_s, self.start_s
        self.distance = 0.0
        self.offroad = False
        self.route = RouteBook.for_route(self.goal_distance, leaderboard_rules)
        self.red_light_line: float | None = None
        self.accel = self.yaw_rate = 0.0

    # --- where the ego is --------------------------------------------------------------------------------
    def _project(self, ego: tuple[float, float, float, float]) -> tuple[float, float, float]:
        """Arc length, lateral offset and heading error on the route, searched near the last match."""
        lo, hi = max(self.segment - 20, 0), min(self.segment + 200, len(self.route_xy))
        s, lateral, k = geo.project(self.route_xy[lo:hi], self.route_s[lo:hi], np.array(ego[:2]))
        self.segment = lo + k
        heading_error = float(geo.wrap_angle(ego[2] - self.route_heading[self.segment]))
        return s, lateral, heading_error

    @property
    def route_progress(self) -> float:
        return self.progress - self.start_s

    @property
    def route_completion(self) -> float:
        return min(self.route_progress / self.goal_distance, 1.0) if self.goal_distance > 0 else 1.0

    def ego_record(self) -> EgoState:
        f = self.frame
        ttc, gap = self._threat()
        motion = (self.accel, self.yaw_rate, self.steer)
        route = (self.route_progress, self.route_completion, self.lateral, self.heading_error, f.speed_limit)
        flags = (self.offroad, self.route.wrong_way, self.route.off_route_lanes)
        return EgoState(self.t, *f.ego, *motion, *route, *flags, ttc, gap, self.stop_ahead())

    def _threat(self) -> tuple[float, float]:
        f = self.frame
        o = f.others
        x, y, yaw, speed = (np.concatenate([[v], o[:, i]]) for i, v in enumerate(f.ego))
        length, width = np.concatenate([[f.ego_size[0]], o[:, 4]]), np.concatenate([[f.ego_size[1]], o[:, 5]])
        return ego_threat(Boxes(x, y, yaw, speed, np.ones(len(x), np.bool_), length, width, np.zeros(len(x))), 0.3)

    def stop_ahead(self) -> float:
        """Metres from the front bumper to the next line the ego must stop at: a red light's, or a stop
        sign's it has not stopped at yet (inf if none)."""
        front = self.route_s_now + self.frame.ego_size[0] / 2
        lines = [self.red_light_line] if self.red_light_line is not None else []
        lines += [s for k, s in self.sign_lines.items() if s is not None and not self.signs_done[k]]
        gaps = [line - front for line in lines if line - front >= -0.5]
        return min(gaps) if gaps else math.inf

    # --- one 0.1 s step --------------------------------------------------------------------------------------
    def advance(self, frame: FrameData, sensor_events: list[dict[str, Any]], steer: float) -> list[Event]:
        """Take the last server frame of a 0.1 s step and the sensor events of all its frames; return
        our events for the step (also appended to ``log``)."""
        prev, prev_speed = self.frame.ego, self.frame.ego[3]
        self.frame, self.steer = frame, steer
        self.t = round(self.t + DT, 6)
        x, y, yaw, speed = frame.ego
        self.accel = (speed - prev_speed) / DT
        self.yaw_rate = float(geo.wrap_angle(yaw - prev[2])) / DT
        self.distance += math.hypot(x - prev[0], y - prev[1])
        prev_front = self.route_s_now + frame.ego_size[0] / 2
        prev_progress = self.progress
        self.route_s_now, self.lateral, self.heading_error = self._project(frame.ego)
        self.progress = max(self.progress, self.route_s_now)
        front = self.route_s_now + frame.ego_size[0] / 2
        t = self.t
        events = self._collisions(sensor_events)

        if not frame.on_road and not self.offroad:
            events.append(Event(EventKind.OFFROAD, t, lateral=float(self.lateral)))
        self.offroad = not frame.on_road

        lines = [StopLine(key, line) for key, line in self._sign_lines(frame.stop_signs)]
        self.red_light_line = None
        if frame.light is not None:
            line = self._stop_line(frame.light)
            if line is not None and frame.light.red:
                self.red_light_line = line
                lines.append(StopLine(("light", frame.light.id), line, str(frame.light.id), red=True))
        events += pass_stop_lines(t, prev_front, front, speed, lines, self.signs_done)

        wrong = is_wrong_way(yaw, frame.lane_yaw, speed)
        off_route = self.offroad or wrong or abs(self.lateral) > OFF_ROUTE_LATERAL_M
        moved = self.progress - prev_progress
        events += self.route.update(t, DT, moved, self.route_progress, self.lateral, speed, wrong, off_route, "carla")
        events += [Event(EventKind.LANE_INVASION, t) for e in sensor_events if e["type"] == "lane_invasion"]
        self.log.extend(events)
        return events

    def _collisions(self, sensor_events: list[dict[str, Any]]) -> list[Event]:
        """One event when a contact with an actor begins (the sensor fires on every frame of it)."""
        out = []
        for e in sensor_events:
            if e["type"] != "collision":
                continue
            actor, last = int(e["other_id"]), self.contacts.get(int(e["other_id"]))
            self.contacts[actor] = self.t
            if last is not None and self.t - last <= CONTACT_GAP_S:
                continue
            kind = actor_kind(e["other_type"])
            xy = tuple(e["other_xy"])
            out.append(
                collision_event(
                    self.t,
                    self.frame.ego,
                    self.frame.ego_size,
                    f"carla:{actor}",
                    kind,
                    xy,
                    float(e.get("other_speed", 0.0)),
                )
            )
        return out

    def _stop_line(self, light: TrafficLight) -> float | None:
        """The light's stop line as an arc length on the route (once per light), or None if it is not on it."""
        if light.id not in self.stop_lines:
            best = None
            for p in np.asarray(light.stop_xy, float).reshape(-1, 2):
                s, lateral, _ = geo.project(self.route_xy, self.route_s, p)
                if abs(lateral) <= STOP_LINE_ON_ROUTE_M and (best is None or s < best):
                    best = s
            self.stop_lines[light.id] = best
        return self.stop_lines[light.id]

    def _sign_lines(self, signs: np.ndarray) -> list[tuple[tuple[int, int], float]]:
        """The nearby stop signs on the route, as (key, arc length of the line), projected once each."""
        out = []
        for x, y in np.asarray(signs, float).reshape(-1, 2):
            key = (round(x * 10), round(y * 10))
            if key not in self.sign_lines:
                s, lateral, _ = geo.project(self.route_xy, self.route_s, np.array([x, y]))
                self.sign_lines[key] = s if abs(lateral) <= STOP_LINE_ON_ROUTE_M else None
            if self.sign_lines[key] is not None:
                out.append((key, self.sign_lines[key]))
        return out

    # --- the episode for the metric suites ---------------------------------------------------------------
    def episode_log(self, ego: list[EgoState]) -> EpisodeLog:
        """The episode as the suites read it, with the ego's record at every 0.1 s (the env keeps those)."""
        return EpisodeLog(
            events=list(self.log),
            ego=list(ego),
            route_length=self.goal_distance,
            dt=DT,
            timed_out=self.route.timed_out,
            distance_outside_route_lanes=self.route.distance_outside_route_lanes,
        )

    def stats(self) -> dict[str, float]:
        return self.route.summary(self.t, self.distance, self.route_progress, self.route_completion)
