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


def test_the_rendered_offset_response_moves_the_ego_and_the_expert_steers_back_on_either_side():
    """``rendered_offset_response`` on the smoke bank with a model that always plans straight on: its plans
    read 0 at every offset, the cameras it was shown differ with the move, and the expert's way back from
    the moved ego goes right from the left and left from the right (the route beside it either way)."""
    from benchmarks.plan_turning import OFFSET_M, rendered_offset_response

    class StraightOn:
        def __init__(self):
            self.seen = []

        def act_batch(self, observations, reasoning, noise_scale):
            self.seen += observations
            return [{"trajectory": poses(8.0, 0.0, 0.0)} for _ in observations]

    card = {
        "source": {"bank": "smoke", "split": None},
        "rig": "front_only",
        "camera_size": [32, 64],
        "n_frames": 1,
        "frame_every": 1,
        "decision_every": 5,
    }
    model = StraightOn()
    response = rendered_offset_response(model, card, per_family=1)
    assert response["scenarios"] == 3 and len(model.seen) == 9
    left, centre, right = (response[f"ego_{m:+.1f}m"] for m in (OFFSET_M, 0.0, -OFFSET_M))
    assert left["plan_y_at_3s_m"] == centre["plan_y_at_6.4s_m"] == right["plan_y_at_3s_m"] == 0.0
    assert left["expert_y_at_6.4s_m"] < -0.5 and right["expert_y_at_6.4s_m"] > 0.5
    assert abs(centre["expert_y_at_6.4s_m"]) < 0.3
    for k in range(3):  # the route moved with the ego, the cameras rendered where it stands
        route_y = [model.seen[3 * k + i]["route"][0, 1] for i in range(3)]
        assert route_y[0] > route_y[1] > route_y[2]
        assert not np.array_equal(model.seen[3 * k]["cameras"], model.seen[3 * k + 1]["cameras"])


def test_the_offset_fit_reads_how_strongly_futures_and_plans_follow_the_errors():
    """Futures 0.8 m the other way per metre of lateral error and 20 m per radian of heading error, plans
    made at half that: the fit reads both, and the plan at half strength."""
    from benchmarks.plan_turning import STEP_3S, offset_fit

    rng = np.random.default_rng(0)
    errors = np.column_stack([rng.uniform(-1.5, 1.5, 40), rng.uniform(-0.09, 0.09, 40)])
    futures, plans = np.zeros((40, 64, 3)), np.zeros((40, 64, 3))
    futures[:, STEP_3S, 1] = -0.8 * errors[:, 0] - 20.0 * errors[:, 1] + 0.1
    plans[:, STEP_3S, 1] = 0.5 * futures[:, STEP_3S, 1]
    fit = offset_fit(errors, futures, plans)
    assert fit["samples"] == 40
    assert fit["future"] == {"per_lateral_m": -0.8, "per_heading_rad": -20.0}
    assert fit["plan"] == {"per_lateral_m": -0.4, "per_heading_rad": -10.0}
