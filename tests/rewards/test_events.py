"""The event vocabulary: typed records with a JSON form."""

from __future__ import annotations

import pytest

from rewards import Event, EventKind, Transition
from tests.rewards.test_metrics import ego


def test_events_round_trip_through_their_json_form():
    hit = Event(EventKind.COLLISION, 1.5, actor="car3", actor_kind="vehicle", where="front", at_fault=True)
    assert hit.to_dict() == {
        "kind": "collision",
        "t": 1.5,
        "actor": "car3",
        "actor_kind": "vehicle",
        "where": "front",
        "at_fault": True,
    }
    assert Event.from_dict(hit.to_dict()) == hit
    assert Event("red_light", 2.0, signal="s1").kind is EventKind.RED_LIGHT  # names read as kinds
    with pytest.raises(ValueError, match="not an event record"):
        Event.from_dict({"kind": "collision", "t": 0.0, "colour": "red"})
    with pytest.raises(ValueError):
        Event("teleport", 0.0)


def test_a_transition_counts_events_by_kind_and_fields():
    events = [
        Event(EventKind.COLLISION, 0.1, actor="a", actor_kind="vehicle", at_fault=True),
        Event(EventKind.COLLISION, 0.1, actor="b", actor_kind="pedestrian", at_fault=False),
        Event(EventKind.OFFROAD, 0.1),
    ]
    t = Transition(ego(), None, ego(), events)
    assert t.count(EventKind.COLLISION) == 2 and t.count("collision", at_fault=True) == 1
    assert t.count(EventKind.COLLISION, actor_kind="pedestrian") == 1 and t.count(EventKind.RED_LIGHT) == 0
