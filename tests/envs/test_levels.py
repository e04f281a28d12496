"""Levels: a bridge over a road. Actors at different heights never collide, never brake for each
other, and the lane under a bridge is not judged by the bridge's lane."""

import json

import numpy as np
import pytest

from envs import World
from scenarios import geometry as geo
from scenarios.maps import Lane, RoadMap
from tests.envs.helpers import drive_world, route_plan


def _crossing(tmp_path, bridge_height: float):
    """A 300 m road along x at z = 0 and a road along y crossing it at x = 150, ``bridge_height`` up
    (ramps of 60 m each side), with a parked car on the crossing road right above the ego's lane."""
    y = np.linspace(-150.0, 150.0, 301)
    z = bridge_height * np.clip((150.0 - np.abs(y)) / 60.0, 0.0, 1.0)
    lanes = [
        Lane("low", geo.straight(np.array([0.0, 0.0]), 0.0, 300.0), speed_limit=13.9),
        Lane("high", np.column_stack([np.full_like(y, 150.0), y]), speed_limit=13.9, z=z),
    ]
    lanes[0].z = np.zeros(len(lanes[0].centerline))
    road_map = tmp_path / "crossing.json"
    road_map.write_text(json.dumps(RoadMap(lanes={lane.id: lane for lane in lanes}).to_dict()))
    scenario = {
        "id": f"bridge_{bridge_height:g}",
        "family": "custom",
        "description": "a road under a crossing road",
        "map": {"file": str(road_map)},
        "ego": {"lane": "low", "s": 100.0, "speed": 10.0, "route": ["low"], "goal_distance": 180.0},
        "actors": [{"id": "parked", "lane": "high", "s": 150.0, "behaviour": {"type": "static"}}],
        "duration_s": 12.0,
    }
    from scenarios.schema import Scenario

    return Scenario.model_validate(scenario)


@pytest.mark.parametrize("height", [0.0, 6.0])
def test_an_actor_on_a_bridge_is_not_hit_by_the_ego_passing_under_it(tmp_path, height):
    w = World(_crossing(tmp_path, height))
    assert w.compiled.levels == (height > 0)
    threats = []
    events = drive_world(w, lambda w: (threats.append(w.ego_record().ttc), route_plan(w, 10.0))[1], 8.0)
    hits = [e for e in events if e.kind == "collision"]
    if height == 0.0:  # the same picture on one level: the ego drives into the parked car
        assert len(hits) == 1 and hits[0].actor == "parked"
    else:
        assert not hits and w.route_progress > 60.0 and np.isinf(threats).all()
        assert abs(float(w.state.z[1]) - height) < 1e-6 and abs(float(w.state.z[0])) < 1e-6
        assert not any(e.kind in ("wrong_way", "off_route_lanes", "offroad") for e in events)


@pytest.mark.parametrize("height", [0.0, 6.0])
def test_traffic_on_a_bridge_does_not_brake_for_the_ego_under_it(tmp_path, height):
    scn = _crossing(tmp_path, height)
    car = {"id": "car", "lane": "high", "s": 90.0, "speed": 10.0, "behaviour": {"type": "idm", "desired_speed": 10.0}}
    scn = scn.model_validate(
        scn.model_dump(mode="json")
        | {"actors": [car], "ego": scn.ego.model_dump(mode="json") | {"s": 148.0, "speed": 0.0}}
    )
    w = World(scn)
    speeds = []
    drive_world(w, lambda w: (speeds.append(float(w.state.speed[1])), route_plan(w, 0.0))[1], 8.0)
    if height == 0.0:
        assert min(speeds) < 5.0  # it brakes for the ego standing across its lane
    else:
        assert min(speeds) > 9.0 and w.state.s[1] > 160.0  # it drives over


@pytest.mark.parametrize("height", [0.0, 6.0])
def test_leaving_a_bridge_deck_over_a_road_is_off_road(tmp_path, height):
    """Drifting off the side of a deck over a wide road below: on one level the road catches the ego,
    six metres up there is nothing under its wheels."""
    y = np.linspace(-150.0, 150.0, 301)
    z = height * np.clip((150.0 - np.abs(y)) / 60.0, 0.0, 1.0)
    low = Lane("low", geo.straight(np.array([0.0, 0.0]), 0.0, 300.0), width=14.0, z=np.zeros(300 + 1))
    low.z = np.zeros(len(low.centerline))
    high = Lane("high", np.column_stack([np.full_like(y, 150.0), y]), z=z)
    path = tmp_path / "deck.json"
    path.write_text(json.dumps(RoadMap(lanes={"low": low, "high": high}).to_dict()))
    from scenarios.schema import Scenario

    scn = Scenario.model_validate(
        {
            "id": f"deck_{height:g}",
            "family": "custom",
            "description": "the ego drifts off a deck",
            "map": {"file": str(path)},
            "ego": {"lane": "high", "s": 144.0, "speed": 3.0, "route": ["high"], "goal_distance": 100.0},
            "duration_s": 10.0,
        }
    )
    w = World(scn)
    assert (w.compiled.stacked is not None) == (height > 0)
    events = drive_world(w, lambda w: route_plan(w, 3.0, lateral=3.5), 3.0)
    assert abs(float(w.state.x[0]) - 146.5) < 1.0 and abs(float(w.state.y[0])) < 5.0  # over the low road
    offroad = [e for e in events if e.kind == "offroad"]
    assert bool(offroad) == (height > 0)
