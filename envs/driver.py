"""A built-in privileged route follower: the world's own reference driver.

It reads the world state directly (route, actors, signals), plans a speed profile with IDM on the
nearest obstacle in the route corridor, red / yellow lights and stop signs, caps speed by the
lane limit and by curvature (2.5 m/s^2 lateral), and returns the Alpamayo-format plan: 64 ego-frame
(x, y, yaw) waypoints at 0.1 s. It is the baseline the demo drives and the starting point of the
expert agent; it does not overtake or nudge.
"""

from __future__ import annotations

import math

import numpy as np

from envs.controller import PLAN_DT, PLAN_STEPS
from envs.world import RED, YELLOW, World
from envs.world.traffic import idm
from scenarios import geometry as geo

LAT_ACCEL = 2.5
CORRIDOR = 1.6  # metres either side of the route centreline that count as "in my way"


def route_speed_cap(world: World) -> np.ndarray:
    """Per route vertex: min(lane speed limit, curvature limit), smoothed backwards for braking."""
    c = world.compiled
    if c.speed_cap is not None:
        return c.speed_cap
    lanes, _ = c.paths.lane_at(np.full(len(c.route_s), c.route_path), c.route_s)
    limit = c.lane_speed_limit[lanes]
    h = np.unwrap(geo.headings(c.route_xy))
    ds = np.maximum(np.gradient(c.route_s), 1e-3)
    kappa = np.abs(np.gradient(h) / ds)
    kappa = np.convolve(kappa, np.ones(5) / 5, mode="same")
    cap = np.minimum(limit, np.sqrt(LAT_ACCEL / np.maximum(kappa, 1e-4)))
    for i in range(len(cap) - 2, -1, -1):  # reachable with 2 m/s^2 braking
        step = c.route_s[i + 1] - c.route_s[i]
        cap[i] = min(cap[i], math.sqrt(cap[i + 1] ** 2 + 2 * 2.0 * step))
    c.speed_cap = cap  # per scenario: every episode and planner reuses it
    return cap


class RouteFollower:
    """Privileged driver that keeps its lane, follows leaders and obeys signals and stop signs."""

    def __init__(self, time_headway: float = 1.5, min_gap: float = 3.0) -> None:
        self.T, self.s0 = time_headway, min_gap
        self._stopped_at: dict[int, float] = {}

    def reset(self) -> None:
        self._stopped_at = {}

    def obstacle_ahead(self, world: World) -> tuple[float, float]:
        """Gap (m, bumper to bumper) and speed along the route of the nearest actor in the corridor."""
        st, c, a = world.state, world.compiled, world.compiled.actors
        s_ego = st.route_s
        idx = np.flatnonzero(st.active)
        idx = idx[idx > 0]
        if not len(idx):
            return math.inf, 0.0
        near = np.hypot(st.x[idx] - st.x[0], st.y[idx] - st.y[0]) < 70.0
        best, v_best = math.inf, 0.0
        lo = st.route_seg
        hi = min(lo + 80, len(c.route_xy) - 1)
        pts, ss = c.route_xy[lo : hi + 1], c.route_s[lo : hi + 1]
        if len(pts) < 2:
            return math.inf, 0.0
        for j in idx[near]:
            s_j, lat_j, k = geo.project(pts, ss, np.array([st.x[j], st.y[j]]))
            if s_j <= s_ego or abs(lat_j) > CORRIDOR + a.width[j] / 2 or s_j >= ss[-1] - 0.01:
                continue
            gap = s_j - s_ego - (a.length[0] + a.length[j]) / 2
            seg_h = math.atan2(pts[k + 1, 1] - pts[k, 1], pts[k + 1, 0] - pts[k, 0])
            v_along = max(0.0, st.speed[j] * math.cos(st.yaw[j] - seg_h))
            if gap < best:
                best, v_best = gap, v_along
        return best, v_best

    def stop_line_ahead(self, world: World) -> float:
        """Gap from the front bumper to the first stop line the ego must stop at."""
        return next_stop_line(world, self._stopped_at)[0]

    def plan(self, world: World) -> np.ndarray:
        st, c = world.state, world.compiled
        cap = route_speed_cap(world)
        gap_obj, v_obj = self.obstacle_ahead(world)
        gap_stop = self.stop_line_ahead(world)
        stops = [gap_stop] if math.isfinite(gap_stop) else []
        ss, _ = speed_profile(
            c.route_s,
            cap,
            float(st.route_s),
            float(st.speed[0]),
            (gap_obj, v_obj),
            stops,
            self.T,
            self.s0,
            max_decel=6.0,
        )
        # the plan lies on the route centreline: the controller's lateral feedback closes any offset
        pts, hs = geo.interpolate(c.route_xy, c.route_s, ss)
        return to_ego_frame(pts, hs, float(st.x[0]), float(st.y[0]), float(st.yaw[0]))


def next_stop_line(world: World, stopped_at: dict[int, float], wait: float = 1.0) -> tuple[float, str | None]:
    """Gap from the front bumper to the first stop line the ego must stop at, and why: ``"red"``, a
    ``"yellow"`` it can still stop for (< 4 m/s^2), or a ``"stop_sign"`` until it has stood there
    for ``wait`` s (``stopped_at`` remembers when, per stop line, across calls)."""
    st, c = world.state, world.compiled
    front = st.route_s + c.actors.length[0] / 2
    sig = world.signal_states()
    for k, (s_line, sg) in enumerate(c.route_stops):  # ordered along the route
        gap = s_line - front
        if gap < -0.5:
            continue
        if sg >= 0:
            state = sig[sg]
            if state == RED or (state == YELLOW and st.speed[0] ** 2 / (2 * max(gap, 0.1)) < 4.0):
                return gap, "red" if state == RED else "yellow"
        else:
            if st.stop_done[k]:
                stopped_at.setdefault(k, st.t)
                if st.t - stopped_at[k] >= wait:
                    continue
            return gap, "stop_sign"
    return math.inf, None


def speed_profile(
    route_s: np.ndarray,
    cap: np.ndarray,
    s: float,
    v: float,
    lead: tuple[float, float] = (math.inf, 0.0),
    stops: list[float] | tuple = (),
    time_headway: float = 1.5,
    min_gap: float = 3.0,
    speed_cap: float = math.inf,
    max_decel: float = 6.0,
    max_accel: float = 1.5,
) -> tuple[np.ndarray, np.ndarray]:
    """IDM rollout over the plan horizon along the route: arc lengths and speeds at 0.1 .. 6.4 s.

    The tightest constraint wins: the free road (``cap``: the speed limit / curvature cap per route
    vertex, and ``speed_cap``), a lead moving at constant speed (bumper gap, speed), and fixed stop
    points (gaps to stop lines, yield points, pedestrians) approached with a short headway;
    ``max_accel`` is the IDM's acceleration (a brisker one for a pass through the oncoming lane).
    """
    gap_lead, v_lead = lead
    gaps = list(stops)
    ss, vs = np.empty(PLAN_STEPS), np.empty(PLAN_STEPS)
    for k in range(PLAN_STEPS):
        v0 = min(float(np.interp(s + v * 0.5, route_s, cap)), speed_cap)
        acc = idm(v, v0, gap_lead, v_lead, max_accel, 2.5, time_headway, min_gap)
        for g in gaps:
            acc = min(acc, idm(v, v0, max(g - 0.5, 0.05), 0.0, max_accel, 2.5, 0.6, 0.5))
        acc = min(max(acc, -max_decel), max_accel)
        v_new = max(v + acc * PLAN_DT, 0.0)
        ds = 0.5 * (v + v_new) * PLAN_DT
        s += ds
        gap_lead += (v_lead - 0.5 * (v + v_new)) * PLAN_DT
        gaps = [g - ds for g in gaps]
        v = v_new
        ss[k], vs[k] = s, v
    return ss, vs


def to_ego_frame(pts: np.ndarray, headings: np.ndarray, x: float, y: float, yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    d = pts - np.array([x, y])
    out = np.empty((len(pts), 3), np.float32)
    out[:, 0] = c * d[:, 0] + s * d[:, 1]
    out[:, 1] = -s * d[:, 0] + c * d[:, 1]
    out[:, 2] = geo.wrap_angle(headings - yaw)
    return out
