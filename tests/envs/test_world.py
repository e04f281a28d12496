"""The embedded world: events, traffic behaviour, determinism, snapshot / restore, control tracking."""

import hashlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from envs import RouteFollower, TrajectoryController, World
from envs.world import Mode
from scenarios import FAMILIES, load_bank, make_scenario
from scenarios import geometry as geo
from tests.envs.helpers import drive_world, route_plan


def _with(scn, **update):
    return scn.model_validate({**scn.model_dump(mode="json"), **update})


def _types(events):
    return [e.kind for e in events]


# --- crafted events ----------------------------------------------------------------------------------------
def test_driving_into_a_parked_car_is_a_front_at_fault_vehicle_collision(empty_straight):
    ego = empty_straight.ego
    scn = _with(
        empty_straight, actors=[{"id": "parked", "lane": ego.lane, "s": ego.s + 30, "behaviour": {"type": "static"}}]
    )
    w = World(scn)
    events = drive_world(w, lambda w: route_plan(w, 10.0), 6.0)
    hits = [e for e in events if e.kind == "collision"]
    assert len(hits) == 1  # one event per contact, not one per step
    assert hits[0].to_dict() | {"t": 0, "ego_speed": 0, "actor_speed": 0} == {
        "kind": "collision",
        "t": 0,
        "actor": "parked",
        "actor_kind": "vehicle",
        "where": "front",
        "at_fault": True,
        "ego_speed": 0,
        "actor_speed": 0,
    }


def test_being_rear_ended_while_stopped_is_not_at_fault(empty_straight):
    ego = empty_straight.ego
    lane = World(empty_straight).compiled.road_map.lanes[ego.lane]
    start, h = lane.pose_at(ego.s - 25)
    end, _ = lane.pose_at(ego.s + 5)
    track = [[0.0, *start, h], [3.0, *end, h]]
    scn = _with(
        empty_straight,
        ego={**empty_straight.ego.model_dump(), "speed": 0.0},
        actors=[{"id": "rammer", "kind": "vehicle", "behaviour": {"type": "replay", "track": track}}],
    )
    w = World(scn)
    events = []
    for _ in range(40):
        events += w.step(0.0, 0.0)
    hits = [e for e in events if e.kind == "collision"]
    assert hits and hits[0].where == "rear" and hits[0].at_fault is False


def test_hitting_a_crossing_pedestrian_is_a_pedestrian_collision(empty_straight):
    ego = empty_straight.ego
    x = ego.s + 25.0
    walker = {
        "id": "ped",
        "kind": "pedestrian",
        "length": 0.5,
        "width": 0.6,
        "height": 1.8,
        "behaviour": {"type": "walk", "path": [[x, -6.0], [x, 6.0]], "speed": 1.5, "trigger": {"time": 0.0}},
    }
    w = World(_with(empty_straight, actors=[walker]))
    events = drive_world(w, lambda w: route_plan(w, 8.0), 6.0)
    hits = [e for e in events if e.kind == "collision"]
    assert hits and hits[0].actor_kind == "pedestrian" and hits[0].at_fault


def test_steering_off_the_road_is_an_offroad_event(empty_straight):
    w = World(empty_straight)
    events = []
    while "offroad" not in _types(events) and w.t < 3.0:
        events += w.step(0.0, 0.35)
    assert w.state.offroad and events[-1].kind == "offroad"
    assert sum(w.step(0.0, 0.0) != [] for _ in range(3)) == 0  # entering is one event, not one per step


def _junction(maneuver, light):
    fam = FAMILIES["signalized_intersection"]
    params = fam.sample_params(np.random.default_rng(0)) | {"maneuver": maneuver, "density": 0.3}
    scn = make_scenario("signalized_intersection", params, 0, "j")
    prog = {"phases": [{"state": light, "duration": 100.0}], "offset": 0.0}
    return _with(scn, actors=[], signals={k: prog for k in scn.signals})


def test_running_a_red_light_is_an_infraction_and_green_is_not():
    w = World(_junction("straight", "red"))
    events = drive_world(w, lambda w: route_plan(w, 9.0), 14.0)
    assert _types(events).count("red_light") == 1
    w = World(_junction("straight", "green"))
    assert "red_light" not in _types(drive_world(w, lambda w: route_plan(w, 9.0), 14.0))


def test_the_route_follower_stops_at_red_and_goes_on_green():
    scn = _junction("left", "red")
    prog = {"phases": [{"state": "red", "duration": 12.0}, {"state": "green", "duration": 60.0}], "offset": 0.0}
    scn = _with(scn, signals={k: prog for k in scn.signals})
    w = World(scn)
    driver = RouteFollower()
    events = drive_world(w, driver.plan, 12.0)
    assert "red_light" not in _types(events) and w.state.speed[0] < 0.2
    events = drive_world(w, driver.plan, 25.0)
    assert "route_complete" in _types(events) and "red_light" not in _types(events)


def test_rolling_through_a_stop_sign_is_an_infraction_but_stopping_is_not():
    params = FAMILIES["t_junction"].sample_params(np.random.default_rng(1))
    scn = _with(make_scenario("t_junction", params, 0, "t"), actors=[])
    assert "stop_sign" in _types(drive_world(World(scn), lambda w: route_plan(w, 6.0), 15.0))
    events = drive_world(World(scn), RouteFollower().plan, 30.0)
    assert "stop_sign" not in _types(events) and "route_complete" in _types(events)


def test_driving_in_the_oncoming_lane_is_wrong_way(empty_straight):
    w = World(empty_straight)
    events = drive_world(w, lambda w: route_plan(w, 8.0, lateral=3.5), 8.0)
    assert "wrong_way" in _types(events)
    assert w.stats()["distance_wrong_way"] > 10.0


# --- traffic ------------------------------------------------------------------------------------------------
def test_idm_traffic_stops_behind_a_parked_car_without_touching_it(empty_straight):
    ego = {**empty_straight.ego.model_dump(), "lane": "r_b0", "route": ["r_b0"], "s": 10.0, "speed": 0.0}
    ego.pop("goal_distance")
    scn = _with(
        empty_straight,
        ego=ego,
        actors=[
            {"id": "parked", "lane": "r_f0", "s": 120.0, "behaviour": {"type": "static"}},
            {"id": "car", "lane": "r_f0", "s": 40.0, "speed": 12.0, "path": ["r_f0"]},
        ],
    )
    w = World(scn)
    for _ in range(250):
        w.step(0.0, 0.0)
    a = w.compiled.actors
    i, j = a.index("car"), a.index("parked")
    gap = w.state.s[j] - w.state.s[i] - (a.length[i] + a.length[j]) / 2
    assert w.state.speed[i] < 0.05 and 0.5 < gap < 6.0


def test_idm_traffic_stops_at_a_red_light():
    scn = _junction("right", "red")
    scn = _with(scn, actors=[{"id": "car", "lane": "N_b0", "s": 40.0, "speed": 10.0}])
    w = World(scn)
    for _ in range(200):
        w.step(-1.0, 0.0)
    i = w.compiled.actors.index("car")
    stop_s = w.compiled.path_stop_s[w.state.path_id[i]][0]
    front = w.state.s[i] + w.compiled.actors.length[i] / 2
    assert w.state.speed[i] < 0.05 and 0.0 < stop_s - front < 4.0


def test_cut_in_changes_into_the_ego_lane(smoke):
    w = World(smoke.get("cut_in-000"))
    i = w.compiled.actors.index("cutter")
    v = w.scenario.ego.speed
    drive_world(w, lambda w: route_plan(w, v), 15.0)  # the ego closes in on the slower cutter
    assert w.state.mode[i] == Mode.DONE
    lane, _ = w.compiled.paths.lane_at(w.state.path_id[[i]], w.state.s[[i]])
    assert w.compiled.lane_ids[lane[0]] == w.scenario.ego.lane and abs(w.state.d[i]) < 1e-6


def test_hard_braking_lead_stops_holds_then_drives_on(smoke):
    w = World(smoke.get("lead_brake-000"))
    i = w.compiled.actors.index("lead")
    seen = set()
    driver = RouteFollower()
    ctl = TrajectoryController()
    for k in range(250):
        if k % 5 == 0:
            st = w.state
            ctl.set_plan(driver.plan(w), st.x[0], st.y[0], st.yaw[0], st.speed[0])
        st = w.state
        w.step(*ctl.control(st.x[0], st.y[0], st.yaw[0], st.speed[0]))
        seen.add(int(w.state.mode[i]))
    assert {Mode.BRAKING, Mode.HOLDING, Mode.DONE} <= seen
    assert not [e for e in w.log if e.kind == "collision"]


def test_brake_lights_are_lit_while_a_car_brakes_or_stands_in_traffic_and_never_on_a_parked_car(smoke):
    base = smoke.get("lead_brake-000")
    lead_s = next(a for a in base.actors if a.id == "lead").s
    parked = {"id": "parked", "lane": "r_f1", "s": lead_s + 20.0, "behaviour": {"type": "static"}}  # beside its path
    w = World(_with(base, actors=[*base.model_dump(mode="json")["actors"], parked]))
    i, j = w.compiled.actors.index("lead"), w.compiled.actors.index("parked")
    lit_by_mode: dict[int, set[bool]] = {}
    for _ in range(200):
        w.step(-3.0 if w.state.speed[0] > 0.5 else 0.0, 0.0)  # the ego stays well behind
        lights = w.brake_lights()
        lit_by_mode.setdefault(int(w.state.mode[i]), set()).add(bool(lights[i]))
        assert not lights[j] and not lights[0]
    assert lit_by_mode[Mode.WAITING] == {False}  # cruising at its desired speed
    assert lit_by_mode[Mode.BRAKING] == {True} and lit_by_mode[Mode.HOLDING] == {True}


# --- control ------------------------------------------------------------------------------------------------
ARC_START, ARC_END = 60.0, 60.0 + 15.0 * np.deg2rad(150.0)  # the curve15 fixture's arc along its route


def _drive_curve15(scenario) -> tuple[World, np.ndarray]:
    """The controller on the 15 m radius curve at 8 m/s, replanning every 5 steps: the world at the end
    and, per step, (arc length along the route, lateral offset, wheel angle)."""
    w = World(scenario)
    w.state.speed[0] = 8.0
    c = w.compiled
    ctl = TrajectoryController()
    rows = []
    for k in range(170):
        st = w.state
        if k % 5 == 0:
            ctl.set_plan(route_plan(w, 8.0), st.x[0], st.y[0], st.yaw[0], st.speed[0])
        w.step(*ctl.control(st.x[0], st.y[0], st.yaw[0], st.speed[0]))
        s, lat, _ = geo.project(c.route_xy, c.route_s, np.array([w.state.x[0], w.state.y[0]]))
        rows.append((s, lat, w.state.steer))
    return w, np.array(rows)


def test_controller_tracks_a_15m_radius_curve_at_8mps_within_30cm(curve15):
    w, rows = _drive_curve15(curve15)
    s, lat = rows[:, 0], rows[:, 1]
    errors = np.abs(lat[(ARC_START + 3.0 < s) & (s < ARC_END)])
    assert len(errors) > 20
    assert errors.max() < 0.3
    assert abs(w.state.speed[0] - 8.0) < 0.3


def test_controller_holds_the_wheel_steady_through_a_steady_curve(curve15):
    """The wheel swinging between the rate limit's ends every step (a period-2 limit cycle) tracks the
    path as well as a steady wheel does (the test above passed with it); only the wheel angle shows it."""
    _, rows = _drive_curve15(curve15)
    s = rows[:, 0]
    steer = rows[(ARC_START + 8.0 < s) & (s < ARC_END - 3.0), 2]
    assert len(steer) > 20
    change = np.diff(steer)
    swings = (change[1:] * change[:-1] < 0) & (np.abs(change[1:]) > 0.02) & (np.abs(change[:-1]) > 0.02)
    # the limit cycle: a reversal at every step, by the rate limit (0.12 rad per step)
    assert swings.mean() < 0.15
    assert np.abs(change).max() < 0.06


def test_controller_respects_alpasim_limits(empty_straight):
    w = World(empty_straight)
    w.step(100.0, 10.0)
    assert w.state.accel[0] <= 6.0 + 1e-9 and abs(w.state.steer) <= np.deg2rad(45) + 1e-9
    w.state.speed[0] = 5.0
    w.step(-100.0, 0.0)
    assert w.state.accel[0] >= -8.0 - 1e-9
    with pytest.raises(ValueError, match="finite"):
        w.step(float("nan"), 0.0)


# --- determinism and branching ---------------------------------------------------------------------------------
def _rollout_digest(bank: str, scenario: str, steps: int) -> str:
    w = World(load_bank(bank).get(scenario), seed=3)
    driver, ctl = RouteFollower(), TrajectoryController()
    h = hashlib.sha256()
    for k in range(steps):
        st = w.state
        if k % 5 == 0:
            ctl.set_plan(driver.plan(w), st.x[0], st.y[0], st.yaw[0], st.speed[0])
        ev = w.step(*ctl.control(st.x[0], st.y[0], st.yaw[0], st.speed[0]))
        for arr in (st.x, st.y, st.yaw, st.speed):
            h.update(arr.tobytes())
        h.update(repr(ev).encode())
    return h.hexdigest()


def test_same_scenario_seed_and_actions_are_bit_identical_across_processes():
    here = _rollout_digest("smoke", "traffic_jam-000", 120)
    assert here == _rollout_digest("smoke", "traffic_jam-000", 120)
    code = textwrap.dedent("""
        from tests.envs.test_world import _rollout_digest
        print(_rollout_digest("smoke", "traffic_jam-000", 120))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


def test_snapshot_restore_reproduces_bit_for_bit(smoke):
    w = World(smoke.get("signalized_intersection-000"), seed=5)
    driver, ctl = RouteFollower(), TrajectoryController()
    for k in range(40):
        st = w.state
        if k % 5 == 0:
            ctl.set_plan(driver.plan(w), st.x[0], st.y[0], st.yaw[0], st.speed[0])
        w.step(*ctl.control(st.x[0], st.y[0], st.yaw[0], st.speed[0]))
    snap = w.snapshot()
    rng_draw = w.state.rng.random()
    controls = [(1.0 - 0.05 * k, 0.02 * np.sin(k)) for k in range(60)]

    def run():
        out = []
        for a, d in controls:
            out.append(w.step(a, d))
        s = w.state
        return out, [x.copy() for x in (s.x, s.y, s.yaw, s.speed, s.s, s.d)], list(w.log)

    first = run()
    w.restore(snap)
    assert w.state.rng.random() == rng_draw  # the RNG is part of the snapshot
    w.restore(snap)
    second = run()
    assert first[0] == second[0] and first[2] == second[2]
    for a, b in zip(first[1], second[1]):
        assert np.array_equal(a, b)


def test_moving_the_car_ahead_back_brings_it_nearer_along_its_lane_and_the_world_goes_on_from_there(empty_straight):
    """``move_along``: a lane-following car moves along its lane keeping its speed, a parked one along its
    heading; the ego and unknown actors are refused; the world steps on from the moved state."""
    ego = empty_straight.ego
    actors = [
        {"id": "car", "lane": ego.lane, "s": ego.s + 40, "speed": 5.0, "path": [ego.lane]},
        {"id": "parked", "lane": ego.lane, "s": ego.s + 80, "behaviour": {"type": "static"}},
    ]
    w = World(_with(empty_straight, actors=actors))
    a, st = w.compiled.actors, w.state
    car, parked = a.index("car"), a.index("parked")
    before = st.s[car], st.x[car], st.y[car], st.speed[car], st.x[parked], st.y[parked]
    w.move_along("car", -25.0)
    w.move_along("parked", -10.0)
    assert st.s[car] == pytest.approx(before[0] - 25.0) and st.speed[car] == before[3]
    assert np.hypot(st.x[car] - before[1], st.y[car] - before[2]) == pytest.approx(25.0, abs=1e-6)  # a straight lane
    assert np.hypot(st.x[parked] - before[4], st.y[parked] - before[5]) == pytest.approx(10.0)
    w.step(0.0, 0.0)
    assert st.s[car] == pytest.approx(before[0] - 25.0 + 0.5, abs=0.05)  # 0.1 s at about 5 m/s on from there
    with pytest.raises(ValueError, match="'ego'"):
        w.move_along(a.ids[0], 1.0)
    with pytest.raises(ValueError, match="'nobody'"):
        w.move_along("nobody", 1.0)
    assert w.movable("car") and w.movable("parked") and not w.movable(a.ids[0])


def test_shifting_the_ego_moves_it_sideways_and_turns_it_and_refuses_the_road_s_edge_and_another_car(empty_straight):
    """``shift_ego``: the ego moves along its left normal (negative: right) and turns, keeping its speed;
    its route projection reads the move; off the road or onto another car it says not clear."""
    ego = empty_straight.ego
    length = 300.0  # the oncoming lane's arc length runs from the other end
    beside = {"id": "parked", "lane": "r_b0", "s": length - ego.s, "behaviour": {"type": "static"}}
    w = World(empty_straight)
    st = w.state
    x, y, yaw, speed, lateral = float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0]), st.lateral
    assert w.shift_ego(1.0, 0.1)
    assert (st.x[0], st.y[0]) == pytest.approx((x - np.sin(yaw), y + np.cos(yaw)))
    assert st.yaw[0] == pytest.approx(yaw + 0.1) and st.speed[0] == speed
    assert st.lateral == pytest.approx(lateral + 1.0, abs=1e-6)  # a straight route: the move itself
    assert w.shift_ego(-2.0, -0.1)  # along the turned ego's normal
    assert st.lateral == pytest.approx(lateral + 1.0 - 2.0 * np.cos(0.1), abs=1e-6) and st.yaw[0] == pytest.approx(yaw)
    assert not w.shift_ego(-30.0, 0.0)  # far off the road
    assert World(empty_straight).shift_ego(3.5, 0.0)  # the oncoming lane: on the road
    assert not World(_with(empty_straight, actors=[beside])).shift_ego(3.5, 0.0)  # onto the car parked there


# --- every family runs ----------------------------------------------------------------------------------------
def _family_samples():
    core = load_bank("core", split="train")
    seen = {}
    for s in core:
        seen.setdefault(s.family, []).append(s)
    return [lst[0] for lst in seen.values()] + [lst[-1] for lst in seen.values()]


@pytest.mark.parametrize("scenario", _family_samples(), ids=lambda s: s.id)
def test_every_family_runs_ten_seconds_under_the_route_follower(scenario):
    w = World(scenario)
    drive_world(w, RouteFollower().plan, 10.0)
    assert w.t == pytest.approx(10.0)
    assert np.isfinite(w.state.x).all() and np.isfinite(w.state.speed).all()


def test_compiled_scenarios_are_kept_for_later_resets_within_a_memory_budget(monkeypatch):
    """A scenario is compiled once and reused by later resets of it, but the cache keeps only as many
    as fit its byte budget (before, it kept 33 whatever their size: 5-10 GB of 10 km routes per
    evaluation worker, and two evaluations at once ran a 24 GB machine out of memory)."""
    from envs.world import compile as compiled

    monkeypatch.setattr(compiled, "_CACHE", {})
    scenarios = load_bank("core", split="test").scenarios[:6]
    first = compiled.compile_scenario(scenarios[0])
    assert compiled.compile_scenario(scenarios[0]) is first  # reused
    budget = 2.5 * first.paths.nbytes
    monkeypatch.setattr(compiled, "CACHE_BYTES", budget)
    for scn in scenarios[1:]:
        latest = compiled.compile_scenario(scn)
        assert compiled.compile_scenario(scn) is latest  # the one just compiled is always kept
        kept = compiled._CACHE.values()
        assert len(kept) == 1 or sum(c.paths.nbytes for c in kept) <= budget
    assert len(compiled._CACHE) < len(scenarios)
