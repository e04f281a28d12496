"""The CARLA env backend against a stand-in server (tests/envs/backends/carla_fake.py): the env API, our events from
CARLA's sensors, pedals, the retry policy around episodes, and ``loopdrive eval --backend carla``.
(Against a live server: tests/envs/backends/test_carla_server.py.)"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs.backends.carla_connection import CarlaUnavailable, RetryPolicy
from envs.backends.carla_control import PedalController
from envs.backends.carla_env import CarlaDriveEnv
from envs.backends.carla_episode import CarlaEpisode, FrameData, TrafficLight
from rewards import compute_suites
from tests.envs.backends.carla_fake import LIGHT_ID, ROUTE, WALKER_ID, FakeCarlaServer, follow_route

NO_WAIT = RetryPolicy(attempts=3, backoff_s=0.0)


@dataclass(frozen=True)
class NoWait(RetryPolicy):
    backoff_s: float = 0.0


def make(server: FakeCarlaServer, **kwargs) -> CarlaDriveEnv:
    kwargs = {
        "bank": "smoke",
        "scenario": "straight-000",
        "camera_size": (32, 64),
        "n_frames": 2,
        "carla_retry": NO_WAIT,
        "session_factory": server.session,
    } | kwargs
    return gym.make("LoopDrive-v0", backend="carla", **kwargs).unwrapped


def drive(env: CarlaDriveEnv, speed: float = 8.0, seed: int = 0):
    obs, info = env.reset(seed=seed)
    done, infos = False, [info]
    while not done:
        obs, _, terminated, truncated, info = env.step(follow_route(obs, speed))
        infos.append(info)
        done = terminated or truncated
    return obs, infos


def test_the_carla_backend_passes_gymnasiums_env_checker():
    env = make(FakeCarlaServer())
    assert env.observation_space == gym.make("LoopDrive-v0", camera_size=(32, 64), n_frames=2).observation_space
    check_env(env, skip_render_check=True)


def test_an_episode_follows_the_planned_route_to_its_end_with_every_metric_suite():
    server = FakeCarlaServer()
    env = make(server, scenario="curve-000")
    obs, infos = drive(env)
    metrics = infos[-1]["metrics"]
    assert metrics["events"].get("route_complete") == 1, metrics["events"]
    assert metrics["infractions"] == [] and metrics["route_completion"] == pytest.approx(1.0)
    assert metrics["leaderboard"]["score"] == pytest.approx(100.0)
    assert set(metrics["suites"]) == set(compute_suites(env.world.episode_log(env.ego_track)))
    assert max(abs(e.lateral) for e in env.ego_track) < 1.0  # the pedals and steer track the plan
    assert env.ego_track[-1].speed == pytest.approx(8.0, abs=1.5)
    assert infos[-1]["carla"]["town"] == "Town07"
    # the cameras are the server's images, the newest last
    assert obs["cameras"].shape == (4, 2, 32, 64, 3) and (obs["cameras"] == obs["cameras"][:, :, :1, :1]).all()
    obs, _ = env.reset(seed=0)
    obs = env.step(follow_route(obs, 8.0))[0]
    x, y, _, _ = env.world.frame.ego
    assert obs["cameras"][0, -1, 0, 0, 0] == int(x * 4) % 256 and obs["cameras"][0, -1, 0, 0, 1] == int(y * 4) % 256
    env.close()
    assert server.actors == set() and not server.synchronous


def test_sensor_events_become_our_infractions():
    walker = make(FakeCarlaServer(walker_at=40.0))
    _, infos = drive(walker)
    hit = [e for info in infos for e in info["events"] if e.kind == "collision"]
    assert len(hit) == 1 and hit[0].actor_kind == "pedestrian" and hit[0].at_fault
    assert hit[0].actor == f"carla:{WALKER_ID}" and hit[0].where == "front"
    assert infos[-1]["metrics"]["infractions"][0]["type"] == "collision_pedestrian"
    assert infos[-1]["metrics"]["leaderboard"]["score"] < 100.0

    red = make(FakeCarlaServer(red_light=(30.0, 60.0)))
    _, infos = drive(red)  # this driver ignores lights
    assert [e.signal for info in infos for e in info["events"] if e.kind == "red_light"] == [str(LIGHT_ID)]

    stop = make(FakeCarlaServer(stop_sign_at=50.0))
    _, infos = drive(stop)  # ... and stop signs
    assert [e.kind for info in infos for e in info["events"] if e.kind == "stop_sign"] == ["stop_sign"]
    assert infos[-1]["metrics"]["infractions"][0]["type"] == "stop_sign"


def test_the_episode_bookkeeping_matches_the_embedded_worlds_rules():
    def frame(x, y, yaw=0.0, speed=5.0, **kw):
        return FrameData(0, ego=(x, y, yaw, speed), **kw)

    route = np.stack([np.arange(0.0, 101.0), np.zeros(101)], 1)
    ep = CarlaEpisode(route, frame(0.0, 0.0))
    contact = {"type": "collision", "other_id": 5, "other_type": "vehicle.tesla.model3", "other_xy": (-4.0, 0.0)}
    out = [ep.advance(frame(1.0, 0.0), [contact], 0.0), ep.advance(frame(1.5, 0.0), [contact], 0.0)]
    assert [e.kind for e in out[0]] == ["collision"] and out[1] == []  # one event per contact, not per frame
    assert out[0][0].where == "rear" and not out[0][0].at_fault and out[0][0].actor_kind == "vehicle"
    off = ep.advance(frame(2.0, 4.0, on_road=False), [], 0.0)
    assert [e.kind for e in off] == ["offroad"] and ep.route.off_route_lanes
    assert ep.advance(frame(2.5, 4.0, on_road=False), [], 0.0) == []  # once per excursion
    # a light's stop line projects onto the route; crossing it on red is one red_light event
    light = TrafficLight(3, True, np.array([[10.0, 1.0]]))
    assert ep.advance(frame(6.0, 0.0, light=light), [], 0.0) == [] and ep.stop_ahead() == pytest.approx(1.55)
    assert [e.kind for e in ep.advance(frame(8.0, 0.0, light=light), [], 0.0)] == ["red_light"]
    # a stop sign: stopping within 8 m before its line clears it; running the next one is an infraction
    signs = np.array([[14.0, 0.5], [30.0, -0.5]])
    assert ep.advance(frame(9.0, 0.0, speed=0.1, stop_signs=signs), [], 0.0) == []  # stopped 2.55 m short
    assert ep.advance(frame(12.0, 0.0, stop_signs=signs), [], 0.0) == []  # crosses the first line: it had stopped
    assert ep.stop_ahead() == pytest.approx(30.0 - 14.45)  # the second sign is next
    assert [e.kind for e in ep.advance(frame(28.0, 0.0, stop_signs=signs), [], 0.0)] == ["stop_sign"]
    # wrong way: sustained driving against the lane (50 m), reported once
    events, x = [], 28.0
    while x < 90.0:
        x += 2.0
        events += ep.advance(frame(x, 0.0, lane_yaw=math.pi), [], 0.0)
    assert [e.kind for e in events] == ["wrong_way"] and ep.route.distance_wrong_way > 50.0
    assert [e.kind for e in ep.advance(frame(92.0, 13.0), [], 0.0)] == ["route_deviation"]
    assert [e.kind for e in ep.advance(frame(99.5, 0.0, speed=0.0), [], 0.0)] == ["route_complete"]
    assert ep.route_completion == 1.0 and ep.accel == pytest.approx(-50.0)
    assert ep.route.time_stopped == pytest.approx(0.1)


def test_pedals_realise_the_wanted_acceleration_and_steer_the_right_way():
    pedals = PedalController(math.radians(70.0))
    throttle, brake, steer = pedals(2.0, 0.1, 5.0, 2.0, 0.1)
    assert throttle > 0 and brake == 0 and steer < 0  # ours: left positive; CARLA: right positive
    throttle, brake, _ = pedals(-4.0, 0.0, 5.0, -4.0, 0.1)
    assert throttle == 0 and brake == pytest.approx((4.0 - 0.15 - 0.01) / 8.0, abs=0.02)
    # the PI loop corrects a car that is weaker than the feed-forward map assumes
    pedals, speed, accel = PedalController(), 5.0, 0.0
    for _ in range(200):
        throttle, brake, _ = pedals(1.0, 0.0, speed, accel, 0.05)
        accel = 0.7 * 3.5 * throttle - 8.0 * brake - 0.15 - 4e-4 * speed**2
        speed += accel * 0.05
    assert accel == pytest.approx(1.0, abs=0.1)


def test_reset_reconnects_after_time_outs_and_gives_up_cleanly():
    server = FakeCarlaServer()
    server.failures = {"connect": 1, "prepare": 1}
    env = make(server)
    obs, _ = env.reset(seed=0)
    assert server.sessions == 2 and "cameras" in obs  # the failed prepare dropped the session; a new one
    server.failures = {"spawn": 5}
    with pytest.raises(CarlaUnavailable, match="after 3 attempts"):
        env.reset(seed=1)
    assert server.actors == set()


def test_a_server_lost_mid_episode_is_reported_and_leaves_nothing_behind():
    server = FakeCarlaServer()
    env = make(server)
    obs, _ = env.reset(seed=0)
    server.failures = {"tick": 1}
    with pytest.raises(CarlaUnavailable, match="mid-episode"):
        env.step(follow_route(obs, 8.0))
    assert env.session is None and server.actors == set()
    obs, _ = env.reset(seed=0)  # a new session, a fresh episode
    assert env.step(follow_route(obs, 8.0))[4]["t"] == pytest.approx(0.5)


def test_the_embedded_worlds_privileged_views_are_refused_with_reasons():
    with pytest.raises(ValueError, match=r"bev.*do not exist on CARLA"):
        make(FakeCarlaServer(), observations=("cameras", "bev"))
    with pytest.raises(ValueError, match="ade_expert"):
        make(FakeCarlaServer(), rewards={"progress": 1.0, "ade_expert": 1.0})
    with pytest.raises(NotImplementedError, match="embedded"):
        make(FakeCarlaServer()).snapshot()


def test_loopdrive_eval_on_carla_retries_a_lost_server_and_records_what_stays_lost(tmp_path, monkeypatch):
    from evaluation import evaluate, load_eval_config

    server = FakeCarlaServer()
    monkeypatch.setattr("envs.backends.carla_env.open_session", server.session)
    monkeypatch.setattr("envs.backends.carla_env.RetryPolicy", NoWait)
    server.crash_at_frame = 100  # the first episode loses the server once, mid-episode: rerun
    config = load_eval_config(
        None,
        bank="smoke",
        agent="constant_velocity",
        backend="carla",
        camera_size=(32, 64),
        n_frames=2,
        scenarios=["straight-000", "curve-000"],
        video=True,
    )
    summary = evaluate(config, tmp_path / "ok")
    records = [json.loads(line) for line in (tmp_path / "ok" / "episodes.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"] and [r["attempts"] for r in records] == [2, 1]
    assert summary["episodes"]["ok"] == 2 and records[0]["consistency"] is None
    assert all((tmp_path / "ok" / r["video"]).stat().st_size > 0 for r in records)

    server.failures = {"connect": 100}
    config = config.model_copy(update={"scenarios": ["straight-000"], "video": False})
    evaluate(config, tmp_path / "down")
    (rec,) = [json.loads(line) for line in (tmp_path / "down" / "episodes.jsonl").read_text().splitlines()]
    assert rec["status"] == "infra_error" and "CarlaUnavailable" in rec["error"]

    with pytest.raises(ValueError, match="privileged"):
        evaluate(config.model_copy(update={"agent": "expert"}), tmp_path / "expert")


def test_fake_route_is_what_the_scenario_translation_would_ask_for():
    from envs.backends.carla_session import route_shape_matches

    assert route_shape_matches(ROUTE, "curve") and not route_shape_matches(ROUTE, "straight")


def test_loopdrive_eval_backend_carla_from_the_command_line(tmp_path, monkeypatch, capsys):
    from loopdrive.cli import main

    server = FakeCarlaServer()
    seen = []
    monkeypatch.setattr(
        "envs.backends.carla_env.open_session", lambda *address: seen.append(address) or server.session(*address)
    )
    code = main(
        [
            "eval",
            "--backend",
            "carla",
            "--carla-host",
            "carla.example",
            "--carla-port",
            "2100",
            "--agent",
            "stop",
            "--scenarios",
            "straight-000",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0 and seen[0][:2] == ("carla.example", 2100)
    assert json.loads((tmp_path / "config.json").read_text())["backend"] == "carla"
    assert "driving score" in capsys.readouterr().out


def test_the_real_session_code_runs_end_to_end_on_a_stand_in_carla_module(monkeypatch):
    """CarlaSession itself (not the stand-in session) under the env, with tests/envs/backends/carla_module_fake.py as
    the ``carla`` module: route planning on the topology, spawning, frames, events, clean-up."""
    from tests.envs.backends import carla_module_fake

    carla = carla_module_fake.module()
    monkeypatch.setitem(sys.modules, "carla", carla)
    env = gym.make(
        "LoopDrive-v0",
        backend="carla",
        bank="smoke",
        scenario="straight-000",
        camera_size=(32, 64),
        n_frames=2,
        carla_retry=NO_WAIT,
    ).unwrapped
    obs, _ = env.reset(seed=0)
    server = carla.Client.world
    assert server.settings.synchronous_mode and server.settings.fixed_delta_seconds == 0.05
    assert env.world.goal_distance >= 100.0 and env.observation_space.contains(obs)
    for _ in range(6):
        obs, _, terminated, truncated, info = env.step(follow_route(obs, 8.0))
        assert not (terminated or truncated)
    assert env.world.route_progress > 5.0 and abs(env.world.lateral) < 0.5
    assert int(obs["cameras"][0, -1, 0, 0, 0]) == server.frame % 256  # the newest frame's image
    assert set(info["reward_terms"]) and info["carla"]["town"] == "Town04"
    np.testing.assert_allclose(env.session.stop_signs, [[300.0, 0.0]])  # the trigger volume, in our frame
    traffic = [a for a in server.actors.values() if a.type_id.startswith("vehicle.") and a is not env.session.ego]
    assert traffic and all(a.autopilot and a.lights_by_traffic_manager for a in traffic)  # brake lights shown
    env.close()
    assert [a.type_id for a in server.actors.values()] == ["traffic.stop"]  # the map's, not ours
    assert not server.settings.synchronous_mode
