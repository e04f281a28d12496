"""A running CARLA server's map, saved as OpenDRIVE and imported like any file."""

from __future__ import annotations

import os

import numpy as np
import pytest

from scenarios.opendrive.cache import load_map
from scenarios.opendrive.server import fetch_server_map
from tests.envs.backends import carla_module_fake


def test_the_servers_map_is_written_atomically_and_imports(tmp_path):
    """With the stand-in client module (it checks this code, not CARLA's API: the test below does)."""
    path = fetch_server_map("localhost", 2000, out=tmp_path, carla=carla_module_fake.module())
    assert path == tmp_path / "Town04.xodr" and not list(tmp_path.glob("*.part"))
    road_map, report, _ = load_map(path, use_cache=False)
    lanes = [lane for lane in road_map.lanes.values() if lane.kind == "driving"]
    assert len(lanes) == 2 and not report.warnings
    assert np.isclose(lanes[0].length, carla_module_fake.ROAD_M)


def test_a_map_without_opendrive_text_is_refused(tmp_path, monkeypatch):
    carla = carla_module_fake.module()
    monkeypatch.setattr(carla_module_fake.Map, "to_opendrive", lambda self: "")
    with pytest.raises(ValueError, match=r"Town04.*no OpenDRIVE"):
        fetch_server_map(out=tmp_path, carla=carla)


HOST = os.environ.get("LOOPDRIVE_CARLA_HOST")


@pytest.mark.skipif(not HOST, reason="no CARLA server: set LOOPDRIVE_CARLA_HOST (docker compose up carla)")
def test_a_live_servers_town_imports_and_matches_its_own_client(tmp_path):
    pytest.importorskip("carla", reason="the CARLA client is not installed (pip install '.[carla]')")
    from scenarios.opendrive.oracle import compare_with_carla

    path = fetch_server_map(HOST, int(os.environ.get("LOOPDRIVE_CARLA_PORT", 2000)), out=tmp_path)
    r = compare_with_carla(path, 10.0)
    assert r["samples"] > 100 and r["position_error_m"]["max"] < 0.10 and r["topology"]["n_only_ours"] == 0
