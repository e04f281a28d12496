"""Metric suites against hand-computed cases, and every reward term on crafted transitions."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewards import REWARD_TERMS, EgoState, EpisodeLog, Event, EventKind, Transition, compute_suites
from rewards.metrics import alpasim, comfort, leaderboard, pdms, success


def ego(**kw) -> EgoState:
    base = dict(
        t=0.0,
        x=0.0,
        y=0.0,
        yaw=0.0,
        speed=10.0,
        accel=0.0,
        yaw_rate=0.0,
        steer=0.0,
        route_progress=0.0,
        route_completion=0.0,
        lateral=0.0,
        heading_error=0.0,
        speed_limit=13.9,
        offroad=False,
        wrong_way=False,
        off_route_lanes=False,
    )
    return EgoState(**(base | kw))


def track(completion: float, n: int = 50, speed: float = 10.0, accel: float = 0.0) -> list[EgoState]:
    return [
        ego(t=0.1 * k, x=speed * 0.1 * k, speed=speed, accel=accel, route_completion=completion * k / (n - 1))
        for k in range(n)
    ]


def collision(kind, at_fault=True):
    return Event(EventKind.COLLISION, 1.0, actor="a", actor_kind=kind, where="front", at_fault=at_fault)


def test_leaderboard_20_multiplies_coefficients():
    log = EpisodeLog([collision("vehicle"), Event(EventKind.RED_LIGHT, 2.0, signal="s")], track(0.8), 100.0)
    lb = leaderboard(log)
    assert lb["infraction_penalty"] == pytest.approx(0.6 * 0.7)
    assert lb["route_completion"] == pytest.approx(80.0)
    assert lb["score"] == pytest.approx(80.0 * 0.42)


def test_leaderboard_21_and_outside_lanes():
    log = EpisodeLog([collision("vehicle"), Event(EventKind.RED_LIGHT, 2.0)], track(1.0), 100.0)
    assert leaderboard(log, "2.1")["infraction_penalty"] == pytest.approx(1 / (1 + 0.7 + 0.4))
    log = EpisodeLog([collision("pedestrian")], track(1.0), 200.0, distance_outside_route_lanes=20.0)
    assert leaderboard(log)["infraction_penalty"] == pytest.approx(0.5 * 0.9)
    with pytest.raises(ValueError, match="unknown leaderboard version"):
        leaderboard(log, "3.0")


def test_the_leaderboards_scenario_tests_and_the_min_speed_factor():
    timeout = Event(EventKind.SCENARIO_TIMEOUT, 3.0, scenario="Accident_1")
    ev = Event(EventKind.YIELD_EMERGENCY_VEHICLE, 4.0, scenario="EV_1")
    slow = [Event(EventKind.MIN_SPEED, 5.0, percentage=50.0), Event(EventKind.MIN_SPEED, 9.0, percentage=80.0)]
    log = EpisodeLog([collision("vehicle"), timeout, ev, *slow], track(1.0), 100.0)
    lb = leaderboard(log)
    assert lb["infraction_penalty"] == pytest.approx(0.6 * 0.7 * 0.7)  # min speed is not in ``score``
    assert lb["score"] == pytest.approx(100 * 0.6 * 0.7 * 0.7)
    assert lb["min_speed_penalty"] == pytest.approx((1 - 0.3 * 0.5) * (1 - 0.3 * 0.2))
    assert lb["score_min_speed"] == pytest.approx(lb["score"] * 0.85 * 0.94)
    assert leaderboard(log, "2.1")["infraction_penalty"] == pytest.approx(1 / (1 + 0.7 + 0.4 + 0.4))
    # a bank scenario's standing time-out and a route file's timeout events add up
    assert leaderboard(EpisodeLog([timeout], track(1.0), 100.0, timed_out=True))["infraction_penalty"] == pytest.approx(
        0.49
    )
    # success is Bench2Drive's: a min-speed infraction aside, none
    done = Event(EventKind.ROUTE_COMPLETE, 9.9)
    assert success(EpisodeLog([done, *slow], track(1.0), 100.0))["score"] == 100.0
    assert success(EpisodeLog([done, ev], track(1.0), 100.0))["score"] == 0.0
    kinds = [i["type"] for i in EpisodeLog([timeout, ev, *slow], track(1.0), 100.0).infractions()]
    assert kinds == ["scenario_timeout", "yield_emergency_vehicle", "min_speed", "min_speed"]


def test_pdms_sub_scores():
    clean = EpisodeLog([Event(EventKind.ROUTE_COMPLETE, 4.0)], track(1.0), 100.0)
    assert pdms(clean)["score"] == pytest.approx(100.0)
    assert pdms(EpisodeLog([collision("vehicle")], track(1.0), 100.0))["score"] == 0.0
    static = pdms(EpisodeLog([collision("static")], track(1.0), 100.0))
    assert static["nc"] == 0.5 and static["score"] == pytest.approx(50.0)
    half = pdms(EpisodeLog([], track(0.5), 100.0))
    assert half["score"] == pytest.approx(100 * (5 + 5 * 0.5 + 2) / 12)
    close = [s._replace(ttc=0.5) if k == 10 else s for k, s in enumerate(track(1.0))]
    assert pdms(EpisodeLog([], close, 100.0))["ttc"] == 0.0
    assert pdms(EpisodeLog([Event(EventKind.OFFROAD, 1.0)], track(1.0), 100.0))["score"] == 0.0
    not_at_fault = EpisodeLog([collision("vehicle", at_fault=False)], track(1.0), 100.0)
    assert pdms(not_at_fault)["nc"] == 1.0


def test_alpasim_scene_score():
    assert alpasim(EpisodeLog([], track(0.6), 100.0))["score"] == pytest.approx(75.0)
    assert alpasim(EpisodeLog([], track(0.9), 100.0))["score"] == pytest.approx(100.0)
    assert alpasim(EpisodeLog([collision("vehicle")], track(1.0), 100.0))["score"] == 0.0
    assert alpasim(EpisodeLog([collision("vehicle", False)], track(1.0), 100.0))["score"] == 100.0


def test_comfort_and_success():
    assert comfort(EpisodeLog([], track(1.0), 100.0))["score"] == pytest.approx(100.0)
    harsh = track(1.0, accel=-6.0)
    assert comfort(EpisodeLog([], harsh, 100.0))["score"] == 0.0
    done = Event(EventKind.ROUTE_COMPLETE, 4.9)
    assert success(EpisodeLog([done], track(1.0), 100.0))["score"] == 100.0
    assert success(EpisodeLog([done, Event(EventKind.STOP_SIGN, 1)], track(1.0), 100.0))["score"] == 0.0


def test_compute_suites_is_on_a_0_100_scale():
    s = compute_suites(EpisodeLog([collision("static")], track(0.7), 100.0))
    for suite in ("leaderboard", "pdms", "alpasim", "comfort", "success"):
        assert 0.0 <= s[suite]["score"] <= 100.0
    assert s["extra"]["distance_m"] == pytest.approx(49 * 1.0)
    assert math.isfinite(s["extra"]["km_per_incident"])


# --- terms on crafted transitions ---------------------------------------------------------------------------------
def T(prev=None, state=None, events=(), action=None, reference=None):
    return Transition(prev or ego(), action, state or ego(), list(events), 0.1, None, reference)


@pytest.mark.parametrize(
    "name,transition,expected",
    [
        ("progress", T(ego(route_progress=10.0), ego(route_progress=11.2)), 1.2),
        ("progress", T(ego(route_progress=10.0), ego(route_progress=9.0)), 0.0),
        ("collision", T(events=[collision("vehicle"), collision("static", False)]), 1.0),
        ("collision_pedestrian", T(events=[collision("pedestrian"), collision("vehicle")]), 1.0),
        ("collision_static", T(events=[collision("static")]), 1.0),
        ("collision_vehicle", T(events=[collision("static")]), 0.0),
        ("offroad", T(state=ego(offroad=True)), 1.0),
        ("red_light", T(events=[Event(EventKind.RED_LIGHT, 0)]), 1.0),
        ("stop_sign", T(events=[Event(EventKind.STOP_SIGN, 0)]), 1.0),
        ("wrong_way", T(state=ego(wrong_way=True)), 1.0),
        ("speeding", T(state=ego(speed=16.9, speed_limit=13.9)), 3.0),
        ("speeding", T(state=ego(speed=10.0)), 0.0),
        ("ttc", T(state=ego(ttc=0.5)), 1.0),
        ("ttc", T(state=ego(ttc=3.0)), 0.0),
        ("headway", T(state=ego(speed=10.0, lead_gap=15.0)), 1.0),  # 1.5 s behind
        ("headway", T(state=ego(speed=10.0, lead_gap=25.0)), 0.0),
        ("headway", T(state=ego(speed=0.0, lead_gap=2.0)), 0.0),  # queued, standing
        ("lane_centering", T(state=ego(lateral=-0.7)), 0.7),
        ("lane_keeping", T(state=ego(off_route_lanes=True)), 1.0),
        ("comfort", T(ego(accel=0.0), ego(accel=0.0)), 0.0),
        ("comfort", T(ego(accel=0.0), ego(accel=-6.0)), 3 / 6),  # lon accel, jerk and lon jerk bounds broken
        ("blocked", T(state=ego(speed=0.0)), 1.0),
        ("blocked", T(state=ego(speed=0.0, stop_ahead=3.0)), 0.0),
        ("min_speed", T(state=ego(speed=3.475, speed_limit=13.9)), 0.5),
        ("route_complete", T(events=[Event(EventKind.ROUTE_COMPLETE, 0)]), 1.0),
    ],
)
def test_term_values(name, transition, expected):
    assert REWARD_TERMS[name](transition) == pytest.approx(expected)


def test_trajectory_terms_against_the_reference():
    t = np.arange(1, 65) * 0.1
    ref = np.stack([10 * t, 0 * t, 0 * t], 1)
    off = ref + [0.0, 1.5, 0.0]
    assert REWARD_TERMS["ade_expert"](T(action=off, reference=ref)) == pytest.approx(1.5)
    assert REWARD_TERMS["ade_expert"](T(action=off, reference=None)) == 0.0
    demo = REWARD_TERMS["alpamayo_demo"]
    assert demo(T(action=ref, reference=ref)) == pytest.approx(0.0)
    from rewards.comfort import plan_comfort

    assert plan_comfort(ref) == 1.0 and plan_comfort(off) < 1.0  # the offset plan jumps sideways at once
    assert demo(T(action=off, reference=ref)) == pytest.approx(-0.4 * 1.5 / 3 + 0.1 * (plan_comfort(off) - 1))
    assert demo(T(action=ref + [0, 5.0, 0], reference=ref)) == -1.0


def test_user_metrics_by_registry_and_import_path(tmp_path, monkeypatch):
    from rewards import METRICS, register_metric

    @register_metric("half_completion")
    def half(log):
        return {"score": 50.0 * log.route_completion}

    try:
        assert compute_suites(EpisodeLog([], track(1.0), 100.0))["half_completion"]["score"] == pytest.approx(50.0)
    finally:
        METRICS.pop("half_completion")
    (tmp_path / "my_metrics.py").write_text("def speed(log):\n    return {'score': max(e.speed for e in log.ego)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = compute_suites(EpisodeLog([], track(1.0), 100.0), extra_metrics=["my_metrics:speed"])
    assert out["my_metrics:speed"]["score"] == 10.0
    with pytest.raises(ValueError, match="unknown metric"):
        compute_suites(EpisodeLog([], track(1.0), 100.0), extra_metrics=["nope"])


@given(
    st.integers(2, 80),
    st.floats(0.0, 30.0),
    st.floats(-0.3, 0.3),
    st.floats(-3.0, 3.0),
    st.integers(0, 2**31 - 1),
)
def test_compiled_plan_comfort_equals_its_numpy_definition(n, speed, curvature, accel, seed):
    from rewards.comfort import plan_comfort, plan_comfort_reference

    t = np.arange(1, n + 1) * 0.1
    s = np.maximum(speed * t + 0.5 * accel * t**2, 0.0)
    yaw = curvature * s + np.random.default_rng(seed).normal(0, 0.05, n)
    plan = np.stack([np.cumsum(np.cos(yaw)) * speed * 0.1, np.cumsum(np.sin(yaw)) * speed * 0.1, yaw], 1)
    plan[n // 2 :, 2] += 2 * np.pi * (seed % 3 - 1)  # a wrapped heading must be unwrapped as np.unwrap does
    assert plan_comfort(plan) == plan_comfort_reference(plan)
