"""How an episode ended (``rewards.ending``): the event that ended it, or how the ego stood when
its time ran out."""

from __future__ import annotations

import pytest

from envs.interface import terminal_event
from evaluation.summary import ending_of
from rewards.ending import STALL_PROGRESS_M, STALL_WINDOW_S, Ending, episode_ending, stalled
from rewards.events import Event, EventKind
from rewards.transition import EgoState

DT = 0.1


def _track(speeds: list[float]) -> list[EgoState]:
    """A track on a straight route, one state per 0.1 s world step, driven at ``speeds``."""
    track, progress = [], 0.0
    for k, v in enumerate(speeds):
        progress += v * DT
        track.append(
            EgoState(
                k * DT,
                progress,
                0.0,
                0.0,
                v,
                0.0,
                0.0,
                0.0,
                progress,
                progress / 1e3,
                0.0,
                0.0,
                13.9,
                False,
                False,
                False,
            )
        )
    return track


def test_the_event_that_ended_the_episode_names_its_ending():
    track = _track([10.0] * 300)
    for kind in (
        EventKind.ROUTE_COMPLETE,
        EventKind.ROUTE_DEVIATION,
        EventKind.AGENT_BLOCKED,
        EventKind.INVALID_ACTION,
    ):
        assert episode_ending(Event(kind, 29.9), track) == Ending(kind.value)
    # the env names the event: the first of the step's that ends the episode
    assert terminal_event([Event(EventKind.RED_LIGHT, 29.0), Event(EventKind.ROUTE_COMPLETE, 29.9)], True).kind == (
        EventKind.ROUTE_COMPLETE
    )
    at_fault = Event(EventKind.COLLISION, 29.9, actor="car_1", at_fault=True)
    assert episode_ending(terminal_event([at_fault], True), track) is Ending.COLLISION
    # a route file's run drives on after a collision: what ended it is the event that ends routes
    blocked = Event(EventKind.AGENT_BLOCKED, 29.9)
    assert episode_ending(terminal_event([at_fault, blocked], False), track) is Ending.AGENT_BLOCKED
    # a collision the ego did not cause does not end the episode: its time ran out while it drove on
    rear_ended = Event(EventKind.COLLISION, 29.9, actor="car_1", at_fault=False)
    assert episode_ending(terminal_event([rear_ended], True), track) is Ending.TIME_LIMIT


def test_the_time_running_out_is_stalled_when_the_ego_stood_or_crawled_through_its_last_seconds():
    window = int(STALL_WINDOW_S / DT)
    assert episode_ending(None, _track([10.0] * 300)) is Ending.TIME_LIMIT
    assert episode_ending(None, _track([10.0] * 300 + [0.0] * window)) is Ending.STALLED
    crawl = STALL_PROGRESS_M / STALL_WINDOW_S  # m/s that make just the stall's progress in its window
    assert stalled(_track([10.0] * 300 + [0.8 * crawl] * window))
    assert not stalled(_track([10.0] * 300 + [1.2 * crawl] * window))
    # standing at a red light for most of the window and then driving off is not a stall
    assert not stalled(_track([10.0] * 300 + [0.0] * (window - 20) + [8.0] * 20))
    assert stalled(_track([0.0] * 30))  # shorter than the window: counted from the start
    assert not stalled([])


@pytest.mark.parametrize(
    ("record", "ending"),
    [
        ({"status": "ok", "ending": "stalled"}, "stalled"),
        ({"status": "agent_error"}, "agent_error"),
        ({"status": "ok"}, "unrecorded"),  # written before endings were recorded
    ],
)
def test_a_records_ending(record, ending):
    assert ending_of(record) == ending
