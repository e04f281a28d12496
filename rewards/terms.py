"""Built-in reward terms: pure functions of one transition.

Each returns an unweighted quantity (metres, counts, indicators, fractions); sign and scale come
from the config's weights, e.g. ``{"progress": 0.1, "collision": -10.0, "comfort": -0.1}``.
Safety terms count *new* infractions in the step (events), state terms (off-road, wrong way,
lane centering) are paid every step the condition holds.
"""

from __future__ import annotations

import numpy as np

from rewards.comfort import comfort_checks, plan_comfort
from rewards.events import EventKind
from rewards.metrics import TTC_THRESHOLD
from rewards.registry import register
from rewards.transition import EgoState, Transition

HEADWAY_S = 2.0  # s of the ego's own travel: the two-second rule of following distance


# --- progress ------------------------------------------------------------------------------------------
@register("progress")
def progress(t: Transition) -> float:
    """Metres of route covered in this step (never negative: going back earns nothing)."""
    return max(0.0, t.state.route_progress - t.prev.route_progress)


@register("route_complete")
def route_complete(t: Transition) -> float:
    """1 on the step the route is completed."""
    return float(t.count(EventKind.ROUTE_COMPLETE))


# --- safety events --------------------------------------------------------------------------------------
@register("collision")
def collision(t: Transition) -> float:
    """New at-fault collisions of any class."""
    return float(t.count(EventKind.COLLISION, at_fault=True))


@register("collision_vehicle")
def collision_vehicle(t: Transition) -> float:
    return float(t.count(EventKind.COLLISION, at_fault=True, actor_kind="vehicle"))


@register("collision_pedestrian")
def collision_pedestrian(t: Transition) -> float:
    return float(t.count(EventKind.COLLISION, at_fault=True, actor_kind="pedestrian"))


@register("collision_static")
def collision_static(t: Transition) -> float:
    return float(t.count(EventKind.COLLISION, at_fault=True, actor_kind="static"))


@register("offroad")
def offroad(t: Transition) -> float:
    """1 for every step that ends with a corner of the ego off the drivable area."""
    return 1.0 if t.state.offroad else 0.0


@register("red_light")
def red_light(t: Transition) -> float:
    return float(t.count(EventKind.RED_LIGHT))


@register("stop_sign")
def stop_sign(t: Transition) -> float:
    return float(t.count(EventKind.STOP_SIGN))


@register("wrong_way")
def wrong_way(t: Transition) -> float:
    """1 for every step driven against the direction of the lane the ego is in."""
    return 1.0 if t.state.wrong_way else 0.0


@register("speeding")
def speeding(t: Transition) -> float:
    """Metres per second above the lane's speed limit (0 at or below it)."""
    return max(0.0, t.state.speed - t.state.speed_limit)


@register("ttc")
def ttc(t: Transition) -> float:
    """1 while the time to collision with the actor ahead is under 0.95 s (nuPlan's bound)."""
    return 1.0 if t.state.ttc < TTC_THRESHOLD else 0.0


@register("headway")
def headway(t: Transition) -> float:
    """1 while the gap to the actor ahead is shorter than two seconds of the ego's travel: a warning that
    comes seconds before ``ttc`` fires, when braking still avoids the collision."""
    return 1.0 if t.state.lead_gap < HEADWAY_S * t.state.speed else 0.0


# --- lane keeping -----------------------------------------------------------------------------------------
@register("lane_centering")
def lane_centering(t: Transition) -> float:
    """Absolute lateral offset from the route centreline, metres."""
    return abs(t.state.lateral)


@register("lane_keeping")
def lane_keeping(t: Transition) -> float:
    """1 for every step outside the lanes of the route (its lanes and same-direction neighbours)."""
    return 1.0 if t.state.off_route_lanes else 0.0


# --- comfort and pace -----------------------------------------------------------------------------------------
@register("comfort")
def comfort(t: Transition) -> float:
    """Fraction of the six nuPlan comfort bounds violated in this step (0 = comfortable)."""
    checks = comfort_checks(t.prev, t.state, t.dt)
    return 1.0 - sum(checks.values()) / len(checks)


def standing_blocked(s: EgoState) -> bool:
    """The ego stands still with nothing in its way: no lead within 10 m, no stop line it must keep to
    within 10 m (a red light, or a stop sign it has not stopped at yet)."""
    return s.speed < 0.1 and s.lead_gap > 10.0 and s.stop_ahead > 10.0


@register("blocked")
def blocked(t: Transition) -> float:
    """1 while the ego stands still with nothing in its way (see :func:`standing_blocked`)."""
    return 1.0 if standing_blocked(t.state) else 0.0


@register("min_speed")
def min_speed(t: Transition) -> float:
    """Shortfall below half the speed limit when the way is clear, as a fraction (CARLA's min speed)."""
    s = t.state
    if s.lead_gap < 30.0 or s.stop_ahead < 30.0:
        return 0.0
    target = 0.5 * s.speed_limit
    return max(0.0, 1.0 - s.speed / target) if target > 0 else 0.0


# --- trajectory quality against the expert ------------------------------------------------------------------
def ade(plan: np.ndarray, reference: np.ndarray) -> float | np.ndarray:
    """Average displacement error (m) between two [T, >=2] trajectories; over leading batch axes
    ([..., T, >=2]), one per pair."""
    plan, reference = np.asarray(plan), np.asarray(reference)
    n = min(plan.shape[-2], reference.shape[-2])
    err = np.linalg.norm(plan[..., :n, :2] - reference[..., :n, :2], axis=-1).mean(axis=-1)
    return float(err) if err.ndim == 0 else err


@register("ade_expert", needs_reference=True)
def ade_expert(t: Transition) -> float:
    """ADE (m) of the agent's plan against the privileged expert's plan, at decision steps."""
    if t.reference is None or np.ndim(t.action) != 2:
        return 0.0
    return ade(t.action, t.reference)


@register("alpamayo_demo", needs_reference=True)
def alpamayo_demo(t: Transition) -> float:
    """Alpamayo's released demo reward at decision steps: if ADE < 3 m then -0.4 ADE / 3 +
    0.1 (comfort - 1), else -1; comfort is the fraction of the comfort bounds that hold."""
    if t.reference is None or np.ndim(t.action) != 2:
        return 0.0
    d = ade(t.action, t.reference)
    if d >= 3.0:
        return -1.0
    return -0.4 * d / 3.0 + 0.1 * (plan_comfort(t.action, t.dt) - 1.0)


DEFAULT_REWARDS = {"progress": 0.1, "collision": -10.0, "offroad": -1.0, "red_light": -5.0, "route_complete": 5.0}
