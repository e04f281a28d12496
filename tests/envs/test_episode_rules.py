"""The episode rules every backend applies: collisions, stop lines, the route book."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from envs.episode_rules import (
    ROUTE_DEVIATION,
    WRONG_WAY_DISTANCE,
    MinSpeedBook,
    RouteBook,
    StopLine,
    collision_event,
    is_wrong_way,
    pass_stop_lines,
)
from rewards import EventKind


@pytest.mark.parametrize(
    ("other", "speed", "where", "at_fault"),
    [
        ((5.0, 0.0), 5.0, "front", True),
        ((-5.0, 0.0), 5.0, "rear", False),
        ((0.0, 2.0), 5.0, "lateral", True),
        ((5.0, 0.0), 0.2, "front", False),
    ],
)
def test_a_collision_is_classified_and_blamed_as_alpasim_does(other, speed, where, at_fault):
    e = collision_event(1.0, (0.0, 0.0, 0.0, speed), (4.8, 2.0), "car", "vehicle", other, 3.0)
    assert (e.kind, e.where, e.at_fault, e.actor_speed) == (EventKind.COLLISION, where, at_fault, 3.0)


def test_stop_lines_red_lights_and_stop_signs():
    stopped = defaultdict(bool)
    red = StopLine("light", 10.0, signal="s1", red=True)
    sign = StopLine("sign", 30.0)
    assert [e.kind for e in pass_stop_lines(0.1, 9.0, 10.5, 5.0, [red, sign], stopped)] == [EventKind.RED_LIGHT]
    green = StopLine("light", 10.0, signal="s1", red=False)
    assert pass_stop_lines(0.1, 9.0, 10.5, 5.0, [green], stopped) == []
    assert pass_stop_lines(0.1, 24.0, 25.0, 0.1, [sign], stopped) == [] and stopped["sign"]  # stopped 5 m short
    assert pass_stop_lines(0.2, 29.5, 30.5, 3.0, [sign], stopped) == []  # crossing after a stop: fine
    run = pass_stop_lines(0.2, 29.5, 30.5, 3.0, [StopLine("other", 30.0)], defaultdict(bool))
    assert [e.kind for e in run] == [EventKind.STOP_SIGN]


def test_the_route_book_reports_each_infraction_once():
    book = RouteBook(goal_distance=100.0)
    events = []
    for k in range(40):  # 2 m per step against the lane
        events += book.update(0.1 * k, 0.1, 2.0, 2.0 * k, 0.0, 10.0, True, True, "lane7")
    wrong = [e for e in events if e.kind is EventKind.WRONG_WAY]
    assert len(wrong) == 1 and wrong[0].lane == "lane7" and book.wrong_way_run >= WRONG_WAY_DISTANCE
    assert book.distance_outside_route_lanes == pytest.approx(80.0)
    assert [e.kind for e in book.update(4.0, 0.1, 1.0, 90.0, ROUTE_DEVIATION + 1, 10.0, False, False)] == [
        EventKind.ROUTE_DEVIATION
    ]
    assert [e.kind for e in book.update(4.1, 0.1, 10.0, 100.0, 0.0, 0.0, False, False)] == [EventKind.ROUTE_COMPLETE]
    assert book.update(4.2, 0.1, 0.0, 100.0, 0.0, 0.0, False, False) == [] and book.time_stopped == pytest.approx(0.2)


def test_wrong_way_needs_motion_against_the_lane():
    assert is_wrong_way(math.pi, 0.0, 5.0) and not is_wrong_way(0.1, 0.0, 5.0)
    assert not is_wrong_way(math.pi, 0.0, 0.2) and not is_wrong_way(math.pi, None, 5.0)


def test_standing_still_for_180_s_ends_the_route_as_the_leaderboard_does():
    from envs.interface import is_terminal

    book = RouteBook(goal_distance=100.0)
    events = []
    for k in range(2000):  # 200 s: moving for the first 10 s, then standing
        speed = 5.0 if k < 100 else 0.0
        events += book.update(0.1 * k, 0.1, 0.5 if speed else 0.0, 50.0, 0.0, speed, False, False)
    blocked = [e for e in events if e.kind is EventKind.AGENT_BLOCKED]
    assert len(blocked) == 1 and blocked[0].t == pytest.approx(10.0 + 180.0 - 0.1, abs=0.11)
    assert is_terminal(blocked, terminate_on_collision=True)


def test_the_min_speed_test_judges_each_quarter_against_the_traffic():
    book = MinSpeedBook(route_length=400.0)
    events = []
    for k in range(100):  # quarter 1 at 5 m/s in 10 m/s traffic, where there is traffic
        events += book.update(0.1 * k, 0.99 * k, 5.0, 10.0 if k % 2 else None)
    events += book.update(10.0, 100.0, 5.0, 10.0)
    assert [e.percentage for e in events] == [50.0] and events[0].kind == EventKind.MIN_SPEED
    for k in range(100):  # quarter 2 as fast as the traffic: no infraction; quarter 3 with no traffic: none
        events += book.update(11 + 0.1 * k, 100.0 + k, 10.0, 10.0)
    events += book.update(30.0, 250.0, 1.0, None) + book.update(31.0, 300.0, 1.0, None)
    assert len(events) == 1 and book.judged == 3
    events += book.update(32.0, 350.0, 3.0, 4.0)
    assert book.close(33.0, 370.0) == []  # ends short of 95 %: the last quarter is not judged
    judged = book.close(34.0, 390.0)  # past 95 %: judged as it stands
    assert [e.percentage for e in judged] == [75.0] and book.judged == 4 and book.close(35.0, 399.0) == []


def test_a_route_file_ends_on_the_leaderboards_30_m_deviation():
    from envs.episode_rules import LEADERBOARD_DEVIATION

    for deviation, ends_at in ((ROUTE_DEVIATION, 20.0), (LEADERBOARD_DEVIATION, 31.0)):
        book = RouteBook(goal_distance=500.0, deviation=deviation)
        ended = [lat for lat in (11.0, 20.0, 29.0, 31.0) if book.update(0.0, 0.1, 0.0, 0.0, lat, 5.0, False, False)]
        assert ended == [ends_at]
