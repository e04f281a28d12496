"""A stand-in for a CARLA server, for testing the CARLA env where no server runs.

``FakeCarlaServer`` keeps what a server keeps (its actors, the frame counter, synchronous mode) and
can be told to fail: ``failures = {"prepare": 1}`` makes the next ``prepare`` raise the client's
time-out error once; ``crash_at_frame = N`` makes the server stop answering once, at frame N.
``server.session(host, port, tm_port, timeout_s)`` is a ``session_factory`` for
:class:`envs.backends.carla_env.CarlaDriveEnv`; its sessions have :class:`CarlaSession`'s interface.
The ego is a kinematic bicycle with a CARLA-like pedal response on a fixed route (60 m straight, a
90-degree left curve of radius 40 m, 60 m straight); cameras show colours that encode the ego's pose.
Optional: a pedestrian standing on the route at arc length ``walker_at``; a red light whose stop line
is at ``red_light = (s, red_until_s)``; a stop sign whose line is at ``stop_sign_at``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs.backends.carla_episode import FrameData, TrafficLight
from scenarios import geometry as geo

TIMEOUT = "time-out of 20000ms while waiting for the simulator, make sure the simulator is ready and connected"
ROUTE = geo.resample(
    geo.chain(
        geo.straight(np.zeros(2), 0.0, 60.0),
        geo.arc(np.array([60.0, 0.0]), 0.0, 40.0, math.pi / 2),
        geo.straight(np.array([100.0, 40.0]), math.pi / 2, 60.0),
    ),
    1.0,
)
WALKER_ID, LIGHT_ID = 901, 77


class FakeCarlaServer:
    def __init__(
        self,
        walker_at: float | None = None,
        red_light: tuple[float, float] | None = None,
        stop_sign_at: float | None = None,
    ) -> None:
        self.walker_at, self.red_light, self.stop_sign_at = walker_at, red_light, stop_sign_at
        self.actors: set[int] = set()
        self.frame = 0
        self.synchronous = False
        self.failures: dict[str, int] = {}
        self.crash_at_frame: int | None = None
        self.sessions = 0
        self.next_id = 100

    def maybe_fail(self, what: str) -> None:
        if self.failures.get(what, 0) > 0:
            self.failures[what] -= 1
            raise RuntimeError(TIMEOUT)

    def session(self, host: str, port: int, tm_port: int, timeout_s: float) -> FakeCarlaSession:
        self.maybe_fail("connect")
        self.sessions += 1
        return FakeCarlaSession(self)


class FakeCarlaSession:
    max_steer_rad = math.radians(70.0)

    def __init__(self, server: FakeCarlaServer) -> None:
        self.server = server
        self.mine: list[int] = []
        self.rig: list[Any] = []
        self.t = 0.0

    def connect(self) -> None:
        self.server.maybe_fail("connect")

    def prepare(self, setup) -> None:
        self.server.maybe_fail("prepare")
        self.server.synchronous = True

    def pick_route(self, setup, rng: np.random.Generator) -> np.ndarray:
        return ROUTE.copy()

    def spawn(self, route: np.ndarray, rig, setup) -> None:
        self.server.maybe_fail("spawn")
        self.rig, self.route, self.route_s = list(rig), route, geo.arc_lengths(route)
        self.x, self.y = float(route[0, 0]), float(route[0, 1])
        self.yaw, self.speed, self.t = float(geo.headings(route)[0]), 0.0, 0.0
        for _ in range(len(self.rig) + 3):  # ego, cameras, collision and lane-invasion sensors
            self.mine.append(self.server.next_id)
            self.server.actors.add(self.server.next_id)
            self.server.next_id += 1
        if self.server.walker_at is not None:
            (self.walker_xy,), _ = geo.interpolate(route, self.route_s, np.array([self.server.walker_at]))
            self.mine.append(WALKER_ID)
            self.server.actors.add(WALKER_ID)

    def tick(self, throttle: float, brake: float, steer: float, read: bool = True) -> FrameData:
        self.server.maybe_fail("tick")
        if self.server.frame == self.server.crash_at_frame:
            self.server.crash_at_frame = None
            raise RuntimeError(TIMEOUT)
        assert self.server.synchronous, "ticking a server in asynchronous mode"
        dt = 0.05
        accel = 3.5 * throttle - 8.0 * brake - 0.15 - 4e-4 * self.speed**2
        self.speed = max(self.speed + accel * dt, 0.0)
        wheel = -steer * self.max_steer_rad
        self.yaw = float(geo.wrap_angle(self.yaw + self.speed / 2.85 * math.tan(wheel) * dt))
        self.x += self.speed * math.cos(self.yaw) * dt
        self.y += self.speed * math.sin(self.yaw) * dt
        self.t += dt
        self.server.frame += 1
        s, lateral, k = geo.project(self.route, self.route_s, np.array([self.x, self.y]))
        out = FrameData(self.server.frame, ego=(self.x, self.y, self.yaw, self.speed), ego_size=(4.9, 2.1))
        shade = np.array([int(self.x * 4) % 256, int(self.y * 4) % 256, int(math.degrees(self.yaw)) % 256], np.uint8)
        out.images = {cam.name: np.broadcast_to(shade, (cam.height, cam.width, 3)).copy() for cam in self.rig}
        out.on_road = abs(lateral) < 3.5
        out.lane_yaw = float(geo.headings(self.route)[k]) if out.on_road else None
        if self.server.walker_at is not None:
            wx, wy = self.walker_xy
            out.others = np.array([[wx, wy, 0.0, 0.0, 0.6, 0.6]])
            if math.hypot(wx - self.x, wy - self.y) < 2.45 + 0.3:
                out.events.append(
                    {
                        "type": "collision",
                        "frame": self.server.frame,
                        "other_id": WALKER_ID,
                        "other_type": "walker.pedestrian.0001",
                        "other_xy": (wx, wy),
                        "other_speed": 0.0,
                    }
                )
        if self.server.red_light is not None:
            line, red_until = self.server.red_light
            if line - 30.0 <= s <= line + 5.0:
                (stop_xy,), _ = geo.interpolate(self.route, self.route_s, np.array([line]))
                out.light = TrafficLight(LIGHT_ID, self.t < red_until, stop_xy[None])
        if self.server.stop_sign_at is not None:
            out.stop_signs, _ = geo.interpolate(self.route, self.route_s, np.array([self.server.stop_sign_at]))
        return out

    def close(self) -> None:
        self.server.actors -= set(self.mine)
        self.mine = []
        self.server.synchronous = False


def follow_route(obs: dict[str, Any], speed: float) -> np.ndarray:
    """A trajectory along the observed route points (ego frame) at a constant speed."""
    pts = np.concatenate([np.zeros((1, 2)), obs["route"].astype(float)])
    s = geo.arc_lengths(pts)
    xy, heading = geo.interpolate(pts, s, speed * 0.1 * np.arange(1, 65))
    return np.concatenate([xy, heading[:, None]], 1).astype(np.float32)
