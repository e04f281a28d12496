"""The expert passes an obstacle through the oncoming lane only when the oncoming traffic, braking for it
as the world's drivers do, leaves it room to get back in lane, the oncoming flow's next vehicle (not
yet entered) included: it never ends up face to face with a car that stopped for it, beside the
obstacle, in that car's lane (the Leaderboard's *TwoWays scenarios), yet takes a gap of about 5 s
from a standstill. Round an obstacle in a lane with another its way beside, it changes into the free
one on the side the obstacle leaves open, and not in front of a car coming up fast. Held at a junction
by a flow that never gives way, it creeps up and goes when the flow's next vehicle can brake for it
(the junction flow scenarios), and coming fast to a turn it judges a gap at the speed it turns at; going
straight on at a green light it lets a car running its red cross; moving two lanes over it waits for a car
in the lane between.
Where two lanes join at a shallow angle it lets the car coming alongside in ahead; out beside its lane
at a junction it stays in that lane where it runs on, or waits short of the junction and moves back in
behind a car that can brake for it."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from agents import prediction
from agents.expert import Expert
from agents.prediction import EgoPass, Oncoming, pass_completes
from scenarios.schema import Scenario


def test_a_pass_completes_only_when_the_oncoming_car_stops_beyond_its_end():
    ego = EgoPass(front=0.0, speed=0.0, top=8.0, length=4.9, back=7.0, ramp_s=1.6, ramp_min_speed=3.0)
    assert pass_completes(ego, 10.0, [])
    far, near = Oncoming(130.0, 11.0, 11.0), Oncoming(50.0, 11.0, 11.0)
    assert pass_completes(ego, 10.0, [far])  # it sees us from 100 m and stops short of the pass
    assert not pass_completes(ego, 10.0, [near])  # it stops where we need to be back
    assert not pass_completes(ego, 10.0, [far, near])
    standing = Oncoming(20.0, 0.0, 11.0)  # a car standing in the oncoming lane before the end of the pass
    assert not pass_completes(ego, 10.0, [standing])
    # a longer obstacle needs more room than a short one with the same oncoming car
    assert pass_completes(ego, 5.0, [Oncoming(95.0, 11.0, 11.0)])
    assert not pass_completes(ego, 30.0, [Oncoming(95.0, 11.0, 11.0)])


def _obstacle_with_oncoming_flow(
    gap: tuple[float, float], source: float = 100.0, cars_at: tuple[float, ...] = (0.0, 10.0, 16.0)
) -> Scenario:
    """One lane each way; an accident (three cars over 21 m, or cars ``cars_at`` metres on) in the ego's
    lane 110 m ahead; an oncoming flow enters ``source`` metres past it at 11 m/s, ``gap`` metres apart
    (the Leaderboard's AccidentTwoWays, ParkedObstacleTwoWays)."""
    from scenarios.families import make_scenario

    params = {"lanes": 1, "length": 500.0, "speed_limit": 13.9, "density": 0.0}
    data = make_scenario("straight", params, 0, "parked_two_ways").model_dump(mode="json")
    ego = data["ego"] | {"lane": "r_f0", "s": 40.0, "speed": 6.0, "route": ["r_f0"], "goal_distance": 300.0}
    cars = [
        {"id": f"crash{k}", "lane": "r_f0", "s": 150.0 + ds, "behaviour": {"type": "static"}}
        for k, ds in enumerate(cars_at)
    ]
    source_s = 500.0 - 152.5 - cars_at[-1] - source  # (on the oncoming lane, which runs the other way)
    flow = {"id": "oncoming", "path": ["r_b0"], "s": source_s, "speed": 11.0, "gap": list(gap)}
    return Scenario.model_validate(data | {"ego": ego, "actors": cars, "flows": [flow], "duration_s": 150.0})


def _drive(scenario: Scenario, steps: int):
    """The world the expert drives ``scenario`` in (collisions do not end it), and an iterator that makes
    up to ``steps`` decisions of 0.5 s, one per item, stopping where the episode ends."""
    env = gym.make("LoopDrive-v0", scenario=scenario, observations=("state",), terminate_on_collision=False)
    env.reset(seed=0)
    world = env.unwrapped.world
    expert = Expert()
    expert.reset({"world": world})

    def decisions():
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(expert.act(None).trajectory)
            yield
            if terminated or truncated:
                return

    return world, decisions()


def _events(world) -> list[str]:
    return [e.kind.value for e in world.log]


def _pass(scenario: Scenario) -> tuple[list[str], float]:
    """Events, and the longest time the ego stood in the oncoming lane."""
    world, decisions = _drive(scenario, 300)
    standing, longest = 0.0, 0.0
    for _ in decisions:
        out = abs(world.state.lateral) > 1.5 and world.state.speed[0] < 0.3
        standing = standing + 0.5 if out else 0.0
        longest = max(longest, standing)
    return _events(world), longest


def test_the_expert_passes_an_obstacle_between_oncoming_cars_and_never_stands_in_their_lane(monkeypatch):
    scenario = _obstacle_with_oncoming_flow((60.0, 130.0), source=10.0)
    events, longest = _pass(scenario)
    assert "route_complete" in events and "collision" not in events and longest == 0.0
    # the scene is a real test: an expert blind to the flow's next vehicle (it has not entered yet when
    # the pass starts) meets it in the oncoming lane and stands there, face to face
    monkeypatch.setattr(prediction, "next_oncoming_from_flows", lambda *args: [])
    monkeypatch.setattr("agents.expert.next_oncoming_from_flows", lambda *args: [])
    events, longest = _pass(scenario)
    assert longest > 10.0


def _left_turn_across_a_flow(gap: tuple[float, float]) -> Scenario:
    """An unprotected left turn on a shared green across a flow of oncoming traffic at 10 m/s that never
    gives way, ``gap`` metres apart (the Leaderboard's SignalizedJunctionLeftTurn)."""
    from envs import World
    from scenarios.families import make_scenario

    params = {"speed_limit": 11.1, "oncoming": 1, "headway": 3.0, "oncoming_speed": 8.0}
    data = make_scenario("unprotected_left", params, 0, "left_across_flow").model_dump(mode="json")
    data["actors"] = []
    lanes = World(Scenario.model_validate(data)).compiled.road_map.lanes
    straight = next(x for x in lanes["N_b0"].successors if abs(lanes[x].heading[-1] - lanes[x].heading[0]) < 0.1)
    path = ["N_b0", straight, lanes[straight].successors[0]]
    source = lanes["N_b0"].length - 40.0  # (its first vehicle reaches the junction as the ego does)
    flow = {"id": "oncoming", "path": path, "s": source, "speed": 10.0, "gap": list(gap), "reacts_to_signals": False}
    return Scenario.model_validate(data | {"flows": [flow], "duration_s": 120.0})


def _turn(scenario: Scenario) -> tuple[list[str], float]:
    """Events, and when the ego was through the junction (inf: never)."""
    world, decisions = _drive(scenario, 240)
    c = world.compiled
    lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
    k = next(k for k, li in enumerate(lanes) if li >= 0 and c.lane_in_junction[li])
    exit_s = float(starts[k]) + c.road_map.lanes[c.lane_ids[lanes[k]]].length
    through = math.inf
    for _ in decisions:
        if through == math.inf and world.state.route_s > exit_s + 5.0:
            through = world.state.t
    return _events(world), through


def test_held_at_a_turn_by_a_flow_that_never_gives_way_the_expert_creeps_up_and_goes_when_it_can_brake(
    monkeypatch,
):
    """Gaps of 3-4.5 s: too short to turn through untouched (it needs about 6 s from its line), long enough
    for the flow's next vehicle to see it on its path and brake, as scenario_runner's flows do."""
    scenario = _left_turn_across_a_flow((30.0, 45.0))
    events, through = _turn(scenario)
    assert "collision" not in events and through < 60.0
    # the scene is a real test: the expert that only takes a gap it can clear untouched waits it out
    monkeypatch.setattr("agents.expert.ASSERT_AFTER_S", math.inf)
    events, through = _turn(scenario)
    assert "collision" not in events and through == math.inf


def test_held_at_a_turn_by_a_dense_flow_the_expert_goes_when_the_next_car_can_brake_firmly(monkeypatch):
    """Gaps of 3-3.6 s at 10 m/s (the Leaderboard's turns at a busy junction): the next vehicle sees it on its
    path with room to stop at 7 m/s^2 (the world's traffic brakes at up to 9), never at a gentle 5."""
    scenario = _left_turn_across_a_flow((30.0, 36.0))
    events, through = _turn(scenario)
    assert "collision" not in events and through < 60.0
    monkeypatch.setattr("agents.expert.YIELD_DECEL", 5.0)  # the expert before: it waited the flow out
    events, through = _turn(scenario)
    assert "collision" not in events and through == math.inf


def test_the_expert_counts_on_slowing_for_a_turn_where_the_route_caps_its_speed():
    """Where it will be on a junction path: from its speed, accelerating at ``CROSS_ACCEL`` up to ``CROSS_SPEED``
    (the closed form) where the route lets it, and no faster than the route's cap where that is lower, after
    which it speeds up again at ``CROSS_ACCEL``."""
    from agents.expert import CROSS_ACCEL, _capped_progress, _distance_covered, _time_to_cover

    taus = np.arange(0.0, 12.0, 0.25)
    for v in (0.0, 3.0, 12.0):
        x, t = _capped_progress(v, 150.0, np.array([0.0, 500.0]), np.array([30.0, 30.0]))
        assert np.allclose(np.interp(taus, t, x), _distance_covered(taus, v), atol=0.1)
        assert abs(float(np.interp(60.0, x, t)) - _time_to_cover(60.0, v)) < 0.05
    # 14 m/s, 40 m before a turn taken at 6 m/s (braked into at 2 m/s^2), 20 m long, then straight again
    x_cap = np.array([0.0, 40.0, 60.0, 60.5, 210.0])
    v_cap = np.array([14.0, 6.0, 6.0, 14.0, 14.0])
    x, t = _capped_progress(14.0, 150.0, x_cap, v_cap)
    speed = np.gradient(x, t)
    assert (speed <= np.interp(x, x_cap, v_cap) + 0.05).all()
    after = (x > 70.0) & (x < 80.0)  # out of the turn it speeds up from 6 m/s at CROSS_ACCEL
    assert np.allclose(speed[after] ** 2, 36.0 + 2.0 * CROSS_ACCEL * (x[after] - 60.0), rtol=0.05)
    assert float(np.interp(60.0, x, t)) > _time_to_cover(60.0, 14.0) + 1.5  # the turn takes > 1.5 s longer


def _fast_to_a_left_turn(car_s: float, car_speed: float) -> Scenario:
    """The ego at 13.9 m/s, 100 m before an unprotected left turn on a shared green (it slows to about 5 m/s
    in the turn), and a flow of oncoming cars 150 m apart at ``car_speed`` that never gives way, its first
    ``car_s`` metres along the oncoming lane (Leaderboard 2.0 route 8's InterurbanAdvancedActorFlow, where
    the expert came at 14.6 m/s to a right turn across a flow at 18 m/s)."""
    from envs import World
    from scenarios.families import make_scenario

    params = {"speed_limit": 13.9, "oncoming": 1, "headway": 3.0, "oncoming_speed": 8.0}
    data = make_scenario("unprotected_left", params, 0, "fast_left").model_dump(mode="json")
    lanes = World(Scenario.model_validate(data)).compiled.road_map.lanes
    straight = next(x for x in lanes["N_b0"].successors if abs(lanes[x].heading[-1] - lanes[x].heading[0]) < 0.1)
    path = ["N_b0", straight, lanes[straight].successors[0]]
    flow = {
        "id": "onc",
        "path": path,
        "s": car_s,
        "speed": car_speed,
        "gap": [150.0, 150.0],
        "reacts_to_signals": False,
    }
    data["ego"] |= {"s": 5.0, "speed": 13.9}
    return Scenario.model_validate(data | {"actors": [], "flows": [flow], "duration_s": 40.0})


def _hardest_braking_of_others(scenario: Scenario) -> tuple[list[str], float]:
    """Events, and the hardest braking (m/s^2, over 0.5 s) of any other vehicle."""
    world, decisions = _drive(scenario, 80)
    before, hardest = world.state.speed.copy(), 0.0
    for _ in decisions:
        st = world.state
        others = st.active.copy()
        others[0] = False
        hardest = max(hardest, float(((before - st.speed) / 0.5)[others].max(initial=0.0)))
        before = st.speed.copy()
    return _events(world), hardest


@pytest.mark.parametrize("car_s, car_speed", [(25.0, 8.0), (30.0, 8.0), (10.0, 10.0), (12.5, 10.0)])
def test_coming_fast_to_a_turn_the_expert_judges_the_gap_at_the_speed_it_turns_at(monkeypatch, car_s, car_speed):
    """The gap in front of the flow's car is long enough at its approach speed and too short at the speed it
    turns at: it waits, and the car goes by without braking."""
    events, hardest = _hardest_braking_of_others(_fast_to_a_left_turn(car_s, car_speed))
    assert events == ["route_complete"] and hardest < 1.0
    # the scene is a real test: counting on its approach speed through the turn it went, and the car braked hard
    import agents.expert as expert_module

    capped = expert_module._capped_progress
    no_cap = np.array([0.0, 1.0]), np.array([1e3, 1e3])
    monkeypatch.setattr(expert_module, "_capped_progress", lambda v, reach, *cap: capped(v, reach, *no_cap))
    events, hardest = _hardest_braking_of_others(_fast_to_a_left_turn(car_s, car_speed))
    assert hardest > 5.0


def _standing_behind_a_parked_car(spacing: float) -> Scenario:
    """The ego standing 3 m behind a parked car, one lane each way; oncoming cars ``spacing`` metres apart
    at the lane's speed, under way from the start and kept coming by a flow 100 m past the car (the
    Leaderboard's ParkedObstacleTwoWays: `frequency` 45-85 m on route 17)."""
    data = _obstacle_with_oncoming_flow((spacing, spacing), cars_at=(0.0,)).model_dump(mode="json")
    data["ego"] |= {"s": 142.0, "speed": 0.0, "goal_distance": 150.0}
    first = 500.0 - 250.0  # the flow's source on the oncoming lane
    stream = [{"id": f"on{k}", "lane": "r_b0", "s": first + k * spacing, "speed": 11.0} for k in range(4)]
    return Scenario.model_validate(data | {"actors": data["actors"] + stream})


def _passed_at(scenario: Scenario) -> tuple[list[str], float]:
    """Events, and when the ego was 10 m past the parked car (inf: never)."""
    world, decisions = _drive(scenario, 120)
    passed = math.inf
    for _ in decisions:
        if passed == math.inf and world.state.route_s > 160.0:
            passed = world.state.t
    return _events(world), passed


def test_standing_behind_a_parked_car_the_expert_passes_between_oncoming_cars_55_m_apart(monkeypatch):
    """About 5 s between two oncoming cars: enough for a pass from a standstill started as the first one
    goes by (counted out in their lane only as its front nears the car, the decision and the check
    before it pulls out alike) and driven briskly (2.5 m/s^2)."""
    events, passed = _passed_at(_standing_behind_a_parked_car(55.0))
    assert "collision" not in events and passed < 20.0
    # the scene is a real test: at the 1.5 m/s^2 it drives elsewhere the gaps are too short
    monkeypatch.setattr("agents.expert.PASS_ACCEL", 1.5)
    events, passed = _passed_at(_standing_behind_a_parked_car(55.0))
    assert passed == math.inf


def test_an_obstacle_pushed_to_the_left_of_the_left_lane_is_passed_in_the_free_lane_on_its_right():
    """Two lanes each way; a crash in the ego's lane shifted towards the centre line (an Accident with
    `direction` left): the expert changes to the lane on its right, not into the oncoming lanes."""
    from scenarios.families import make_scenario

    params = {"lanes": 2, "length": 400.0, "speed_limit": 13.9, "density": 0.0}
    data = make_scenario("straight", params, 0, "crash_on_the_left").model_dump(mode="json")
    ego = data["ego"] | {"lane": "r_f0", "s": 30.0, "speed": 8.0, "route": ["r_f0"], "goal_distance": 250.0}
    cars = [
        {"id": f"crash{k}", "lane": "r_f0", "s": 130.0 + ds, "lateral": 1.0, "behaviour": {"type": "static"}}
        for k, ds in enumerate((0.0, 10.0, 16.0))
    ]
    scenario = Scenario.model_validate(data | {"ego": ego, "actors": cars, "duration_s": 60.0})
    world, decisions = _drive(scenario, 120)
    lateral = [world.state.lateral for _ in decisions]  # the ego's offset from its lane's centre, left +
    events = _events(world)
    assert "route_complete" in events and "collision" not in events
    assert min(lateral) < -2.5 and max(lateral) < 1.0


def test_the_expert_does_not_pull_out_in_front_of_a_car_coming_up_fast_in_the_lane_beside():
    """Standing behind a parked car on a two-lane road, a car 60 m back in the free lane at 20 m/s (3 s
    away; a highway's traffic): the expert lets it by before it changes lanes (pulling out at once, it
    made that car brake at 9 m/s^2)."""
    from scenarios.families import make_scenario

    params = {"lanes": 2, "length": 400.0, "speed_limit": 22.2, "density": 0.0}
    data = make_scenario("straight", params, 0, "fast_car_beside").model_dump(mode="json")
    ego = data["ego"] | {"lane": "r_f1", "s": 92.0, "speed": 0.0, "route": ["r_f1"], "goal_distance": 200.0}
    cars = [
        {"id": "parked", "lane": "r_f1", "s": 100.0, "behaviour": {"type": "static"}},
        {"id": "fast", "lane": "r_f0", "s": 32.0, "speed": 20.0},
    ]
    scenario = Scenario.model_validate(data | {"ego": ego, "actors": cars, "duration_s": 40.0})
    world, decisions = _drive(scenario, 80)
    fast = list(world.compiled.actors.ids).index("fast")
    hardest = min(0.0, *(float(world.state.accel[fast]) for _ in decisions))  # its hardest braking
    events = _events(world)
    assert "route_complete" in events and "collision" not in events and hardest > -1.0


def _red_light_runner(s0: float) -> Scenario:
    """Straight through a junction on green; a car from the right runs its red light at 10 m/s, starting
    ``s0`` metres along its lane, 110 m long (the Leaderboard's OppositeVehicleRunningRedLight)."""
    from scenarios.families import make_scenario

    params = {"maneuver": "straight", "lanes": 1, "speed_limit": 11.1, "green_ns": 60.0, "green_ew": 20.0}
    data = make_scenario("signalized_intersection", params | {"offset": 0.0, "density": 0.0}, 0, "runner")
    data = data.model_dump(mode="json")
    runner = {
        "id": "runner",
        "lane": "E_b0",
        "s": s0,
        "speed": 10.0,
        "path": ["E_b0", "j:E_b0->W_f0", "W_f0"],
        "behaviour": {"type": "idm", "desired_speed": 10.0, "reacts_to_signals": False},
    }
    return Scenario.model_validate(data | {"actors": [runner], "duration_s": 40.0})


def test_going_straight_on_green_the_expert_lets_a_car_running_its_red_light_cross():
    """Timed to meet it (with the runner 40 m along, an expert that trusts the lights is hit)."""
    for s0 in (30.0, 40.0, 50.0):
        world, decisions = _drive(_red_light_runner(s0), 80)
        for _ in decisions:
            pass
        events = _events(world)
        assert "collision" not in events and "route_complete" in events, s0


def _on_the_ramp(actors: list[dict] = (), flows: list[dict] = (), s: float = 133.0, speed: float = 0.0) -> Scenario:
    """A highway on-ramp whose 25 m merge lane runs beside the outer lane (hu_f1) into it: the ego on the
    ramp ``s`` metres along (133: standing at the merge lane's start)."""
    from scenarios.families import make_scenario

    params = {"lanes": 2, "speed_limit": 22.2, "density": 0.0, "ramp_length": 100.0}
    data = make_scenario("highway_merge", params, 0, "ramp").model_dump(mode="json")
    data["ego"] |= {"s": s, "speed": speed, "goal_distance": 250.0 - s + 40.0}
    return Scenario.model_validate(data | {"actors": list(actors), "flows": list(flows), "duration_s": 90.0})


def test_the_expert_does_not_merge_in_front_of_a_car_coming_up_fast_in_the_lane_it_merges_into():
    """The car reaches the merge lane only after the ego has left it, then runs up behind it: the
    previous expert merged and made it brake at 8-9 m/s^2."""
    from scenarios.families import idm_actor

    for s, speed in ((0.0, 25.0), (0.0, 28.0), (10.0, 25.0)):
        car = idm_actor("fast", "hu_f1", s, speed, ["hu_f1", "hd_f1"], speed)
        world, decisions = _drive(_on_the_ramp([car]), 60)
        j = list(world.compiled.actors.ids).index("fast")
        hardest = 0.0
        for _ in decisions:
            hardest = min(hardest, float(world.state.accel[j]))
        assert hardest > -3.5 and _events(world) == ["route_complete"], (s, speed, hardest)


def _merge_into_a_flow(speed: float, gap: tuple[float, float]) -> tuple[list[str], float]:
    """Events, and when the ego (on the ramp at 8 m/s) was through the merge lane into a flow at ``speed``
    m/s, ``gap`` metres apart, in the outer lane (inf: never in 90 s)."""
    flow = {"id": "slow", "path": ["hu_f1", "hd_f1"], "s": 150.0, "speed": speed, "gap": list(gap)}
    world, decisions = _drive(_on_the_ramp(flows=[flow], s=40.0, speed=8.0), 180)
    through = math.inf
    for _ in decisions:
        if through == math.inf and world.state.route_s > 138.3 + 25.3:
            through = world.state.t
    return _events(world), through


def test_merging_into_a_slow_dense_flow_the_expert_follows_the_car_that_went_in_before_it():
    """MergerIntoSlowTraffic: cars at 9 m/s, 15-40 m apart, that never give way by rule (they brake for
    what stands on their path). The car that has just gone by into the merge is a leader to follow, not
    a conflict to wait out (the previous expert stood at the merge for the whole 90 s)."""
    events, through = _merge_into_a_flow(speed=9.0, gap=(15.0, 40.0))
    assert through < 60.0 and "collision" not in events


def test_standing_at_the_end_of_a_merge_lane_the_expert_lets_the_passing_car_pull_away_and_goes_behind_it():
    """A flow at 10 m/s, 25-35 m apart (route 19's MergerIntoSlowTraffic): the car passing the standing ego
    pulls away and is a leader once past, not a car to brake for while beside it; before, the next car
    was always too near by the time the one beside had gone by, and the ego stood the whole 90 s."""
    events, through = _merge_into_a_flow(speed=10.0, gap=(25.0, 35.0))
    assert through < 60.0 and "collision" not in events


def test_a_car_in_the_next_lane_passes_beside_the_path_and_one_crossing_it_is_met_a_half_length_early():
    """Where a crossing vehicle meets our junction path is read from both bodies: beside us (a flow's car
    coming the other way in the lane next to our exit, 3.5 m off) it is clear; across our path it
    touches half its length before its centre gets there."""
    from agents.expert import CONFLICT_MARGIN_M, _body_reach

    world, _ = _drive(_on_the_ramp(), 0)
    a = world.compiled.actors
    # (vehicle 0, the ego's own size, heading the other way beside our path and across it)
    beside, across = _body_reach(world, 0, np.array([0.0, math.pi / 2]), np.array([math.pi]))[:, 0]
    assert beside == a.width[0] / 2 + a.width[0] / 2 + CONFLICT_MARGIN_M < 3.5
    assert across == a.length[0] / 2 + a.width[0] / 2 + CONFLICT_MARGIN_M


def test_changing_lanes_into_a_flow_along_a_long_lane_the_expert_keeps_its_pace_and_goes_in_behind_a_car():
    """The route changes from the merge's lane into the one beside it, where a flow runs at 16 m/s,
    15-40 m apart (the Leaderboard's EnterActorFlow onto a highway). It keeps to its lane a little
    slower than the car beside it and goes in behind that car; the previous expert stopped where its
    side reached the new lane and waited there."""
    flow = {"id": "flow", "path": ["hu_f0", "hd_f0"], "s": 120.0, "speed": 16.0, "gap": [15.0, 40.0]}
    data = _on_the_ramp(flows=[flow], s=40.0, speed=12.0).model_dump(mode="json")
    data["ego"] |= {"route": ["ramp", "merge:ramp->hd_f1", "hd_f1", "hd_f0"], "goal_distance": 370.0}
    world, decisions = _drive(Scenario.model_validate(data), 120)
    slowest = math.inf
    for _ in decisions:
        slowest = min(slowest, float(world.state.speed[0]))
    assert _events(world) == ["route_complete"] and world.state.t < 40.0 and slowest > 3.0


@pytest.mark.parametrize(
    "target, ahead, speed, ego_speed",
    [("r_f1", 55.0, 12.0, 22.0), ("r_f1", 60.0, 10.0, 20.0), ("r_f0", 80.0, 12.0, 18.0), ("r_f0", 85.0, 12.0, 22.0)],
)
def test_changing_lanes_the_expert_falls_in_behind_a_slow_car_where_it_would_catch_it_up(
    target, ahead, speed, ego_speed
):
    """MergerIntoSlowTraffic (route 23): the route changes one or two lanes over along a 260 m lane, and
    a car drives slower in the lane it moves into. By the time the ego catches it up the route's line
    has moved across towards it, so it is a car to follow, judged at the catch-up point, not where it
    is now: the previous expert judged it beside its path and hit its side as the line moved (these
    four, of 180 in a scan; the new expert none)."""
    from scenarios.families import build_family_map, idm_actor, make_scenario

    params = {"lanes": 3, "length": 260.0, "speed_limit": 27.8, "density": 0.0}
    road = make_scenario("straight", params, 0, "lc")
    lane = road.ego.lane
    assert target in build_family_map("straight", params).lanes_beside(lane)
    ego = road.ego.model_copy(update={"s": 5.0, "speed": ego_speed, "route": [lane, target], "goal_distance": 240.0})
    slow = idm_actor("slow", target, ahead, speed, [target], speed)
    data = road.model_dump(mode="json") | {"ego": ego.model_dump(mode="json"), "actors": [slow], "duration_s": 40.0}
    world, decisions = _drive(Scenario.model_validate(data), 60)
    for _ in decisions:
        pass
    assert _events(world) == ["route_complete"]


@pytest.mark.parametrize("back, speed", [(35.0, 26.0), (45.0, 26.0), (45.0, 30.0), (55.0, 30.0)])
def test_along_a_long_lane_change_the_expert_lets_a_fast_car_some_way_back_go_by_first(back, speed):
    """The route changes lanes along an 800 m lane; in the lane it changes into a car comes up ``back``
    metres behind at ``speed`` (the ego at 14 m/s). The expert moves across in a few seconds, not over the
    whole lane, so it lets such a car by first, however far back (waiting costs nothing: it drives on in
    its own lane); counting only cars within 30 m, as where a change must be made before a junction, it
    moved across in front of these four and they braked at 7-9 m/s^2."""
    from scenarios.families import build_family_map, idm_actor, make_scenario

    params = {"lanes": 2, "length": 800.0, "speed_limit": 22.2, "density": 0.0}
    road = make_scenario("straight", params, 0, "fast")
    lane = build_family_map("straight", params).lanes[road.ego.lane]
    other = lane.left or lane.right
    route = [road.ego.lane, other]
    ego = road.ego.model_copy(update={"s": 200.0, "speed": 14.0, "route": route, "goal_distance": 550.0})
    car = idm_actor("fast", other, 200.0 - back, speed, [other], speed)
    data = road.model_dump(mode="json") | {"ego": ego.model_dump(mode="json"), "actors": [car], "duration_s": 40.0}
    world, decisions = _drive(Scenario.model_validate(data), 60)
    j = list(world.compiled.actors.ids).index("fast")
    hardest, before = 0.0, speed
    for _ in decisions:
        if not world.state.active[j]:
            break
        hardest, before = max(hardest, (before - float(world.state.speed[j])) / 0.5), float(world.state.speed[j])
    assert "collision" not in _events(world) and hardest < 3.0


@pytest.mark.parametrize("length, speed", [(200.0, 20.0), (300.0, 16.0), (400.0, 12.0)])
def test_moving_two_lanes_over_along_a_short_lane_the_expert_does_not_overshoot_its_new_lane(length, speed):
    """The route changes two lanes over along a ``length`` m lane (Leaderboard 1.0's Town06 routes 40 / 43 /
    47), so the new lane moves across the route's line at up to 1 m/s; a car drives in the lane beyond. The
    move rides on the moving lane and never passes its centre; laid out as a fixed target's, it started
    level each decision, lagged the lane and swung 1.4-1.7 m past its centre towards that car (a collision
    on all three Town06 routes)."""
    from scenarios.families import idm_actor, make_scenario

    params = {"lanes": 4, "length": length, "speed_limit": 22.2, "density": 0.0}
    road = make_scenario("straight", params, 0, "two")
    route, goal = ["r_f0", "r_f2"], length - 40.0
    ego = road.ego.model_copy(update={"lane": "r_f0", "s": 20.0, "speed": speed, "route": route, "goal_distance": goal})
    car = idm_actor("beyond", "r_f3", 20.0, speed, ["r_f3"], speed)
    data = road.model_dump(mode="json") | {"ego": ego.model_dump(mode="json"), "actors": [car], "duration_s": 40.0}
    env = gym.make("LoopDrive-v0", scenario=Scenario.model_validate(data), observations=("state",))
    env.reset(seed=0)
    world, expert, past = env.unwrapped.world, Expert(), 0.0
    expert.reset({"world": world})
    for _ in range(60):
        _, _, terminated, truncated, _ = env.step(expert.act(None).trajectory)
        if expert._moved is not None:  # how far past its lane's centre, away from where it came from
            side = math.copysign(1.0, expert._moved[2])
            past = max(past, side * (world.state.lateral - float(expert._lane_line(world.state.route_s))))
        if terminated or truncated:
            break
    assert "collision" not in _events(world) and past < 0.5


@pytest.mark.parametrize("ahead, speed", [(0.0, 14.0), (2.0, 14.0), (4.0, 13.0), (-3.0, 15.0)])
def test_moving_two_lanes_over_the_expert_waits_for_a_car_in_the_lane_between(ahead, speed):
    """The route moves two lanes over along a 300 m lane (Leaderboard 2.0 route 19's EnterActorFlow, where
    the ramp's lane joins a highway two lanes from the route's), and a car drives in the lane between,
    about level with the ego (``ahead`` metres, centre to centre). The lanes crossed are the new one and
    the one between: the expert waits for that car to draw ahead and goes in behind it. Checking only the
    new lane, it moved across into the car's side (routes 19 / 49 / 79, seed 0: a collision)."""
    from scenarios.families import idm_actor, make_scenario

    params = {"lanes": 3, "length": 300.0, "speed_limit": 22.2, "density": 0.0}
    road = make_scenario("straight", params, 0, "two")
    route = ["r_f0", "r_f2"]
    ego = road.ego.model_copy(update={"lane": "r_f0", "s": 20.0, "speed": 14.0, "route": route, "goal_distance": 260.0})
    car = idm_actor("between", "r_f1", 20.0 + ahead, speed, ["r_f1"], speed)
    data = road.model_dump(mode="json") | {"ego": ego.model_dump(mode="json"), "actors": [car], "duration_s": 40.0}
    world, decisions = _drive(Scenario.model_validate(data), 80)
    for _ in decisions:
        pass
    assert _events(world) == ["route_complete"]


def _on_built_map(tmp_path, builder, scenario: dict) -> Scenario:
    """``scenario`` on the map ``builder`` (a ``MapBuilder``) builds, written as a JSON road map."""
    import json

    path = tmp_path / f"{scenario['id']}.json"
    path.write_text(json.dumps(builder.build().to_dict()))
    return Scenario.model_validate(scenario | {"map": {"file": str(path)}})


def _roads(*roads: tuple[str, float, float, float, int], connect: tuple[tuple[str, str], ...]):
    """A ``MapBuilder`` with straight one-way roads (name, x, y, length, lanes) at 14-16 m/s, and junction
    connectors (in junction ``j``) between the given lane ends."""
    from scenarios import geometry as geo
    from scenarios.roads import MapBuilder

    b = MapBuilder()
    for name, x, y, length, lanes in roads:
        b.road(name, geo.straight([x, y], 0.0, length), lanes, 0, 16.0, sidewalks=False)
    for a, c in connect:
        b.connector(a, c, junction="j")
    return b


def _joining_at_a_shallow_angle(tmp_path, source: float, flow_speed: float) -> Scenario:
    """Two one-lane roads 9 m apart whose lanes join over a 100 m junction connector each, the one from the
    side at about 5 degrees; the ego drives the straight one at 9 m/s from 50 m before the junction, and a
    flow that never gives way by rule enters the other ``source`` metres along it (20-60 m from the junction)
    at ``flow_speed``, its cars 200 m apart (route 24's EnterActorFlow: a car came alongside in the junction
    as the lanes closed up and hit the ego's side)."""
    b = _roads(
        ("a", 0, 0, 150, 1), ("b", 0, -9, 150, 1), ("o", 250, 0, 300, 1), connect=(("a_f0", "o_f0"), ("b_f0", "o_f0"))
    )
    route = ["a_f0", "j:a_f0->o_f0", "o_f0"]
    flow = {"id": "side", "path": ["b_f0", "j:b_f0->o_f0", "o_f0"], "s": source, "speed": flow_speed}
    ego = {"lane": "a_f0", "s": 100.0, "speed": 9.0, "route": route, "goal_distance": 250.0}
    return _on_built_map(
        tmp_path, b, {"id": "joining", "duration_s": 40.0, "ego": ego, "flows": [flow | {"gap": [200.0, 200.0]}]}
    )


@pytest.mark.parametrize("car_at, ego_at", [(140.0, 60.0), (135.0, 50.0), (130.0, 50.0), (140.0, 70.0)])
def test_a_car_standing_to_give_way_where_its_lane_joins_ours_is_not_waited_for(tmp_path, car_at, ego_at):
    """Two lanes join just past a junction; on the other one a car stands at its stop sign, giving way to
    the ego, 9 m to its side and ahead of it. A car standing there is not one merging in first (it may
    be waiting for us; standing, it passes any "heading our way" test): the previous expert slowed to a
    crawl behind it until it went, 10 s later here (route 60 and Leaderboard 1.0's route 38 stood 180 s
    where the car kept waiting)."""
    from scenarios.families import idm_actor

    b = _roads(
        ("a", 0, 0, 150, 1), ("b", 0, -9, 150, 1), ("o", 165, 0, 300, 1), connect=(("a_f0", "o_f0"), ("b_f0", "o_f0"))
    )
    b.stop_sign("b_f0")
    car = idm_actor("side", "b_f0", car_at, 0.0, ["b_f0", "j:b_f0->o_f0", "o_f0"], 10.0, yields_at_junctions=True)
    ego = {"lane": "a_f0", "s": ego_at, "speed": 9.0, "route": ["a_f0", "j:a_f0->o_f0", "o_f0"], "goal_distance": 250.0}
    scenario = _on_built_map(tmp_path, b, {"id": "standing", "duration_s": 60.0, "ego": ego, "actors": [car]})
    world, decisions = _drive(scenario, 100)
    for _ in decisions:
        pass
    assert _events(world) == ["route_complete"] and world.state.t < 20.0


def test_where_lanes_join_at_a_shallow_angle_the_expert_falls_in_behind_the_car_coming_alongside(tmp_path):
    """The car on the other lane is seen on our side well before the lanes touch; a faster one, or one a
    nose ahead, is let in ahead. The previous expert drove on, and each of these five hit its side (the
    lanes overlap before the map's joining point, and the car sees the ego on its path only then)."""
    for source, speed in ((84.0, 12.0), (88.0, 12.0), (92.0, 12.0), (104.0, 12.0), (88.0, 14.0)):
        world, decisions = _drive(_joining_at_a_shallow_angle(tmp_path, source, speed), 80)
        for _ in decisions:
            pass
        assert _events(world) == ["route_complete"], (source, speed)


def _passed_into_a_flow(tmp_path, gap: tuple[float, float], speed: float, lane_beside_goes_on: bool) -> Scenario:
    """Two lanes our way ending at a junction whose path starts in ours (the lane beside runs on through it,
    or has no successor); an accident in our lane 80 m ahead of the ego, passed in the lane beside, and
    past it a flow at ``speed`` in our lane, ``gap`` metres apart, that never lets anyone in by rule (route
    24's MergerIntoSlowTraffic after its Accident; route 75's Accident_1 before EnterActorFlowV2)."""
    connect = (("r_f0", "o_f0"), ("r_f1", "o_f1")) if lane_beside_goes_on else (("r_f0", "o_f0"),)
    b = _roads(("r", 0, 0, 200, 2), ("o", 240, 0, 200, 2 if lane_beside_goes_on else 1), connect=connect)
    route = ["r_f0", "j:r_f0->o_f0", "o_f0"]
    scenario = {
        "id": "passed",
        "duration_s": 90.0,
        "ego": {"lane": "r_f0", "s": 20.0, "speed": 10.0, "route": route, "goal_distance": 300.0},
        "actors": [{"id": "crash", "lane": "r_f0", "s": 100.0, "behaviour": {"type": "static"}}],
        "flows": [{"id": "flow", "path": route, "s": 120.0, "speed": speed, "gap": list(gap)}],
    }
    return _on_built_map(tmp_path, b, scenario)


def test_out_beside_its_lane_at_a_junction_the_expert_waits_short_of_it_and_moves_back_in_behind_a_car(tmp_path):
    """Back from the pass is never clear (the flow fills our lane), so it stops short of the junction, room
    enough to move across before it, and goes back in behind a car when the next one, driving on until our
    body is on its path, can then brake for it. The previous expert drove through the junction out of its
    lane (off the road), and without the move back in it stands there to the end."""
    for gap in ((15.0, 25.0), (25.0, 40.0)):
        world, decisions = _drive(_passed_into_a_flow(tmp_path, gap, 7.0, lane_beside_goes_on=False), 180)
        for _ in decisions:
            pass
        assert _events(world) == ["route_complete"], gap


def test_out_beside_its_lane_where_that_lane_runs_on_through_the_junction_the_expert_stays_in_it(tmp_path):
    """Its own lane full of the flow, it drives on through the junction in the lane beside and moves back
    after it; the previous expert stood at the junction's edge to the end, waiting to be back in lane."""
    for gap in ((15.0, 25.0), (25.0, 40.0)):
        world, decisions = _drive(_passed_into_a_flow(tmp_path, gap, 10.0, lane_beside_goes_on=True), 180)
        slowest = math.inf
        for _ in decisions:
            if world.state.route_s > 150.0:
                slowest = min(slowest, float(world.state.speed[0]))
        assert _events(world) == ["route_complete"] and slowest > 5.0, gap
