"""Against a live CARLA server (``LOOPDRIVE_CARLA_HOST`` [and ``LOOPDRIVE_CARLA_PORT``]), e.g. the
docker-compose ``carla`` service; skipped with the reason everywhere else."""

from __future__ import annotations

import os

import numpy as np
import pytest

HOST = os.environ.get("LOOPDRIVE_CARLA_HOST")
pytestmark = pytest.mark.skipif(not HOST, reason="no CARLA server: set LOOPDRIVE_CARLA_HOST (docker compose up carla)")


def test_a_session_drives_a_planned_route_and_leaves_no_actors(smoke):
    carla = pytest.importorskip("carla", reason="the CARLA client is not installed (pip install '.[carla]')")
    from envs.backends.carla_scenarios import carla_setup
    from envs.backends.carla_session import CarlaSession
    from envs.sensors import make_rig

    session = CarlaSession(HOST, int(os.environ.get("LOOPDRIVE_CARLA_PORT", 2000)))
    scenario = next(s for s in smoke.scenarios if s.family == "straight")
    setup = carla_setup(scenario)
    before = {a.id for a in session.world.get_actors()}
    try:
        session.prepare(setup)
        route = session.pick_route(setup, np.random.default_rng(0))
        session.spawn(route, make_rig("alpamayo4", 64, 128), setup)
        frames = [session.tick(0.5, 0.0, 0.0) for _ in range(40)]
        assert frames[-1].frame == frames[0].frame + 39  # synchronous: one server frame per tick
        assert set(frames[-1].images) == {c.name for c in make_rig("alpamayo4")}
        assert frames[-1].ego[3] > 1.0  # it moved
    finally:
        session.close()
    assert {a.id for a in session.world.get_actors()} <= before  # nothing left behind
    assert hasattr(carla, "Client")


def test_loopdrive_v0_drives_an_episode_on_carla_and_cleans_up():
    pytest.importorskip("carla", reason="the CARLA client is not installed (pip install '.[carla]')")
    import gymnasium as gym

    from tests.envs.backends.carla_fake import follow_route

    port = int(os.environ.get("LOOPDRIVE_CARLA_PORT", 2000))
    env = gym.make(
        "LoopDrive-v0",
        backend="carla",
        bank="smoke",
        scenario="straight-000",
        carla_host=HOST,
        carla_port=port,
        camera_size=(64, 128),
    ).unwrapped
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        for _ in range(20):
            obs, _, terminated, truncated, _ = env.step(follow_route(obs, 8.0))
            if terminated or truncated:
                break
        assert env.world.route_progress > 20.0  # 10 s of driving along the planned route
        assert "leaderboard" in env.episode_metrics()
        before = {a.id for a in env.session.world.get_actors()} - {a.id for a in env.session.actors}
    finally:
        world = env.session.world
        env.close()
    assert {a.id for a in world.get_actors()} <= before
