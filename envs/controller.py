"""Trajectory tracking: turn the agent's 64 x (x, y, yaw) ego-frame plan into (accel, steer).

The plan is anchored at the ego pose of the decision that produced it and tracked until the next
one. Lateral control is curvature feed-forward plus feedback on lateral and heading error, with
gains scaled by speed so the linearised error dynamics have the same natural frequency and damping
at every speed (exact on a kinematic bicycle in steady state: a 15 m radius curve at 8 m/s is
tracked within centimetres). Longitudinal control follows the plan's time
parameterisation: feed-forward acceleration plus feedback on speed and along-track position.
Outputs respect AlpaSim's limits (accel [-8, 6] m/s^2, steer +-45 deg), applied by the world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
        c, s = math.cos(yaw), math.sin(yaw)
        wx = x + c * plan[:, 0] - s * plan[:, 1]
        wy = y + s * plan[:, 0] + c * plan[:, 1]
        wp = np.stack([wx, wy], 1)
        first = wp[1] - wp[0] if len(wp) > 1 else np.zeros(2)
        norm = float(np.hypot(*first))
        u = first / norm if norm > 1e-3 else np.array([math.cos(yaw + plan[0, 2]), math.sin(yaw + plan[0, 2])])
        path = np.concatenate([[wp[0] - 5.0 * u], wp])
        seg = np.hypot(*np.diff(path, axis=0).T)
        path_s = np.concatenate([[0.0], np.cumsum(seg)])
        # heading from geometry where the path moves, from the yaw channel where it stands still
        geom_h = np.arctan2(np.diff(path[:, 1]), np.diff(path[:, 0]))
        geom_h = np.concatenate([geom_h, geom_h[-1:]])
        yaw_ch = yaw + np.concatenate([[plan[0, 2]], plan[:, 2]])
        moving = np.concatenate([seg, seg[-1:]]) > 0.05
        self.path_xy, self.path_s = path, path_s
        self.path_h = np.unwrap(np.where(moving, geom_h, yaw_ch))
        step = np.maximum(np.concatenate([seg, seg[-1:]]), 1e-6)
        curv = np.where(step > 0.05, np.diff(np.concatenate([self.path_h, self.path_h[-1:]])) / step, 0.0)
        self.path_k = np.convolve(np.concatenate([curv[:1], curv, curv[-1:]]), np.ones(3) / 3, mode="valid")
        # time parameterisation: t = 0 is the ego's projection, then one waypoint per 0.1 s
        self.seg = 0
        s_anchor = self._project(x, y)[0]
        self.plan_t = np.arange(len(wp) + 1) * PLAN_DT
        self.plan_s = np.maximum.accumulate(np.concatenate([[s_anchor], path_s[1:]]))
        v = np.diff(self.plan_s) / PLAN_DT
        self.plan_v = np.concatenate([[speed], v])
        self.plan_v[1:-1] = 0.5 * (v[:-1] + v[1:])
        self.plan_xy = path
        self.elapsed = 0.0

    def _project(self, x: float, y: float) -> tuple[float, float, float]:
        """Arc length, lateral offset (left +) and path heading at the ego's projection."""
        xy = self.path_xy
        lo, hi = max(self.seg - 1, 0), min(self.seg + 12, len(xy) - 1)
        a = xy[lo:hi]
        ab = xy[lo + 1 : hi + 1] - a
        p = np.array([x, y]) - a
        denom = np.maximum((ab * ab).sum(1), 1e-9)
        t = np.clip((p * ab).sum(1) / denom, 0.0, 1.0)
        err = p - t[:, None] * ab
        k = int((err * err).sum(1).argmin())
        self.seg = i = lo + k
        s_ego = self.path_s[i] + t[k] * math.sqrt(denom[k])
        h_path = self.path_h[i] + t[k] * (self.path_h[min(i + 1, len(xy) - 1)] - self.path_h[i])
        cross = ab[k, 0] * p[k, 1] - ab[k, 1] * p[k, 0]
        e_lat = math.copysign(math.sqrt(float((err[k] ** 2).sum())), cross)
        return s_ego, e_lat, h_path

    def control(self, x: float, y: float, yaw: float, speed: float, steer: float = 0.0) -> tuple[float, float]:
        """(accel, steer) for the next DT given the current ego state (and current wheel angle)."""
        if self.plan_xy is None:
            return -3.0, 0.0
        g = self.g
        now = self.elapsed
        self.elapsed += DT
        t_ref = self.plan_t
        s_ref = float(np.interp(now, t_ref, self.plan_s))  # where the plan says we are now
        v_ref = float(np.interp(now + g.preview, t_ref, self.plan_v))
        v_next = float(np.interp(now + DT + g.preview, t_ref, self.plan_v))
        a_ff = (v_next - v_ref) / DT

        s_ego, e_lat, h_path = self._project(x, y)
        # the centre of mass moves along yaw + slip angle, not along yaw
        slip = math.atan(0.5 * math.tan(steer))
        e_head = (yaw + slip - h_path + math.pi) % (2 * math.pi) - math.pi

        # lateral: curvature feed-forward at the preview point + feedback
        s_prev = s_ego + max(speed, 1.0) * g.preview
        kappa = float(np.interp(s_prev, self.path_s, self.path_k))
        plan_moving = self.path_s[-1] - s_ego > 0.3
        if plan_moving:
            # e'' = v^2 kappa on a kinematic bicycle: these gains give omega / zeta at every speed
            v_eff = max(speed, 3.0)
            kappa_cmd = kappa - (g.omega / v_eff) ** 2 * e_lat - 2.0 * g.zeta * g.omega / v_eff * e_head
            steer = math.atan(WHEELBASE * kappa_cmd)
        else:
            steer = 0.0

        # longitudinal: feed-forward + speed and position feedback
        accel = a_ff + g.k_speed * (v_ref - speed) + g.k_position * (s_ref - s_ego)
        if v_ref < 0.05 and s_ref - s_ego < 0.3:
            accel = min(accel, -2.0 if speed > 0.05 else 0.0)
        return accel, steer
