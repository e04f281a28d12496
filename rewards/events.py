"""What can happen in an episode: a typed event vocabulary shared by every backend and every metric.

The world (embedded or CARLA) writes ``Event`` records; reward terms, metric suites, the episode
summary and the evaluation journal read them. An event is a small frozen record: its ``kind`` and
time, and the fields that kind carries (a collision's actor, its class, where it hit and whose fault
it was; a red light's signal; ...). ``to_dict`` / ``from_dict`` give the JSON form that journals and
reports store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class EventKind(str, Enum):
    """The kinds of event. A ``str`` enum: ``EventKind.COLLISION == "collision"`` holds, and JSON
    stores the plain name."""

    COLLISION = "collision"
    OFFROAD = "offroad"
    RED_LIGHT = "red_light"
    STOP_SIGN = "stop_sign"
    WRONG_WAY = "wrong_way"
    ROUTE_DEVIATION = "route_deviation"
    ROUTE_COMPLETE = "route_complete"
    AGENT_BLOCKED = "agent_blocked"  # standing still for AGENT_BLOCKED_S: the Leaderboard ends the route
    LANE_INVASION = "lane_invasion"  # CARLA's lane-invasion sensor (information only)
    INVALID_ACTION = "invalid_action"  # the agent's action was malformed; the episode ends
    TRIGGER = "trigger"  # a scripted actor's trigger fired (information only)
    # route files (the Leaderboard 2.0's scenario tests)
    SCENARIO_TIMEOUT = "scenario_timeout"  # not through a scenario within its time; its actors leave
    YIELD_EMERGENCY_VEHICLE = "yield_emergency_vehicle"  # still ahead of the emergency vehicle when it ends
    MIN_SPEED = "min_speed"  # slower than the traffic around over a stretch of the route (``percentage``)

    def __str__(self) -> str:
        return self.value


# kinds the leaderboard and the summaries count against the driver
INFRACTIONS = frozenset(
    {
        EventKind.OFFROAD,
        EventKind.RED_LIGHT,
        EventKind.STOP_SIGN,
        EventKind.WRONG_WAY,
        EventKind.ROUTE_DEVIATION,
        EventKind.AGENT_BLOCKED,
        EventKind.SCENARIO_TIMEOUT,
        EventKind.YIELD_EMERGENCY_VEHICLE,
        EventKind.MIN_SPEED,
    }
)
# kinds that count as incidents for km-per-incident
INCIDENTS = frozenset(
    {EventKind.COLLISION, EventKind.OFFROAD, EventKind.RED_LIGHT, EventKind.STOP_SIGN, EventKind.WRONG_WAY}
)
# kinds that end an episode (a collision only when it is the ego's fault and the env says so)
ENDS_ROUTE = frozenset({EventKind.ROUTE_COMPLETE, EventKind.ROUTE_DEVIATION, EventKind.AGENT_BLOCKED})


@dataclass(frozen=True)
class Event:
    """One thing that happened at time ``t`` (seconds into the episode)."""

    kind: EventKind
    t: float
    actor: str | None = None  # collision: the other actor's id; trigger: the triggered actor
    actor_kind: str | None = None  # collision: "vehicle", "pedestrian" or "static"
    where: str | None = None  # collision: "front", "rear" or "lateral" (on the ego)
    at_fault: bool = False  # collision: the ego drove into it (front or lateral, while moving)
    ego_speed: float | None = None  # collision: m/s
    actor_speed: float | None = None  # collision: m/s
    lateral: float | None = None  # offroad / route deviation: offset from the route (m)
    signal: str | None = None  # red light: the signal's id
    lane: str | None = None  # wrong way: the lane driven against
    reason: str | None = None  # invalid action: what was wrong with it
    scenario: str | None = None  # scenario timeout / yield: the route file's scenario element
    percentage: float | None = None  # min speed: the ego's mean speed as % of the traffic's

    def __post_init__(self) -> None:
        if not isinstance(self.kind, EventKind):
            object.__setattr__(self, "kind", EventKind(self.kind))

    def matches(self, kind: EventKind | str, **fields_: Any) -> bool:
        """Of this kind, with these field values (e.g. ``at_fault=True``)."""
        return self.kind == kind and all(getattr(self, k) == v for k, v in fields_.items())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"kind": ..., "t": ...}`` and the fields that are set."""
        out = {k: v for k, v in asdict(self).items() if v is not None and not (k == "at_fault" and v is False)}
        out["kind"] = self.kind.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        try:
            return cls(**data)
        except TypeError as e:  # a field that is not part of the vocabulary
            raise ValueError(f"not an event record {data!r}: {e}") from None
