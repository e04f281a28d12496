"""Alpamayo-R1 in the release's layout, checked against tensors computed by NVIDIA's own code
(tests/data/alpamayo_r1_reference, see its README for provenance and tolerances)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from agents.alpamayo import TOLERANCES, AlpamayoR1, check_reference
from agents.alpamayo.action_space import yaw_of
from agents.alpamayo.reference import failures
from agents.vla.checkpoint import CheckpointError
from agents.vla.flow import log_prob, sample_sde

FIXTURE = Path(__file__).parents[2] / "data" / "alpamayo_r1_reference"


@pytest.fixture(scope="module")
def model() -> AlpamayoR1:
    return AlpamayoR1.from_pretrained(FIXTURE / "checkpoint")


@pytest.fixture(scope="module")
def goldens() -> dict[str, torch.Tensor]:
    return load_file(FIXTURE / "goldens.safetensors")


def _observation(g: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The fixture's inputs as the env gives them: cameras [4, 4, H, W, 3], history [16, 4] (x, y, yaw, speed)."""
    xyz, rot = g["ego_history_xyz"][0, 0], g["ego_history_rot"][0, 0]
    speed = torch.linalg.norm(torch.diff(xyz[:, :2], dim=0, prepend=xyz[:1, :2]), dim=-1) / 0.1
    history = torch.stack([xyz[:, 0], xyz[:, 1], yaw_of(rot), speed], -1)
    return {"cameras": g["image_frames"].permute(0, 1, 3, 4, 2).numpy(), "ego_history": history.numpy()}


def _plan(g: dict[str, torch.Tensor]) -> torch.Tensor:
    """The fixture's ground-truth future as a plan [1, 64, 3] (x, y, yaw)."""
    xyz, rot = g["ego_future_xyz"][0, 0], g["ego_future_rot"][0, 0]
    return torch.cat([xyz[:, :2], yaw_of(rot)[:, None]], -1)[None]


def test_every_golden_is_reproduced_within_its_tolerance(model):
    errors = check_reference(FIXTURE, model)
    assert set(errors) == set(TOLERANCES)
    assert failures(errors) == {}, failures(errors)
    # the exact ones are exact, and the one-pass and incremental (generate) prefixes agree
    assert errors["fused_input_ids"] == errors["expert_position_ids"] == errors["tf_position_ids"] == 0
    assert errors["generated_prefix_velocity_t_a"] < 1e-4


def test_the_checker_notices_a_wrong_model(model):
    wrong = AlpamayoR1.from_pretrained(FIXTURE / "checkpoint")
    with torch.no_grad():
        wrong.expert.layers[0].self_attn.q_norm.weight.mul_(1.01)  # a one-percent change in one norm
    broken = failures(check_reference(FIXTURE, wrong))
    assert "velocity_t_a" in broken and "tf_logits_gen" not in broken  # the VLM is untouched


def test_save_and_load_round_trip_is_bit_identical(model, tmp_path):
    model.save_pretrained(tmp_path / "saved")
    again = AlpamayoR1.from_pretrained(tmp_path / "saved")  # base VLM files travel in saved/base_vlm
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "saved" / "config.json").read_text()) == json.loads(
        (FIXTURE / "checkpoint" / "config.json").read_text()
    )
    assert (
        load_file(tmp_path / "saved" / "model.safetensors").keys()
        == load_file(FIXTURE / "checkpoint" / "model.safetensors").keys()
    )
    assert check_reference(FIXTURE, again) == check_reference(FIXTURE, model)


def test_one_sft_step_trains_the_trajectory_head_only(goldens):
    model = AlpamayoR1.from_pretrained(FIXTURE / "checkpoint").train()
    params = model.set_trainable("expert")
    vlm_before = {k: v.clone() for k, v in model.vlm.state_dict().items()}
    head_before = model.action_out_proj.weight.clone()
    opt = torch.optim.AdamW(params, lr=1e-3)
    obs, plan, reasoning = [_observation(goldens)], _plan(goldens), ["Keep lane and follow the gentle left curve."]
    losses = []
    for _ in range(3):
        out = model.losses(obs, reasoning, plan, generator=torch.Generator().manual_seed(0))
        losses.append(float(out["flow"]))
        opt.zero_grad()
        out["flow"].backward()
        opt.step()
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]  # the same (t, noise) each step
    assert all(torch.equal(vlm_before[k], v) for k, v in model.vlm.state_dict().items())
    assert not torch.equal(head_before, model.action_out_proj.weight)
    assert float(out["text"]) > 0


def test_flow_times_follow_the_release_or_the_project_sampler(model):
    g = torch.Generator().manual_seed(0)
    release, ours = model.flow_time(20000, "release", g), model.flow_time(20000, "loopdrive", g)
    assert 0.0 <= float(release.min()) and float(release.max()) <= 0.999
    assert float(release.mean()) == pytest.approx(0.999 * (1 - 0.6), abs=0.01)  # E[Beta(1.5, 1)] = 0.6
    assert float(ours.mean()) == pytest.approx(0.001 + 0.998 * 0.6, abs=0.01)
    with pytest.raises(ValueError, match="unknown flow-time sampler"):
        model.flow_time(1, "cosine")


def test_flow_sde_log_probs_give_ratio_one_for_an_unchanged_policy(goldens):
    model = AlpamayoR1.from_pretrained(FIXTURE / "checkpoint")
    batch = model.prepare([_observation(goldens)] * 2)
    prefix, _ = model.teacher_forced_prefix(batch, model.reasoning_ids(["Keep lane."] * 2))
    field, ctx = model.field, prefix.cache
    g = torch.Generator().manual_seed(3)
    _, chain, smask, logp_old = sample_sde(field, 2, ctx, prefix.mask, 10, 0.5, "all", g, state=prefix.start)
    logp = log_prob(field, chain, smask, ctx, prefix.mask, 0.5, state=prefix.start)
    assert torch.allclose(torch.exp(logp - logp_old), torch.ones(2), atol=1e-5, rtol=0)
    # a policy-gradient step on the head moves the ratio away from one
    params = model.set_trainable("expert")
    opt = torch.optim.SGD(params, lr=1e-2)
    (-(logp * torch.tensor([1.0, -1.0])).mean()).backward()
    opt.step()
    with torch.no_grad():
        moved = log_prob(field, chain, smask, ctx, prefix.mask, 0.5, state=prefix.start)
    assert not torch.allclose(moved, logp_old, atol=1e-4)


def test_fewer_denoising_steps_sample_a_shorter_chain_whose_log_prob_is_recomputed(goldens):
    model = AlpamayoR1.from_pretrained(FIXTURE / "checkpoint")
    obs = [_observation(goldens)] * 2
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        plans, chain, smask, logp = model.sample_with_log_prob(obs, 0.5, "all", g, steps=4)
        again = model.chain_log_prob(obs, chain, smask, 0.5)
    assert chain.shape[0] == 5 and smask.shape[-1] == 4 and plans.shape[0] == 2
    torch.testing.assert_close(again, logp, atol=1e-4, rtol=0)
    planned = model.act_batch(obs, reasoning=False, generator=g, noise_scale=0.0, steps=4)
    assert planned[0]["trajectory"].shape == plans[0].shape


def test_the_agent_plans_from_env_observations(goldens):
    from agents.loading import load_agent

    agent = load_agent(f"alpamayo:{FIXTURE / 'checkpoint'}?temperature=0&noise=0")
    agent.reset({"seed": 0})
    out = agent.act(_observation(goldens))
    assert out.trajectory.shape == (64, 3) and np.isfinite(out.trajectory).all()
    assert isinstance(out.reasoning, str)
    again = load_agent(f"alpamayo:{FIXTURE / 'checkpoint'}?temperature=0&noise=0")
    again.reset({"seed": 0})
    assert np.array_equal(again.act(_observation(goldens)).trajectory, out.trajectory)  # deterministic


def test_in_bfloat16_as_on_a_gpu_the_model_plans_what_it_plans_in_float32(goldens):
    # the agent casts to bf16 on a GPU; the float32 flow state once met the bf16 action-in MLP and failed
    obs = [_observation(goldens)]
    plans = []
    for dtype in (torch.float32, torch.bfloat16):
        model = AlpamayoR1.from_pretrained(FIXTURE / "checkpoint").in_dtype(dtype)
        plans.append(model.act_batch(obs, False, torch.Generator().manual_seed(0))[0]["trajectory"])
    assert plans[1].dtype == np.float32 and np.isfinite(plans[1]).all()
    assert np.abs(plans[1] - plans[0]).max() < 0.05 * np.abs(plans[0]).max()  # bf16 rounding, not another plan


def test_the_agent_drives_an_episode_in_the_embedded_world():
    import gymnasium as gym

    import envs  # noqa: F401  (registers the ids)
    from agents.loading import load_agent

    agent = load_agent(f"alpamayo:{FIXTURE / 'checkpoint'}?temperature=0")
    agent.model.max_reasoning_tokens = 12  # the untrained fixture never ends its reasoning: the same path, shorter
    env = gym.make("LoopDrive-v0", bank="smoke", scenario="curve-000", camera_size=(64, 128))
    obs, _ = env.reset(seed=0)
    agent.reset({"seed": 0})
    for _ in range(3):  # the untrained fixture plans nonsense, but every plan is valid and the world runs it
        plan = agent.act(obs).trajectory
        assert env.action_space.contains(plan)
        obs, _, terminated, truncated, _ = env.step(plan)
        if terminated or truncated:
            break
    env.close()


# --- bad input: every failure names the file and the reason -------------------------------------------------
def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "ref"
    shutil.copytree(FIXTURE, root)
    return root


def _edit_config(root: Path, **changes) -> None:
    file = root / "checkpoint" / "config.json"
    raw = json.loads(file.read_text())
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            raw[section][field] = value
        elif value is None:
            raw.pop(section)
        else:
            raw[section] = value
    file.write_text(json.dumps(raw))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "qwen3_vl"}, "model_type = 'qwen3_vl', not 'alpamayo_r1'"),
        ({"mystery_option": 3}, "mystery_option: a key this loader does not know"),
        ({"diffusion_cfg__int_method": "rk4"}, "diffusion_cfg.int_method"),
        ({"action_space_cfg___target_": "x.UnicycleJerkActionSpace"}, "only UnicycleAccelCurvatureActionSpace"),
        ({"action_space_cfg__accel_std": 0}, "action_space_cfg.accel_std"),
        ({"expert_cfg": {"num_key_value_heads": 4}}, "kv heads and head_dim"),
        ({"expert_cfg": {"rope_theta": 1}}, "not text-model settings"),
        ({"vocab_size": 500}, "vocab_size is 500"),
        ({"traj_token_start_idx": 399}, "traj_token_start_idx is 399"),
        ({"action_in_proj_cfg": None}, "action_in_proj_cfg"),
    ],
)
def test_an_unsupported_or_inconsistent_config_is_refused(tmp_path, change, message):
    root = _copy(tmp_path)
    _edit_config(root, **change)
    with pytest.raises(CheckpointError, match=r"config\.json|base_vlm") as e:
        AlpamayoR1.from_pretrained(root / "checkpoint")
    assert message in str(e.value)


def _edit_weights(root: Path, edit) -> None:
    file = root / "checkpoint" / "model.safetensors"
    weights = load_file(file)
    edit(weights)
    save_file(weights, file)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda w: w.pop("expert.layers.1.mlp.up_proj.weight"), "missing.*expert.layers.1.mlp.up_proj.weight"),
        (lambda w: w.update({"expert.extra.weight": torch.zeros(2)}), "unexpected.*expert.extra.weight"),
        (lambda w: w.update({"action_out_proj.weight": torch.zeros(3, 48)}), "action_out_proj.weight"),
        (lambda w: w.pop("action_space.accel_std"), "action_space.accel_std"),
    ],
)
def test_missing_extra_or_misshapen_weights_are_refused(tmp_path, edit, message):
    root = _copy(tmp_path)
    _edit_weights(root, edit)
    with pytest.raises(CheckpointError, match=message) as e:
        AlpamayoR1.from_pretrained(root / "checkpoint")
    assert "model.safetensors" in str(e.value)


def test_a_missing_base_vlm_or_tokenizer_is_refused(tmp_path):
    root = _copy(tmp_path)
    (root / "base_vlm" / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"no tokenizer\.json"):
        AlpamayoR1.from_pretrained(root / "checkpoint")
    shutil.rmtree(root / "base_vlm")
    with pytest.raises(CheckpointError, match=r"vlm_name_or_path = 'base_vlm' is not a local folder.*\?base=DIR"):
        AlpamayoR1.from_pretrained(root / "checkpoint")
    with pytest.raises(CheckpointError, match="does not exist"):
        AlpamayoR1.from_pretrained(root / "checkpoint", base=tmp_path / "nowhere")
    assert AlpamayoR1.from_pretrained(root / "checkpoint", base=FIXTURE / "base_vlm") is not None


def test_a_truncated_weights_file_is_refused(tmp_path):
    root = _copy(tmp_path)
    file = root / "checkpoint" / "model.safetensors"
    file.write_bytes(file.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        AlpamayoR1.from_pretrained(root / "checkpoint")


def test_agent_spec_options_are_checked():
    from agents.loading import AgentSpecError, load_agent

    with pytest.raises(AgentSpecError, match="unknown option"):
        load_agent(f"alpamayo:{FIXTURE / 'checkpoint'}?beam=4")
    with pytest.raises(AgentSpecError, match="temperature must be a number"):
        load_agent(f"alpamayo:{FIXTURE / 'checkpoint'}?temperature=hot")
    with pytest.raises(AgentSpecError, match=r"config\.json"):
        load_agent(f"alpamayo:{FIXTURE}")
