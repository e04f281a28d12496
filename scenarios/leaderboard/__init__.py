"""The Leaderboard 2.0 scenario types, and Bench2Drive's own, on the embedded world (see ``base`` for
how a type is built).

``play(route_lanes, road_map, scenarios, where)`` turns a planned route's scenario elements into the
actors, flows, front-brake events, signal programs and holds of its embedded-world scenario, and the
windows in which the Leaderboard times and judges each (``TIMEOUTS``, the emergency vehicle's test),
and says which elements it played, which it skipped (and why) and which types it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scenarios.leaderboard import bench2drive, crossings, flows, junctions, obstacles, vehicles  # noqa: F401
from scenarios.leaderboard.base import TYPES, BadParameter, NotPlaced, Placed, Played, RouteFrame, ScenarioType
from scenarios.leaderboard.bench2drive import DRIVE_THROUGH
from scenarios.maps import RoadMap

# Leaderboard 2.0's types that are not played yet, with why (listed so reports can say so)
NOT_PLAYED = {
    "ControlLoss": "needs the ego's own dynamics disturbed (road debris); the world does not perturb the ego yet",
    "ParkingExit": "the route starts in a parking spot; the world's routes start on a driving lane",
}
# Bench2Drive's ability groups of the Leaderboard types (the Bench2Drive paper's grouping)
GROUPS = ("Merging", "Overtaking", "Emergency Brake", "Give Way", "Traffic Sign")
# scenario_runner's ScenarioTimeout: seconds from the trigger for the types that can hold the ego up
# (obstacles to pass, flows to cross or join, a blocked exit), 240 for each (its JunctionLeftTurn and
# JunctionRightTurn too); the quick events (cut-ins, crossings, hard brakes) have none
TIMEOUTS = dict.fromkeys(
    (
        "Accident",
        "AccidentTwoWays",
        "ConstructionObstacle",
        "ConstructionObstacleTwoWays",
        "ParkedObstacle",
        "ParkedObstacleTwoWays",
        "HazardAtSideLane",
        "HazardAtSideLaneTwoWays",
        "VehicleOpensDoorTwoWays",
        "InvadingTurn",
        "BlockedIntersection",
        "EnterActorFlow",
        "EnterActorFlowV2",
        "InterurbanActorFlow",
        "InterurbanAdvancedActorFlow",
        "HighwayExit",
        "MergerIntoSlowTraffic",
        "MergerIntoSlowTrafficV2",
        "CrossingBicycleFlow",
        "SignalizedJunctionLeftTurn",
        "SignalizedJunctionRightTurn",
        "NonSignalizedJunctionLeftTurn",
        "NonSignalizedJunctionRightTurn",
        "T_Junction",  # (Bench2Drive's)
        "SequentialLaneChange",
        "SignalizedJunctionLeftTurnEnterFlow",
        "NonSignalizedJunctionLeftTurnEnterFlow",
    ),
    240.0,
)
EMERGENCY_IDLE_S = 10.0  # from when the emergency vehicle is within 50 m of the ego, then the test: is it past?


@dataclass
class PlayedRoute:
    """Everything the route's scenario elements add, and what became of each element."""

    played: Played = field(default_factory=Played)
    types: list[str] = field(default_factory=list)  # one per element played, in route order
    skipped: dict[str, str] = field(default_factory=dict)  # element name -> why
    unsupported: list[str] = field(default_factory=list)  # types with no builder (sorted, unique)


def play(lanes: list[str], road_map: RoadMap, scenarios: list[tuple], where: str) -> PlayedRoute:
    """Build each ``(name, type, params, trigger arc length[, trigger point (x, y)])`` on the route's
    lanes. An element whose parameters make no sense raises ``BadParameter`` naming ``where``, the
    element and the parameter; one that does not fit the road is skipped with its reason."""
    route = RouteFrame(road_map, lanes)
    out = PlayedRoute()
    unknown: set[str] = set()
    for k, (name, kind, params, s, *at) in enumerate(scenarios):
        spec = TYPES.get(kind)
        if spec is None:
            unknown.add(kind)
            continue
        placed = Placed(name, kind, params, s, f"sc{k}", tuple(at[0]) if at else None)
        try:
            part = spec.build(route, placed)
        except BadParameter as e:
            raise BadParameter(f"{where}: scenario {name} ({kind}): {e}") from None
        except NotPlaced as e:
            out.skipped[name] = f"{kind}: {e}"
            continue
        out.played.actors += part.actors
        out.played.flows += part.flows
        out.played.front_brakes += part.front_brakes
        out.played.clear_background += part.clear_background
        out.played.signals.update(part.signals)
        out.played.windows += _windows(placed, part)
        out.played.signal_holds += part.signal_holds
        out.types.append(kind)
    out.unsupported = sorted(unknown)
    return out


def _windows(sc: Placed, part: Played) -> list[dict]:
    """The element's ``ScenarioWindow``: timed out after ``TIMEOUTS`` unless the ego is past its actors
    by then; the emergency vehicle's ends ``EMERGENCY_IDLE_S`` after it came near the ego."""
    ids = [a["id"] for a in [*part.actors, *part.flows]]
    window = {"name": sc.name, "type": sc.type, "start": round(sc.s, 2), "actors": ids}
    if sc.type == "YieldToEmergencyVehicle":
        return [window | {"duration_s": EMERGENCY_IDLE_S, "emergency_vehicle": sc.id("emergency")}]
    if sc.type not in TIMEOUTS:
        return []
    ends = [x["leave_at"] for x in [*part.actors, *part.flows, *part.clear_background] if x.get("leave_at")]
    end = max(ends, default=sc.s + DRIVE_THROUGH)  # (no actors: the route itself is the test)
    return [window | {"end": round(max(end, sc.s + 1.0), 2), "timeout_s": TIMEOUTS[sc.type]}]


__all__ = [
    "GROUPS",
    "NOT_PLAYED",
    "TYPES",
    "BadParameter",
    "NotPlaced",
    "PlayedRoute",
    "ScenarioType",
    "play",
    "types_table",
]


def types_table() -> str:
    """The README's table of the Leaderboard 2.0 and Bench2Drive types: played or not, the scenario
    time-out, what is played, what differs."""
    rows = [
        "| type | played | ability group | time-out | what happens | approximated |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted([*TYPES, *NOT_PLAYED]):
        if name in TYPES:
            t = TYPES[name]
            timeout = f"{TIMEOUTS[name]:.0f} s" if name in TIMEOUTS else "-"
            rows.append(f"| {name} | yes | {t.group} | {timeout} | {t.behaviour} | {t.approximated or '-'} |")
        else:
            rows.append(f"| {name} | **no** | - | - | - | {NOT_PLAYED[name]} |")
    return "\n".join(rows)
