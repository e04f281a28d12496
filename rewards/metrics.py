"""Episode metrics from the world's event log.

``leaderboard_score`` is the CARLA Leaderboard 2.0 route score, RC x IP: route completion (%)
times an infraction penalty that starts at 1 and is multiplied per infraction by its coefficient
(pedestrian 0.50, vehicle 0.60, static 0.65, red light 0.70, stop sign 0.80; leaving the route's
lanes multiplies by 1 - pct/100). Source: leaderboard.carla.org, Leaderboard 2.0 scoring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LB20_COEFFICIENTS = {
    "pedestrian": 0.50,
    "vehicle": 0.60,
    "static": 0.65,
    "red_light": 0.70,
    "stop_sign": 0.80,
    "scenario_timeout": 0.70,
}


def leaderboard_score(events: Iterable[Mapping[str, Any]], stats: Mapping[str, float]) -> dict[str, float]:
    """RC, IP and the route score (0-100) of one episode, Leaderboard 2.0 coefficients."""
    ip = 1.0
    for e in events:
        if e["type"] == "collision":
            ip *= LB20_COEFFICIENTS[e["actor_kind"]]
        elif e["type"] in ("red_light", "stop_sign"):
            ip *= LB20_COEFFICIENTS[e["type"]]
    length = max(stats.get("route_length", 0.0), 1e-6)
    outside_pct = min(100.0, 100.0 * stats.get("distance_outside_route_lanes", 0.0) / length)
    ip *= 1.0 - outside_pct / 100.0
    rc = 100.0 * stats.get("route_completion", 0.0)
    return {"route_completion": rc, "infraction_penalty": ip, "score": rc * ip}
