"""Built-in reward terms: route progress and the safety events of a step.

Each returns an unweighted quantity (metres, counts, indicators); the sign and scale come from the
weights in the config, e.g. ``{"progress": 0.1, "collision": -10.0}``.
"""

from __future__ import annotations

from rewards.registry import register
from rewards.transition import Transition


@register("progress")
def progress(t: Transition) -> float:
    """Metres of route covered in this step (never negative: going back earns nothing)."""
    return max(0.0, t.state.route_progress - t.prev.route_progress)


@register("collision")
def collision(t: Transition) -> float:
    """Number of new at-fault collisions (any class)."""
    return float(t.count("collision", at_fault=True))


@register("offroad")
def offroad(t: Transition) -> float:
    """1 for every step that ends with a corner of the ego off the drivable area."""
    return 1.0 if t.state.offroad else 0.0


@register("red_light")
def red_light(t: Transition) -> float:
    return float(t.count("red_light"))


@register("route_complete")
def route_complete(t: Transition) -> float:
    return float(t.count("route_complete"))


DEFAULT_REWARDS = {"progress": 0.1, "collision": -10.0, "offroad": -1.0, "red_light": -5.0, "route_complete": 5.0}
