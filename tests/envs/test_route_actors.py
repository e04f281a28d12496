"""Actors tied to the ego's route progress: appearing and leaving, actor flows, front-brake events."""

import numpy as np
import pytest

from envs import World
from envs.world import kernels
from tests.envs.helpers import drive_world, route_plan


def _with(scn, **update):
    return scn.model_validate({**scn.model_dump(mode="json"), **update})


def test_an_actor_appears_and_leaves_with_the_egos_route_progress(empty_straight):
    ego = empty_straight.ego
    parked = {"id": "parked", "lane": ego.lane, "s": ego.s + 120, "lateral": 3.0, "behaviour": {"type": "static"}}
    scn = _with(empty_straight, actors=[parked | {"appear_at": ego.s + 40, "leave_at": ego.s + 150}])
    w = World(scn)
    i = w.compiled.actors.index("parked")
    seen = []
    for _ in range(25):
        drive_world(w, lambda w: route_plan(w, 10.0), 1.0)
        seen.append((w.state.progress - ego.s, bool(w.state.active[i]), float(w.state.x[i])))
    before = [x for p, on, x in seen if p < 39.0]
    during = [x for p, on, x in seen if 41.0 < p < 149.0]
    after = [on for p, on, _ in seen if p > 151.0]
    assert before and during and after
    lane = w.compiled.road_map.lanes[ego.lane]
    assert all(x > 1e5 for x in before)  # not there (and not in anyone's way) before
    assert np.allclose(during, lane.pose_at(ego.s + 120)[0][0])  # where it was placed
    assert not any(after)
    # a snapshot from before it appeared replays the same appearance
    w2 = World(scn)
    drive_world(w2, lambda w: route_plan(w, 10.0), 3.0)
    snap = w2.snapshot()
    drive_world(w2, lambda w: route_plan(w, 10.0), 5.0)
    first = w2.state.x.copy()
    w2.restore(snap)
    drive_world(w2, lambda w: route_plan(w, 10.0), 5.0)
    assert np.array_equal(first, w2.state.x)


def test_an_actor_flow_keeps_its_gaps_and_speed_and_stops_with_its_stretch(empty_straight):
    ego = empty_straight.ego
    flow = {"id": "flow", "path": [ego.lane], "s": 5.0, "end_s": 250.0, "speed": 8.0, "gap": [20.0, 30.0]}
    scn = _with(empty_straight, flows=[flow | {"appear_at": 0.0, "leave_at": ego.s + 60}])
    w = World(scn)
    rows = w.compiled.flows[0].rows
    gaps = []
    for _ in range(60):  # the ego stands: the flow runs for 6 s of every second checked
        w.step(-1.0, 0.0)
        on = rows[w.state.active[rows]]
        s = np.sort(w.state.s[on])
        gaps += list(np.diff(s))
        assert np.all(w.state.speed[on] <= 8.0 + 1e-6)
    assert len(gaps) and min(gaps) >= 20.0 - 1.0 and max(gaps) <= 30.0 + 1.0
    assert 2 <= int(w.state.active[rows].sum()) <= 3
    # the ego drives through its stretch (behind the flow) and on: the flow is gone
    drive_world(w, lambda w: route_plan(w, 6.0), 16.0)
    assert w.state.progress > ego.s + 60 and not w.state.active[rows].any()


def test_a_flow_does_not_spawn_into_the_ego_standing_on_its_source(empty_straight):
    """CARLA's spawn fails where a vehicle stands (scenario_runner's flow tries again the next tick): a
    flow whose source is under the ego waits until the ego has moved off it."""
    ego = empty_straight.ego
    flow = {"id": "flow", "path": [ego.lane], "s": ego.s, "end_s": 250.0, "speed": 8.0, "gap": [20.0, 30.0]}
    w = World(_with(empty_straight, ego=ego.model_dump(mode="json") | {"speed": 0.0}, flows=[flow]))
    rows = w.compiled.flows[0].rows
    for _ in range(30):  # the ego stands on the source for 3 s
        w.step(-1.0, 0.0)
    assert not w.state.active[rows].any()
    drive_world(w, lambda w: route_plan(w, 8.0), 3.0)  # it drives off: the flow starts behind it
    assert w.state.active[rows].any() and not [e for e in w.log if e.kind.value == "collision"]


def test_a_front_brake_event_stops_the_vehicles_ahead_on_the_route_only(empty_straight):
    ego = empty_straight.ego
    road = World(empty_straight).compiled.road_map
    lane = road.lanes[ego.lane]
    oncoming = lane.opposite
    actors = [
        {
            "id": "ahead",
            "lane": ego.lane,
            "s": ego.s + 30,
            "speed": 10.0,
            "behaviour": {"type": "idm", "desired_speed": 10.0},
        },
        {
            "id": "far",
            "lane": ego.lane,
            "s": ego.s + 140,
            "speed": 10.0,
            "behaviour": {"type": "idm", "desired_speed": 10.0},
        },
    ]
    if oncoming is not None:
        s_opp = road.lanes[oncoming].length - (ego.s + 40)
        actors.append(
            {
                "id": "oncoming",
                "lane": oncoming,
                "s": s_opp,
                "speed": 10.0,
                "behaviour": {"type": "idm", "desired_speed": 10.0},
            }
        )
    scn = _with(empty_straight, actors=actors, front_brakes=[{"at": ego.s + 10, "ahead": 60.0}])
    w = World(scn)
    drive_world(w, lambda w: route_plan(w, 8.0), 4.0)
    speed = {k: float(w.state.speed[w.compiled.actors.index(k)]) for k in [a["id"] for a in actors]}
    assert speed["ahead"] == 0.0  # 6 m/s^2 from 10 m/s: stopped within 2 s
    assert speed["far"] > 9.0
    if oncoming is not None:
        assert speed["oncoming"] > 9.0
    drive_world(w, lambda w: route_plan(w, 0.0), 6.0)  # 5 s later it drives on
    assert float(w.state.speed[w.compiled.actors.index("ahead")]) > 1.0


def test_a_blocker_leaves_its_time_after_the_ego_comes_close(empty_straight):
    ego = empty_straight.ego
    blocker = {
        "id": "blocker",
        "lane": ego.lane,
        "s": ego.s + 40,
        "behaviour": {"type": "static", "trigger": {"ego_distance": 13.0}, "remove_after": 4.0},
    }
    w = World(_with(empty_straight, actors=[blocker]))
    i = w.compiled.actors.index("blocker")
    # the ego drives up to it and stands; the blocker leaves 4 s after the ego came within 13 m
    t_close = None
    for _ in range(150):
        gap = float(np.hypot(w.state.x[i] - w.state.x[0], w.state.y[i] - w.state.y[0]))
        if t_close is None and gap < 13.0:
            t_close = w.t
        drive_world(w, lambda w: route_plan(w, 4.0 if w.state.route_s < ego.s + 32 else 0.0), 0.1, every=1)
        if not w.state.active[i]:
            break
    assert t_close is not None and not w.state.active[i]
    assert abs(w.t - t_close - 4.0) <= 0.25
    assert not [e for e in w.log if e.kind == "collision"]


def test_a_clear_background_zone_empties_the_lane_ahead_and_the_oncoming_lane(empty_straight):
    ego = empty_straight.ego
    zone = {"appear_at": ego.s + 20, "leave_at": ego.s + 250, "ahead_to": ego.s + 120, "oncoming": True}
    background = {"density": 3.0, "radius": 150.0, "max_vehicles": 30}
    w = World(_with(empty_straight, background=background, clear_background=[zone]))
    road, rows = w.compiled.road_map, w.compiled.background[0].rows
    lane = road.lanes[ego.lane]

    def in_zone(st) -> tuple[int, int]:
        """Background vehicles in the ego's lane between it and ``ahead_to``, and in the oncoming lane (less
        the 15 m at the far end that a vehicle may have driven into since the last background pass)."""
        ahead = oncoming = 0
        for i in rows[st.active[rows]]:
            s_on, d_on = w.compiled.paths.project(w.compiled.route_path, np.array([st.x[i], st.y[i]]))
            same_way = np.cos(st.yaw[i] - lane.heading[0]) > 0
            if same_way and abs(d_on) < 1.5 and st.route_s < s_on <= zone["ahead_to"]:
                ahead += 1
            if not same_way and st.route_s - 10 < s_on <= zone["ahead_to"] + 100 - 15:
                oncoming += 1
        return ahead, oncoming

    assert sum(in_zone(w.state)) > 0  # traffic everywhere before the ego reaches the zone
    drive_world(w, lambda w: route_plan(w, 4.0), 1.0)
    assert w.state.progress < zone["appear_at"]
    while w.state.progress < zone["appear_at"] + 5.0:
        drive_world(w, lambda w: route_plan(w, 4.0), 1.0)
    for _ in range(15):  # from the next background pass on, for as long as the zone holds
        drive_world(w, lambda w: route_plan(w, 4.0), 1.0)
        assert in_zone(w.state) == (0, 0)


def test_a_vehicle_facing_the_ego_in_its_lane_stops_well_short_of_it(empty_straight):
    ego = empty_straight.ego
    road = World(empty_straight).compiled.road_map
    lane = road.lanes[ego.lane]
    oncoming = road.lanes[lane.opposite]
    s_on = oncoming.length - (ego.s + 150.0)  # 150 m ahead of the ego, coming towards it
    idm = {"type": "idm", "desired_speed": 10.0}
    car = {"id": "car", "lane": oncoming.id, "s": s_on, "speed": 10.0, "behaviour": idm}
    w = World(_with(empty_straight, actors=[car]))
    i = w.compiled.actors.index("car")
    side = float(np.linalg.norm(oncoming.pose_at(oncoming.length - ego.s)[0] - lane.pose_at(ego.s)[0]))
    drive_world(w, lambda w: route_plan(w, 3.0, lateral=side), 5.0)  # the ego pulls out into its lane
    drive_world(w, lambda w: route_plan(w, 0.0, lateral=side), 20.0)  # and stands there
    st = w.state
    gap = float(np.hypot(st.x[i] - st.x[0], st.y[i] - st.y[0])) - (w.compiled.actors.length[[0, i]].sum()) / 2
    assert st.speed[i] < 0.1 and gap >= 8.0  # room for the ego to pull back in (not IDM's 2 m)
    assert not [e for e in w.log if e.kind == "collision"]


def _window_scenario(empty_straight, blocked: bool = True, **window):
    """A parked car in the ego's lane 60 m on (``blocked``), a flow on the lane, an actor that appears
    later, and a window of them."""
    ego = empty_straight.ego
    blocker = {"id": "blocker", "lane": ego.lane, "s": ego.s + 60, "behaviour": {"type": "static"}}
    later = {"id": "later", "lane": ego.lane, "s": ego.s + 200, "lateral": 3.0, "behaviour": {"type": "static"}}
    flow = {"id": "flow", "path": [ego.lane], "s": ego.s + 100, "end_s": 290.0, "speed": 8.0, "gap": [20.0, 30.0]}
    ids = ["blocker", "later", "flow"] if blocked else ["later", "flow"]
    spec = {"name": "Parked_1", "type": "ParkedObstacle", "start": ego.s + 10, "actors": ids}
    return _with(
        empty_straight,
        actors=[blocker] * blocked + [later | {"appear_at": ego.s + 150, "leave_at": ego.s + 260}],
        flows=[flow | {"appear_at": 0.0, "leave_at": ego.s + 300}],
        windows=[spec | window],
        rules="leaderboard",
    )


def _until(stop: float):
    """Drive the route at 8 m/s and stand once the route arc length reaches ``stop``."""
    return lambda w: route_plan(w, 8.0 if w.state.progress < stop else 0.0)


def test_a_scenario_not_passed_in_time_is_a_timeout_and_its_actors_leave_for_good(empty_straight):
    s0 = empty_straight.ego.s
    w = World(_window_scenario(empty_straight, end=s0 + 90, timeout_s=20.0))
    blocker, later = w.compiled.actors.index("blocker"), w.compiled.actors.index("later")
    flow_rows = w.compiled.flows[0].rows
    events = drive_world(w, _until(s0 + 45), 15.0)  # waiting behind the parked car
    assert w.state.active[blocker] and w.state.active[flow_rows].any()
    assert not [e for e in events if e.kind == "scenario_timeout"]
    events = drive_world(w, _until(s0 + 45), 10.0)  # 20 s since the ego passed the trigger at +10 m
    timeouts = [e for e in events if e.kind == "scenario_timeout"]
    assert len(timeouts) == 1 and timeouts[0].scenario == "Parked_1"
    assert not w.state.active[blocker] and not w.state.active[flow_rows].any()
    drive_world(w, _until(1e9), 25.0)  # the way is free; the later actor never appears, nor the flow
    assert w.state.progress > s0 + 160 and not w.state.active[later] and not w.state.active[flow_rows].any()
    assert not [e for e in w.log if e.kind == "collision"]


def test_a_scenario_passed_in_time_is_no_timeout(empty_straight):
    s0 = empty_straight.ego.s
    w = World(_window_scenario(empty_straight, blocked=False, end=s0 + 90, timeout_s=20.0))
    events = drive_world(w, _until(1e9), 30.0)
    assert w.state.progress > s0 + 90 and w.state.window_over.all()
    assert not [e for e in events if e.kind == "scenario_timeout"]


def test_the_ego_fails_to_yield_when_the_emergency_vehicle_is_still_behind_it(empty_straight):
    ego = empty_straight.ego
    for gap, fails in ((-20.0, True), (40.0, False)):  # the vehicle behind the ego / already ahead of it
        ev = {"id": "ev", "lane": ego.lane, "s": ego.s + gap, "behaviour": {"type": "static"}}
        window = {"name": "EV_1", "type": "YieldToEmergencyVehicle", "start": ego.s, "duration_s": 3.0}
        scn = _with(empty_straight, actors=[ev], windows=[window | {"actors": ["ev"], "emergency_vehicle": "ev"}])
        w = World(scn)
        events = drive_world(w, lambda w: route_plan(w, 2.0), 5.0)
        yields = [e for e in events if e.kind == "yield_emergency_vehicle"]
        assert len(yields) == int(fails) and not [e for e in events if e.kind == "scenario_timeout"]
        assert not w.state.active[w.compiled.actors.index("ev")]  # it leaves when its time is up


def test_an_emergency_vehicles_time_starts_when_it_comes_within_50_m(empty_straight):
    """scenario_runner gives the ego 10 s from when the vehicle is within 50 m (InTriggerDistanceToVehicle,
    Idle), not from the trigger: one that stands 60 m behind never starts its clock, one 45 m behind does."""
    ego = empty_straight.ego.model_copy(update={"s": 100.0})
    for gap, judged in ((-60.0, False), (-45.0, True)):
        ev = {"id": "ev", "lane": ego.lane, "s": ego.s + gap, "behaviour": {"type": "static"}}
        window = {"name": "EV_1", "type": "YieldToEmergencyVehicle", "start": ego.s, "duration_s": 3.0}
        windows = [window | {"actors": ["ev"], "emergency_vehicle": "ev"}]
        w = World(_with(empty_straight, ego=ego.model_dump(mode="json"), actors=[ev], windows=windows))
        events = drive_world(w, lambda w: route_plan(w, 0.0), 8.0)  # the ego stands: the gap stays
        assert len([e for e in events if e.kind == "yield_emergency_vehicle"]) == int(judged)
        assert bool(w.state.window_over[0]) == judged


def test_a_window_naming_an_actor_the_scenario_lacks_is_refused(empty_straight):
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="not in the scenario"):
        _with(empty_straight, windows=[{"name": "X", "type": "Accident", "start": 1.0, "end": 9.0, "actors": ["nope"]}])


def test_a_clear_background_zone_empties_the_lanes_it_names_and_refuses_an_unknown_one(empty_straight):
    ego = empty_straight.ego
    oncoming = World(empty_straight).compiled.road_map.lanes[ego.lane].opposite
    zone = {"appear_at": ego.s + 20, "leave_at": ego.s + 250, "ahead_to": ego.s + 21, "lanes": [oncoming]}
    background = {"density": 3.0, "radius": 150.0, "max_vehicles": 30}
    w = World(_with(empty_straight, background=background, clear_background=[zone]))
    c, rows = w.compiled, w.compiled.background[0].rows

    def on_lane(st, lane_id: str) -> int:
        lanes = c.paths.lanes[st.path_id[rows], 0]  # (a straight road's paths are one lane each)
        return int(np.sum(st.active[rows] & (lanes == c.lane_index[lane_id])))

    plain = World(_with(empty_straight, background=background))
    assert on_lane(w.state, oncoming) > 0
    while w.state.progress < zone["appear_at"] + 5.0:
        drive_world(w, lambda w: route_plan(w, 4.0), 1.0)
        drive_world(plain, lambda w: route_plan(w, 4.0), 1.0)
    for _ in range(10):  # the whole named lane, not only near the route ahead
        drive_world(w, lambda w: route_plan(w, 4.0), 1.0)
        drive_world(plain, lambda w: route_plan(w, 4.0), 1.0)
        assert on_lane(w.state, oncoming) == 0 and on_lane(plain.state, oncoming) > 0
    bad = _with(empty_straight, background=background, clear_background=[zone | {"lanes": ["no_such_lane"]}])
    with pytest.raises(ValueError, match=r"clear_background\[0\]\.lanes: no lane 'no_such_lane'"):
        World(bad)


def test_a_vehicle_stops_for_the_egos_nose_in_its_lane_not_only_its_centre(empty_straight):
    """Traffic sees the ego's body (a capsule along its length), as CARLA's agents see its bounding box:
    an ego across the road with only its front in the oncoming lane is braked for."""
    ego = empty_straight.ego
    road = World(empty_straight).compiled.road_map
    lane, oncoming = road.lanes[ego.lane], road.lanes[road.lanes[ego.lane].opposite]
    idm = {"type": "idm", "desired_speed": 10.0}
    car = {"id": "car", "lane": oncoming.id, "s": oncoming.length - (ego.s + 60.0), "speed": 10.0, "behaviour": idm}
    w = World(_with(empty_straight, actors=[car]))
    st, i = w.state, w.compiled.actors.index("car")
    across = lane.heading[0] + np.pi / 2  # the ego turns across, towards the oncoming lane
    centre_line = oncoming.pose_at(oncoming.length - ego.s)[0]  # the car's lane centre beside the ego
    normal = np.array([np.cos(across), np.sin(across)])
    st.x[0], st.y[0] = centre_line - 3.0 * normal  # its centre 3 m short of that lane's centre line
    st.yaw[0], st.speed[0] = across, 0.0
    for _ in range(100):
        w.step(-3.0, 0.0)
    assert not [e for e in w.log if e.kind == "collision"]
    assert st.speed[i] < 0.5 and np.hypot(st.x[i] - st.x[0], st.y[i] - st.y[0]) > 3.0


@pytest.mark.parametrize("turned", [40.0, 45.0, 50.0])
def test_a_vehicle_stops_for_the_corner_of_an_ego_standing_at_an_angle_to_its_lane(empty_straight, turned):
    """Traffic sees the corners of the ego's box too, which the capsule along its length leaves out: an
    ego standing turned towards the oncoming lane with only its front corner over that lane's centre
    line (its centre and both ends of the capsule out of reach) is braked for, not driven into."""
    ego = empty_straight.ego
    road = World(empty_straight).compiled.road_map
    lane, oncoming = road.lanes[ego.lane], road.lanes[road.lanes[ego.lane].opposite]
    car = {"id": "car", "lane": oncoming.id, "s": oncoming.length - (ego.s + 60.0), "speed": 10.0}
    w = World(_with(empty_straight, actors=[car | {"behaviour": {"type": "idm", "desired_speed": 10.0}}]))
    st, a, i = w.state, w.compiled.actors, w.compiled.actors.index("car")
    yaw = lane.heading[0] + np.radians(turned)
    towards = np.array([np.cos(lane.heading[0] + np.pi / 2), np.sin(lane.heading[0] + np.pi / 2)])
    forward, left = np.array([np.cos(yaw), np.sin(yaw)]), np.array([-np.sin(yaw), np.cos(yaw)])
    length, width = float(a.length[0]), float(a.width[0])
    spine = (length - width) / 2 * forward
    corner = length / 2 * forward + width / 2 * left  # the front corner nearest the oncoming lane
    centre_line = oncoming.pose_at(oncoming.length - ego.s)[0]
    # the corner 5 cm past the car's side; the capsule's points (its centre, its ends) out of its reach
    centre = centre_line - (float(a.width[i]) / 2 - 0.05 + corner @ towards) * towards
    reach = (a.width[i] + width) / 2 + kernels.OBSTACLE_MARGIN
    assert all(abs((centre + p - centre_line) @ towards) > reach for p in (0.0 * spine, spine, -spine))
    st.x[0], st.y[0] = centre
    st.yaw[0], st.speed[0] = yaw, 0.0
    for _ in range(100):
        w.step(-3.0, 0.0)
    assert not [e for e in w.log if e.kind == "collision"]
    assert st.speed[i] < 0.5


def test_a_vehicle_brakes_for_the_speed_an_ego_in_its_lane_closes_at(empty_straight):
    """A driver facing the ego in its lane brakes for the speed they close at: it has slowed down more by
    the time the gap is down to 40 m when the ego drives at it than when the ego stands there (IDM with
    the ego as a lead at minus its speed), so an ego passing an obstacle through its lane finds room to
    pull back in."""
    ego = empty_straight.ego
    road = World(empty_straight).compiled.road_map
    lane, oncoming = road.lanes[ego.lane], road.lanes[road.lanes[ego.lane].opposite]
    idm = {"type": "idm", "desired_speed": 14.0}

    def speed_at_40_m(ego_speed: float) -> float:
        """The oncoming car's speed when the gap to the ego, in its lane 90 m ahead of it, is down to 40 m."""
        car = {"id": "car", "lane": oncoming.id, "s": oncoming.length - (ego.s + 90.0), "speed": 14.0}
        w = World(_with(empty_straight, actors=[car | {"behaviour": idm}]))
        st, i = w.state, w.compiled.actors.index("car")
        st.x[0], st.y[0] = oncoming.pose_at(oncoming.length - ego.s)[0]  # the ego in the oncoming lane
        st.yaw[0], st.speed[0] = lane.heading[0], ego_speed
        while np.hypot(st.x[i] - st.x[0], st.y[i] - st.y[0]) > 40.0:
            w.step(0.0, 0.0)
        return float(st.speed[i])

    moving, standing = speed_at_40_m(8.0), speed_at_40_m(0.0)
    assert moving < standing - 1.0, (moving, standing)
