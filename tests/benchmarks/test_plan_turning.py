"""``benchmarks/plan_turning.py``'s ratios on futures and plans made by hand: a plan that is the future
turns and brakes 1.0 as much, one that drives straight on at its speed 0, one that turns half as sharply
and brakes half as hard 0.5 (turning about half as much over the same arc)."""

import numpy as np
import pytest

from benchmarks.plan_turning import plan_report, speed_at


def poses(speed0: float, accel: float, curvature: float) -> np.ndarray:
    """64 poses 0.1 s apart of a car from speed0 at a constant acceleration (never reversing) and curvature."""
    t = np.arange(1, 65) * 0.1
    v = np.maximum(speed0 + accel * t, 0.0)
    s = np.cumsum(v * 0.1)
    yaw = curvature * s
    x, y = np.cumsum(np.cos(yaw) * v * 0.1), np.cumsum(np.sin(yaw) * v * 0.1)
    return np.stack([x, y, yaw], -1)


def test_turn_and_braking_ratios_of_plans_made_by_hand():
    futures = np.stack([poses(8.0, 0.0, 0.03), poses(8.0, -2.0, 0.0), poses(8.0, 0.0, -0.02)])
    v0 = np.full(3, 8.0)
    same = plan_report(futures, futures, v0)
    assert (same["turning"], same["braking"]) == (2, 1)
    assert same["turn_ratio"] == pytest.approx(1.0) and same["braking_ratio"] == pytest.approx(1.0)
    straight_on = np.stack([poses(8.0, 0.0, 0.0)] * 3)
    report = plan_report(futures, straight_on, v0)
    assert report["turn_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert report["braking_ratio"] == pytest.approx(0.0, abs=1e-6)
    half = np.stack([poses(8.0, 0.0, 0.015), poses(8.0, -1.0, 0.0), poses(8.0, 0.0, -0.01)])
    report = plan_report(futures, half, v0)
    assert report["turn_ratio"] == pytest.approx(0.5, abs=0.02)
    assert report["braking_ratio"] == pytest.approx(0.5, abs=0.02)
    np.testing.assert_allclose(speed_at(futures, 29), [8.0, 2.0, 8.0], atol=0.15)  # (poses at 2.9-3.1 s)


def test_the_offset_census_counts_routes_that_start_beside_the_car_and_moving_the_route_copies():
    from benchmarks.plan_turning import moved_route, offset_census

    route = np.zeros((4, 32, 2))
    route[:, :, 0] = np.arange(32) * 2.0
    route[:, :, 1] = np.array([0.7, -2.0, -1.5, 0.0])[:, None]  # left 0.7 m, right 2 and 1.5 m, centred
    futures = np.zeros((4, 64, 3))
    futures[:, 29, 1] = [0.5, 0.0, -1.0, 0.3]
    census = offset_census(route, futures, np.array(["curve", "overtake", "overtake", "straight"]))
    assert census["left_0.5-1m"] == {"samples": 1, "future_y_at_3s_m": 0.5, "families": {"curve": 1}}
    assert census["right_over_1m"] == {"samples": 2, "future_y_at_3s_m": -0.5, "families": {"overtake": 2}}
    assert census["left_over_1m"]["samples"] == census["right_0.5-1m"]["samples"] == 0
    assert census["left_over_1m"]["future_y_at_3s_m"] is None
    obs = {"route": route[3].astype(np.float32), "ego_state": np.zeros(7, np.float32), "command": 1}
    moved = moved_route([obs], 1.5)[0]
    np.testing.assert_allclose(moved["route"][:, 1], 1.5)
    assert moved["ego_state"][5] == -1.5 and moved["command"] == 1  # the car 1.5 m right of the moved route
    assert obs["route"][0, 1] == 0.0 and obs["ego_state"][5] == 0.0  # the data's own observation is untouched
