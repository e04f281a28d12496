"""nuPlan comfort bounds (also used by Alpamayo's demo reward), checked on ego kinematics.

Bounds (nuPlan closed-loop score): longitudinal acceleration in [-4.05, 2.40] m/s^2, |lateral
acceleration| <= 4.89 m/s^2, |jerk| <= 8.37 m/s^3, |longitudinal jerk| <= 4.13 m/s^3,
|yaw rate| <= 0.95 rad/s, |yaw acceleration| <= 1.93 rad/s^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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
