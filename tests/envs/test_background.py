"""Background traffic around the ego: spawned within the radius at the configured density, despawned
beyond it, a fixed pool of rows, deterministic and branchable like everything else in the world."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from shapely.geometry import Point, Polygon
from shapely.ops import unary_union

from envs import World
from envs.world.compile import BACKGROUND_PATH_M
from scenarios import geometry as geo
from scenarios import load_bank
from scenarios.families import random_path
from scenarios.opendrive.cache import load_map
from tests.envs.helpers import drive_world, route_plan


@pytest.fixture(scope="module")
def town_route():
    """A Town01 route of the towns bank with its placed traffic replaced by background traffic."""
    scn = load_bank("towns", split="test").scenarios[0]
    spec = {"density": 1.0, "radius": 100.0, "max_vehicles": 30}
    return scn.model_validate(scn.model_dump(mode="json") | {"actors": [], "background": spec})


def test_vehicles_come_and_go_around_the_ego_as_it_drives(town_route):
    w = World(town_route)
    (vehicles,) = w.compiled.background
    rows = vehicles.rows
    assert len(rows) == 30 and w.compiled.actors.n == 31  # the pool is all there is: the cost never grows
    at_start = set(rows[w.state.active[rows]].tolist())
    assert 3 <= len(at_start) <= 30
    seen, reach = set(at_start), []

    def plan(w):
        st = w.state
        live = rows[st.active[rows]]
        seen.update(live.tolist())
        reach.append(np.hypot(st.x[live] - st.x[0], st.y[live] - st.y[0]).max(initial=0.0))
        return route_plan(w, 8.0)

    drive_world(w, plan, 60.0)
    assert w.route_progress > 300.0
    assert max(reach) < 100.0 + 20.0 + 2 * 20.0  # despawned within a pass (1 s) of leaving the radius
    assert len(seen - at_start) >= 3  # new vehicles appeared along the way
    assert (w.state.active[rows].sum() >= 1) and (w.state.active[rows].sum() <= 30)


def test_background_traffic_is_deterministic_and_branches_exactly(town_route):
    a, b = World(town_route, seed=3), World(town_route, seed=3)
    drive_world(a, lambda w: route_plan(w, 8.0), 20.0)
    snap = a.snapshot()
    drive_world(b, lambda w: route_plan(w, 8.0), 20.0)
    np.testing.assert_array_equal(a.state.x, b.state.x)
    drive_world(a, lambda w: route_plan(w, 8.0), 15.0)
    after = a.state.x.copy(), a.state.active.copy()
    a.restore(snap)
    drive_world(a, lambda w: route_plan(w, 8.0), 15.0)
    np.testing.assert_array_equal(a.state.x, after[0])
    np.testing.assert_array_equal(a.state.active, after[1])
    other = World(town_route, seed=4)
    drive_world(other, lambda w: route_plan(w, 8.0), 20.0)
    assert not np.array_equal(other.state.active, b.state.active) or not np.array_equal(other.state.x, b.state.x)


def test_pedestrians_walk_the_sidewalks_and_cross_at_crosswalks():
    """Town10HD has crosswalks: walkers appear on its sidewalks near the ego, walk at their pace, and
    some start at a crosswalk's end, crossing the road."""
    scn = next(s for s in load_bank("towns", split="test").scenarios if "Town10HD" in s.tags)
    spec = {"density": 0.5, "max_vehicles": 10, "pedestrians": 3.0, "max_pedestrians": 25, "radius": 80.0}
    w = World(scn.model_validate(scn.model_dump(mode="json") | {"actors": [], "background": spec}))
    cars, walkers = w.compiled.background
    assert walkers.walking and not cars.walking and len(walkers.rows) == 25
    assert (walkers.s == 0).sum() >= 2  # crosswalk starts (a crossing path starts at its end)
    road_map = w.compiled.road_map
    sidewalks = [lane.polygon.buffer(0.5) for lane in road_map.lanes.values() if lane.kind == "sidewalk"]
    crossings = [Polygon(cw.polygon).buffer(1.0) for cw in road_map.crosswalks]
    where = unary_union(sidewalks + crossings)
    live = walkers.rows[w.state.active[walkers.rows]]
    assert len(live) >= 5
    start = np.column_stack([w.state.x[live], w.state.y[live]])
    assert all(where.contains(Point(*p)) for p in start)
    drive_world(w, lambda w: route_plan(w, 0.0), 5.0)  # the ego waits; the walkers walk
    moved = np.hypot(w.state.x[live] - start[:, 0], w.state.y[live] - start[:, 1])
    walking = w.state.active[live]
    assert np.median(moved[walking]) == pytest.approx(1.3 * 5.0, abs=1.0)


def test_a_walker_waits_for_a_vehicle_standing_in_its_way():
    scn = next(s for s in load_bank("towns", split="test").scenarios if "Town10HD" in s.tags)
    spec = {"density": 0.0, "max_vehicles": 1, "pedestrians": 3.0, "max_pedestrians": 10, "radius": 80.0}
    w = World(scn.model_validate(scn.model_dump(mode="json") | {"actors": [], "background": spec}))
    _, walkers = w.compiled.background
    st = w.state
    k = int(walkers.rows[st.active[walkers.rows]][0])
    # the ego stands across the walker's way, its side 1.5 m ahead of the walker
    heading = float(st.yaw[k])
    st.x[0], st.y[0] = st.x[k] + 2.5 * np.cos(heading), st.y[k] + 2.5 * np.sin(heading)
    st.yaw[0], st.speed[0] = heading + np.pi / 2, 0.0
    s0 = float(st.s[k])
    for _ in range(10):
        w.step(0.0, 0.0)
    assert float(st.s[k]) == pytest.approx(s0, abs=0.15)  # at most one step before it saw the car
    st.x[0] += 50.0  # the car moves away: the walker goes on
    for _ in range(10):
        w.step(0.0, 0.0)
    assert float(st.s[k]) > s0 + 1.0


def test_a_background_vehicle_drives_on_well_past_the_lane_it_appears_on(town_route):
    """A vehicle may appear anywhere on its lane, near its end too: its path runs on for the pool's
    length past that lane (or to a dead end), so it never vanishes, or runs off its path into whoever
    stands beyond it, a few metres after appearing."""
    w = World(town_route)
    (vehicles,) = w.compiled.background
    paths, road = w.compiled.paths, w.compiled.road_map
    ahead = paths.length[vehicles.path] - vehicles.s
    last_lane = [w.compiled.lane_ids[paths.lanes[p][paths.lanes[p] >= 0][-1]] for p in vehicles.path]
    dead_end = np.array([not road.lanes[x].successors for x in last_lane])
    assert (ahead[~dead_end] >= BACKGROUND_PATH_M["driving"]).all()
    assert (~dead_end).mean() > 0.9


def test_traffic_on_a_lane_that_runs_out_moves_into_the_lane_beside_and_drives_on():
    """A lane that narrows to nothing with no lane after it (Town06's lane dropped before a junction) is
    left for the lane beside, as CARLA's traffic manager links such a dead end: a path along it changes
    into that lane and goes on along its successors, instead of ending at the point where the lane has
    no width left (beside the next lane's traffic)."""
    road = load_map(Path(__file__).parents[2] / "scenarios" / "towns" / "Town06.xodr.gz")[0]
    lane = road.lanes["48_0_-3"]
    assert lane.runs_out and road.merges_into(lane.id) == "48_0_-4"
    assert not road.lanes["48_0_-4"].runs_out and road.merges_into("48_0_-4") is None
    path = random_path(road, lane.id, 300.0, np.random.default_rng(0))
    assert path[:2] == [lane.id, "48_0_-4"] and path[2] in road.lanes["48_0_-4"].successors
    assert all(b in road.lanes[a].successors for a, b in itertools.pairwise(path[2:]))
    line = road.lane_sequence_polyline(path)
    assert geo.arc_lengths(line)[-1] >= 300.0
    # by the lane's end the path is on the centre of the lane beside, clear of the point the lane runs out at
    assert np.min(np.hypot(*(line - road.lanes["48_0_-4"].centerline[-1]).T)) < 0.1
    assert np.min(np.hypot(*(line - lane.centerline[-1]).T)) > 1.0
