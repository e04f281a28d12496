"""The CARLA backend's parts that need no server: frames, routes on a topology, scenario translation,
the connection retry policy. (Tests against a live server: tests/envs/backends/test_carla_server.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.backends.carla_connection import CarlaUnavailable, RetryPolicy, is_connection_error, run_with_retries
from envs.backends.carla_frames import (
    from_carla_pose,
    from_carla_yaw_deg,
    to_carla_pose,
    to_carla_xy,
    to_carla_yaw_deg,
    world_to_ego,
)
from envs.backends.carla_routes import NoRouteError, RoadGraph
from envs.backends.carla_scenarios import FAMILY_MAP, carla_setup


def test_frames_flip_y_and_the_sense_of_rotation():
    assert to_carla_pose(10.0, 5.0, math.pi / 2) == (10.0, -5.0, -90.0)  # north in ours is -90 deg in CARLA
    assert from_carla_pose(10.0, -5.0, -90.0) == pytest.approx((10.0, 5.0, math.pi / 2))
    yaws = np.linspace(-3.1, 3.1, 13)
    np.testing.assert_allclose(from_carla_yaw_deg(to_carla_yaw_deg(yaws)), yaws, atol=1e-12)
    assert float(to_carla_yaw_deg(math.pi)) == pytest.approx(180.0)
    pts = np.random.default_rng(0).normal(size=(5, 2)) * 30
    np.testing.assert_allclose(to_carla_xy(to_carla_xy(pts)), pts)


def test_left_stays_left_through_a_round_trip():
    ego = (3.0, -2.0, 0.7)
    left = np.array([ego[0] - math.sin(ego[2]) * 4, ego[1] + math.cos(ego[2]) * 4])  # 4 m to the ego's left
    cx, cy, cyaw = to_carla_pose(*ego)
    back = from_carla_pose(cx, cy, cyaw)
    lx, ly = to_carla_xy(left)
    p = world_to_ego(to_carla_xy(np.array([lx, ly])), *back)
    np.testing.assert_allclose(p, [0.0, 4.0], atol=1e-9)


def _grid() -> RoadGraph:
    """One-way loop A(0,0) -> B(100,0) -> C(100,100) -> D(0,100) -> A, plus a shortcut A -> C."""
    line = lambda a, b: np.linspace(a, b, 21)  # noqa: E731
    a, b, c, d = (np.array(p, float) for p in ((0, 0), (100, 0), (100, 100), (0, 100)))
    return RoadGraph([line(a, b), line(b, c), line(c, d), line(d, a), line(a, c)])


def test_the_planner_finds_the_shortest_drivable_route():
    g = _grid()
    route = g.plan([10.0, 0.5], [50.0, 99.0], spacing=2.0)  # from A->B, to C->D
    assert np.allclose(route[0], [10.0, 0.0], atol=1e-6) and np.allclose(route[-1], [50.0, 100.0], atol=1.0)
    # along A->B, then B->C, then C->D: 90 + 100 + 50 m
    assert abs(len(route) * 2.0 - 240.0) <= 4.0
    steps = np.hypot(*np.diff(route, axis=0).T)
    assert np.allclose(steps[:-1], 2.0, atol=1e-6)
    short = g.plan([0.5, 0.5], [100.0, 50.0])  # from A->C's start region: nearest is A->B or A->C
    assert np.allclose(short[-1], [100.0, 50.0], atol=1.0)


def test_the_planner_follows_driving_directions_and_reports_dead_ends():
    line = lambda a, b: np.linspace(a, b, 11)  # noqa: E731
    g = RoadGraph([line((0, 0), (50, 0)), line((60, 0), (100, 0))])  # two unconnected one-way roads
    with pytest.raises(NoRouteError):
        g.plan([5, 0], [80, 0])
    ahead = g.plan([5, 0], [40, 0])
    assert ahead[0][0] == pytest.approx(5.0) and ahead[-1][0] == pytest.approx(40.0, abs=1.0)
    with pytest.raises(ValueError, match="polylines"):
        RoadGraph([np.zeros((1, 2))])


def test_every_family_has_a_carla_setup(smoke):
    from scenarios import FAMILIES

    assert set(FAMILIES) == set(FAMILY_MAP)
    for s in smoke.scenarios:
        setup = carla_setup(s, seed=1)
        assert setup.town.startswith("Town") and setup.min_route_m >= 100 and 0 <= setup.seed < 2**31
    with pytest.raises(ValueError, match="moon_landing"):
        carla_setup(smoke.scenarios[0].model_copy(update={"family": "moon_landing"}))


def test_retries_reconnect_restart_then_give_up():
    calls = {"work": 0, "reconnect": 0, "restart": 0, "sleep": []}

    def flaky():
        calls["work"] += 1
        if calls["work"] < 3:
            raise RuntimeError("time-out of 10000ms while waiting for the simulator, make sure it is up")
        return "episode"

    policy = RetryPolicy(attempts=3, backoff_s=1.0, restart_after=2)

    def count(key: str):
        return lambda: calls.__setitem__(key, calls[key] + 1)

    out = run_with_retries(flaky, policy, count("reconnect"), count("restart"), calls["sleep"].append)
    assert out == "episode" and calls["reconnect"] == 2 and calls["restart"] == 1 and calls["sleep"] == [1.0, 2.0]

    def dead():
        raise RuntimeError("failed to connect to newly created socket")

    with pytest.raises(CarlaUnavailable, match="2 attempts"):
        run_with_retries(dead, RetryPolicy(attempts=2), lambda: None, sleep=lambda s: None)

    def agent_bug():
        raise ValueError("the agent returned NaN")

    with pytest.raises(ValueError, match="NaN"):  # not a connection problem: no retry
        run_with_retries(agent_bug, policy, lambda: None, sleep=lambda s: None)
    assert is_connection_error(TimeoutError()) and not is_connection_error(KeyError("x"))


def test_camera_mounts_and_route_shapes():
    from envs.backends.carla_frames import camera_mount
    from envs.backends.carla_session import route_shape_matches
    from envs.sensors import make_rig

    mounts = {c.name: camera_mount(c) for c in make_rig("alpamayo4")}
    for cam in make_rig("alpamayo4"):
        m = mounts[cam.name]
        assert m["yaw"] == -cam.yaw_deg and m["y"] == -cam.y and m["pitch"] == -cam.pitch_deg
    s = np.linspace(0, 100, 101)
    straight = np.stack([s, np.zeros_like(s)], 1)
    theta = np.linspace(0, np.pi / 2, 101)
    left = np.stack([30 * np.sin(theta), 30 - 30 * np.cos(theta)], 1)  # a quarter circle to the left
    assert route_shape_matches(straight, "straight") and not route_shape_matches(straight, "curve")
    assert route_shape_matches(left, "turn_left") and not route_shape_matches(left, "turn_right")
    assert route_shape_matches(left * [1, -1], "turn_right")
