"""The route's own lateral actions: what driving the route ahead's centreline would steer, per plan step.

The tiny VLA's flow head turns less than the road does. Closed loop on `core_large` val, the recipe's
plans turn 0.63-0.83 of a curve and 0.26-0.60 of a junction's turn (``evaluation.steering``'s planned
ratio). On its own training samples they turn 0.74-0.96 (``benchmarks/plan_turning.py``). The route
ahead is in its inputs, and the flow has to learn to turn from it. ``[model] route_origin`` starts the
flow from these actions instead (plus the manoeuvre's mean residual), so the head learns what the car
does *beside* following the route. On the expert's data they leave 0.30 m/s^2 of a curve's 1.38 (rms
lateral acceleration) to learn, and nothing of a junction's, where the speed is the traffic's.
Measured in one draw, the plans then turn 0.95 of a curve, the car drives curves no better, and the
model loses 11.4 points on val at the junctions and lane changes (docs/experiments/rl.md, stop 82):
off by default.

The speed is the car's now, slowed where the route's curvature asks (``CURVE_LAT_ACCEL``) and early
enough to brake for it (``CURVE_BRAKE``): at a junction the car turns slowly, and the lateral
acceleration of a turn is the curvature times the speed squared. Arrays in, one row per sample (a
numba kernel drives each row), so an SFT dataset's origins and one decision's are computed alike.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from agents.vla.action_space import DT, SPEED_FLOOR, SPEED_MAX, STEPS, LateralAction, bounds

CURVE_LAT_ACCEL = 2.5  # m/s^2 a curve is driven at (the expert's route follower keeps the same)
CURVE_BRAKE = 2.0  # m/s^2 of braking ahead of a curve
MIN_SEGMENT_M = 1e-3  # shorter route segments (a route's clamped end repeats its last point) have no heading


def route_curvature(route: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arc length ``[B, P - 2]`` of each interior point of the routes ``[B, P, 2]`` (ego frame, from their
    first point) and the curvature there (1/m, left positive): heading change over the mean length of
    the two segments. A repeated point keeps the heading before it, so a route's clamped end reads straight."""
    step = np.diff(np.asarray(route, np.float64), axis=1)
    length = np.hypot(step[..., 0], step[..., 1])
    heading = np.arctan2(step[..., 1], step[..., 0])
    valid = length > MIN_SEGMENT_M
    last_valid = np.maximum.accumulate(np.where(valid, np.arange(length.shape[1]), 0), axis=1)
    heading = np.unwrap(np.take_along_axis(heading, last_valid, axis=1), axis=1)
    arc = np.cumsum(length, axis=1)[:, :-1]
    curvature = np.diff(heading, axis=1) / np.maximum(0.5 * (length[:, 1:] + length[:, :-1]), MIN_SEGMENT_M)
    return arc, np.where(valid[:, 1:], curvature, 0.0)


@njit(cache=True)
def _drive(arc: np.ndarray, curvature: np.ndarray, v0: np.ndarray, steps: int, dt: float, accel: bool) -> np.ndarray:
    """Per row: the speed cap of each route point (its curvature's, and braking for those ahead), then
    ``steps`` of driving at the speed now or the cap, the lateral action read half a step on (curvature
    interpolated along the arc, clamped at the ends; as lateral acceleration with ``accel``)."""
    rows, points = curvature.shape
    out = np.empty((rows, steps))
    cap = np.empty(points)
    for i in range(rows):
        for j in range(points):
            cap[j] = min(np.sqrt(CURVE_LAT_ACCEL / max(abs(curvature[i, j]), 1e-6)), SPEED_MAX)
        for j in range(points - 2, -1, -1):
            cap[j] = min(cap[j], np.sqrt(cap[j + 1] ** 2 + 2.0 * CURVE_BRAKE * (arc[i, j + 1] - arc[i, j])))
        s, v = 0.0, min(max(v0[i], 0.0), SPEED_MAX)
        for t in range(steps):
            v = min(v, _along(s, arc[i], cap))
            k = _along(s + 0.5 * v * dt, arc[i], curvature[i])
            out[i, t] = k * max(v, SPEED_FLOOR) ** 2 if accel else k
            s += v * dt
    return out


@njit(cache=True)
def _along(s: float, arc: np.ndarray, values: np.ndarray) -> float:
    """``values`` at arc length ``s``, linear between the points ``arc`` (increasing), clamped at the ends."""
    if s <= arc[0]:
        return values[0]
    for j in range(1, len(arc)):
        if s <= arc[j]:
            w = (s - arc[j - 1]) / max(arc[j] - arc[j - 1], MIN_SEGMENT_M)
            return values[j - 1] + w * (values[j] - values[j - 1])
    return values[-1]


def route_lateral_actions(
    route: np.ndarray, v0: np.ndarray, lateral: LateralAction, steps: int = STEPS, dt: float = DT
) -> np.ndarray:
    """The lateral actions ``[B, steps]`` (as the flow head's ``lateral`` action, physical units) of driving
    the routes ``[B, P, 2]`` (ego frame) from speeds ``v0`` ``[B]``, never faster than the routes'
    curvature allows; past a route's last point its last curvature holds."""
    if len(route) == 0:
        return np.zeros((0, steps))
    if np.ndim(route) != 3 or np.shape(route)[1] < 3 or np.shape(route)[2] != 2:
        raise ValueError(f"route_lateral_actions: routes must be [B, P >= 3, 2] points, got shape {np.shape(route)}")
    arc, curvature = route_curvature(route)
    v0 = np.ascontiguousarray(v0, np.float64)
    return _drive(np.ascontiguousarray(arc), np.ascontiguousarray(curvature), v0, steps, dt, lateral != "curvature")


def route_origin(
    route: np.ndarray, v0: np.ndarray, lateral: LateralAction, action_std: tuple[float, float] | None
) -> np.ndarray:
    """:func:`route_lateral_actions` in the flow head's normalised units ``[B, steps]`` (float32): over the
    data's lateral std (or the bound, as :func:`agents.vla.action_space.normalise` scales), with no
    mean taken off; the manoeuvre's mean residual carries the data's mean."""
    scale = action_std[1] if action_std is not None else bounds(lateral)[1]
    return (route_lateral_actions(route, v0, lateral) / scale).astype(np.float32)
