"""Trajectory tracking: turn the agent's 64 x (x, y, yaw) ego-frame plan into (accel, steer).

The plan is anchored at the ego pose of the decision that produced it and tracked until the next
one. Lateral control is curvature feed-forward plus feedback on lateral and heading error, with
gains scaled by speed and the heading error taken with the slip angle that the command itself sets
(a 15 m radius curve at 8 m/s is tracked within centimetres, the wheel steady). Longitudinal
control follows the plan's time parameterisation: feed-forward acceleration plus feedback on speed
and along-track position.
Outputs respect AlpaSim's limits (accel [-8, 6] m/s^2, steer +-45 deg), applied by the world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from envs.world import DT, WHEELBASE

PLAN_STEPS = 64
PLAN_DT = 0.1


@dataclass
class ControllerGains:
    omega: float = 3.0  # rad/s: natural frequency of the lateral error dynamics
    zeta: float = 0.9  # damping ratio of the lateral error dynamics
    k_speed: float = 1.5  # 1/s
    k_position: float = 0.6  # 1/s^2
    preview: float = 0.05  # s: look-ahead for actuator lag


class TrajectoryController:
    def __init__(self, gains: ControllerGains | None = None) -> None:
        self.g = gains or ControllerGains()
        self.plan_xy: np.ndarray | None = None

    def set_plan(self, plan: np.ndarray, x: float, y: float, yaw: float, speed: float) -> None:
        """Anchor an ego-frame plan ``[64, 3]`` (waypoints at 0.1 .. 6.4 s) at the current pose.

        The tracked path is the waypoint polyline extended 5 m backwards along its first segment;
        the anchor (the ego now) is projected onto it, so a plan that starts off to one side still
        produces lateral feedback (the anchor is never part of the path itself).
        """
        if plan.dtype != np.float64 or not plan.flags.c_contiguous:
            plan = np.ascontiguousarray(plan, dtype=np.float64)
        self.path_xy, self.path_s, self.path_h, self.path_k, self.plan_s, self.plan_v, self.seg = _prepare(
            plan, x, y, yaw, speed
        )
        self.plan_xy = self.path_xy
        self.elapsed = 0.0

    def control(self, x: float, y: float, yaw: float, speed: float) -> tuple[float, float]:
        """(accel, steer) for the next DT given the current ego pose and speed."""
        if self.plan_xy is None:
            return -3.0, 0.0
        g = self.g
        accel, steer, self.seg = _control(
            self.path_xy,
            self.path_s,
            self.path_h,
            self.path_k,
            self.plan_s,
            self.plan_v,
            self.elapsed,
            self.seg,
            x,
            y,
            yaw,
            speed,
            g.omega,
            g.zeta,
            g.k_speed,
            g.k_position,
            g.preview,
        )
        self.elapsed += DT
        return accel, steer


@njit(cache=True)
def _prepare(plan, x, y, yaw, speed):
    """Everything ``control`` needs from a new plan, in one compiled call."""
    path, path_s, head, kappa = _build_path(plan, x, y, yaw)
    s_anchor, _, _, seg = _project(path, path_s, head, x, y, 0)
    plan_s, plan_v = _time_profile(path_s, s_anchor, speed)
    return path, path_s, head, kappa, plan_s, plan_v, seg


@njit(cache=True)
def _build_path(plan, x, y, yaw):
    """World-frame path (waypoints + a 5 m lead-in), arc length, heading and curvature."""
    n = plan.shape[0]
    c, s = math.cos(yaw), math.sin(yaw)
    path = np.empty((n + 1, 2))
    for k in range(n):
        path[k + 1, 0] = x + c * plan[k, 0] - s * plan[k, 1]
        path[k + 1, 1] = y + s * plan[k, 0] + c * plan[k, 1]
    dx, dy = path[2, 0] - path[1, 0], path[2, 1] - path[1, 1]
    norm = math.sqrt(dx * dx + dy * dy)
    if norm > 1e-3:
        ux, uy = dx / norm, dy / norm
    else:
        ux, uy = math.cos(yaw + plan[0, 2]), math.sin(yaw + plan[0, 2])
    path[0, 0], path[0, 1] = path[1, 0] - 5.0 * ux, path[1, 1] - 5.0 * uy
    m = n + 1
    seg = np.empty(m)
    path_s = np.zeros(m)
    head = np.empty(m)
    for k in range(m - 1):
        ex, ey = path[k + 1, 0] - path[k, 0], path[k + 1, 1] - path[k, 1]
        seg[k] = math.sqrt(ex * ex + ey * ey)
        path_s[k + 1] = path_s[k] + seg[k]
        # heading from geometry where the path moves, from the yaw channel where it stands still
        yaw_k = yaw + plan[max(k - 1, 0), 2]
        head[k] = math.atan2(ey, ex) if seg[k] > 0.05 else yaw_k
    seg[m - 1] = seg[m - 2]
    head[m - 1] = head[m - 2]
    for k in range(1, m):  # unwrap
        d = head[k] - head[k - 1]
        head[k] -= 2 * math.pi * math.floor((d + math.pi) / (2 * math.pi))
    curv = np.zeros(m)
    for k in range(m - 1):
        if seg[k] > 0.05:
            curv[k] = (head[k + 1] - head[k]) / seg[k]
    curv[m - 1] = curv[m - 2]
    kappa = np.empty(m)
    for k in range(m):  # 3-tap smoothing
        kappa[k] = (curv[max(k - 1, 0)] + curv[k] + curv[min(k + 1, m - 1)]) / 3.0
    return path, path_s, head, kappa


@njit(cache=True)
def _project(path, path_s, head, px, py, seg):
    """Arc length, lateral offset (left +), path heading and segment at the projection of (px, py)."""
    n = path.shape[0]
    lo, hi = max(seg - 1, 0), min(seg + 12, n - 1)
    best, kb, tb, lat = np.inf, lo, 0.0, 0.0
    for k in range(lo, hi):
        ax, ay = path[k, 0], path[k, 1]
        bx, by = path[k + 1, 0] - ax, path[k + 1, 1] - ay
        L2 = max(bx * bx + by * by, 1e-9)
        t = min(max(((px - ax) * bx + (py - ay) * by) / L2, 0.0), 1.0)
        ex, ey = px - ax - t * bx, py - ay - t * by
        d2 = ex * ex + ey * ey
        if d2 < best:
            cross = bx * (py - ay) - by * (px - ax)
            best, kb, tb = d2, k, t
            lat = math.sqrt(d2) if cross >= 0 else -math.sqrt(d2)
    s = path_s[kb] + tb * (path_s[kb + 1] - path_s[kb])
    h = head[kb] + tb * (head[min(kb + 1, n - 1)] - head[kb])
    return s, lat, h, kb


@njit(cache=True)
def _wrap(angle):
    """An angle in [-pi, pi)."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


@njit(cache=True)
def _curvature_command(kappa, e_lat, e_yaw, k_lat, k_head):
    """The curvature ``c`` with ``c = kappa - k_lat e_lat - k_head (e_yaw + slip(c))``.

    The centre of mass moves along yaw + slip, and the slip is the one the commanded wheel angle sets
    (tan(slip) = wheelbase c / 2), so the heading error is solved for together with the command. Taken
    from the wheel angle of the moment instead, each step's steer entered the next one's heading error
    with a gain above one, and the wheel swung between the ends of its rate limit at every step in
    every turn. ``f(c)`` rises monotonically: Newton's steps from the small-angle solution.
    """
    half = 0.5 * WHEELBASE
    c = (kappa - k_lat * e_lat - k_head * e_yaw) / (1.0 + k_head * half)
    for _ in range(3):
        f = c - kappa + k_lat * e_lat + k_head * (e_yaw + math.atan(half * c))
        c -= f / (1.0 + k_head * half / (1.0 + (half * c) ** 2))
    return c


@njit(cache=True)
def _time_profile(path_s, s_anchor, speed):
    """Arc length and speed at t = 0, 0.1, ..., 6.4 s: the ego's projection first, then the waypoints."""
    m = path_s.shape[0]
    plan_s = np.empty(m)
    plan_s[0] = s_anchor
    for k in range(1, m):
        plan_s[k] = max(path_s[k], plan_s[k - 1])
    v = np.empty(m - 1)
    for k in range(m - 1):
        v[k] = (plan_s[k + 1] - plan_s[k]) / PLAN_DT
    plan_v = np.empty(m)
    plan_v[0] = speed
    for k in range(1, m - 1):
        plan_v[k] = 0.5 * (v[k - 1] + v[k])
    plan_v[m - 1] = v[m - 2]
    return plan_s, plan_v


@njit(cache=True)
def _control(
    path,
    path_s,
    head,
    kappa_path,
    plan_s,
    plan_v,
    now,
    seg,
    x,
    y,
    yaw,
    speed,
    omega,
    zeta,
    k_speed,
    k_position,
    preview,
):
    t_ref = np.arange(plan_s.shape[0]) * PLAN_DT
    s_ref = np.interp(now, t_ref, plan_s)  # where the plan says we are now
    v_ref = np.interp(now + preview, t_ref, plan_v)
    a_ff = (np.interp(now + DT + preview, t_ref, plan_v) - v_ref) / DT
    s_ego, e_lat, h_path, seg = _project(path, path_s, head, x, y, seg)
    cmd_steer = 0.0
    if path_s[-1] - s_ego > 0.3:  # the plan still moves: curvature feed-forward + feedback
        kappa = np.interp(s_ego + max(speed, 1.0) * preview, path_s, kappa_path)
        # e'' = v^2 kappa: these gains give omega / zeta at every speed for a point moving along its
        # yaw; the slip solved with the command (a wheel angle moves the centre of mass's direction at
        # once) slows that response, to about 2 rad/s at 8 m/s
        v_eff = max(speed, 3.0)
        k_lat, k_head = (omega / v_eff) ** 2, 2.0 * zeta * omega / v_eff
        kappa_cmd = _curvature_command(kappa, e_lat, _wrap(yaw - h_path), k_lat, k_head)
        cmd_steer = math.atan(WHEELBASE * kappa_cmd)
    accel = a_ff + k_speed * (v_ref - speed) + k_position * (s_ref - s_ego)
    if v_ref < 0.05 and s_ref - s_ego < 0.3:
        accel = min(accel, -2.0 if speed > 0.05 else 0.0)
    return accel, cmd_steer, seg
