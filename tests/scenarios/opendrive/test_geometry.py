"""OpenDRIVE geometry against closed forms and hand computation; the esmini test maps import."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import quad

from scenarios.opendrive import import_opendrive, read_opendrive
from scenarios.opendrive.lanes import RoadGeometry
from scenarios.opendrive.records import Geometry
from scenarios.opendrive.reference_line import ReferenceLine

ESMINI_DIR = Path(__file__).parents[2] / "data" / "opendrive" / "esmini"
ESMINI = sorted(ESMINI_DIR.glob("*.xodr"))


def _line(g: Geometry, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return ReferenceLine([g], "test").evaluate(s)


def test_a_line_and_an_arc_follow_their_closed_forms():
    s = np.linspace(0, 10, 11)
    x, y, h = _line(Geometry(0, 1.0, 2.0, 0.5, 10, "line"), s)
    assert np.allclose(x, 1 + s * math.cos(0.5)) and np.allclose(y, 2 + s * math.sin(0.5)) and np.allclose(h, 0.5)
    r = 20.0  # a full left circle returns to its start, its centre r to the left of it
    x, y, h = _line(
        Geometry(0, 0.0, 0.0, 0.0, 2 * math.pi * r, "arc", {"curvature": 1 / r}), np.linspace(0, 2 * math.pi * r, 50)
    )
    assert np.allclose(np.hypot(x - 0.0, y - r), r, atol=1e-9)
    assert abs(x[-1]) < 1e-9 and abs(y[-1]) < 1e-9 and h[-1] == pytest.approx(2 * math.pi)


@pytest.mark.parametrize(("k0", "k1"), [(0.0, 0.05), (0.02, -0.03), (-0.1, -0.01), (0.01, 0.01 + 1e-14)])
def test_a_spiral_follows_the_integral_of_its_linear_curvature(k0, k1):
    length, h0 = 80.0, 0.3
    g = Geometry(0, 5.0, -3.0, h0, length, "spiral", {"curvStart": k0, "curvEnd": k1})
    c = (k1 - k0) / length

    def theta(u: float) -> float:
        return h0 + k0 * u + c * u * u / 2

    for s in (0.0, 7.5, 40.0, 80.0):
        xe = 5.0 + quad(lambda u: math.cos(theta(u)), 0, s, epsabs=1e-12)[0]
        ye = -3.0 + quad(lambda u: math.sin(theta(u)), 0, s, epsabs=1e-12)[0]
        x, y, h = _line(g, np.array([s]))
        assert abs(x[0] - xe) < 1e-8 and abs(y[0] - ye) < 1e-8 and h[0] == pytest.approx(theta(s))


def test_poly3_and_parampoly3_lie_on_their_cubics():
    a, b, c, d = 0.5, 0.1, 0.02, -0.001
    u_end = 20.0
    length = quad(lambda u: math.hypot(1, b + 2 * c * u + 3 * d * u * u), 0, u_end)[0]
    g = Geometry(0, 0.0, 0.0, 0.0, length, "poly3", {"a": a, "b": b, "c": c, "d": d})
    x, y, _ = _line(g, np.linspace(0, length, 30))
    assert np.allclose(y, a + b * x + c * x**2 + d * x**3, atol=1e-4) and x[-1] == pytest.approx(u_end, abs=1e-3)
    coef = {"aU": 0, "bU": 1.0, "cU": 0.01, "dU": 0, "aV": 0, "bV": 0.2, "cV": -0.01, "dV": 0.0005}
    for p_range, p_end in (("arcLength", 30.0), ("normalized", 1.0)):
        g = Geometry(0, 1.0, 1.0, math.pi / 2, 30.0, "paramPoly3", coef | {"pRange": p_range})
        p = np.linspace(0, p_end, 7)
        x, y, _ = _line(g, p * (30.0 / p_end))
        u = coef["bU"] * p + coef["cU"] * p**2
        v = coef["bV"] * p + coef["cV"] * p**2 + coef["dV"] * p**3
        assert np.allclose(x, 1.0 - v, atol=1e-9) and np.allclose(y, 1.0 + u, atol=1e-9)  # heading pi/2


def test_lane_offset_and_width_follow_the_file():
    odr = read_opendrive(ESMINI_DIR / "lane_width_and_offset.xodr")
    road = odr.roads["4"]
    g = RoadGeometry(road, "test")
    s = np.array([0.0, 2.5, 5.0, 9.9])
    inner, outer = g.borders(road.sections[0], -1, s)
    assert np.allclose(inner, s) and np.allclose(inner - outer, s)  # offset = s, width = s (both b = 1)
    x, y, _, _, w = g.centre(road.sections[0], -1, s)
    t = s - s / 2  # the centre: offset minus half the width
    assert np.allclose(x, 10 + s * math.cos(1) - t * math.sin(1)) and np.allclose(
        y, -10 + s * math.sin(1) + t * math.cos(1)
    )
    assert np.allclose(w, s)


@pytest.mark.parametrize("path", ESMINI, ids=[p.name for p in ESMINI])
def test_every_esmini_map_imports(path):
    road_map, report = import_opendrive(str(path))
    assert road_map.lanes and report.roads >= 1
    for lane in road_map.lanes.values():
        assert np.isfinite(lane.centerline).all() and lane.widths is not None and lane.widths.max() >= 0.1
        assert all(n in road_map.lanes for n in lane.successors)


def test_lane_sections_link_their_lanes():
    road_map, _ = import_opendrive(str(ESMINI_DIR / "multi_lanesections.xodr"))
    odr = read_opendrive(ESMINI_DIR / "multi_lanesections.xodr")
    road = next(iter(odr.roads.values()))
    for k in range(len(road.sections) - 1):
        for lane_id, lane in road.sections[k].lanes.items():
            key = f"{road.id}_{k}_{lane_id}"
            if lane_id < 0 and lane.successor is not None and key in road_map.lanes:
                assert road_map.lanes[key].successors == [f"{road.id}_{k + 1}_{lane.successor}"]
    # a lane's end is where its successor starts (continuity across sections)
    for lane in road_map.lanes.values():
        for n in lane.successors:
            assert np.linalg.norm(lane.centerline[-1] - road_map.lanes[n].centerline[0]) < 0.05
