"""Leaderboard route files: reading (1.0 and 2.0), route ids, densifying on a town's lanes, bad input."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from shapely.geometry import LineString, Point

from scenarios import geometry as geo
from scenarios.opendrive.cache import load_map
from scenarios.routes import RouteFileError, parse_route_ids, plan_route, read_routes

ROUTES = Path(__file__).parents[1] / "data" / "routes"
TOWNS = Path(__file__).parents[2] / "scenarios" / "towns"


def test_route_ids_and_ranges():
    assert parse_route_ids("0,3-5, 9") == ["0", "3", "4", "5", "9"]
    with pytest.raises(ValueError, match="'5-3'"):
        parse_route_ids("5-3")


def test_leaderboard_2_routes_with_their_typed_scenarios():
    routes = read_routes(ROUTES / "lb2_routes_devtest.xml")
    assert [(r.id, r.town) for r in routes] == [("0", "Town12"), ("1", "Town12")]
    r = routes[0]
    assert len(r.keypoints) == 35 and r.keypoints[0].x == 983.5 and len(r.weathers) == 2
    by_name = {s.name: s for s in r.scenarios}
    assert by_name["ParkingExit_1"].params == {
        "direction": "right",
        "front_vehicle_distance": 9.0,
        "behind_vehicle_distance": 9.0,
    }
    assert by_name["SignalizedJunctionLeftTurn_1"].params["source_dist_interval"] == (30.0, 65.0)
    assert by_name["Accident_1"].trigger.yaw == pytest.approx(math.radians(144))
    assert [r.id for r in read_routes(ROUTES / "lb2_routes_devtest.xml", ["1"])] == ["1"]
    with pytest.raises(RouteFileError, match=r"no route with id \['7'\]"):
        read_routes(ROUTES / "lb2_routes_devtest.xml", ["7"])


def test_leaderboard_1_routes_densify_on_town01_through_every_keypoint():
    road_map = load_map(TOWNS / "Town01.xodr.gz")[0]
    routes = [r for r in read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml") if r.town == "Town01"]
    assert len(routes) == 10
    for r in routes:
        plan = plan_route(r, road_map)
        assert all(b in road_map.lanes[a].successors for a, b in zip(plan.lanes, plan.lanes[1:]))
        line = LineString(road_map.lane_sequence_polyline(plan.lanes))
        assert max(line.distance(Point(k.x, k.y)) for k in r.keypoints) < 1.0  # every keypoint on the route
        straight = sum(math.dist((a.x, a.y), (b.x, b.y)) for a, b in zip(r.keypoints, r.keypoints[1:]))
        assert straight <= plan.length + 1.0


def test_a_route_changes_lanes_where_its_keypoints_move_to_a_neighbouring_lane():
    """Route 40 on Town06's multi-lane roads moves between lanes from keypoint to keypoint: the route
    changes into a lane beside along a lane (one change per lane), and its line blends across."""
    road_map = load_map(TOWNS / "Town06.xodr.gz")[0]
    route = read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml", ["40"])[0]
    plan = plan_route(route, road_map)
    pairs = list(itertools.pairwise(plan.lanes))
    changes = [k for k, (a, b) in enumerate(pairs) if road_map.is_lane_change(a, b)]
    assert changes and all(b - a > 1 for a, b in itertools.pairwise(changes))
    assert all(b in road_map.lanes[a].successors or road_map.is_lane_change(a, b) for a, b in pairs)
    line, _, starts = road_map.lane_sequence(plan.lanes)
    s_line = geo.arc_lengths(line)
    for k in changes:  # the blend leaves A's centre at its start and reaches B's at its end, smoothly
        a, b = road_map.lanes[plan.lanes[k]], road_map.lanes[plan.lanes[k + 1]]
        end = starts[k + 2] if k + 2 < len(starts) else s_line[-1]
        inside = (s_line >= starts[k]) & (s_line <= end + 1e-9)
        piece = line[inside]
        assert np.linalg.norm(piece[0] - a.centerline[0]) < 0.5 and np.linalg.norm(piece[-1] - b.centerline[-1]) < 1.0
        assert np.linalg.norm(np.diff(piece, axis=0), axis=1).max() < 2.0
    route_line = LineString(line)
    assert max(route_line.distance(Point(k.x, k.y)) for k in route.keypoints) < 8.0  # within two lanes of each


def test_a_lane_path_far_longer_than_its_keypoints_gap_is_refused_not_driven():
    road_map = load_map(TOWNS / "Town04.xodr.gz")[0]
    route = read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml", ["32"])[0]
    with pytest.raises(ValueError, match=r"route 32: from keypoint 8 .* the lanes detour \d+ m for a 45 m gap"):
        plan_route(route, road_map)


def test_scenarios_attach_within_2_m_and_10_degrees(tmp_path):
    road_map = load_map(TOWNS / "Town01.xodr.gz")[0]
    r = read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml", ["0"])[0]
    k = r.keypoints[3]
    line = road_map.lane_sequence_polyline(plan_route(r, road_map).lanes)
    s_line = geo.arc_lengths(line)
    at, _, _ = geo.project(line, s_line, np.array([k.x, k.y]))
    h = math.degrees(float(geo.interpolate(line, s_line, at)[1]))  # the route's heading at the keypoint
    points = "".join(f'<waypoint x="{p.x}" y="{p.y}" z="0" yaw="{math.degrees(p.yaw)}"/>' for p in r.keypoints)

    def scenario(name: str, dx: float, yaw: float) -> str:
        n = np.array([-math.sin(math.radians(h)), math.cos(math.radians(h))]) * dx
        x, y = k.x + n[0], k.y + n[1]
        return f'<scenario name="{name}" type="Accident"><trigger_point x="{x}" y="{y}" z="0" yaw="{yaw}"/></scenario>'

    body = scenario("on", 0.5, h) + scenario("far", 4.0, h) + scenario("turned", 0.0, h + 30)
    (tmp_path / "r.xml").write_text(
        f'<routes><route id="0" town="Town01">{points}<scenarios>{body}</scenarios></route></routes>'
    )
    plan = plan_route(read_routes(tmp_path / "r.xml")[0], road_map)
    assert [s.name for s, _ in plan.scenarios] == ["on"] and sorted(plan.unplaced) == ["far", "turned"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<routes><route id='1' town='Town01'><waypoint x='1' y='2'/>", "not well-formed"),
        ("<routes><route town='Town01'/></routes>", "needs id and town"),
        (
            "<routes><route id='4' town='T'><position x='a' y='0'/><position x='1' y='1'/></route></routes>",
            "route 4: <position> x='a' is not a number",
        ),
        ("<routes><route id='4' town='T'><position x='1' y='0'/></route></routes>", "route 4: fewer than 2 keypoints"),
        (
            "<routes><route id='4' town='T'><position x='1' y='0'/><position x='2' y='0'/><scenarios><scenario "
            "name='A_1' type='Accident'/></scenarios></route></routes>",
            "scenario A_1: needs a type and a <trigger_point>",
        ),
        ('<!DOCTYPE r [<!ENTITY a "b">]><routes/>', "DTD"),
    ],
)
def test_a_bad_route_file_names_the_file_the_route_and_the_element(tmp_path, text, message):
    (tmp_path / "bad.xml").write_text(text)
    with pytest.raises(RouteFileError) as e:
        read_routes(tmp_path / "bad.xml")
    assert str(e.value).startswith(str(tmp_path / "bad.xml")) and message in str(e.value), str(e.value)


def _written_routes(tmp_path) -> Path:
    """Route 0 of the Leaderboard 1.0 file with an Accident on it, a route on a town nobody has, and one
    whose keypoint is off the road (a file this test writes: tests never ship others' route files)."""
    r = read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml", ["0"])[0]
    points = "".join(f'<waypoint x="{p.x}" y="{p.y}" z="0" yaw="{math.degrees(p.yaw)}"/>' for p in r.keypoints)
    k = r.keypoints[2]
    accident = f'<scenario name="Accident_1" type="Accident"><trigger_point x="{k.x}" y="{k.y}" z="0"/></scenario>'
    off = '<waypoint x="5000" y="5000" z="0" yaw="0"/><waypoint x="5010" y="5000" z="0" yaw="0"/>'
    (tmp_path / "routes.xml").write_text(
        f'<routes><route id="0" town="Town01">{points}<scenarios>{accident}</scenarios></route>'
        f'<route id="1" town="Town99">{points}</route><route id="2" town="Town01">{off}</route></routes>'
    )
    return tmp_path / "routes.xml"


def test_a_route_file_is_a_bank_made_in_memory_with_the_refused_routes_named(tmp_path):
    from scenarios import load_bank
    from scenarios.routes import RouteBankSpec

    spec = RouteBankSpec(str(_written_routes(tmp_path)), (str(TOWNS),))
    assert RouteBankSpec.parse(spec.to_string()) == spec
    bank = load_bank(spec.to_string())
    assert [s.id for s in bank.scenarios] == ["route_0"] and bank.manifest.families == ["route"]
    assert "no Town99.xodr" in bank.refused["route_1"] and "route 2: keypoint 0" in bank.refused["route_2"]
    scn = bank.scenarios[0]
    assert scn.params["scenario_types"] == ["Accident"] and "scenario:Accident" in scn.tags
    assert scn.ego.goal_distance > 500 and scn.background is not None and scn.signals
    assert list(tmp_path.iterdir()) == [tmp_path / "routes.xml"]  # nothing written: a route file is never converted
    assert load_bank(spec.to_string()).scenarios[0] == scn  # the same scenarios each time (seeded by route id)
    assert load_bank(RouteBankSpec(spec.file, spec.maps, "1").to_string()).scenarios == []


def test_runs_of_one_route_path_share_a_tag_and_resample_together():
    """The Leaderboard 2.0 files drive each path three times (another weather): the runs carry one
    ``path:`` tag, and the interval that resamples whole paths is wider than the one that takes the
    copies for independent routes."""
    from evaluation.summary import bootstrap_ci, clustered_bootstrap_ci
    from scenarios.routes import path_tag

    r0, r1 = read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml", ["0", "1"])
    assert path_tag(r0) == path_tag(replace(r0, id="30", weathers=({"cloudiness": 80.0},))) != path_tag(r1)
    scores = [10.0, 90.0, 50.0, 30.0]
    paths = ["a", "b", "c", "d"]
    copied = [x for x in scores for _ in range(3)], [p for p in paths for _ in range(3)]
    assert clustered_bootstrap_ci(*copied) == pytest.approx(clustered_bootstrap_ci(scores, paths))
    naive, clustered = bootstrap_ci(copied[0]), clustered_bootstrap_ci(*copied)
    assert clustered[1] - clustered[0] > 1.4 * (naive[1] - naive[0])


def test_loopdrive_eval_runs_a_route_file_and_resumes(tmp_path):
    from evaluation import EvalConfig, evaluate

    config = EvalConfig(
        routes=str(_written_routes(tmp_path)), agent="expert", rigs=["front_only"], camera_size=(32, 64)
    )
    summary = evaluate(config, tmp_path / "run", progress=False, write_report=False)
    assert summary["episodes"]["total"] == 1 and summary["suites"]["leaderboard"]["mean"] > 90
    assert set(summary["routes"]["refused"]) == {"route_1", "route_2"}
    assert summary["routes"]["scenarios_played"] == {"Accident": 1}
    assert {"ControlLoss", "ParkingExit"} <= set(summary["routes"]["scenario_types_not_played"])
    assert set(summary["by_ability"]) == {"Overtaking"}  # Bench2Drive's group of an Accident
    # the Leaderboard 2.0's score with the min-speed infraction is reported beside the headline one
    with_min_speed = summary["driving_score_min_speed"]["mean"]
    assert with_min_speed <= summary["suites"]["leaderboard"]["mean"]
    again = evaluate(config, tmp_path / "run", progress=False, write_report=True)  # nothing left to run
    assert again["suites"]["leaderboard"] == summary["suites"]["leaderboard"]
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Routes, worst first" in page and page.count('data-figure="bev"') == 1
    assert "Route file: scenarios and abilities" in page and "Overtaking" in page and "DS with min speed" in page
    assert "stroke-dasharray" in page  # the planned route, drawn on its town under the path driven


def test_a_bench2drive_style_route_sets_the_egos_light_red_then_green_and_the_expert_waits(tmp_path):
    """Bench2Drive's own types from a file this test writes (its files are the user's copy only): the
    ego's light set red as it comes to the junction, then green; the expert stops for it and goes on."""
    from evaluation import EvalConfig, evaluate
    from scenarios.leaderboard.base import RouteFrame
    from scenarios.opendrive.cache import load_map

    r = read_routes(ROUTES / "lb1_routes_training_town01_04_06.xml", ["0"])[0]
    town = load_map(TOWNS / "Town01.xodr.gz")[0]
    frame = RouteFrame(town, plan_route(r, town).lanes)
    entry = frame.junction_after(200.0)[0]
    near = frame.pose(entry - 25.0)  # 25 m before the second junction with lights
    points = "".join(f'<waypoint x="{p.x}" y="{p.y}" z="0" yaw="{math.degrees(p.yaw)}"/>' for p in r.keypoints)

    def run(kind: str) -> dict:
        at = f'<trigger_point x="{near[0]}" y="{near[1]}" z="0"/>'
        t = f'<trigger_point x="{r.keypoints[1].x}" y="{r.keypoints[1].y}" z="0"/>'
        elements = (
            f'<scenario name="J_1" type="{kind}">{at}</scenario><scenario name="T_1" type="T_Junction">{t}</scenario>'
        )
        (tmp_path / f"{kind}.xml").write_text(
            f'<routes><route id="0" town="Town01">{points}<scenarios>{elements}</scenarios></route></routes>'
        )
        config = EvalConfig(
            routes=str(tmp_path / f"{kind}.xml"), agent="expert", rigs=["front_only"], camera_size=(32, 64)
        )
        return evaluate(config, tmp_path / kind, progress=False, write_report=False)

    red, plain = run("VanillaSignalizedTurnEncounterRedLight"), run("VanillaNonSignalizedTurn")
    assert red["routes"]["scenarios_played"] == {"T_Junction": 1, "VanillaSignalizedTurnEncounterRedLight": 1}
    assert not red["routes"]["scenario_types_unsupported"] and not red["routes"]["scenarios_skipped"]
    for summary in (red, plain):
        assert summary["success_rate"] == 100.0 and "red_light" not in summary["infractions"]
    assert set(red["by_ability"]) == {"Traffic Sign"}

    def stopped_then_went(kind: str) -> bool:
        """Whether the ego, passing the trigger, slowed below 1 m/s and was going again (over 2 m/s)
        within 6 s (its 0.5 s trace)."""
        record = json.loads((tmp_path / kind / "episodes.jsonl").read_text().splitlines()[-1])
        trace = np.array(record["trace"])
        k = int(np.argmin(np.hypot(*(trace - np.array(near[:2])).T)))
        speed = np.hypot(*np.diff(trace[k : k + 30], axis=0).T) / 0.5
        slowest = int(np.argmin(speed[:15]))
        return bool(speed[slowest] < 1.0 and (speed[slowest : slowest + 12] > 2.0).any())

    # red for 5 s as it came, then green: it stops and goes; under the town's own program it waits longer
    assert stopped_then_went("VanillaSignalizedTurnEncounterRedLight")
    assert not stopped_then_went("VanillaNonSignalizedTurn")
