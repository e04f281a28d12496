"""GRPO, PPO and the SB3 baseline end to end on RLlib: a few iterations, resume, what moves."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rewards import Ending


def _rl_recipe(algorithm: str, init: Path, data: dict | None = None, **rl):
    from training.recipes import recipe_from_dict

    base = {
        "iterations": 1,
        "bank": "smoke",
        "split": None,
        "scenarios": ["lead_brake-000"],
        "minibatch": 16,
        "threads": 1,
    }
    base |= {"groups_per_iter": 1, "group_size": 2} if algorithm == "grpo" else {"batch_steps": 40}
    return recipe_from_dict(
        {
            "algorithm": algorithm,
            "seed": 1,
            "init_from": str(init),
            "data": {"collect": False, "n_frames": 1} | (data or {}),
            "rl": base | rl,
            "eval": {"final": False},
            "checkpoint": {"every": 1, "keep_last": 3},
        }
    )


def test_grpo_one_iteration_end_to_end(ray_local, tiny_vla, tmp_path):
    from agents.vla.model import VLA
    from training.run import train

    result = train(_rl_recipe("grpo", tiny_vla), tmp_path / "run", progress=False)
    assert result["iteration"] == 1 and Path(result["final"]).is_dir()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {"reward/score", "clip_fraction", "loss/policy", "reward_terms/progress"} <= set(lines[-1])
    assert (tmp_path / "run" / "curves.png").exists()
    before, after = VLA.from_pretrained(tiny_vla), VLA.from_pretrained(result["final"])
    moved = [
        not torch.equal(a, b)
        for (_, a), (_, b) in zip(before.expert.state_dict().items(), after.expert.state_dict().items())
    ]
    assert any(moved)  # the flow head learned ...
    frozen = zip(before.backbone.parameters(), after.backbone.parameters())
    assert all(torch.equal(a, b) for a, b in frozen)  # ... alone


def test_grpo_resume_matches_an_uninterrupted_run(ray_local, tiny_vla, tmp_path):
    from agents.vla.model import VLA
    from training.run import train

    straight = train(_rl_recipe("grpo", tiny_vla, iterations=2), tmp_path / "a", progress=False)
    train(_rl_recipe("grpo", tiny_vla, iterations=2, max_iterations_this_run=1), tmp_path / "b", progress=False)
    resumed = train(_rl_recipe("grpo", tiny_vla, iterations=2), tmp_path / "b", resume=True, progress=False)
    assert resumed["iteration"] == 2
    a, b = VLA.from_pretrained(straight["final"]), VLA.from_pretrained(resumed["final"])
    for (name, x), (_, y) in zip(a.expert.state_dict().items(), b.expert.state_dict().items()):
        assert torch.equal(x, y), name


def test_ppo_one_iteration_end_to_end_on_rllib(ray_local, tiny_vla, tmp_path):
    from agents.vla.model import VLA
    from training.run import train

    result = train(_rl_recipe("ppo", tiny_vla, dual_clip=3.0), tmp_path / "run", progress=False)
    assert result["iteration"] == 1
    final = Path(result["final"])
    assert (final / "value_head.safetensors").exists()
    assert result["env_steps"] >= 40 and "learner/vf_loss" in result and "learner/clip_fraction" in result
    assert "reward_terms/progress" in result and "episode/driving_score" in result  # from the env runners
    endings = {k: v for k, v in result.items() if k.startswith("episode/ending_")}
    assert set(endings) == {f"episode/ending_{e.value}" for e in Ending} and sum(endings.values()) == pytest.approx(1)
    before, after = VLA.from_pretrained(tiny_vla), VLA.from_pretrained(final)
    assert any(not torch.equal(a, b) for a, b in zip(before.expert.parameters(), after.expert.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(before.backbone.parameters(), after.backbone.parameters()))


def test_ppo_gives_the_critic_its_own_optimiser_and_learning_rate(ray_local, tiny_vla):
    from training.rl.ppo import build_algorithm, learner_module

    recipe = _rl_recipe("ppo", tiny_vla, lr=1e-6, vf_lr=1e-2, epochs=1, minibatch=40)
    algo = build_algorithm(recipe, tiny_vla, (56, 112))
    try:
        module = learner_module(algo)
        critic = [p.detach().clone() for p in module.value_head.parameters()]
        expert = [p.detach().clone() for p in module.vla.expert.parameters()]
        result = algo.train()
        moved_critic = max(float((p - q).abs().max()) for p, q in zip(module.value_head.parameters(), critic))
        moved_expert = max(float((p - q).abs().max()) for p, q in zip(module.vla.expert.parameters(), expert))
    finally:
        algo.stop()
    # an Adam step moves a parameter by at most about its learning rate: the critic's steps are vf_lr's,
    # the policy's lr's (one shared optimiser would move both alike), each clipped by its own norm
    assert 1e-6 <= moved_expert <= 5e-6 and 1e-2 <= moved_critic <= 5e-2
    norms = result["learners"]["default_policy"]
    assert {"gradients_policy_global_norm", "gradients_critic_global_norm"} <= set(norms)


def test_ppo_critic_warmup_moves_only_the_critic_then_the_policy(ray_local, tiny_vla, tmp_path):
    from training.recipes import RecipeError
    from training.rl.ppo import train_ppo

    recipe = _rl_recipe("ppo", tiny_vla, iterations=2, critic_warmup=1, lr=1e-3, vf_lr=1e-2, minibatch=20)
    train_ppo(recipe, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "learner/critic_only" in r]
    assert [r["learner/critic_only"] for r in rows] == [1.0, 0.0]
    assert "learner/policy_loss" not in rows[0] and "learner/policy_loss" in rows[1]
    assert rows[0]["learner/gradients_critic_global_norm"] > 0
    with pytest.raises(RecipeError, match="critic_warmup"):
        train_ppo(_rl_recipe("ppo", tiny_vla, iterations=2, critic_warmup=2), tmp_path / "refused", progress=False)


def test_ppo_critic_warmup_leaves_the_policy_at_its_start(ray_local, tiny_vla):
    from training.rl.ppo import build_algorithm, learner_module

    recipe = _rl_recipe("ppo", tiny_vla, lr=1e-3, vf_lr=1e-2, minibatch=20)
    algo = build_algorithm(recipe, tiny_vla, (56, 112))
    try:
        module = learner_module(algo)
        module.critic_only = True
        policy = [p.detach().clone() for p in module.vla.parameters()]
        critic = [p.detach().clone() for p in module.value_head.parameters()]
        algo.train()
        assert all(torch.equal(p, q) for p, q in zip(module.vla.parameters(), policy))
        assert not all(torch.equal(p, q) for p, q in zip(module.value_head.parameters(), critic))
    finally:
        algo.stop()


def test_ppo_critic_fitting_epochs_explain_more_of_the_returns(ray_local, tiny_vla):
    from training.rl.ppo import build_algorithm, explained_variance

    targets = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert float(explained_variance(targets, targets)) == 1.0
    assert float(explained_variance(torch.full((4,), 2.5), targets)) == pytest.approx(0.0)
    recipe = _rl_recipe("ppo", tiny_vla, vf_lr=1e-2, minibatch=20, vf_fit_epochs=200)
    algo = build_algorithm(recipe, tiny_vla, (56, 112))
    try:
        learner = algo.train()["learners"]["default_policy"]
    finally:
        algo.stop()
    # the 2 PPO minibatch steps barely fit the fresh head; 200 more epochs on the same targets explain a
    # share more: 0.49 against 0.00 on a 2-core Intel Xeon, 0.15 against 0.00 on a 2-core AMD EPYC (the
    # rollouts, and so the targets, differ in their last bits between the CPUs' kernels)
    assert learner["vf_explained_var_fitted"] > learner["vf_explained_var"] + 0.1


def test_ppo_kl_anchor_scores_the_samples_under_the_frozen_start(ray_local, tiny_vla):
    from training.recipes import RecipeError
    from training.rl.losses import k3_kl
    from training.rl.ppo import build_algorithm, learner_module, train_ppo

    recipe = _rl_recipe("ppo", tiny_vla, lr=1e-3, kl_coef=0.5, epochs=2, minibatch=20)
    algo = build_algorithm(recipe, tiny_vla, (56, 112))
    try:
        module = learner_module(algo)
        result = algo.train()
        learner = algo.learner_group._learner
        reference = learner.reference_policy(learner.config)
        start = [p.detach() for p in reference.expert.parameters()]
        assert all(not p.requires_grad for p in reference.parameters())
        moved = [not torch.equal(a, b) for a, b in zip(module.vla.expert.parameters(), start)]
    finally:
        algo.stop()
    assert any(moved)  # the policy left the start, the reference stayed there ...
    kl = result["learners"]["default_policy"]["kl_ref"]
    assert 0 < kl < float("inf")  # ... and the penalty measured the distance between them (k3 >= 0)
    assert float(k3_kl(torch.tensor([0.0]), torch.tensor([0.0]))) == 0.0
    baseline = _rl_recipe("ppo", Path("unused"), policy="mlp_state", kl_coef=0.5)
    with pytest.raises(RecipeError, match="kl_coef"):
        train_ppo(baseline, "unused_run", progress=False)


def test_ppo_privileged_critic_reads_the_actors_the_policy_sees_only_as_pixels(ray_local, tiny_vla):
    from ray.rllib.core.columns import Columns

    from envs.observations import EGO_STATE_DIM, N_NEIGHBOURS, ROUTE_POINTS
    from training.rl.env import RLDriveEnv
    from training.rl.ppo import build_algorithm, learner_module

    recipe = _rl_recipe("ppo", tiny_vla, value_inputs="privileged", vf_lr=1e-2)
    algo = build_algorithm(recipe, tiny_vla, (56, 112))
    try:
        result = algo.train()  # the runners' observations carry the state vector, or the critic fails
        module = learner_module(algo)
        env = RLDriveEnv(algo.config.env_config | {"tasks": [("lead_brake-000", 0)]})
        obs, _ = env.reset()
        env.close()
        assert set(obs) > {"cameras", "state"}
        moved = dict(obs, state=obs["state"].copy())
        actors = EGO_STATE_DIM + 2 * (ROUTE_POINTS // 2)  # the neighbours' features start after the route's
        moved["state"][actors : actors + 8 * N_NEIGHBOURS] = 0.0  # no actor near the ego (its lead vehicle gone)
        batch = {k: torch.as_tensor(np.stack([obs[k], moved[k]])) for k in obs}
        with torch.no_grad():
            values = module.compute_values({Columns.OBS: batch})
            plans = [module.vla.act_batch([o], reasoning=False, noise_scale=0.0)[0]["trajectory"] for o in (obs, moved)]
    finally:
        algo.stop()
    assert np.isfinite(result["learners"]["default_policy"]["vf_loss"])
    assert float(values[0]) != float(values[1])  # the critic sees the lead vehicle ...
    assert np.array_equal(plans[0], plans[1])  # ... the policy does not read the state vector


@pytest.mark.parametrize("route_shift", [0.0, 3.5])
def test_ppo_rollouts_hold_the_heads_lane_change_and_the_learner_scores_each_chain_as_sampled(
    ray_local, tiny_vla, tmp_path, route_shift, monkeypatch
):
    """With ``rl.hold = 3`` the env runner plans a change the head chooses at three decisions of its episode
    (each decision reads the episode's last one back; an episode starts free), and the learner scores every
    stored chain given the class it was planned with: its own head (here: always keep_lane) would condition
    the held decisions otherwise, and the first update's ratio would not be 1. With ``rl.route_shift`` the
    route of each decision after a change is chosen is drawn a lane to its side while the hold lasts, the
    change is planned as keep_lane there, and the learner scores the chain on the route drawn (were the
    episode's observation left as the env gave it, the ratio would not be 1)."""
    from agents.vla.manoeuvre import hold_manoeuvres
    from agents.vla.model import VLA, VLAConfig
    from agents.vla.route_shift import SIDES, RouteShift, planned_on_route
    from training.recipes import RecipeError
    from training.rl.module import HELD, HELD_FOR, HOLD_CLASS, HOLD_LEFT, MANOEUVRE, SHIFT_SIDE
    from training.rl.ppo import build_algorithm, learner_module, train_ppo

    with pytest.raises(RecipeError, match=r"rl\.hold = 3: .* cannot hold a manoeuvre: its plan is given no"):
        train_ppo(_rl_recipe("ppo", tiny_vla, hold=3), tmp_path / "no_head", progress=False)
    with pytest.raises(ValueError, match="route_shift draws the lane change held into the route: it needs hold"):
        _rl_recipe("ppo", tiny_vla, route_shift=3.5)
    path = tmp_path / "vla"
    VLA(VLAConfig(size="tiny", image_size=(56, 112), manoeuvres=3, manoeuvre_in_state=True)).save_pretrained(path)
    recipe = _rl_recipe("ppo", path, hold=3, route_shift=route_shift, lr=1e-9, epochs=1)
    algo = build_algorithm(recipe, path, (56, 112))
    calls, drawn_routes = [], []  # the routes the env runner's route shift drew (one env: one per decision)
    columns = (HELD, HELD_FOR) + ((SHIFT_SIDE,) if route_shift else ())
    draw = RouteShift.__call__

    def spied(shift, observation, hold):
        out = draw(shift, observation, hold)
        drawn_routes.append((out["route"], not np.array_equal(out["route"], observation["route"])))
        return out

    monkeypatch.setattr(RouteShift, "__call__", spied)
    try:
        acting = algo.env_runner_group.local_env_runner.module
        scripted = iter([1, 0, 0, 0, 0, 2, 0, 1, 0, 0] * 100)  # the runner's head: a change now and then

        def choose_scripted(hidden, images, state):
            calls.append({"chosen": next(scripted)})
            return torch.eye(3)[[calls[-1]["chosen"]]] * 10.0

        acting.vla.manoeuvre_head.forward = choose_scripted
        explore = acting._forward_exploration

        def recorded(batch, **kwargs):
            out = explore(batch, **kwargs)
            calls[-1] |= {k: int(batch[k][0]) for k in columns} | {
                k: int(out[k][0]) for k in (MANOEUVRE, HOLD_CLASS, HOLD_LEFT)
            }
            if route_shift:  # the module reads the route as the shift drew it for this decision
                calls[-1]["as_drawn"] = np.array_equal(np.asarray(batch["obs"]["route"][0]), drawn_routes[-1][0])
            return out

        acting._forward_exploration = recorded
        learning = learner_module(algo)
        learning.vla.manoeuvre_head.forward = lambda hidden, images, state: torch.eye(3)[[0] * len(hidden)] * 10.0
        result = algo.train()
    finally:
        algo.stop()
    one = torch.tensor
    for call in calls:
        kept, left = hold_manoeuvres(one([call["chosen"]]), one([call[HELD]]), one([call[HELD_FOR]]), 3)
        assert (call[HOLD_CLASS], call[HOLD_LEFT]) == (int(kept[0]), int(left[0]))
        planned = planned_on_route(kept, one([call[SHIFT_SIDE]])) if route_shift else kept
        assert call[MANOEUVRE] == int(planned[0])
        if route_shift:  # the route follows the last decision's hold (a straight road: every change drawn)
            assert call[SHIFT_SIDE] == (SIDES.get(call[HELD], 0) if call[HELD_FOR] > 0 else 0)
    starts = [
        later
        for earlier, later in itertools.pairwise(calls)
        if (later[HELD], later[HELD_FOR]) != (earlier[HOLD_CLASS], earlier[HOLD_LEFT])
    ]
    assert all((s[HELD], s[HELD_FOR]) == (0, 0) for s in starts)  # only where an episode starts
    assert len(starts) <= result["env_runners"]["num_episodes"]
    assert (calls[0][HELD], calls[0][HELD_FOR]) == (0, 0)
    held = [c for c in calls if c["chosen"] == 0 and c[HOLD_CLASS] != 0]
    assert len(held) > len(calls) / 5  # decisions where the head kept its lane and the hold did not
    if route_shift:  # every decision a change is held at reads the route drawn into its lane, and keeps that lane
        assert all(c[SHIFT_SIDE] == SIDES[c[HOLD_CLASS]] and c[MANOEUVRE] == 0 for c in held)
        assert all(c["as_drawn"] for c in calls) and sum(moved for _, moved in drawn_routes) > len(held) / 2
    else:
        assert not drawn_routes
    learner = result["learners"]["default_policy"]
    assert abs(learner["ratio_mean"] - 1) < 1e-3 and abs(learner["approx_kl_old"]) < 1e-3


def test_ppo_behaviour_cloning_anchor_pulls_the_flow_head_to_the_demonstrations(ray_local, tiny_vla, tmp_path):
    from agents.vla.model import VLA
    from training.data import CollectSettings, collect
    from training.recipes import RecipeError
    from training.rl.demonstrations import Demonstrations
    from training.rl.ppo import build_algorithm, learner_module, train_ppo

    data = tmp_path / "demo.zarr"
    settings = CollectSettings(bank="smoke", split=None, scenarios=["lead_brake-000"], n_frames=1, chunk=16)
    collect(settings, data, progress=False)
    recipe = _rl_recipe(
        "ppo", tiny_vla, {"path": str(data)}, lr=1e-3, epochs=2, minibatch=20, bc_weight=1e3, bc_batch=4
    )
    demos = Demonstrations(data, seed=recipe.seed, batch=4, with_text=False)

    def demo_loss(policy) -> float:  # the learner's own batches (its first minibatches' steps)
        with torch.no_grad():
            return sum(float(demos.loss(policy, step)) for step in range(4)) / 4

    before = demo_loss(VLA.from_pretrained(tiny_vla))
    algo = build_algorithm(recipe, tiny_vla, (56, 112))
    try:
        result = algo.train()
        after = demo_loss(learner_module(algo).vla)
    finally:
        algo.stop()
    assert result["learners"]["default_policy"]["bc_loss"] > 0
    assert after < 0.9 * before  # a heavy anchor: the update followed the demonstrations' flow loss
    baseline = _rl_recipe("ppo", Path("unused"), policy="mlp_state", bc_weight=1.0)
    with pytest.raises(RecipeError, match="bc_weight"):
        train_ppo(baseline, "unused_run", progress=False)


def test_sb3_ppo_baseline_trains_resumes_and_loads_as_an_agent(tmp_path):
    from agents import load_agent
    from training.recipes import recipe_from_dict
    from training.run import train

    def recipe(**sb3):
        return recipe_from_dict(
            {
                "algorithm": "ppo_sb3",
                "seed": 0,
                "rl": {"bank": "smoke", "split": None, "scenarios": ["curve-000"]},
                "sb3": {"timesteps": 64, "n_steps": 16, "batch_size": 16, "n_envs": 2, "net_arch": [16]} | sb3,
                "eval": {"final": False},
            }
        )

    first = train(recipe(), tmp_path / "run", progress=False)
    assert first["timesteps"] == 64
    more = train(recipe(timesteps=128), tmp_path / "run", resume=True, progress=False)
    assert more["timesteps"] == 128  # continued from 64, not restarted
    agent = load_agent(more["agent"])
    assert agent.control


def test_grpo_step_level_with_reasoning_and_the_consistency_reward(ray_local, tiny_vla, tmp_path):
    from agents.vla.model import VLA
    from training.run import train

    recipe = _rl_recipe(
        "grpo",
        tiny_vla,
        level="step",
        branch_horizon=2,
        score="return",
        group_size=3,
        reasoning=True,
        consistency_weight=1.0,
        train="both",
        lr=1e-3,
    )
    result = train(recipe, tmp_path / "run", progress=False)
    assert result["iteration"] == 1
    assert 0.0 <= result["reward/consistency"] <= 1.0  # scored on the env runner by the rules critic
    assert "reasoning/ratio_mean" in result  # the reasoning tokens' clipped objective joined the loss
    before, after = VLA.from_pretrained(tiny_vla), VLA.from_pretrained(result["final"])
    assert any(not torch.equal(a, b) for a, b in zip(before.backbone.parameters(), after.backbone.parameters()))


@pytest.mark.parametrize("policy", ["mlp_state", "cnn_bev"])
def test_ppo_baseline_modules_on_rllib(ray_local, tmp_path, policy):
    from training.run import train

    recipe = _rl_recipe("ppo", Path("unused"), policy=policy, batch_steps=64, minibatch=32)
    result = train(recipe, tmp_path / "run", progress=False)
    assert result["iteration"] == 1 and result["env_steps"] >= 64 and "learner/vf_loss" in result
    assert Path(result["final"]).exists()
    again = train(
        recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"iterations": 2})}),
        tmp_path / "run",
        resume=True,
        progress=False,
    )
    assert again["iteration"] == 2


def test_grpo_with_a_behaviour_cloning_anchor_on_the_sft_data(ray_local, tiny_vla, tmp_path):
    from training.data import CollectSettings, collect
    from training.run import train

    data = tmp_path / "demo.zarr"
    collect(
        CollectSettings(bank="smoke", split=None, scenarios=["lead_brake-000"], n_frames=1, chunk=16),
        data,
        progress=False,
    )
    recipe = _rl_recipe("grpo", tiny_vla, data={"path": str(data)}, bc_weight=1.0, bc_batch=4)
    result = train(recipe, tmp_path / "run", progress=False)
    assert result["loss/bc"] > 0  # the flow-matching loss on demonstrations joined the policy gradient
