"""Agents: loading by spec, baselines, and the privileged expert's driving and reasoning."""

import textwrap

import gymnasium as gym
import numpy as np
import pytest

from agents import AgentSpecError, ConstantVelocity, Expert, Stop, load_agent
from rewards.consistency import consistency_score
from rewards.scene import scene_facts


def run(env_id_kwargs, spec, scenario):
    env = gym.make("LoopDrive-v0", observations=("state", "ego_state", "ego_history"), **env_id_kwargs)
    obs, _ = env.reset(seed=0, options={"scenario": scenario})
    agent = load_agent(spec)
    agent.reset({"scenario": env.unwrapped.scenario, "world": env.unwrapped.world})
    outputs, done = [], False
    while not done:
        out = agent.act(obs)
        outputs.append(out)
        obs, _, term, trunc, info = env.step(out.trajectory)
        done = term or trunc
    return info["metrics"], outputs, env


def test_builtin_specs_and_plugins(tmp_path, monkeypatch):
    assert isinstance(load_agent("expert"), Expert)
    follower = load_agent("expert?time_headway=0.6&min_gap=2")  # another driving style
    assert isinstance(follower, Expert) and (follower.T, follower.s0, follower.caution_speed) == (0.6, 2.0, 6.0)
    with pytest.raises(AgentSpecError, match=r"unknown option\(s\) \['headway'\]"):
        load_agent("expert?headway=0.6")
    with pytest.raises(AgentSpecError, match="positive"):
        load_agent("expert?min_gap=0")
    assert isinstance(load_agent("constant_velocity"), ConstantVelocity) and isinstance(load_agent("stop"), Stop)
    (tmp_path / "my_agents.py").write_text(
        textwrap.dedent("""
        import numpy as np
        from agents import AgentOutput, BaseAgent

        class Cruise(BaseAgent):
            name = "cruise"
            def act(self, obs):
                t = np.arange(1, 65) * 0.1
                return AgentOutput(np.stack([10 * t, 0 * t, 0 * t], 1).astype(np.float32), "cruise")

        class NeedsArgs:
            def __init__(self, x): ...

        class NoAct:
            def reset(self, info): ...
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    metrics, outs, _ = run({"scenario": "straight-000"}, "my_agents:Cruise", "straight-000")
    assert outs[0].reasoning == "cruise" and metrics["distance"] > 0
    for spec, match in [
        ("expurt", "unknown agent 'expurt'"),
        ("nope_mod:X", "cannot import module 'nope_mod'"),
        ("my_agents:Missing", "has no attribute 'Missing'"),
        ("my_agents:NeedsArgs", "cannot be built without arguments"),
        ("my_agents:NoAct", "has no act"),
    ]:
        with pytest.raises(AgentSpecError, match=match):
            load_agent(spec)


def test_baselines_make_well_formed_plans():
    obs = {"ego_state": np.array([10.0, 0.0, 0.1, 0, 13.9, 0, 0], np.float32)}
    cv = ConstantVelocity().act(obs).trajectory
    assert cv.shape == (64, 3) and cv.dtype == np.float32 and cv[-1, 1] > 0  # arcs left with yaw rate 0.1
    st = Stop().act(obs).trajectory
    assert np.allclose(st[-5:, 0], st[-1, 0]) and st[-1, 0] == pytest.approx(10.0**2 / 6.0, rel=1e-3)


def test_expert_needs_the_world():
    with pytest.raises(ValueError, match="privileged"):
        Expert().reset({"scenario": None})


@pytest.mark.parametrize(
    "scenario",
    [
        "parked_blocking-000",
        "overtake-000",
        "unprotected_left-000",
        "pedestrian_crossing-000",
        "t_junction-000",
        "cut_in-000",
    ],
)
def test_expert_solves_the_hard_families(scenario):
    metrics, _, _ = run({"bank": "smoke"}, "expert", scenario)
    assert metrics["suites"]["success"]["score"] == 100.0, metrics["infractions"]


def test_expert_beats_the_baselines_on_smoke(smoke):
    def mean_ds(spec):
        return np.mean([run({"bank": "smoke"}, spec, s.id)[0]["suites"]["leaderboard"]["score"] for s in smoke])

    expert = mean_ds("expert")
    assert expert >= 90.0
    assert expert > mean_ds("constant_velocity") + 20.0


def test_expert_reasoning_is_consistent_with_what_it_does(smoke):
    _, outs, env = run({"bank": "smoke"}, "expert", "lead_brake-000")
    assert all(o.reasoning for o in outs)
    env.reset(seed=0, options={"scenario": "signalized_intersection-000"})
    prog = {"phases": [{"state": "red", "duration": 100.0}], "offset": 0.0}
    scn = env.unwrapped.scenario
    red = scn.model_validate(scn.model_dump(mode="json") | {"signals": {k: prog for k in scn.signals}, "actors": []})
    env = gym.make("LoopDrive-v0", scenario=red, observations=("state",))
    env.reset(seed=0)
    agent = Expert()
    world = env.unwrapped.world
    agent.reset({"world": world})
    for _ in range(6):
        out = agent.act(None)
        env.step(out.trajectory)
    assert "Red light" in out.reasoning
    causes = scene_facts(world).causes
    score = consistency_score(out.reasoning, out.trajectory, causes, speed0=float(world.state.speed[0]))
    assert score.overall >= 0.75, score.details


def test_sb3_policies_load_without_pickle(tmp_path):
    """A stable-baselines3 zip runs as ``sb3:PATH`` with the same actions as SB3's own (pickle) loader."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    from agents.sb3 import control_rollout

    for env_id, name in (("LoopDriveControl-v0", "control"), ("LoopDriveState-v0", "trajectory")):
        env = gym.make(env_id, bank="smoke", scenario="curve-000")
        model = PPO(
            "MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, policy_kwargs={"net_arch": [16, 16]}
        )
        model.learn(32)
        model.save(tmp_path / name)
        agent = load_agent(f"sb3:{tmp_path / name}.zip")
        assert agent.control == (name == "control")
        obs, _ = env.reset(seed=0)
        ours = agent.act(obs)
        theirs, _ = PPO.load(tmp_path / f"{name}.zip").predict(obs, deterministic=True)  # our own file: safe
        if agent.control:
            np.testing.assert_allclose(ours.extras["control"], theirs, atol=1e-6)
            speed = float(obs["state"][0])
            np.testing.assert_allclose(ours.trajectory, control_rollout(speed, *theirs), atol=1e-6)
        else:
            np.testing.assert_allclose(ours.trajectory, theirs, atol=1e-6)

    straight = control_rollout(10.0, 0.0, 0.0)
    np.testing.assert_allclose(straight[:, 0], 10.0 * np.arange(1, 65) * 0.1, rtol=1e-5)
    assert np.abs(straight[:, 1:]).max() == 0.0

    custom = PPO(
        "MultiInputPolicy",
        gym.make("LoopDriveControl-v0", bank="smoke"),
        policy_kwargs={"activation_fn": torch.nn.ReLU},
    )
    custom.save(tmp_path / "custom")
    with pytest.raises(AgentSpecError, match="only pickle can restore"):
        load_agent(f"sb3:{tmp_path / 'custom'}.zip")
    with pytest.raises(AgentSpecError, match="no such file"):
        load_agent(f"sb3:{tmp_path / 'missing.zip'}")


def test_vla_spec_options(tmp_path):
    from agents.vla.model import VLA, VLAConfig

    VLA(VLAConfig(size="tiny")).save_pretrained(tmp_path / "vla")
    agent = load_agent(f"vla:{tmp_path / 'vla'}?reasoning=0&noise=0")
    assert agent.reasoning is False and agent.noise_scale == 0.0
    assert load_agent(f"vla:{tmp_path / 'vla'}").noise_scale == 1.0
    with pytest.raises(AgentSpecError, match=r"unknown option\(s\) \['temperature'\]"):
        load_agent(f"vla:{tmp_path / 'vla'}?temperature=2")
    with pytest.raises(AgentSpecError, match="noise must be a number"):
        load_agent(f"vla:{tmp_path / 'vla'}?noise=lots")
    assert load_agent(f"vla:{tmp_path / 'vla'}?steps=4").flow_steps == 4
    assert load_agent(f"vla:{tmp_path / 'vla'}").flow_steps is None
    for bad in ("0", "2.5", "few"):
        with pytest.raises(AgentSpecError, match="steps must be"):
            load_agent(f"vla:{tmp_path / 'vla'}?steps={bad}")
    with pytest.raises(AgentSpecError, match=r"flow_unconditional > 0"):  # its head never saw the state alone
        load_agent(f"vla:{tmp_path / 'vla'}?guidance=2")
    VLA(VLAConfig(size="tiny", flow_unconditional=0.1)).save_pretrained(tmp_path / "guided")
    assert load_agent(f"vla:{tmp_path / 'guided'}?guidance=2").guidance == (2.0,)
    assert load_agent(f"vla:{tmp_path / 'guided'}?guidance=2,1").guidance == (2.0, 1.0)
    assert load_agent(f"vla:{tmp_path / 'guided'}").guidance is None
    for bad in ("2,1,1", "strong", "2,"):
        with pytest.raises(AgentSpecError, match="guidance must be w or w_accel,w_lateral"):
            load_agent(f"vla:{tmp_path / 'guided'}?guidance={bad}")
    with pytest.raises(AgentSpecError, match="plan is given no manoeuvre"):  # nothing to hold
        load_agent(f"vla:{tmp_path / 'vla'}?hold=6")
    VLA(VLAConfig(size="tiny", manoeuvres=3, manoeuvre_in_state=True)).save_pretrained(tmp_path / "manoeuvre")
    assert load_agent(f"vla:{tmp_path / 'manoeuvre'}?hold=6").hold == 6
    assert load_agent(f"vla:{tmp_path / 'manoeuvre'}").hold == 0
    for bad in ("-1", "2.5"):
        with pytest.raises(AgentSpecError, match="hold must be a whole number"):
            load_agent(f"vla:{tmp_path / 'manoeuvre'}?hold={bad}")
    assert load_agent(f"vla:{tmp_path / 'manoeuvre'}?hold=6&route_shift=3.5").route_shift == 3.5
    for bad in ("route_shift=3.5", "hold=6&route_shift=-1"):  # no hold to move the route with; a negative lane
        with pytest.raises(AgentSpecError, match="give metres >= 0, with a hold"):
            load_agent(f"vla:{tmp_path / 'manoeuvre'}?{bad}")
    VLA(VLAConfig(size="tiny", manoeuvres=3, manoeuvre_in_state=True, route_inputs=False)).save_pretrained(
        tmp_path / "routeless"
    )
    with pytest.raises(AgentSpecError, match="reads no route"):
        load_agent(f"vla:{tmp_path / 'routeless'}?hold=6&route_shift=3.5")
    assert load_agent(f"vla:{tmp_path / 'vla'}").perception == "probe"
    with pytest.raises(AgentSpecError, match="plan reads no perception probe"):  # nothing to replace
        load_agent(f"vla:{tmp_path / 'vla'}?perception=oracle")
    VLA(VLAConfig(size="tiny", perception_targets=8, perception_in_state=True)).save_pretrained(tmp_path / "probe")
    assert load_agent(f"vla:{tmp_path / 'probe'}?perception=oracle").perception == "oracle"
    with pytest.raises(AgentSpecError, match="perception must be one of"):
        load_agent(f"vla:{tmp_path / 'probe'}?perception=eyes")
    partial = load_agent(f"vla:{tmp_path / 'probe'}?perception=lead_gap,lead_closing_speed")
    assert partial.from_world == ("lead_gap", "lead_closing_speed") and partial.closing == "probe"
    assert load_agent(f"vla:{tmp_path / 'probe'}?closing=tracked").closing == "tracked"
    with pytest.raises(AgentSpecError, match="closing must be one of"):
        load_agent(f"vla:{tmp_path / 'probe'}?closing=radar")
