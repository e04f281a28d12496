"""Scenario schema, validation messages, map model, families and reproducible banks."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs import LoopDriveEnv
from scenarios import (
    FAMILIES,
    RoadMap,
    ScenarioError,
    build_family_map,
    generate_bank,
    load_bank,
    load_scenario,
    make_scenario,
    parse_scenario,
    validate_path,
)
from scenarios.banks import BANKS_DIR

REQUIRED_FAMILIES = {
    "straight",
    "curve",
    "s_bend",
    "signalized_intersection",
    "unprotected_left",
    "t_junction",
    "highway_merge",
    "overtake",
    "lead_brake",
    "cut_in",
    "pedestrian_crossing",
    "parked_blocking",
    "traffic_jam",
}


def test_at_least_twelve_families_with_parameter_ranges():
    assert REQUIRED_FAMILIES <= set(FAMILIES)
    for fam in FAMILIES.values():
        assert fam.params, fam.name
        assert fam.description


def test_curve_radius_reaches_fifteen_metres_both_ways():
    r = FAMILIES["curve"].params["radius"]
    assert r.lo <= 15.0
    assert set(FAMILIES["curve"].params["direction"].options) == {"left", "right"}


@pytest.mark.parametrize("name", sorted(REQUIRED_FAMILIES))
def test_family_is_a_pure_function_of_params_and_seed(name):
    fam = FAMILIES[name]
    params = fam.sample_params(np.random.default_rng(3))
    a = make_scenario(name, params, 11, "x").model_dump(mode="json")
    b = make_scenario(name, params, 11, "x").model_dump(mode="json")
    assert a == b
    m = build_family_map(name, params)
    assert m.drivable_area.area > 100
    # every lane centre lies on the drivable area
    for lane in m.lanes.values():
        mid = lane.centerline[len(lane.centerline) // 2]
        assert m.drivable_area.contains(__import__("shapely").Point(mid)), lane.id


def test_junction_map_holds_connectors_signals_stop_lines_and_crosswalks():
    m = build_family_map(
        "signalized_intersection", FAMILIES["signalized_intersection"].sample_params(np.random.default_rng(0))
    )
    connectors = [lane for lane in m.lanes.values() if lane.junction is not None]
    assert connectors and all(len(c.successors) == 1 and len(c.predecessors) == 1 for c in connectors)
    assert len(m.signals) == 4 and m.stop_lines and len(m.crosswalks) == 4
    assert all(sl.signal in m.signals for sl in m.stop_lines)


def test_road_map_round_trips_through_json(tmp_path):
    m = build_family_map("t_junction", FAMILIES["t_junction"].sample_params(np.random.default_rng(1)))
    again = RoadMap.from_dict(json.loads(json.dumps(m.to_dict())))
    assert set(again.lanes) == set(m.lanes)
    assert again.drivable_area.symmetric_difference(m.drivable_area).area < 1.0
    assert [s.id for s in again.stop_lines] == [s.id for s in m.stop_lines]


def test_scenario_with_a_map_file(tmp_path, monkeypatch):
    scn = make_scenario("curve", FAMILIES["curve"].sample_params(np.random.default_rng(2)), 0, "from_file")
    road_map = build_family_map("curve", scn.map.params)
    (tmp_path / "road.json").write_text(json.dumps(road_map.to_dict()))
    data = scn.model_dump(mode="json")
    data["map"] = {"file": "road.json"}
    (tmp_path / "s.json").write_text(json.dumps(data))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    loaded = load_scenario(tmp_path / "s.json")
    assert loaded.map.file == str((tmp_path / "road.json").resolve())  # the scenario's folder, not the cwd
    env = LoopDriveEnv(scenario=loaded, observations=("ego_state",))  # what validates, runs
    env.reset(seed=0)


def test_road_map_rejects_dangling_links():
    from scenarios import Lane

    with pytest.raises(ValueError, match="unknown lane 'nowhere'"):
        RoadMap({"a": Lane("a", [[0, 0], [10, 0]], successors=["nowhere"])})


# --- validation messages -------------------------------------------------------------------------------
def _valid(smoke) -> dict:
    return smoke.get("signalized_intersection-000").model_dump(mode="json")


def test_validation_names_file_field_and_reason(smoke, tmp_path):
    data = _valid(smoke)
    data["actors"][0]["speed"] = -3
    data["ego"]["route"][1] = "no_such_lane"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert f"{path}: actors[0].speed: Input should be greater than or equal to 0" in str(e.value)
    data["actors"][0]["speed"] = 3
    path.write_text(json.dumps(data))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert f"{path}: ego.route[1]: unknown lane 'no_such_lane'" in str(e.value)


def test_validation_catches_broken_route_and_unknown_signal(smoke):
    data = _valid(smoke)
    data["ego"]["route"] = [data["ego"]["route"][0], data["ego"]["route"][2]]  # skips the connector
    data["signals"]["sig_X"] = {"phases": [{"state": "red", "duration": 5}]}
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data, "mem.json")
    text = str(e.value)
    assert "ego.route[1]: lane" in text and "neither follows" in text
    assert "signals.sig_X: the map has no signal 'sig_X'" in text


def test_bank_validate_cli_lists_problems_and_exits_1(smoke, tmp_path):
    bank = tmp_path / "bank"
    shutil.copytree(smoke.path, bank)
    data = json.loads((bank / "scenarios" / "curve-000.json").read_text())
    data["duration_s"] = "long"
    (bank / "scenarios" / "curve-000.json").write_text(json.dumps(data))
    (bank / "scenarios" / "broken.yaml").write_text("id: [unclosed\n")
    cli = [sys.executable, "-m", "loopdrive.cli", "bank", "validate", str(bank)]
    out = subprocess.run(cli, capture_output=True, text=True)
    assert out.returncode == 1
    assert "curve-000.json: duration_s: Input should be a valid number" in out.stderr
    assert "broken.yaml: <file>: cannot read" in out.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "loopdrive.cli", "bank", "validate", str(smoke.path)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr


# hypothesis: arbitrary edits of a valid scenario give validation errors, never a crash
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_scenarios_only_raise_validation_errors(smoke, data):
    base = smoke.get("cut_in-000").model_dump(mode="json")
    paths = [p for p in _paths(base) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        node = base
        try:
            for part in path[:-1]:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            continue
        if data.draw(st.booleans()) and isinstance(node, dict):
            node.pop(path[-1], None)
        else:
            try:
                node[path[-1]] = data.draw(_leaf)
            except (IndexError, TypeError):
                pass
        paths = [p for p in _paths(base) if p]
    try:
        parse_scenario(base, "fuzz.json")
    except ScenarioError as e:
        assert all(line.startswith("fuzz.json: ") for line in e.problems)


# --- banks ------------------------------------------------------------------------------------------------
def test_shipped_banks_load_with_splits():
    core = load_bank("core")
    assert len(core) >= 300
    assert {s.family for s in core} >= REQUIRED_FAMILIES
    for split in ("train", "val", "test"):
        part = load_bank("core", split=split)
        assert {s.family for s in part} >= REQUIRED_FAMILIES, split
    smoke = load_bank("smoke")
    assert sorted(s.family for s in smoke) == sorted(set(s.family for s in smoke))


def test_the_large_bank_has_twenty_held_out_scenarios_per_family():
    """The learning issue's judge: >= 260 scenarios in val and in test, >= 20 of every family in each."""
    from collections import Counter

    for split in ("val", "test"):
        per_family = Counter(s.family for s in load_bank("core_large", split=split))
        assert sum(per_family.values()) >= 260 and min(per_family.values()) >= 20, (split, per_family)
        assert set(per_family) >= REQUIRED_FAMILIES


@pytest.mark.parametrize("name,per_family,seed", [("smoke", 1, 7), ("core", 24, 2026), ("core_large", 80, 2027)])
def test_committed_banks_regenerate_bit_for_bit(tmp_path, name, per_family, seed):
    shipped = load_bank(name)
    fractions = tuple(shipped.manifest.generator.get("split_fractions", (0.6, 0.2, 0.2)))
    fresh = generate_bank(
        tmp_path / name, name, per_family, seed, split_fractions=fractions, description=shipped.manifest.description
    )
    for f in sorted((BANKS_DIR / name / "scenarios").glob("*.json")):
        assert (tmp_path / name / "scenarios" / f.name).read_text() == f.read_text(), f.name
    assert (tmp_path / name / "bank.toml").read_text() == (BANKS_DIR / name / "bank.toml").read_text()
    assert len(fresh) == len(shipped)


def test_validate_path_reports_duplicate_ids(smoke, tmp_path):
    bank = tmp_path / "dup"
    shutil.copytree(smoke.path, bank)
    shutil.copy(bank / "scenarios" / "curve-000.json", bank / "scenarios" / "copy.json")
    problems = validate_path(bank)
    assert any("duplicate scenario id 'curve-000'" in p for p in problems)


def test_unknown_bank_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="no scenario bank 'nope'"):
        load_bank("nope")
