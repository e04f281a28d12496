"""Observation pieces that are not images: ego history, route, command and the compact state vector.

All are expressed in the current ego frame (x forward, y left), the Alpamayo convention:
``R_t0^-1 (p - p_t0)``.
"""

from __future__ import annotations

import math

import numpy as np

from envs.world import RED, YELLOW, World, kernels
from scenarios import geometry as geo

HISTORY_STEPS = 16
ROUTE_POINTS = 32
ROUTE_SPACING = 2.0
N_NEIGHBOURS = 8
NEIGHBOUR_RANGE = 60.0
COMMANDS = ("follow", "left", "straight", "right")
EGO_STATE_DIM = 7
STATE_DIM = EGO_STATE_DIM + 2 * (ROUTE_POINTS // 2) + 8 * N_NEIGHBOURS + 3


def to_ego(xy: np.ndarray, x: float, y: float, yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    dx, dy = xy[..., 0] - x, xy[..., 1] - y
    return np.stack([c * dx + s * dy, -s * dx + c * dy], -1)


class EgoHistory:
    """Ring of the last 16 ego poses at 10 Hz (world frame), read out in the current ego frame."""

    def __init__(self) -> None:
        self.buf = np.zeros((HISTORY_STEPS, 4))
        self.k = 0

    def reset(self, world: World) -> None:
        """Warm start: the ego is assumed to have driven along its route at its initial speed."""
        st, c = world.state, world.compiled
        v = float(st.speed[0])
        back = st.route_s - v * 0.1 * np.arange(HISTORY_STEPS - 1, -1, -1)
        pts, hs = geo.interpolate(c.route_xy, c.route_s, np.maximum(back, 0.0))
        lat = st.lateral
        pts = pts + lat * np.stack([-np.sin(hs), np.cos(hs)], 1)
        self.buf[:, 0:2], self.buf[:, 2], self.buf[:, 3] = pts, hs, v
        self.buf[-1] = st.x[0], st.y[0], st.yaw[0], v
        self.k = 0

    def fill(self, x: float, y: float, yaw: float, speed: float) -> None:
        """Warm start where no route history exists (a CARLA spawn): the ego stood here."""
        self.buf[:] = x, y, yaw, speed
        self.k = 0

    def push(self, world: World) -> None:
        st = world.state
        self.push_pose(st.x[0], st.y[0], st.yaw[0], st.speed[0])

    def push_pose(self, x: float, y: float, yaw: float, speed: float) -> None:
        self.buf[self.k] = x, y, yaw, speed
        self.k = (self.k + 1) % HISTORY_STEPS

    def carry(self, before: tuple[float, float, float], after: tuple[float, float, float]) -> None:
        """Move the whole ring rigidly with the ego from pose ``before`` to ``after`` (x, y, yaw): the ego
        moved sideways or turned in a branch (``World.shift_ego``) drove there the way it drove here, so its
        history reads the same in its own frame."""
        (x0, y0, yaw0), (x1, y1, yaw1) = before, after
        local = to_ego(self.buf[:, :2], x0, y0, yaw0)
        c, s = math.cos(yaw1), math.sin(yaw1)
        self.buf[:, 0] = x1 + c * local[:, 0] - s * local[:, 1]
        self.buf[:, 1] = y1 + s * local[:, 0] + c * local[:, 1]
        self.buf[:, 2] += yaw1 - yaw0

    def observe(self, world: World) -> np.ndarray:
        st = world.state
        return self.observe_from(float(st.x[0]), float(st.y[0]), float(st.yaw[0]))

    def observe_from(self, x: float, y: float, yaw: float) -> np.ndarray:
        """The ring, oldest first, in the ego frame at pose (x, y, yaw)."""
        h = np.roll(self.buf, -self.k, axis=0)  # oldest first, newest (now) last
        out = np.empty((HISTORY_STEPS, 4), np.float32)
        out[:, :2] = to_ego(h[:, :2], x, y, yaw)
        out[:, 2] = geo.wrap_angle(h[:, 2] - yaw)
        out[:, 3] = h[:, 3]
        return out


def route_points(world: World) -> np.ndarray:
    """The next ROUTE_POINTS route centreline points at ROUTE_SPACING metres, in the ego frame."""
    st, c = world.state, world.compiled
    return kernels.route_points_ego(
        c.route_xy, c.route_s, st.route_s, ROUTE_SPACING, ROUTE_POINTS, float(st.x[0]), float(st.y[0]), float(st.yaw[0])
    )


def route_command(world: World, horizon: float = 60.0) -> int:
    """High-level command from the route: the turn of the next junction lane within ``horizon`` m."""
    st, c = world.state, world.compiled
    lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
    for lane_idx, start in zip(lanes, starts):
        if lane_idx < 0 or start > st.route_s + horizon:
            break
        lane = c.road_map.lanes[c.lane_ids[lane_idx]]
        if lane.junction is None or start + lane.length < st.route_s:
            continue
        turn = geo.wrap_angle(lane.heading[-1] - lane.heading[0])
        return COMMANDS.index("left" if turn > 0.5 else "right" if turn < -0.5 else "straight")
    return COMMANDS.index("follow")


def route_command_from_geometry(route_xy: np.ndarray, route_s: np.ndarray, s_now: float, horizon: float = 60.0) -> int:
    """The command where the map has no junction lanes to read (CARLA routes): the route's net heading
    change over the next ``horizon`` m, left or right past 0.5 rad (as a junction turn), else follow."""
    _, (h0, h1) = geo.interpolate(route_xy, route_s, np.array([s_now + 2.0, s_now + horizon]))
    turn = float(geo.wrap_angle(h1 - h0))
    return COMMANDS.index("left" if turn > 0.5 else "right" if turn < -0.5 else "follow")


LATERAL_ERROR, HEADING_ERROR = 5, 6  # where ego_state() holds the ego's lateral and heading error to the route


def ego_state(world: World) -> np.ndarray:
    st = world.state
    return np.array(
        [st.speed[0], st.accel[0], st.yaw_rate, st.steer, st.speed_limit, st.lateral, st.heading_error], np.float32
    )


def state_vector(world: World) -> np.ndarray:
    """Compact privileged state for classic RL: ego, route, 8 nearest actors, next stop line."""
    st, c, a = world.state, world.compiled, world.compiled.actors
    out = np.zeros(STATE_DIM, np.float32)
    out[:EGO_STATE_DIM] = ego_state(world)
    route = (c.route_xy, c.route_s, st.route_s, ROUTE_POINTS, ROUTE_SPACING)
    kernels.state_features(out, EGO_STATE_DIM, world.actor_boxes(), *route, N_NEIGHBOURS, NEIGHBOUR_RANGE)
    k = STATE_DIM - 3
    front = st.route_s + a.length[0] / 2
    out[k] = 1.0  # no stop line ahead
    for line, sg in c.route_stops:
        if line - front > -0.5:
            state = world.signal_states()[sg] if sg >= 0 else RED
            out[k] = min(line - front, 100.0) / 100.0
            out[k + 1] = 1.0 if state == RED else 0.5 if state == YELLOW else 0.0
            out[k + 2] = 1.0 if sg < 0 else 0.0
            break
    return out
