"""How much an agent turns where the road turns: the straight-driving bias as one number.

At every decision the route ahead bends by some heading change over the next metres; the agent's plan
(and then the car, as it drove on) turns by some heading change over the same metres. The
*curvature ratio* is the least-squares slope, through the origin, of what the agent turned on what
the road needed, over the decisions where the road bends::

    ratio = sum(agent_turn * road_turn) / sum(road_turn ** 2)

1.0 follows the road, 0 drives straight ahead whatever the road does, 0.5 turns half as much, and a
negative ratio turns the wrong way. A heading change over a common arc is the curvature integrated
over it, so this is the ratio of mean curvatures, weighted towards the bends that need the most
steering. Plans shorter than ``MIN_ARC_M`` (standing, creeping) say nothing about steering and are
left out; so are decisions where the road turns less than ``MIN_ROAD_TURN``.

The pure functions here read arrays only (the route ahead in the ego frame, the plan, the ego's
poses), so any backend's episodes are measured the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

MIN_ARC_M = 5.0  # a plan shorter than this says nothing about steering
MAX_ARC_M = 40.0  # the bend the next 40 m need (about what a 6.4 s plan covers at urban speeds)
MIN_ROAD_TURN = 0.05  # rad over the arc: where the road is (nearly) straight, nothing is measured


class SteeringSums(NamedTuple):
    """One episode's sums for the ratio (summing them over episodes pools their decisions)."""

    decisions: int = 0
    road_sq: float = 0.0  # sum of road_turn**2 at the planned arcs
    planned: float = 0.0  # sum of planned_turn * road_turn
    driven_road_sq: float = 0.0  # the same at the driven arcs (which can be shorter at an episode's end)
    driven: float = 0.0

    @property
    def planned_ratio(self) -> float | None:
        return self.planned / self.road_sq if self.road_sq > 0 else None

    @property
    def driven_ratio(self) -> float | None:
        return self.driven / self.driven_road_sq if self.driven_road_sq > 0 else None


def arc_lengths(xy: np.ndarray) -> np.ndarray:
    """Cumulative distance along the points ``[N, 2]`` from the first."""
    return np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])


def polyline_turn(xy: np.ndarray, arc: float) -> float:
    """Heading change of a polyline ``[N, 2]`` from its first segment to the one at ``arc`` metres
    (unwrapped, left positive); points that repeat (a route's clamped end) are skipped."""
    step = np.diff(xy, axis=0)
    length = np.hypot(step[:, 0], step[:, 1])
    keep = length > 1e-6
    if keep.sum() < 1:
        return 0.0
    step, length = step[keep], length[keep]
    heading = np.unwrap(np.arctan2(step[:, 1], step[:, 0]))
    ends = np.cumsum(length)
    k = min(int(np.searchsorted(ends, arc)), len(heading) - 1)
    return float(heading[k] - heading[0])


def decision_turns(
    road: np.ndarray, plan: np.ndarray, track_s: np.ndarray, track_yaw: np.ndarray, k: int
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """``(road_turn, planned_turn)`` and ``(road_turn, driven_turn)`` of one decision, each None where
    it measures nothing (a short arc, a straight road).

    ``road``: the route ahead ``[M, 2]`` in the ego frame; ``plan``: ``[T, 3]`` (x, y, yaw) in the same
    frame; ``track_s`` / ``track_yaw``: the ego's whole track as arc length and unwrapped yaw, and ``k``
    the index of its pose at the decision (so an episode's track is measured once, not per decision)."""
    road_arc = float(arc_lengths(road)[-1])
    plan_xy = np.vstack([np.zeros(2), plan[:, :2]])
    plan_s, plan_yaw = arc_lengths(plan_xy), np.unwrap(np.concatenate([[0.0], plan[:, 2]]))
    planned = driven = None
    arc = min(float(plan_s[-1]), road_arc, MAX_ARC_M)
    if arc >= MIN_ARC_M:
        need = polyline_turn(road, arc)
        if abs(need) >= MIN_ROAD_TURN:
            planned = (need, float(np.interp(arc, plan_s, plan_yaw)))
        driven_arc = min(arc, float(track_s[-1] - track_s[k]))
        if driven_arc >= MIN_ARC_M:
            need = polyline_turn(road, driven_arc)
            if abs(need) >= MIN_ROAD_TURN:
                driven = (need, float(np.interp(track_s[k] + driven_arc, track_s, track_yaw) - track_yaw[k]))
    return planned, driven


def episode_sums(decisions: Sequence[tuple[np.ndarray, np.ndarray, int]], poses: np.ndarray) -> SteeringSums:
    """The sums of an episode: ``decisions`` are ``(road, plan, pose_index)`` (the route ahead and the
    plan at a decision, and the index of the ego's pose then in ``poses`` ``[N, 3]`` (x, y, yaw))."""
    track_s, track_yaw = arc_lengths(poses[:, :2]), np.unwrap(poses[:, 2])
    n = 0
    road_sq = planned = driven_road_sq = driven = 0.0
    for road, plan, k in decisions:
        p, d = decision_turns(road, plan, track_s, track_yaw, k)
        if p is not None:
            n += 1
            road_sq += p[0] ** 2
            planned += p[0] * p[1]
        if d is not None:
            driven_road_sq += d[0] ** 2
            driven += d[0] * d[1]
    return SteeringSums(n, road_sq, planned, driven_road_sq, driven)


def pooled_ratio(
    sums: Sequence[SteeringSums], samples: int = 2000, seed: int = 0
) -> dict[str, dict[str, float | list[float] | None] | int]:
    """The planned and driven ratios over episodes, with percentile-bootstrap 95% intervals that
    resample episodes (the decisions of one episode are not independent)."""
    arr = np.array([tuple(s) for s in sums], float).reshape(-1, len(SteeringSums._fields))
    total = SteeringSums(*arr.sum(0)) if len(arr) else SteeringSums()
    out: dict[str, dict[str, float | list[float] | None] | int] = {
        "episodes": int((arr[:, 0] > 0).sum()) if len(arr) else 0,
        "decisions": int(total.decisions),
    }
    rng = np.random.default_rng(seed)
    draws = arr[rng.integers(0, len(arr), (samples, len(arr)))].sum(1) if len(arr) else np.zeros((0, 5))
    for name, num, den in (("planned", 2, 1), ("driven", 4, 3)):
        ratio = total.planned_ratio if name == "planned" else total.driven_ratio
        ok = draws[:, den] > 0
        boot = draws[ok, num] / draws[ok, den]
        ci = [float(x) for x in np.quantile(boot, [0.025, 0.975])] if len(boot) else [None, None]
        out[name] = {"ratio": ratio, "ci95": ci}
    return out
