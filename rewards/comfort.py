"""nuPlan comfort bounds (also used by Alpamayo's demo reward), checked on ego kinematics.

Bounds (nuPlan closed-loop score): longitudinal acceleration in [-4.05, 2.40] m/s^2, |lateral
acceleration| <= 4.89 m/s^2, |jerk| <= 8.37 m/s^3, |longitudinal jerk| <= 4.13 m/s^3,
|yaw rate| <= 0.95 rad/s, |yaw acceleration| <= 1.93 rad/s^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass(frozen=True)
class ComfortBounds:
    lon_accel: tuple[float, float] = (-4.05, 2.40)
    lat_accel: float = 4.89
    jerk: float = 8.37
    lon_jerk: float = 4.13
    yaw_rate: float = 0.95
    yaw_accel: float = 1.93


NUPLAN = ComfortBounds()
CHECKS = ("lon_accel", "lat_accel", "jerk", "lon_jerk", "yaw_rate", "yaw_accel")


def comfort_checks(prev, state, dt: float, bounds: ComfortBounds = NUPLAN) -> dict[str, bool]:
    """Which of the six bounds hold for one step between two ego records (True = within bounds)."""
    lat_prev = prev.speed * prev.yaw_rate
    lat = state.speed * state.yaw_rate
    lon_jerk = (state.accel - prev.accel) / dt
    lat_jerk = (lat - lat_prev) / dt
    return {
        "lon_accel": bounds.lon_accel[0] <= state.accel <= bounds.lon_accel[1],
        "lat_accel": abs(lat) <= bounds.lat_accel,
        "jerk": math.hypot(lon_jerk, lat_jerk) <= bounds.jerk,
        "lon_jerk": abs(lon_jerk) <= bounds.lon_jerk,
        "yaw_rate": abs(state.yaw_rate) <= bounds.yaw_rate,
        "yaw_accel": abs(state.yaw_rate - prev.yaw_rate) / dt <= bounds.yaw_accel,
    }


def comfort_series(speed, accel, yaw_rate, dt: float, bounds: ComfortBounds = NUPLAN, smooth: int = 3) -> np.ndarray:
    """Per-step boolean array ``[T, 6]`` of the bounds for a whole episode (columns as ``CHECKS``).

    Derivatives are taken on a short moving average (``smooth`` steps), as nuPlan filters its
    signals before differencing, so one-step numerical spikes do not count as discomfort.
    """
    speed, accel, yaw_rate = (np.asarray(a, float) for a in (speed, accel, yaw_rate))
    if smooth > 1 and len(speed) >= smooth:
        k = np.ones(smooth) / smooth
        accel = np.convolve(np.pad(accel, (smooth // 2, smooth - 1 - smooth // 2), mode="edge"), k, "valid")
        yaw_rate = np.convolve(np.pad(yaw_rate, (smooth // 2, smooth - 1 - smooth // 2), mode="edge"), k, "valid")
    lat = speed * yaw_rate
    lon_jerk = np.gradient(accel, dt) if len(accel) > 1 else np.zeros_like(accel)
    lat_jerk = np.gradient(lat, dt) if len(lat) > 1 else np.zeros_like(lat)
    yaw_acc = np.gradient(yaw_rate, dt) if len(yaw_rate) > 1 else np.zeros_like(yaw_rate)
    return np.stack(
        [
            (accel >= bounds.lon_accel[0]) & (accel <= bounds.lon_accel[1]),
            np.abs(lat) <= bounds.lat_accel,
            np.hypot(lon_jerk, lat_jerk) <= bounds.jerk,
            np.abs(lon_jerk) <= bounds.lon_jerk,
            np.abs(yaw_rate) <= bounds.yaw_rate,
            np.abs(yaw_acc) <= bounds.yaw_accel,
        ],
        1,
    )


def plan_comfort(plan: np.ndarray, dt: float = 0.1, bounds: ComfortBounds = NUPLAN) -> float:
    """Fraction of the steps of a planned trajectory ([T, 3] ego frame, from the origin at rest
    heading) that keep all six comfort bounds: ``comfort_series`` on the plan's own kinematics.

    One compiled pass (the reward service and GRPO's ``alpamayo_demo`` call it for every plan); a
    test holds it to the numpy reference below.
    """
    plan = np.ascontiguousarray(plan, dtype=np.float64)
    if plan.ndim != 2 or plan.shape[1] < 3 or len(plan) < 2:
        raise ValueError(f"a plan is [T >= 2, 3] (x, y, yaw), got shape {plan.shape}")
    b = bounds
    limits = (b.lon_accel[0], b.lon_accel[1], b.lat_accel, b.jerk, b.lon_jerk, b.yaw_rate, b.yaw_accel)
    return float(_plan_comfort(plan, dt, *limits))


def plan_comfort_reference(plan: np.ndarray, dt: float = 0.1) -> float:
    """``plan_comfort`` written with numpy, as the definition the compiled kernel is tested against."""
    xy = np.concatenate([[[0.0, 0.0]], np.asarray(plan, float)[:, :2]])
    v = np.linalg.norm(np.diff(xy, axis=0), axis=1) / dt
    yaw_rate = np.diff(np.unwrap(np.concatenate([[0.0], np.asarray(plan, float)[:, 2]]))) / dt
    return float(comfort_series(v, np.gradient(v, dt), yaw_rate, dt).all(1).mean())


@njit(cache=True)
def _gradient(a, dt, out):
    n = len(a)
    out[0] = (a[1] - a[0]) / dt
    out[n - 1] = (a[n - 1] - a[n - 2]) / dt
    for i in range(1, n - 1):
        out[i] = (a[i + 1] - a[i - 1]) / (2.0 * dt)


@njit(cache=True)
def _smooth3(a, out):
    """The 3-step moving average with edge padding that ``comfort_series`` applies."""
    n, w = len(a), 1.0 / 3.0
    for i in range(n):
        lo, hi = a[max(i - 1, 0)], a[min(i + 1, n - 1)]
        out[i] = lo * w + a[i] * w + hi * w


@njit(cache=True)
def _plan_comfort(plan, dt, acc_lo, acc_hi, lat_max, jerk_max, lon_jerk_max, yaw_rate_max, yaw_acc_max):
    n = plan.shape[0]
    v, yaw_rate, accel = np.empty(n), np.empty(n), np.empty(n)
    px, py, prev_yaw, unwrapped = 0.0, 0.0, 0.0, 0.0
    correction = 0.0
    for i in range(n):
        v[i] = math.hypot(plan[i, 0] - px, plan[i, 1] - py) / dt
        px, py = plan[i, 0], plan[i, 1]
        step = plan[i, 2] - prev_yaw  # np.unwrap: steps of pi or more are wrapped into [-pi, pi)
        if abs(step) >= math.pi:
            wrapped = (step + math.pi) % (2.0 * math.pi) - math.pi
            if wrapped == -math.pi and step > 0:
                wrapped = math.pi
            correction += wrapped - step
        value = plan[i, 2] + correction
        yaw_rate[i] = (value - unwrapped) / dt
        prev_yaw, unwrapped = plan[i, 2], value
    _gradient(v, dt, accel)
    if n >= 3:
        smooth_accel, smooth_rate = np.empty(n), np.empty(n)
        _smooth3(accel, smooth_accel)
        _smooth3(yaw_rate, smooth_rate)
        accel, yaw_rate = smooth_accel, smooth_rate
    lat = v * yaw_rate
    lon_jerk, lat_jerk, yaw_acc = np.empty(n), np.empty(n), np.empty(n)
    _gradient(accel, dt, lon_jerk)
    _gradient(lat, dt, lat_jerk)
    _gradient(yaw_rate, dt, yaw_acc)
    ok = 0
    for i in range(n):
        if (
            acc_lo <= accel[i] <= acc_hi
            and abs(lat[i]) <= lat_max
            and math.hypot(lon_jerk[i], lat_jerk[i]) <= jerk_max
            and abs(lon_jerk[i]) <= lon_jerk_max
            and abs(yaw_rate[i]) <= yaw_rate_max
            and abs(yaw_acc[i]) <= yaw_acc_max
        ):
            ok += 1
    return ok / n
