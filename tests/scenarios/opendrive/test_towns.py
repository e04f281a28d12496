"""The CARLA towns against the ``carla`` client (the oracle), the Leaderboard's route keypoints on them, the
import cache and the ``loopdrive map`` commands."""

from __future__ import annotations

import gzip
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import shapely
from shapely.geometry import LineString, Point

from scenarios.opendrive import import_opendrive
from scenarios.opendrive.cache import load_map

TOWNS = Path(__file__).parents[3] / "scenarios" / "towns"
ROUTES = Path(__file__).parents[2] / "data" / "routes"
SHARED = Path(__file__).parents[4] / "shared" / "roads" / "carla_towns"
SHIPPED = ["Town01", "Town02", "Town04", "Town06", "Town10HD"]

try:
    import carla
except ImportError:
    carla = None
needs_carla = pytest.mark.skipif(carla is None, reason="the carla client is not installed (pip install carla==0.9.16)")


@needs_carla
@pytest.mark.parametrize("town", SHIPPED)
def test_lanes_match_carla_within_centimetres_and_the_lane_graph_is_carlas(town):
    from scenarios.opendrive.oracle import compare_with_carla

    r = compare_with_carla(TOWNS / f"{town}.xodr.gz")
    assert r["samples"] > 1000 and r["samples_carla_could_not_place"] == 0
    assert r["position_error_m"]["median"] < 0.02 and r["position_error_m"]["max"] < 0.10
    assert r["width_error_m"]["max"] < 0.01 and r["heading_error_deg"]["max"] < 0.5
    topo = r["topology"]
    assert topo["n_only_ours"] == 0 and topo["n_only_carla"] == topo["n_only_carla_unlinked_in_file"] == 0


@pytest.mark.parametrize("town", SHIPPED)
def test_every_lane_ends_where_its_successors_start(town):
    """A lane section's last point belongs to its own records: a lane offset that starts where the
    next section starts must not move it (Town06 / Town04 shift lanes by 2.4-14 m there)."""
    road_map = load_map(TOWNS / f"{town}.xodr.gz")[0]
    gaps = [
        float(np.hypot(*(road_map.lanes[nxt].centerline[0] - lane.centerline[-1])))
        for lane in road_map.lanes.values()
        if lane.kind == "driving"
        for nxt in lane.successors
    ]
    assert len(gaps) > 100 and max(gaps) < 0.05


@needs_carla
@pytest.mark.skipif(not (SHARED / "Town12.xodr.gz").is_file(), reason=f"Town12 (71 MB) is not shipped; not at {SHARED}")
def test_town12_matches_carla():
    from scenarios.opendrive.oracle import compare_with_carla

    r = compare_with_carla(SHARED / "Town12.xodr.gz", sample_every=50.0)
    assert r["driving_lanes"] > 7000 and r["position_error_m"]["median"] < 0.02 and r["position_error_m"]["max"] < 0.1
    topo = r["topology"]
    # CARLA guesses a link for lanes the file leaves unlinked inside a road; every other edge is the same
    assert topo["n_only_ours"] == 0 and topo["n_only_carla"] == topo["n_only_carla_unlinked_in_file"]


def _keypoints(route_file: Path) -> dict[str, list[tuple[float, float]]]:
    """Town -> route keypoints (x, y) of a Leaderboard 1.0 (``waypoint``) or 2.0 (``position``) file."""
    out: dict[str, list[tuple[float, float]]] = {}
    for route in ET.parse(route_file).getroot().iter("route"):
        points = [(float(p.get("x")), float(p.get("y"))) for p in route.iter() if p.tag in ("waypoint", "position")]
        out.setdefault(route.get("town"), []).extend(points)
    return out


@needs_carla
@pytest.mark.parametrize("town", ["Town01", "Town04", "Town06"])
def test_leaderboard_keypoints_lie_on_driving_lanes_in_carlas_frame(town):
    """Leaderboard 1.0 keypoints (CARLA's frame) are on the imported driving lanes; the few that are not
    are as far from them in CARLA's own map (recorded off the road network)."""
    road_map, _ = import_opendrive(str(TOWNS / f"{town}.xodr.gz"))
    points = _keypoints(ROUTES / "lb1_routes_training_town01_04_06.xml")[town]
    centres = [LineString(lane.centerline) for lane in road_map.lanes.values() if lane.kind == "driving"]
    surfaces = [lane.polygon for lane in road_map.lanes.values() if lane.kind == "driving"]
    by_centre, by_surface = shapely.STRtree(centres), shapely.STRtree(surfaces)
    cmap = carla.Map(town, _text(town))
    off = []
    for x, y in points:
        p = Point(x, y)
        ours = p.distance(centres[by_centre.nearest(p)])
        wp = cmap.get_waypoint(carla.Location(x, y, 0.0), project_to_road=True, lane_type=carla.LaneType.Driving)
        yaw = np.radians(wp.transform.rotation.yaw)  # CARLA snaps s to its grid: compare across the lane only
        loc = wp.transform.location
        theirs = abs(-(x - loc.x) * np.sin(yaw) + (y - loc.y) * np.cos(yaw))
        # never farther from a driving lane than CARLA's own pick (CARLA may pick another level or lane)
        assert ours <= theirs + 0.05, (x, y, ours, theirs)
        if p.distance(surfaces[by_surface.nearest(p)]) > 1.0:
            off.append((x, y))
    assert len(points) > 100 and len(off) <= 0.01 * len(points), off


def _text(town: str) -> str:
    import gzip

    return gzip.decompress((TOWNS / f"{town}.xodr.gz").read_bytes()).decode()


def test_the_import_is_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPDRIVE_CACHE", str(tmp_path))
    first, report, cached = load_map(TOWNS / "Town10HD.xodr.gz", memo=False)
    again, report_again, cached_again = load_map(TOWNS / "Town10HD.xodr.gz", memo=False)
    assert not cached and cached_again and report == report_again
    assert first.lanes.keys() == again.lanes.keys()
    for key, lane in first.lanes.items():
        other = again.lanes[key]
        assert np.array_equal(lane.centerline, other.centerline) and np.array_equal(lane.widths, other.widths)
        assert lane.successors == other.successors and lane.kind == other.kind
    assert [s.lanes for s in first.signals.values()] == [s.lanes for s in again.signals.values()]
    for entry in (tmp_path / "maps").glob("*.npz"):
        entry.write_bytes(b"damaged")  # a damaged entry is rebuilt, never trusted
    _, _, cached = load_map(TOWNS / "Town10HD.xodr.gz", memo=False)
    assert not cached
    assert load_map(TOWNS / "Town10HD.xodr.gz")[0] is load_map(TOWNS / "Town10HD.xodr.gz")[0]  # one per process


def test_town04_has_its_overpass_heights_and_town10_its_signals():
    town04, _ = import_opendrive(str(TOWNS / "Town04.xodr.gz"))
    assert town04.height_range()[1] > 5.0  # the overpass
    town10, report = import_opendrive(str(TOWNS / "Town10HD.xodr.gz"))
    assert report.traffic_lights == len(town10.signals) > 10 and report.stop_signs > 0
    governed = {lane for s in town10.signals.values() for lane in s.lanes}
    assert governed and all(town10.lanes[lane].kind == "driving" for lane in governed)
    assert {sl.lane for sl in town10.stop_lines if sl.signal} == governed


def test_map_info_prints_a_json_summary(tmp_path, monkeypatch, capsys):
    from loopdrive.cli import main

    monkeypatch.setenv("LOOPDRIVE_CACHE", str(tmp_path))
    assert main(["map", "info", str(TOWNS / "Town02.xodr.gz")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["roads"] > 50 and info["lanes_by_type"]["driving"] > 50 and info["traffic_lights"] > 0
    assert info["load_s"]["second"] < info["load_s"]["first"]


@needs_carla
def test_map_check_prints_the_oracle_comparison(capsys):
    from loopdrive.cli import main

    assert main(["map", "check", str(TOWNS / "Town02.xodr.gz"), "--every", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["position_error_m"]["max"] < 0.1 and report["topology"]["n_only_ours"] == 0


def test_a_town_is_found_in_a_carla_install_folder(tmp_path):
    from scenarios.opendrive.cache import find_town

    maps = tmp_path / "CarlaUE4" / "Content" / "Carla" / "Maps" / "OpenDrive"
    maps.mkdir(parents=True)
    (maps / "Town02.xodr").write_bytes(gzip.decompress((TOWNS / "Town02.xodr.gz").read_bytes()))
    assert find_town("Town02", [tmp_path]) == maps / "Town02.xodr"
    assert find_town("Town01", [tmp_path, TOWNS]) == TOWNS / "Town01.xodr.gz"
    with pytest.raises(FileNotFoundError, match=r"no Town13\.xodr"):
        find_town("Town13", [tmp_path, TOWNS])
