"""Right of way at junctions without lights: the conflict table, stop and yield signs, and order of
arrival, for vehicles that give way (background traffic)."""

import json

import numpy as np
import pytest

from envs import World
from envs.world.junctions import Rule, conflicts
from scenarios.maps import StopLine
from scenarios.roads import MapBuilder, junction
from scenarios.schema import Scenario


def _crossroads(stop: tuple[str, ...] = (), give_way: tuple[str, ...] = ()):
    """A 4-way junction without lights, one lane each way; stop or yield signs on the named arms."""
    b = MapBuilder()
    roads = junction(b, ["E", "N", "W", "S"], 1, 120.0, 13.9, crosswalks=False)
    for arm in stop:
        b.stop_sign(roads[arm].bwd[0])
    for arm in give_way:
        lane = b.lanes[roads[arm].bwd[0]]
        b.stop_lines.append(StopLine(f"yield:{lane.id}", lane.id, lane.length - 1.0, give_way=True))
    return b.build()


def _scenario(tmp_path, road_map, actors: list[dict]) -> Scenario:
    path = tmp_path / "crossroads.json"
    path.write_text(json.dumps(road_map.to_dict()))
    return Scenario.model_validate(
        {
            "id": "crossroads",
            "family": "custom",
            "description": "two cars meet at a junction without lights",
            "map": {"file": str(path)},
            "ego": {"lane": "E_b0", "s": 10.0, "speed": 0.0, "route": ["E_b0"], "goal_distance": 10.0},
            "actors": actors,
            "duration_s": 30.0,
        }
    )


def _car(aid: str, arm: str, to: str, s: float, gives_way: bool) -> dict:
    lanes = [f"{arm}_b0", f"j:{arm}_b0->{to}_f0", f"{to}_f0"]
    behaviour = {"type": "idm", "desired_speed": 10.0, "yields_at_junctions": gives_way}
    return {"id": aid, "lane": lanes[0], "s": s, "speed": 10.0, "path": lanes, "behaviour": behaviour}


def _run(world: World, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: the two cars' centre distance, their speeds, and their arc lengths."""
    gaps, speeds, s = [], [], []
    for _ in range(int(seconds / 0.1)):
        world.step(0.0, 0.0)
        st = world.state
        gaps.append(float(np.hypot(st.x[1] - st.x[2], st.y[1] - st.y[2])))
        speeds.append(st.speed[1:3].copy())
        s.append(st.s[1:3].copy())
    return np.array(gaps), np.array(speeds), np.array(s)


def test_conflicts_are_crossing_and_merging_movements_not_parallel_or_diverging_ones():
    road_map = _crossroads()
    index = {k: i for i, k in enumerate(road_map.lanes)}
    ptr, idx = conflicts(road_map, index)

    def crosses(a: str, b: str) -> bool:
        i = index[a]
        return index[b] in idx[ptr[i] : ptr[i + 1]]

    straight_we, straight_sn = "j:W_b0->E_f0", "j:S_b0->N_f0"
    assert crosses(straight_we, straight_sn) and crosses(straight_sn, straight_we)
    assert not crosses(straight_we, "j:E_b0->W_f0")  # opposite directions, side by side
    assert not crosses(straight_we, "j:W_b0->S_f0")  # the same entry, parting: one queue
    assert crosses("j:W_b0->N_f0", "j:E_b0->W_f0")  # a left turn across oncoming traffic
    assert crosses("j:S_b0->E_f0", straight_we)  # a right turn merging into the same exit


@pytest.mark.parametrize("gives_way", [True, False])
def test_a_stop_sign_car_stops_at_its_line_then_takes_its_turn(tmp_path, gives_way):
    road_map = _crossroads(stop=("S",))
    arm = road_map.lanes["S_b0"].length
    cars = [_car("major", "W", "E", arm - 40.0, gives_way), _car("minor", "S", "N", arm - 40.0, gives_way)]
    world = World(_scenario(tmp_path, road_map, cars))
    rules = world.compiled.junctions.entry_rule[world.state.path_id[1:3], 0]
    assert list(rules) == [Rule.PRIORITY, Rule.STOP]
    gaps, speeds, s = _run(world, 20.0)
    if not gives_way:  # traffic that ignores the rules drives into each other
        assert gaps.min() < 3.0  # closer than half a length and half a width: the boxes overlap
        return
    assert gaps.min() > 4.0
    stopped = np.flatnonzero(speeds[:, 1] < 0.5)
    assert len(stopped) and arm - 4.0 < s[stopped[0], 1] + 2.25 < arm  # at its line, front first
    assert speeds[:120, 0].min() > 9.0  # the priority car never slowed (until its path ends at 18 s)
    assert s[-1, 1] > arm + 30.0  # and the minor car went on once the junction was clear


def test_a_yield_sign_car_goes_when_no_one_comes_and_waits_when_someone_does(tmp_path):
    road_map = _crossroads(give_way=("S",))
    arm = road_map.lanes["S_b0"].length
    alone = World(_scenario(tmp_path, road_map, [_car("minor", "S", "N", arm - 40.0, True)]))
    assert alone.compiled.junctions.entry_rule[alone.state.path_id[1], 0] == Rule.YIELD
    for _ in range(80):
        alone.step(0.0, 0.0)
        assert alone.state.speed[1] > 9.0  # a yield sign is no stop sign
    cars = [_car("major", "W", "E", arm - 40.0, True), _car("minor", "S", "N", arm - 40.0, True)]
    gaps, speeds, s = _run(World(_scenario(tmp_path, road_map, cars)), 20.0)
    assert gaps.min() > 4.0 and speeds[:, 1].min() < 3.0 and speeds[:120, 0].min() > 9.0
    assert s[-1, 1] > arm + 30.0


def test_equals_go_in_order_of_arrival(tmp_path):
    road_map = _crossroads()
    arm = road_map.lanes["S_b0"].length
    cars = [_car("later", "W", "E", arm - 50.0, True), _car("first", "S", "N", arm - 40.0, True)]
    gaps, speeds, s = _run(World(_scenario(tmp_path, road_map, cars)), 20.0)
    assert gaps.min() > 4.0
    assert speeds[:120, 1].min() > 9.0 and speeds[:, 0].min() < 9.0  # the one nearer goes first
    assert s[-1, 0] > arm + 30.0


def test_yield_lines_never_make_the_ego_stop_or_count_as_infractions(tmp_path):
    road_map = _crossroads(give_way=("S",))
    scn = _scenario(tmp_path, road_map, [])
    scn = scn.model_validate(
        scn.model_dump(mode="json")
        | {"ego": {"lane": "S_b0", "s": 60.0, "speed": 8.0, "route": ["S_b0", "j:S_b0->N_f0", "N_f0"]}}
    )
    world = World(scn)
    assert world.compiled.route_stops == ()
    assert np.isinf(world.stop_ahead())


def test_a_light_whose_line_lies_just_inside_the_junction_governs_the_entry(tmp_path):
    """Towns put some stop lines on the junction lane itself (Town01): the light decides there, never
    the right-of-way rules."""
    b = MapBuilder()
    roads = junction(b, ["E", "N", "W", "S"], 1, 120.0, 13.9, crosswalks=False)
    b.signal("L", [roads["S"].bwd[0]])
    b.stop_lines[-1] = StopLine("L:inside", "j:S_b0->N_f0", 1.0, "L")
    road_map = b.build()
    world = World(_scenario(tmp_path, road_map, [_car("car", "S", "N", 60.0, True)]))
    assert world.compiled.junctions.entry_rule[world.state.path_id[1], 0] == Rule.SIGNAL


@pytest.mark.parametrize("gives_way", [True, False])
def test_under_a_green_light_a_turning_car_gives_way_to_the_straight_one_it_joins(tmp_path, gives_way):
    b = MapBuilder()
    roads = junction(b, ["E", "N", "W", "S"], 1, 120.0, 13.9, crosswalks=False)
    b.signal("LW", [roads["W"].bwd[0]])
    b.signal("LS", [roads["S"].bwd[0]])
    road_map = b.build()
    arm = road_map.lanes["S_b0"].length
    cars = [_car("straight", "W", "E", arm - 40.0, gives_way), _car("turning", "S", "E", arm - 34.0, gives_way)]
    world = World(_scenario(tmp_path, road_map, cars))
    assert list(world.compiled.junctions.entry_turns[world.state.path_id[1:3], 0]) == [False, True]
    assert (world.signal_states() == 0).all()  # both green
    gaps, speeds, _ = _run(world, 20.0)
    if not gives_way:
        assert gaps.min() < 3.0
        return
    assert gaps.min() > 4.0 and speeds[:120, 0].min() > 9.0 and speeds[:, 1].min() < 3.0


@pytest.mark.parametrize("ego_speed", [8.0, 0.0])
def test_traffic_gives_the_ego_its_turn_unless_it_stands(tmp_path, ego_speed):
    """The ego arrives first: a car on the crossing road waits while it drives through; an ego that
    stands at the line gives its turn up after 3 s and the car goes."""
    road_map = _crossroads()
    arm = road_map.lanes["S_b0"].length
    scn = _scenario(tmp_path, road_map, [_car("car", "W", "E", arm - 55.0, True)])
    start = arm - (30.0 if ego_speed else 9.0)
    ego = {"lane": "S_b0", "s": start, "speed": ego_speed, "route": ["S_b0", "j:S_b0->N_f0", "N_f0"]}
    world = World(scn.model_validate(scn.model_dump(mode="json") | {"ego": ego | {"goal_distance": 50.0}}))
    speeds, gaps = [], []
    for _ in range(150):
        world.step(0.0, 0.0)
        st = world.state
        speeds.append(float(st.speed[1]))
        gaps.append(float(np.hypot(st.x[1] - st.x[0], st.y[1] - st.y[0])))
    speeds = np.array(speeds)
    if ego_speed:
        assert min(gaps) > 4.0 and speeds.min() < 4.0  # it let the ego through (6.7 m/s without the rules)
    else:
        assert speeds[-20:].min() > 3.0 and world.state.s[1] > arm + 20.0  # it went on


def test_a_signal_hold_sets_the_lights_as_the_ego_comes_and_hands_them_back(tmp_path):
    b = MapBuilder()
    roads = junction(b, ["E", "N", "W", "S"], 1, 120.0, 13.9, crosswalks=False)
    b.signal("LE", [roads["E"].bwd[0]])
    b.signal("LS", [roads["S"].bwd[0]])
    road_map = b.build()
    scn = _scenario(tmp_path, road_map, [])
    hold = {
        "at": 15.0,  # 5 m after the ego's start
        "until": 1000.0,
        "signals": {
            "LE": [{"state": "red", "duration": 5.0}, {"state": "green", "duration": 3.0}],
            "LS": [{"state": "red", "duration": 8.0}],
        },
    }
    world = World(scn.model_validate(scn.model_dump() | {"signal_holds": [hold]}))
    le, ls = (world.compiled.signal_ids.index(k) for k in ("LE", "LS"))
    seen = []
    for _ in range(160):  # 2 m/s^2 from rest: the ego reaches +5 m after about 2.2 s
        world.step(2.0 if world.state.speed[0] < 3.0 else 0.0, 0.0)
        sig = world.signal_states()
        seen.append((round(world.t, 1), int(sig[le]), int(sig[ls])))
    before = [s for s in seen if s[0] < 2.0]
    assert all(e == 0 and s == 0 for _, e, s in before)  # the map's own program (green) before the ego comes
    started = next(t for t, e, _ in seen if e == 2)
    assert 2.0 <= started <= 3.0
    at = dict((t, (e, s)) for t, e, s in seen)
    assert at[round(started + 4.0, 1)] == (2, 2) and at[round(started + 6.0, 1)] == (0, 2)
    assert at[round(started + 9.0, 1)] == (0, 0)  # both holds over: back to the program
    with pytest.raises(ValueError, match="signal_holds name signals the map does not have"):
        World(
            scn.model_validate(scn.model_dump() | {"signal_holds": [hold | {"signals": {"X": hold["signals"]["LE"]}}]})
        )
