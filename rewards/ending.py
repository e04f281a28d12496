"""How an episode ended: the route driven, a collision, the route left, or the time run out, and then
whether the ego was still driving or had stalled (standing or crawling through its last seconds).

The scores say how well an agent drove; the ending says what stopped it. A policy that stands at a
junction until the scenario's time runs out scores like one that drove slowly, and only the ending
tells them apart (issue 23's PPO runs lost a family that way). The env puts it in the episode's
metrics (``info["metrics"]["ending"]``), where evaluation and training read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from rewards.events import Event
from rewards.transition import EgoState

STALL_WINDOW_S = 10.0  # the last seconds of an episode that say whether the ego had stalled ...
STALL_PROGRESS_M = 5.0  # ... when it made less than this much route progress in them (0.5 m/s)


class Ending(str, Enum):
    """Why an episode ended (a ``str`` enum: JSON stores the plain name)."""

    ROUTE_COMPLETE = "route_complete"  # the route was driven to its end
    COLLISION = "collision"  # a collision the ego caused ended it
    ROUTE_DEVIATION = "route_deviation"  # the ego left its route by more than the deviation allowed
    AGENT_BLOCKED = "agent_blocked"  # a route file's: standing still long enough that the Leaderboard ends it
    INVALID_ACTION = "invalid_action"  # the agent's action was malformed
    STALLED = "stalled"  # the time ran out with the ego standing or crawling (see STALL_PROGRESS_M)
    TIME_LIMIT = "time_limit"  # the time ran out while the ego was driving

    def __str__(self) -> str:
        return self.value


def episode_ending(ended_by: Event | None, track: Sequence[EgoState]) -> Ending:
    """The ending of an episode from the event that ended it (None: its time ran out) and the ego's
    track (one state per world step)."""
    if ended_by is None:
        return Ending.STALLED if stalled(track) else Ending.TIME_LIMIT
    return Ending(ended_by.kind.value)  # (each ending event's kind names its ending)


def stalled(track: Sequence[EgoState]) -> bool:
    """Whether the ego made less than ``STALL_PROGRESS_M`` of route progress in the track's last
    ``STALL_WINDOW_S`` (an episode shorter than that counts from its start). Broader than the scored
    standstill (``envs.episode_rules.RouteBook.blocked``: below 0.1 m/s for 10 s): a crawl counts too;
    the ending names what happened and scores nothing."""
    if not track:
        return False
    end = track[-1]
    start = next(s for s in track if s.t >= end.t - STALL_WINDOW_S - 1e-9)
    return end.route_progress - start.route_progress < STALL_PROGRESS_M
