"""The route's own lateral actions (``[model] route_origin``): what driving its centreline steers, at a speed
its curvature allows, on routes whose answers are known by hand."""

import numpy as np
import pytest

from agents.vla.route_prior import CURVE_BRAKE, CURVE_LAT_ACCEL, route_curvature, route_lateral_actions, route_origin


def arc_route(radius: float, sign: float = 1.0, points: int = 32, spacing: float = 2.0) -> np.ndarray:
    """Points every ``spacing`` m along a circle from the origin, heading +x, turning left (sign 1) or right."""
    theta = np.arange(points) * spacing / radius
    return np.stack([radius * np.sin(theta), sign * radius * (1 - np.cos(theta))], -1)


def straight_then_turn(straight_m: float, radius: float, sign: float) -> np.ndarray:
    """``straight_m`` of straight road, then a circle of ``radius`` turning that way; points every 2 m."""
    straight = np.stack([np.arange(0.0, straight_m, 2.0), np.zeros(int(straight_m / 2))], -1)
    turn = arc_route(radius, sign, points=32 - len(straight)) + [straight_m, 0.0]
    return np.concatenate([straight, turn])


def test_a_circles_curvature_is_one_over_its_radius_with_the_turns_sign_and_a_clamped_end_reads_straight():
    arc, curvature = route_curvature(np.stack([arc_route(25.0), arc_route(25.0, -1.0)]))
    np.testing.assert_allclose(curvature[0], 1 / 25.0, rtol=1e-3)
    np.testing.assert_allclose(curvature[1], -1 / 25.0, rtol=1e-3)
    np.testing.assert_allclose(np.diff(arc[0]), 2.0, rtol=1e-3)
    clamped = np.concatenate([arc_route(25.0, points=20), np.repeat(arc_route(25.0, points=20)[-1:], 12, 0)])
    _, curvature = route_curvature(clamped[None])
    assert np.isfinite(curvature).all()
    np.testing.assert_allclose(curvature[0, :18], 1 / 25.0, rtol=1e-3)
    np.testing.assert_array_equal(curvature[0, 19:], 0.0)


def test_a_curve_is_driven_at_the_cars_speed_or_the_speed_its_curvature_allows():
    """Slow on a wide curve: v0^2 / R (curvature: 1 / R); fast on a tight one: the curve's speed, so
    CURVE_LAT_ACCEL; at rest the lateral acceleration reads at the action space's floor speed (2 m/s)."""
    routes = np.stack([arc_route(50.0), arc_route(20.0), arc_route(20.0, -1.0), arc_route(20.0)])
    v0 = np.array([5.0, 15.0, 15.0, 0.0])
    lateral = route_lateral_actions(routes, v0, "lateral_acceleration")
    assert lateral.shape == (4, 64)
    np.testing.assert_allclose(lateral[0], 25.0 / 50.0, rtol=2e-3)
    np.testing.assert_allclose(lateral[1], CURVE_LAT_ACCEL, rtol=2e-3)
    np.testing.assert_allclose(lateral[2], -CURVE_LAT_ACCEL, rtol=2e-3)
    np.testing.assert_allclose(lateral[3], 4.0 / 20.0, rtol=2e-3)
    curvature = route_lateral_actions(routes[:2], v0[:2], "curvature")
    np.testing.assert_allclose(curvature, np.broadcast_to(1 / np.array([[50.0], [20.0]]), (2, 64)), rtol=2e-3)


def test_the_car_slows_before_a_turn_ahead_and_steers_only_once_it_is_in_it():
    """30 m of straight road, then a right turn of radius 10 m: by the turn the speed is the turn's
    (sqrt(2.5 x 10) = 5 m/s), and at the start no faster than braking at CURVE_BRAKE from there allows."""
    route = straight_then_turn(30.0, 10.0, -1.0)[None]
    lateral = route_lateral_actions(route, np.array([15.0]), "lateral_acceleration")[0]
    allowed = np.sqrt(CURVE_LAT_ACCEL * 10.0 + 2 * CURVE_BRAKE * 29.0)  # the first turn vertex is at 29-30 m
    assert allowed < 15.0
    np.testing.assert_array_equal(lateral[:10], 0.0)  # 1 s at <= 11.8 m/s stays on the straight
    turning = lateral < -0.5
    assert turning.any() and np.all(np.diff(np.flatnonzero(turning)) == 1)  # one turn, then it holds
    np.testing.assert_allclose(lateral[turning][-5:], -CURVE_LAT_ACCEL, rtol=2e-2)


def test_the_origin_is_the_actions_over_the_datas_lateral_std_or_the_bound():
    routes, v0 = np.stack([arc_route(40.0)]), np.array([6.0])
    actions = route_lateral_actions(routes, v0, "lateral_acceleration")
    scaled = route_origin(routes, v0, "lateral_acceleration", (1.3, 0.5))
    assert scaled.dtype == np.float32
    np.testing.assert_allclose(scaled, actions / 0.5, rtol=1e-6)
    np.testing.assert_allclose(route_origin(routes, v0, "lateral_acceleration", None), actions / 9.8, rtol=1e-6)
    assert route_lateral_actions(np.zeros((0, 32, 2)), np.zeros(0), "curvature").shape == (0, 64)
    with pytest.raises(ValueError, match=r"routes must be \[B, P >= 3, 2\] points, got shape \(1, 2, 2\)"):
        route_lateral_actions(np.zeros((1, 2, 2)), np.zeros(1), "curvature")


def test_route_origin_needs_the_manoeuvre_origin_and_the_route():
    from pydantic import ValidationError

    from agents.vla.config import VLAConfig

    VLAConfig(manoeuvres=3, manoeuvre_origin=True, route_origin=True)
    for off in ({"manoeuvre_origin": False}, {"route_inputs": False}):
        with pytest.raises(ValidationError, match=r"route_origin: .* needs manoeuvre_origin = true and route_inputs"):
            VLAConfig(**{"manoeuvres": 3, "manoeuvre_origin": True, "route_origin": True} | off)
