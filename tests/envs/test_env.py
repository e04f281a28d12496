"""The Gymnasium contract: spaces, check_env, determinism, rewards, bad actions, vector envs."""

import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs import InvalidActionError, RouteFollower
from rewards import RewardConfigError


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_check_env_passes(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)


def test_observation_contract():
    env = gym.make("LoopDrive-v0", bank="smoke", scenario="signalized_intersection-000")
    obs, info = env.reset(seed=0)
    assert obs["cameras"].shape == (4, 4, 128, 256, 3) and obs["cameras"].dtype == np.uint8
    assert obs["ego_history"].shape == (16, 4) and obs["ego_history"].dtype == np.float32
    assert np.allclose(obs["ego_history"][-1, :3], 0.0, atol=1e-5)  # now = origin of the ego frame
    assert (np.diff(obs["ego_history"][:, 0]) >= -1e-4).all()  # history lies behind, in order
    assert obs["route"].shape == (32, 2) and obs["route"][0, 0] > 0
    assert obs["command"] in range(4)
    assert env.observation_space.contains(obs)
    assert info["scenario"] == "signalized_intersection-000" and info["events"] == []


def test_a_step_is_one_decision_of_five_world_steps():
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="straight-000")
    env.reset(seed=0)
    _, _, _, _, info = env.step(RouteFollower().plan(env.unwrapped.world))
    assert info["t"] == pytest.approx(0.5)
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="straight-000", decision_every=1)
    env.reset(seed=0)
    _, _, _, _, info = env.step(RouteFollower().plan(env.unwrapped.world))
    assert info["t"] == pytest.approx(0.1)


def _episode(env, seed=0, steps=30):
    obs, _ = env.reset(seed=seed)
    driver = RouteFollower()
    frames, rewards, events = [obs], [], []
    for _ in range(steps):
        obs, r, term, trunc, info = env.step(driver.plan(env.unwrapped.world))
        frames.append(obs)
        rewards.append(r)
        events.append(info["events"])
        if term or trunc:
            break
    return frames, rewards, events


def test_same_seed_and_actions_give_identical_observations_and_rewards():
    make = lambda: gym.make("LoopDrive-v0", bank="smoke", scenario="traffic_jam-000", observations=("cameras", "state"))  # noqa: E731
    a, b = _episode(make()), _episode(make())
    assert a[1] == b[1] and a[2] == b[2]
    for oa, ob in zip(a[0], b[0]):
        assert np.array_equal(oa["cameras"], ob["cameras"]) and np.array_equal(oa["state"], ob["state"])


def test_reward_terms_are_reported_every_step_and_sum_to_the_reward():
    weights = {"progress": 0.5, "collision": -10.0, "offroad": -1.0}
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="straight-000", rewards=weights)
    env.reset(seed=0)
    _, r, _, _, info = env.step(RouteFollower().plan(env.unwrapped.world))
    assert set(info["reward_terms"]) == set(weights)
    assert info["reward_terms"]["progress"] > 0
    assert r == pytest.approx(sum(weights[k] * v for k, v in info["reward_terms"].items()))


def test_user_reward_by_import_path(tmp_path, monkeypatch):
    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rewards.py").write_text(
        textwrap.dedent("""
        def lane_bias(t):
            return -abs(t.state.lateral)

        def two_args(t, extra):
            return 0.0
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    env = gym.make(
        "LoopDrive-v0",
        observations=("state",),
        scenario="curve-000",
        rewards={"progress": 1.0, "my_pkg.rewards:lane_bias": 0.5},
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(RouteFollower().plan(env.unwrapped.world))
    assert "my_pkg.rewards:lane_bias" in info["reward_terms"] and info["reward_terms"]["my_pkg.rewards:lane_bias"] <= 0
    with pytest.raises(RewardConfigError, match="has no attribute 'nope'"):
        gym.make("LoopDrive-v0", observations=("state",), rewards={"my_pkg.rewards:nope": 1.0})
    with pytest.raises(RewardConfigError, match=r"cannot import module 'no_such_pkg\.r'"):
        gym.make("LoopDrive-v0", observations=("state",), rewards={"no_such_pkg.r:f": 1.0})
    with pytest.raises(RewardConfigError, match="exactly one argument"):
        gym.make("LoopDrive-v0", observations=("state",), rewards={"my_pkg.rewards:two_args": 1.0})
    with pytest.raises(RewardConfigError, match="unknown reward term 'progres'"):
        gym.make("LoopDrive-v0", observations=("state",), rewards={"progres": 1.0})


@pytest.mark.parametrize(
    "bad,match",
    [
        (np.full((64, 3), np.nan, np.float32), "non-finite values"),
        (np.zeros((10, 3), np.float32), r"shape \(64, 3\)"),
    ],
)
def test_bad_actions_raise_clearly_and_never_touch_the_world(bad, match):
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="straight-000")
    env.reset(seed=0)
    before = env.unwrapped.world.snapshot()["state"]
    with pytest.raises(InvalidActionError, match=match):
        env.step(bad)
    after = env.unwrapped.world.state
    assert after.t == before.t and np.array_equal(after.x, before.x) and np.array_equal(after.speed, before.speed)


def test_bad_action_can_end_the_episode_as_a_failure_instead():
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="straight-000", invalid_action="terminate")
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(np.full((64, 3), np.inf, np.float32))
    assert term and not trunc and r == 0.0
    assert info["events"][0].kind == "invalid_action" and info["metrics"]["ending"] == "invalid_action"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros((64, 3), np.float32))


def test_control_mode_drives():
    env = gym.make("LoopDriveControl-v0", scenario="straight-000")
    env.reset(seed=0)
    v0 = env.unwrapped.world.state.speed[0]
    for _ in range(10):
        env.step(np.array([1.0, 0.0], np.float32))
    assert env.unwrapped.world.state.speed[0] > v0 + 5.0


def test_episode_ends_with_metrics():
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="lead_brake-000")
    _, rewards, _ = _episode(env, steps=1000)
    info = env.unwrapped.episode_metrics()
    assert info["route_completion"] == pytest.approx(1.0)
    assert info["leaderboard"]["score"] == pytest.approx(100.0)
    assert sum(rewards) > 0


def test_rigs_and_resolution_are_configurable():
    env = gym.make("LoopDrive-v0", rig="front_only", camera_size=(64, 96), n_frames=2, scenario="curve-000")
    obs, _ = env.reset(seed=0)
    assert obs["cameras"].shape == (1, 2, 64, 96, 3)
    custom = [{"name": "left", "fov_deg": 90.0, "yaw_deg": 45.0}, {"name": "right", "fov_deg": 90.0, "yaw_deg": -45.0}]
    obs, _ = gym.make("LoopDrive-v0", rig=custom, scenario="curve-000").reset(seed=0)
    assert obs["cameras"].shape[0] == 2
    with pytest.raises(ValueError, match="unknown camera rig 'fisheye'"):
        gym.make("LoopDrive-v0", rig="fisheye")


@pytest.mark.parametrize(("frame_every", "decision_every"), [(5, 5), (10, 5), (2, 5), (3, 2)])
def test_frames_frame_every_apart_are_the_frames_of_those_world_steps(frame_every, decision_every):
    """The same drive (constant control) seen at 10 Hz, one frame a step, gives every frame each
    observation must hold: n_frames of them, frame_every steps apart, the newest of the decision's last
    step, and the first one repeated until the episode has that much past."""

    def drive(**options):
        env = gym.make(
            "LoopDrive-v0",
            action_mode="control",
            rig="front_only",
            camera_size=(28, 56),
            observations=("cameras",),
            scenario="lead_brake-000",
            **options,
        )
        obs, _ = env.reset(seed=0)
        seen = [obs["cameras"]]
        for _ in range(24 // options["decision_every"]):
            seen.append(env.step(np.array([0.5, 0.02], np.float32))[0]["cameras"])
        return seen

    steps = [o[:, -1] for o in drive(n_frames=1, decision_every=1)]  # the frame of every world step
    for d, obs in enumerate(drive(n_frames=3, frame_every=frame_every, decision_every=decision_every)):
        now = d * decision_every
        want = np.stack([steps[max(now - back * frame_every, 0)] for back in (2, 1, 0)], 1)
        np.testing.assert_array_equal(obs, want, err_msg=f"decision {d}")
    with pytest.raises(ValueError, match="frame_every must be >= 1"):
        gym.make("LoopDrive-v0", frame_every=0)
    with pytest.raises(ValueError, match=r"worldmodel.*frame_every must be 1"):
        gym.make("LoopDrive-v0", backend="worldmodel", world_model="model", frame_every=5)


def test_bad_construction_arguments_are_clear():
    with pytest.raises(ValueError, match="unknown backend 'mujoco'"):
        gym.make("LoopDrive-v0", backend="mujoco")
    with pytest.raises(ValueError, match="action_mode"):
        gym.make("LoopDrive-v0", action_mode="joystick")
    with pytest.raises(KeyError, match="no scenario 'nope'"):
        gym.make("LoopDrive-v0", scenario="nope")
    with pytest.raises(ValueError, match="unknown observations"):
        gym.make("LoopDrive-v0", observations=("lidar",))


def test_render_shows_cameras_and_bev():
    env = gym.make("LoopDrive-v0", render_mode="rgb_array", scenario="pedestrian_crossing-000")
    env.reset(seed=0)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.shape[1] > 2 * 256


def test_async_vector_env():
    vec = gym.make_vec(
        "LoopDrive-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"context": "spawn"},
        observations=("state", "ego_history"),
    )
    obs, _ = vec.reset(seed=[0, 1])
    assert obs["state"].shape[0] == 2
    plan = np.zeros((2, 64, 3), np.float32)
    plan[:, :, 0] = np.arange(1, 65) * 0.5
    for _ in range(3):
        obs, r, _term, _trunc, _info = vec.step(plan)
    assert r.shape == (2,) and np.isfinite(r).all()
    vec.close()


def test_episode_metrics_carry_every_suite():
    env = gym.make("LoopDrive-v0", observations=("state",), scenario="signalized_intersection-000")
    _episode(env, steps=1000)
    m = env.unwrapped.episode_metrics()
    for suite in ("leaderboard", "pdms", "alpasim", "comfort", "success"):
        assert 0.0 <= m["suites"][suite]["score"] <= 100.0
    assert m["suites"]["success"]["score"] == 100.0 and m["infractions"] == []
    assert m["suites"]["leaderboard"]["version"] == 2.0


def test_ttc_and_expert_terms_through_the_env(empty_straight):
    ego = empty_straight.ego
    scn = empty_straight.model_validate(
        empty_straight.model_dump(mode="json")
        | {"actors": [{"id": "parked", "lane": ego.lane, "s": ego.s + 40, "behaviour": {"type": "static"}}]}
    )
    env = gym.make(
        "LoopDrive-v0",
        scenario=scn,
        observations=("state",),
        rewards={"ttc": -1.0, "ade_expert": -0.1, "collision": -10.0},
    )
    env.reset(seed=0)
    from tests.envs.helpers import route_plan

    ttc_steps, ade = 0, []
    for _ in range(20):
        _, _, term, _, info = env.step(route_plan(env.unwrapped.world, 12.0))
        ttc_steps += info["reward_terms"]["ttc"]
        ade.append(info["reward_terms"]["ade_expert"])
        if term:
            break
    assert ttc_steps > 0  # closing in on the parked car at 12 m/s
    assert max(ade) > 1.0  # the expert brakes, this plan does not
    env.reset(seed=0)
    _, _, _, _, info = env.step(RouteFollower().plan(env.unwrapped.world))
    assert info["reward_terms"]["ade_expert"] < 0.05  # the expert agrees with itself


def test_a_run_out_is_the_driving_the_episode_would_have_had_with_its_goal_further_on():
    """Past the goal the expert drives on as it would have, had the goal been 60 m further (bit for
    bit); afterwards the env is back at the episode's end, its returns as they were."""
    from agents import load_agent
    from envs import LoopDriveEnv
    from scenarios import load_bank
    from tests.envs.helpers import drive_to_the_end

    scenario = next(s for s in load_bank("smoke").scenarios if s.id == "straight-000")
    env = LoopDriveEnv(bank="smoke", observations=("ego_state",))
    expert = load_agent("expert")
    info = drive_to_the_end(env, expert, scenario.id)
    assert info["metrics"]["ending"] == "route_complete"
    end, returns = list(env.ego_track), dict(env._returns)
    ran_on = env.run_out(lambda o: expert.act(o).trajectory, 64)
    assert len(ran_on) == 64
    assert env.ego_track == end and env._returns == returns and env.world.t == pytest.approx(end[-1].t)
    with pytest.raises(RuntimeError, match="ended"):
        env.step(np.zeros((64, 3), np.float32))

    further = scenario.model_copy(update={"ego": scenario.ego.model_copy(update={"goal_distance": 226.5})})
    env2 = LoopDriveEnv(bank="smoke", scenario=further, observations=("ego_state",))
    expert2 = load_agent("expert")
    obs, _ = env2.reset(seed=0)
    expert2.reset({"scenario": env2.scenario, "world": env2.world, "seed": 0})
    while len(env2.ego_track) < len(end) + 64:
        obs, *_ = env2.step(expert2.act(obs).trajectory)

    def motion(track):  # (the route's completion is per goal: not the driving)
        return [(e.t, e.x, e.y, e.yaw, e.speed, e.accel, e.steer) for e in track]

    assert motion(env2.ego_track[: len(end)]) == motion(end)
    assert motion(env2.ego_track[len(end) : len(end) + 64]) == motion(ran_on)


def test_a_run_out_stops_before_the_route_ends_and_is_refused_before_the_end():
    """Where the route (and the road) ends soon after the goal, the run-out keeps only the decisions whose
    plans stay on it, none where the goal is at the route's end; driving on needs an episode ended at its
    goal or its time."""
    from agents import load_agent
    from envs import LoopDriveEnv
    from tests.envs.helpers import drive_to_the_end

    env = LoopDriveEnv(bank="smoke", observations=("ego_state",))
    expert = load_agent("expert")
    env.reset(seed=0, options={"scenario": "pedestrian_crossing-000"})
    with pytest.raises(RuntimeError, match="after the episode has ended"):
        env.run_out(lambda o: expert.act(o).trajectory, 64)
    drive_to_the_end(env, expert, "pedestrian_crossing-000")
    held = env.ego_track
    end = list(held)
    ran_on = env.run_out(lambda o: expert.act(o).trajectory, 64)
    assert 0 < len(ran_on) < 64
    assert held == end  # the episode's poses a caller holds did not grow (`held + ran_on` is the driving)
    route_end = env.world.compiled.route_xy[-1]
    assert np.hypot(ran_on[-1].x - route_end[0], ran_on[-1].y - route_end[1]) > 1.0
    assert env.ego_track[-1].t < ran_on[0].t  # (the env is back at the episode's end)

    drive_to_the_end(env, expert, "t_junction-000")  # its goal is where its route ends: at most the
    assert len(env.run_out(lambda o: expert.act(o).trajectory, 64)) < env.decision_every  # decision cut short

    cv = load_agent("constant_velocity")  # into the braking car ahead: no run-out after a collision
    assert drive_to_the_end(env, cv, "lead_brake-000")["metrics"]["ending"] == "collision"
    assert env.run_out(lambda o: cv.act(o).trajectory, 64) == []
