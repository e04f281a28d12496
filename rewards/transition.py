"""What a reward term sees: the ego before and after one 0.1 s world step, the action and the events.

``EgoState`` is a small immutable record (a NamedTuple: cheap to build every 0.1 s) made by the
environment each step, so terms stay pure functions of a transition. ``Transition.world`` gives
privileged terms (time-to-collision, ...)
read-only access to the full world state after the step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rewards.events import Event, EventKind


class EgoState(NamedTuple):
    t: float
    x: float
    y: float
    yaw: float
    speed: float
    accel: float
    yaw_rate: float
    steer: float
    route_progress: float  # metres of route covered since the start
    route_completion: float  # 0..1 of the scenario's goal distance
    lateral: float  # signed offset from the route centreline, left positive
    heading_error: float
    speed_limit: float
    offroad: bool
    wrong_way: bool
    off_route_lanes: bool
    ttc: float = float("inf")  # time to collision with the nearest actor in the ego's path (s)
    lead_gap: float = float("inf")  # bumper-to-bumper gap to that actor (m)
    stop_ahead: float = float("inf")  # metres to the next stop line the ego must stop at (red light)


class Transition(NamedTuple):
    """One 0.1 s world step. ``reference`` is the privileged expert's plan ([64, 3], ego frame) at
    decision steps when a term asks for it (``@register(needs_reference=True)``), else None."""

    prev: EgoState
    action: Any
    state: EgoState
    events: list[Event]
    dt: float = 0.1
    world: Any = None
    reference: Any = None

    def count(self, kind: EventKind | str, **fields: Any) -> int:
        """Number of events of a kind in this step, optionally with these field values (e.g. at_fault=True)."""
        return sum(1 for e in self.events if e.matches(kind, **fields))
