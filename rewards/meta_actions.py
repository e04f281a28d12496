"""Rule-based meta-action detectors over a trajectory (executed or planned), per frame and as segments.

Longitudinal: ``accelerate``, ``decelerate``, ``keep_speed``, ``stop``, ``start_from_stop``.
Lateral: ``keep_lane``, ``turn_left`` / ``turn_right``, ``lane_change_left`` / ``lane_change_right``,
``nudge_left`` / ``nudge_right``. Thresholds are data (``MetaActionThresholds``, loadable from a
dict / TOML table). Signals are smoothed before differencing and labels below ``min_segment`` merge
into their neighbours, so position noise of a few centimetres does not flip labels; the same
detectors label datasets.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

LONGITUDINAL = ("accelerate", "decelerate", "keep_speed", "stop", "start_from_stop")
LATERAL = ("keep_lane", "turn_left", "turn_right", "lane_change_left", "lane_change_right", "nudge_left", "nudge_right")


@dataclass(frozen=True)
class MetaActionThresholds:
    stop_speed: float = 0.3  # m/s: below is "stop"
    accel: float = 0.5  # m/s^2: above is "accelerate"
    decel: float = -0.5  # m/s^2: below is "decelerate"
    start_window: float = 2.0  # s: accelerating within this long after a stop is "start_from_stop"
    turn_angle: float = 0.45  # rad of heading change over turn_window is a turn
    turn_window: float = 3.0  # s
    lane_change_min: float = 2.2  # m of net lateral displacement
    lane_change_max: float = 5.5
    lane_change_heading: float = 0.08  # rad: a lane change / nudge ends with the heading it started with
    yaw_rate_min: float = 0.015  # rad/s: frames turning faster than this belong to a manoeuvre
    nudge_min: float = 0.5  # m of lateral excursion that returns (net < nudge_min)
    smooth: float = 0.5  # s: half-window of the local fits for speed and acceleration
    heading_smooth: float = 1.0  # s: half-window of the local fits for heading
    min_segment: float = 0.6  # s: shorter runs are merged into the previous segment

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetaActionThresholds:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown meta-action thresholds {unknown}; known: {sorted(known)}")
        return cls(**{k: float(v) for k, v in d.items()})

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


DEFAULT_THRESHOLDS = MetaActionThresholds()


def _derivatives(x: np.ndarray, dt: float, half: int) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivative of ``x`` from a local quadratic fit over +-``half`` frames
    (Savitzky-Golay; windows shrink one-sidedly at the ends, so there is no edge bias)."""
    w1, w2 = _fit_weights(len(x), round(dt, 9), half)
    return w1 @ x, w2 @ x


@functools.lru_cache(maxsize=64)
def _fit_weights(T: int, dt: float, half: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows that turn a series into its fitted derivatives: the least-squares fit is linear in the
    data, so it is computed once per (length, dt, window) and then applied as a matrix product."""
    w1, w2 = np.zeros((T, T)), np.zeros((T, T))
    for i in range(T):
        a, b = max(0, i - half), min(T, i + half + 1)
        deg = min(2, b - a - 1)
        if deg < 1:
            continue
        tau = (np.arange(a, b) - i) * dt
        pinv = np.linalg.pinv(np.vander(tau, deg + 1, increasing=True))
        w1[i, a:b] = pinv[1]
        if deg >= 2:
            w2[i, a:b] = 2 * pinv[2]
    w1.flags.writeable = w2.flags.writeable = False
    return w1, w2


def kinematics(
    xy: np.ndarray, dt: float, yaw: np.ndarray | None = None, smooth_s: float = 0.5, heading_smooth_s: float = 1.0
):
    """Speed, acceleration and heading per frame of a trajectory, from local quadratic fits
    (heading over a longer window: it feeds the lateral detectors, which integrate it)."""
    xy = np.asarray(xy, float)
    half = max(1, int(round(smooth_s / dt)))
    vx, ax = _derivatives(xy[:, 0], dt, half)
    vy, ay = _derivatives(xy[:, 1], dt, half)
    speed = np.hypot(vx, vy)
    accel = np.where(speed > 1e-3, (vx * ax + vy * ay) / np.maximum(speed, 1e-3), np.hypot(ax, ay))
    moving = speed > 1.0  # below this the direction of motion is mostly noise
    hh = max(1, int(round(heading_smooth_s / dt)))
    hvx, _ = _derivatives(xy[:, 0], dt, hh)
    hvy, _ = _derivatives(xy[:, 1], dt, hh)
    heading = np.arctan2(hvy, hvx)
    if yaw is not None:  # trust the yaw channel where the trajectory stands still
        heading = np.where(moving, heading, np.asarray(yaw, float))
    else:  # hold the last moving heading through stops
        last = heading[np.argmax(moving)] if moving.any() else 0.0
        for i in range(len(heading)):
            if moving[i]:
                last = heading[i]
            heading[i] = last
    return speed, accel, np.unwrap(heading)


def longitudinal_labels(speed: np.ndarray, accel: np.ndarray, dt: float, th: MetaActionThresholds) -> list[str]:
    out, since_stop = [], np.inf
    for v, a in zip(speed, accel):
        if v < th.stop_speed:
            out.append("stop")
            since_stop = 0.0
            continue
        since_stop += dt
        if a > th.accel:
            out.append("start_from_stop" if since_stop <= th.start_window else "accelerate")
        elif a < th.decel:
            out.append("decelerate")
        else:
            out.append("keep_speed")
    return out


def lateral_labels(xy: np.ndarray, heading: np.ndarray, dt: float, th: MetaActionThresholds) -> list[str]:
    """Turns from the heading change over a centred window; lane changes and nudges from manoeuvres.

    A manoeuvre is a run of frames whose yaw rate exceeds ``yaw_rate_min`` (or a few such runs with
    gaps under 3.5 s: the rate crosses zero mid-manoeuvre) that ends with the heading it started
    with. Across that heading, a net sideways displacement in [lane_change_min, lane_change_max] is a
    lane change; an excursion of at least ``nudge_min`` that comes back is a nudge. (Lane changes on
    curves read as turns or keep_lane.)
    """
    T = len(xy)
    labels = ["keep_lane"] * T
    rate, _ = _derivatives(heading, dt, max(1, int(round(0.5 / dt))))
    runs = _runs(np.abs(rate) > th.yaw_rate_min, bridge=int(round(0.3 / dt)))
    short = int(round(0.5 / dt))
    runs = [(a, b) for a, b in runs if not ((a < 3 or b > T - 4) and b - a < short)]  # one-sided fits at the ends
    lead = max(1, int(round(1.0 / dt)))
    bridge = int(round(3.5 / dt))  # the yaw rate crosses zero mid-manoeuvre
    found: list[tuple[int, int, str]] = []
    for i in range(len(runs)):  # candidate manoeuvres: a few consecutive runs with short gaps
        for j in range(i, min(i + 6, len(runs))):
            if j > i and runs[j][0] - runs[j - 1][1] > bridge:
                break
            a0, b1 = max(0, runs[i][0] - 3), min(T - 1, runs[j][1] + 3)
            before, after = heading[max(0, a0 - lead) : a0 + 1], heading[b1 : b1 + lead + 1]
            if np.ptp(before) > th.lane_change_heading / 2 or np.ptp(after) > th.lane_change_heading / 2:
                continue  # it must start and end driving straight, or it is part of something longer
            h0, h1 = float(np.mean(before)), float(np.mean(after))
            if abs(h1 - h0) > th.lane_change_heading:
                continue  # not back on the same heading: a turn or a curve
            h = (len(before) * h0 + len(after) * h1) / (len(before) + len(after))  # both ends drive straight
            n = np.array([-np.sin(h), np.cos(h)])
            lat = (xy[a0 : b1 + 1] - xy[a0]) @ n
            net, peak = lat[-1], np.abs(lat).max()
            if th.lane_change_min <= abs(net) <= th.lane_change_max:
                found.append((a0, b1, "lane_change_left" if net > 0 else "lane_change_right"))
            elif peak >= th.nudge_min and abs(net) < 0.5 * peak and peak < th.lane_change_min:
                found.append((a0, b1, "nudge_left" if lat[int(np.abs(lat).argmax())] > 0 else "nudge_right"))
    for a0, b1, name in sorted(found, key=lambda f: f[2].startswith("lane_change")):  # lane changes win
        for k in range(a0, b1 + 1):
            labels[k] = name
    travel = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])
    for a, b in runs:  # slow, wide turns: the whole run of turning counts, not just a window
        dpsi = heading[b] - heading[a]
        same_way = np.mean(np.sign(rate[a : b + 1]) == np.sign(dpsi)) >= 0.9  # edge fits may flip a frame
        if abs(dpsi) > th.turn_angle and travel[b] - travel[a] > 3.0 and same_way:
            for k in range(a, b + 1):
                labels[k] = "turn_left" if dpsi > 0 else "turn_right"
    half = max(1, int(round(th.turn_window / dt / 2)))
    for i in range(T):
        a, b = max(0, i - half), min(T - 1, i + half)
        dpsi = heading[b] - heading[a]
        if abs(dpsi) > th.turn_angle and travel[b] - travel[a] > max(3.0, 2.0 * (b - a) * dt):  # moving > 2 m/s
            labels[i] = "turn_left" if dpsi > 0 else "turn_right"
    return labels


def _runs(mask: np.ndarray, bridge: int) -> list[tuple[int, int]]:
    """Index ranges (inclusive) of True runs, bridging gaps of up to ``bridge`` frames."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return []
    out = [[idx[0], idx[0]]]
    for k in idx[1:]:
        if k - out[-1][1] <= bridge + 1:
            out[-1][1] = k
        else:
            out.append([k, k])
    return [(int(a), int(b)) for a, b in out]


def segments(labels: list[str], dt: float, min_duration: float) -> list[dict[str, Any]]:
    """Runs of equal labels as ``{"label", "start", "end"}`` (seconds); short runs join the previous."""
    runs: list[list] = []
    for i, lab in enumerate(labels):
        if runs and runs[-1][0] == lab:
            runs[-1][2] = i + 1
        else:
            runs.append([lab, i, i + 1])
    merged: list[list] = []
    for run in runs:
        if merged and (run[2] - run[1]) * dt < min_duration:
            merged[-1][2] = run[2]
        elif merged and merged[-1][0] == run[0]:
            merged[-1][2] = run[2]
        else:
            merged.append(run)
    if len(merged) > 1 and (merged[0][2] - merged[0][1]) * dt < min_duration:  # a short first run
        merged[1][1] = merged[0][1]
        merged.pop(0)
    return [{"label": lab, "start": round(a * dt, 3), "end": round(b * dt, 3)} for lab, a, b in merged]


def detect(
    xy: np.ndarray,
    dt: float = 0.1,
    yaw: np.ndarray | None = None,
    thresholds: MetaActionThresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """Meta-actions of a trajectory ``xy [T, 2]`` sampled every ``dt`` s.

    Returns per-frame labels and merged segments for both axes, e.g.
    ``{"longitudinal": [...], "lateral": [...], "longitudinal_segments": [...], "lateral_segments": [...]}``.
    """
    xy = np.asarray(xy, float)
    if xy.ndim != 2 or xy.shape[1] < 2 or len(xy) < 3:
        raise ValueError(f"a trajectory needs shape [T >= 3, 2], got {xy.shape}")
    if not np.isfinite(xy).all():
        raise ValueError("trajectory has non-finite values")
    speed, accel, heading = kinematics(xy[:, :2], dt, yaw, thresholds.smooth, thresholds.heading_smooth)
    speed = np.where(speed < thresholds.stop_speed, 0.0, speed)
    lon = longitudinal_labels(speed, accel, dt, thresholds)
    lat = lateral_labels(xy[:, :2], heading, dt, thresholds)
    return {
        "longitudinal": lon,
        "lateral": lat,
        "longitudinal_segments": segments(lon, dt, thresholds.min_segment),
        "lateral_segments": segments(lat, dt, thresholds.min_segment),
    }


def detect_plan(
    plan: np.ndarray, speed0: float, dt: float = 0.1, thresholds: MetaActionThresholds = DEFAULT_THRESHOLDS
) -> dict[str, Any]:
    """Meta-actions of an ego-frame plan ``[64, 3]`` starting at the origin with speed ``speed0``."""
    plan = np.asarray(plan, float)
    back = np.array([[-speed0 * dt, 0.0]])  # one step of history so the first frame has a speed
    xy = np.concatenate([back, [[0.0, 0.0]], plan[:, :2]])
    yaw = np.concatenate([[0.0, 0.0], plan[:, 2]]) if plan.shape[1] > 2 else None
    return detect(xy, dt, yaw, thresholds)


def dominant(result: dict[str, Any]) -> set[str]:
    """The set of meta-actions present for at least ``min_segment`` in a detection result."""
    return {s["label"] for s in result["longitudinal_segments"]} | {s["label"] for s in result["lateral_segments"]}
