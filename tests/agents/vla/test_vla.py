"""The tiny VLA end to end: inference, determinism, save / load, overfitting, RL hooks, as an agent."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agents import load_agent
from agents.vla import action_space
from agents.vla.checkpoint import CheckpointError
from agents.vla.flow import flow_draw, guided_velocity, sample_ode
from agents.vla.model import STATE_FEATURES, VISION_TOKENS, VLA, VLAConfig
from agents.vla.positions import RopePositions


@pytest.fixture(scope="module")
def observations():
    env = gym.make("LoopDrive-v0", bank="smoke", camera_size=(56, 112))
    out = []
    for sid in ("signalized_intersection-000", "curve-000"):
        obs, _ = env.reset(seed=0, options={"scenario": sid})
        out.append(obs)
    return out


@pytest.fixture(scope="module")
def model():
    return VLA(VLAConfig()).eval()


def test_inference_shapes_and_determinism(model, observations):
    a = model.act_batch(observations, reasoning=True, generator=torch.Generator().manual_seed(0))
    b = model.act_batch(observations, reasoning=True, generator=torch.Generator().manual_seed(0))
    assert len(a) == 2 and a[0]["trajectory"].shape == (64, 3) and a[0]["trajectory"].dtype == np.float32
    assert isinstance(a[0]["reasoning"], str)
    for x, y in zip(a, b):
        assert np.array_equal(x["trajectory"], y["trajectory"]) and x["reasoning"] == y["reasoning"]
    traj_only = model.act_batch(observations[:1], reasoning=False, generator=torch.Generator().manual_seed(0))
    assert traj_only[0]["reasoning"] is None and np.isfinite(traj_only[0]["trajectory"]).all()


def test_save_load_round_trip_gives_identical_outputs(model, observations, tmp_path):
    model.save_pretrained(tmp_path / "vla")
    files = {p.name for p in (tmp_path / "vla").rglob("*")}
    assert {"action_expert.safetensors", "model.safetensors", "vla_config.json", "tokenizer.json"} <= files
    assert not any(f.endswith((".bin", ".pt", ".pkl")) for f in files)
    again = VLA.from_pretrained(tmp_path / "vla")
    g = lambda: torch.Generator().manual_seed(4)  # noqa: E731
    a = model.act_batch(observations, generator=g())
    b = again.act_batch(observations, generator=g())
    for x, y in zip(a, b):
        assert np.array_equal(x["trajectory"], y["trajectory"]) and x["reasoning"] == y["reasoning"]
    agent = load_agent(f"vla:{tmp_path / 'vla'}")
    agent.reset({})
    out = agent.act(observations[0])
    assert out.trajectory.shape == (64, 3)
    with pytest.raises(ValueError, match="not a saved VLA"):
        load_agent(f"vla:{tmp_path}")


def test_flow_sde_hooks_ratio_is_one(model, observations):
    traj, chain, mask, logp = model.sample_with_log_prob(observations, generator=torch.Generator().manual_seed(1))
    assert traj.shape == (2, 64, 3) and chain.shape[0] == model.config.flow_steps + 1
    again = model.chain_log_prob(observations, chain, mask)
    assert torch.allclose(torch.exp(again - logp), torch.ones(2), atol=1e-5)
    lp = model.reasoning_log_prob(observations, ["Red light ahead, so stop.", "A curve ahead, so slow down."])
    assert lp.shape == (2,) and (lp < 0).all()


def test_overfitting_eight_samples_drives_text_and_flow_losses_down():
    torch.manual_seed(0)
    model = VLA(VLAConfig())
    env = gym.make("LoopDrive-v0", bank="smoke", rig="front_only", n_frames=1, camera_size=(56, 112))
    obs = [env.reset(seed=0, options={"scenario": sid})[0] for sid in ("curve-000", "lead_brake-000") * 4]
    texts = ["Red light ahead, so stop.", "A curve ahead, so slow down."] * 4
    t = np.arange(1, 65) * 0.1
    trajs = torch.tensor(
        np.stack([np.stack([8 * t - 0.5 * t**2 * (i % 2), 0.02 * (i % 3) * t**2, 0.01 * i * t], 1) for i in range(8)]),
        dtype=torch.float32,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    first = {k: v.item() for k, v in model.losses(obs, texts, trajs, g).items()}
    fitted = action_space.from_trajectory(trajs, model.prepare(obs)["v0"], lateral=model.config.lateral_action)
    for _ in range(80):  # the targets' actions fitted once, as SFT does
        loss = model.losses(obs, texts, trajs, g, actions=fitted)
        opt.zero_grad()
        (loss["text"] + loss["flow"]).backward()
        opt.step()
    with torch.no_grad():  # flow losses are noisy (random t and noise): average a few draws
        draws = [model.losses(obs, texts, trajs, g) for _ in range(4)]
    last = {k: sum(d[k].item() for d in draws) / len(draws) for k in ("text", "flow")}
    assert last["text"] < 0.05 * first["text"]
    assert last["flow"] < 0.3 * first["flow"]


def test_patchify_matches_the_qwen_image_processor():
    from transformers import Qwen2VLImageProcessorPil

    from agents.vla.model import patchify

    proc = Qwen2VLImageProcessorPil(
        min_pixels=56 * 112, max_pixels=56 * 112, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    imgs = np.random.default_rng(0).integers(0, 255, (3, 56, 112, 3), dtype=np.uint8)
    ref = proc(images=list(imgs), return_tensors="pt")["pixel_values"].numpy()
    mean, std = (torch.tensor(v, dtype=torch.float32) for v in (proc.image_mean, proc.image_std))
    mine = patchify(torch.from_numpy(imgs), mean, std).numpy()
    assert mine.shape == ref.shape and np.abs(mine - ref).max() < 1e-5


def test_backbone_from_a_local_pretrained_folder(observations, tmp_path):
    """A stand-in for a real local Qwen2.5-VL checkpoint: its own tokenizer lacks the VLA's tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from agents.vla.tokenizer import CHAT, reasoning_corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        reasoning_corpus(),
        trainers.BpeTrainer(vocab_size=600, special_tokens=CHAT, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {name: fast.convert_tokens_to_ids(token) for name, token in VISION_TOKENS.items()}
    cfg = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(fast),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            bos_token_id=None,
            eos_token_id=fast.eos_token_id,
        ),
        vision_config=dict(
            depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, fullatt_block_indexes=[0]
        ),
        **ids,
    )
    local = tmp_path / "qwen-local"
    torch.manual_seed(0)  # the stand-in's weights do not depend on the tests run before
    Qwen2_5_VLForConditionalGeneration(cfg).save_pretrained(local)
    fast.save_pretrained(local)
    model = VLA(VLAConfig(backbone_path=str(local))).eval()
    assert model.tokenizer.convert_tokens_to_ids("<|cot_start|>") >= len(fast)  # the VLA tokens were added
    out = model.act_batch(observations[:1], generator=torch.Generator().manual_seed(0))
    assert out[0]["trajectory"].shape == (64, 3)
    model.save_pretrained(tmp_path / "vla")
    again = VLA.from_pretrained(tmp_path / "vla")
    b = again.act_batch(observations[:1], generator=torch.Generator().manual_seed(0))
    assert out[0]["reasoning"] == b[0]["reasoning"]
    # the generation cache of a reloaded foreign backbone differs in the 7th digit (its rotary set-up is
    # rebuilt from the saved config); ten flow steps of an untrained head carry that to centimetres at 6 s
    batch = model.prepare(observations[:1])
    for (k1, v1), (k2, v2) in zip(model.encode(batch)[0], again.encode(again.prepare(observations[:1]))[0]):
        assert torch.allclose(k1, k2, atol=1e-4) and torch.allclose(v1, v2, atol=1e-4)
    np.testing.assert_allclose(out[0]["trajectory"], b[0]["trajectory"], rtol=1e-2, atol=5e-2)
    with pytest.raises(CheckpointError, match="not a local transformers model folder"):
        VLA(VLAConfig(backbone_path=str(tmp_path)))


def test_state_token_is_standardised_by_the_training_statistics(observations):
    from agents.vla.model import STATE_FEATURES, state_features

    raw = np.stack([state_features(o) for o in observations])
    model = VLA(VLAConfig())
    assert np.array_equal(model.state_inputs(observations), raw)  # no statistics: the fixed scales
    mean, std = np.linspace(-1, 1, STATE_FEATURES), np.linspace(0.5, 2, STATE_FEATURES)
    model.config.state_mean, model.config.state_std = mean.tolist(), std.tolist()
    assert np.allclose(model.prepare(observations)["state"].numpy(), (raw - mean) / std, atol=1e-6)


def test_several_flow_samples_equal_the_batch_repeated(model, observations):
    """k (time, noise) draws per sample from one VLM pass are the flow loss of the batch repeated k times."""
    reasoning = ["Keep lane.", "The road ahead is clear, so keep the current speed in my lane."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    with torch.no_grad():
        k = model.losses(observations, reasoning, target, torch.Generator().manual_seed(3), flow_samples=3)
        rep = [o for o in observations for _ in range(3)]
        one = model.losses(
            rep,
            [r for r in reasoning for _ in range(3)],
            target.repeat_interleave(3, 0),
            torch.Generator().manual_seed(3),
        )
    assert torch.allclose(k["flow"], one["flow"], atol=1e-5) and torch.allclose(k["text"], one["text"], atol=1e-5)


def test_actions_given_to_the_flow_loss_stand_in_for_fitting_the_trajectories(model, observations):
    reasoning = ["Keep lane.", "Stop."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    v0 = model.prepare(observations)["v0"]
    fitted = action_space.from_trajectory(target, v0, lateral=model.config.lateral_action)
    with torch.no_grad():
        own = model.losses(observations, reasoning, target, torch.Generator().manual_seed(3))
        given = model.losses(observations, reasoning, target, torch.Generator().manual_seed(3), actions=fitted)
        other = model.losses(observations, reasoning, target, torch.Generator().manual_seed(3), actions=fitted * 0.5)
    assert torch.equal(own["flow"], given["flow"]) and torch.equal(own["text"], given["text"])
    assert not torch.allclose(own["flow"], other["flow"])  # the actions given are what the head learns


def test_prompt_only_flow_draws_see_exactly_the_cache_of_a_plan_without_reasoning(model, observations):
    """Masking the reasoning's positions of the teacher-forced cache is the prompt's own cache (the
    context of a plan without reasoning); with no prompt-only share the loss is the full-context one."""
    reasoning = ["Stop.", "The road ahead is clear, so keep the current speed in my lane."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    c = model.config

    def reference(context_of: str, coins: bool) -> torch.Tensor:
        batch = model.prepare(observations, reasoning if context_of == "reasoning" else None)
        if context_of == "reasoning":
            out = model.backbone(**model._vlm_inputs(batch), use_cache=True)
            ctx, mask = [(layer.keys, layer.values) for layer in out.past_key_values.layers], batch["attention_mask"]
        else:
            ctx, mask = model.encode(batch)
        actions = action_space.from_trajectory(target, batch["v0"], lateral=c.lateral_action)
        x1 = action_space.normalise(actions, c.action_mean, c.action_std, c.lateral_action)
        g = torch.Generator().manual_seed(5)
        if coins:
            torch.rand(len(observations), generator=g)
        return flow_draw(model.expert, x1, ctx, mask, g, state=batch["state"]).loss

    with torch.no_grad():
        prompt_only = model.losses(observations, reasoning, target, torch.Generator().manual_seed(5), prompt_only=1.0)
        full = model.losses(observations, reasoning, target, torch.Generator().manual_seed(5))
        assert torch.allclose(prompt_only["flow"], reference("prompt", coins=True), atol=1e-5)
        assert not torch.allclose(prompt_only["flow"], reference("reasoning", coins=True), atol=1e-5)
        assert torch.allclose(full["flow"], reference("reasoning", coins=False), atol=1e-5)
        assert torch.allclose(prompt_only["text"], full["text"])


def test_unconditional_flow_draws_see_the_state_token_alone(model, observations):
    """A draw without the VLM's context is the expert with no context at all (the field context
    guidance compares against); its coin comes after the prompt-only one."""
    reasoning = ["Stop.", "The road ahead is clear, so keep the current speed in my lane."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    c = model.config
    with torch.no_grad():
        blind = model.losses(observations, reasoning, target, torch.Generator().manual_seed(5), unconditional=1.0)
        batch = model.prepare(observations)
        actions = action_space.from_trajectory(target, batch["v0"], lateral=c.lateral_action)
        x1 = action_space.normalise(actions, c.action_mean, c.action_std, c.lateral_action)
        g = torch.Generator().manual_seed(5)
        torch.rand(len(observations), generator=g)  # the unconditional coins
        state_only = flow_draw(model.expert, x1, None, None, g, state=batch["state"]).loss
        assert torch.allclose(blind["flow"], state_only, atol=1e-6)
        full = model.losses(observations, reasoning, target, torch.Generator().manual_seed(5))
        assert not torch.allclose(full["flow"], state_only, atol=1e-4)
        ctx, mask = model.encode(batch)  # a fully masked context is no context
        x, t = torch.randn(2, 64, 2, generator=torch.Generator().manual_seed(1)), torch.full((2,), 0.3)
        none = model.expert(x, t, None, None, batch["state"])
        torch.testing.assert_close(model.expert(x, t, ctx, torch.zeros_like(mask), batch["state"]), none)


def test_motion_dropout_hides_the_ego_motion_from_the_state_token_and_nothing_else(model, observations):
    """A draw with the ego motion dropped is the expert given a state token whose speed, acceleration,
    yaw rate and steering read as the data's mean (0, standardised), the route and command as they
    are, and the full context; its coin comes after the prompt-only and unconditional ones."""
    reasoning = ["Stop.", "The road ahead is clear, so keep the current speed in my lane."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    c = model.config
    with torch.no_grad():
        hidden = model.losses(observations, reasoning, target, torch.Generator().manual_seed(5), motion_dropout=1.0)
        batch = model.prepare(observations, reasoning)
        out = model.backbone(**model._vlm_inputs(batch), use_cache=True)
        ctx = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        actions = action_space.from_trajectory(target, batch["v0"], lateral=c.lateral_action)
        x1 = action_space.normalise(actions, c.action_mean, c.action_std, c.lateral_action)
        state = batch["state"].clone()
        assert state[:, :4].abs().sum() > 0 and state[:, 4:].abs().sum() > 0
        state[:, :4] = 0.0
        g = torch.Generator().manual_seed(5)
        torch.rand(len(observations), generator=g)  # the motion-dropout coins
        want = flow_draw(model.expert, x1, ctx, batch["attention_mask"], g, state=state).loss
        torch.testing.assert_close(hidden["flow"], want, atol=1e-6, rtol=0)
        g = torch.Generator().manual_seed(5)
        torch.rand(len(observations), generator=g)
        seen = flow_draw(model.expert, x1, ctx, batch["attention_mask"], g, state=batch["state"]).loss
        assert not torch.allclose(seen, hidden["flow"], atol=1e-4)  # the same draws with the motion shown


def test_context_guidance_moves_the_plan_along_what_the_context_adds(observations):
    """w = 1 is the plain plan bit for bit; w = 0 on a dimension is the state-only field there; in
    between, the guided velocity is v_s + w (v_c - v_s) per dimension. A head that never trained
    without the context refuses guidance."""
    with pytest.raises(ValueError, match="flow_unconditional > 0"):
        VLA(VLAConfig()).act_batch(observations, reasoning=False, noise_scale=0.0, guidance=2.0)
    model = VLA(VLAConfig(flow_unconditional=0.1)).eval()
    with pytest.raises(ValueError, match="one weight or one per action dimension"):
        model.act_batch(observations, reasoning=False, guidance=(1.0, 2.0, 3.0))
    plain = model.act_batch(observations, reasoning=False, noise_scale=0.0)
    same = model.act_batch(observations, reasoning=False, noise_scale=0.0, guidance=1.0)
    assert all(np.array_equal(a["trajectory"], b["trajectory"]) for a, b in zip(plain, same))
    with torch.no_grad():
        batch = model.prepare(observations)
        ctx, mask = model.encode(batch)
        x, t = torch.randn(2, 64, 2, generator=torch.Generator().manual_seed(2)), torch.full((2,), 0.4)
        v_c = model.expert(x, t, ctx, mask, batch["state"])
        v_s = model.expert(x, t, None, None, batch["state"])
        guided = guided_velocity(model.expert, x, t, ctx, mask, batch["state"], (2.0, 0.0))
        torch.testing.assert_close(guided[..., 0], 2 * v_c[..., 0] - v_s[..., 0])
        torch.testing.assert_close(guided[..., 1], v_s[..., 1])
        state_only = sample_ode(model.expert, 2, None, None, 10, None, state=batch["state"], noise_scale=0.0)
        guided_plan = sample_ode(
            model.expert, 2, ctx, mask, 10, None, state=batch["state"], noise_scale=0.0, guidance=0.0
        )
        torch.testing.assert_close(guided_plan, state_only)


def test_a_vla_saved_before_a_new_expert_option_loads_as_it_was_saved(observations, tmp_path):
    """Options added to the action expert later (here the state on every token) default to off for
    folders saved without them, so an older checkpoint keeps its outputs."""
    import json

    from agents.vla.flow import ExpertConfig

    old = VLA(
        VLAConfig(),
        expert_config=ExpertConfig(**{**VLA(VLAConfig()).expert.config.to_dict(), "state_on_every_token": False}),
    ).eval()
    old.save_pretrained(tmp_path / "old")
    cfg_file = tmp_path / "old" / "vla_config.json"
    raw = json.loads(cfg_file.read_text())
    del raw["expert"]["state_on_every_token"]
    cfg_file.write_text(json.dumps(raw))
    loaded = VLA.from_pretrained(tmp_path / "old")
    assert loaded.expert.config.state_on_every_token is False
    assert VLA(VLAConfig()).expert.config.state_on_every_token is True  # new VLAs condition every token
    a = old.act_batch(observations, reasoning=False, generator=torch.Generator().manual_seed(0))
    b = loaded.act_batch(observations, reasoning=False, generator=torch.Generator().manual_seed(0))
    assert all(np.array_equal(x["trajectory"], y["trajectory"]) for x, y in zip(a, b))


def test_a_lateral_acceleration_head_learns_reloads_and_plans_as_it_learnt(observations, tmp_path):
    """``lateral_action = "lateral_acceleration"``: the flow targets are the lateral accelerations of the
    trajectories, the option is saved with the model, and its plans integrate them back."""
    from agents.vla import action_space

    model = VLA(VLAConfig(lateral_action="lateral_acceleration")).eval()
    t = torch.arange(1, 65) * 0.1
    trajs = torch.stack([torch.stack([10 * t, 0.1 * t**2, 0.02 * t], 1)] * 2)
    v0 = torch.tensor([10.0, 10.0])  # the trajectories' own speed
    curvature = VLA(VLAConfig()).eval()
    for m in (model, curvature):
        g = torch.Generator().manual_seed(0)
        assert torch.isfinite(m.losses(observations, ["", ""], trajs, g)["flow"])
    lateral = action_space.from_trajectory(trajs, v0, lateral="lateral_acceleration")
    assert torch.allclose(
        model.actions_to_trajectory(action_space.normalise(lateral, lateral="lateral_acceleration"), v0),
        trajs,
        atol=0.05,
    )
    assert not torch.allclose(curvature.actions_to_trajectory(action_space.normalise(lateral), v0), trajs, atol=0.5)
    model.save_pretrained(tmp_path / "vla")
    again = VLA.from_pretrained(tmp_path / "vla")
    assert again.config.lateral_action == "lateral_acceleration"
    a = model.act_batch(observations, reasoning=False, generator=torch.Generator().manual_seed(0))
    b = again.act_batch(observations, reasoning=False, generator=torch.Generator().manual_seed(0))
    assert all(np.array_equal(x["trajectory"], y["trajectory"]) for x, y in zip(a, b))


def test_alpamayo_inputs_hide_the_route(observations):
    """With ``route_inputs = False`` the model's plan does not change when the route does (its tokens,
    its offsets, the errors to it); with the route it does, so the test can fail. ``command_input``
    hides the navigation command the same way."""
    obs = observations[1]
    moved = dict(obs)
    moved["route"] = np.asarray(obs["route"]) + np.array([0.0, 3.0], np.float32)  # the route 3 m to the left
    state = np.array(obs["ego_state"], np.float32)
    state[5:7] = [1.5, -0.2]  # lateral and heading error to the route
    moved["ego_state"] = state
    moved["command"] = (int(obs["command"]) + 1) % 4

    def plans(config: VLAConfig) -> list[np.ndarray]:
        torch.manual_seed(0)
        model = VLA(config).eval()
        g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
        return [model.act_batch([o], reasoning=False, generator=g())[0]["trajectory"] for o in (obs, moved)]

    hidden = plans(VLAConfig(route_inputs=False, command_input=False))
    assert np.array_equal(hidden[0], hidden[1])
    with_route = plans(VLAConfig(command_input=False))
    assert not np.allclose(with_route[0], with_route[1])
    with_command = plans(VLAConfig(route_inputs=False))
    assert not np.allclose(with_command[0], with_command[1])


@pytest.mark.parametrize("backbone", ["qwen2_5_vl", "qwen3_vl"])
def test_rotary_positions_from_the_layout_cache_are_transformers_own(backbone, observations):
    """The VLM's position ids come from a cache per row layout (agents/vla/positions.py): they equal
    what transformers' get_rope_index computes for the whole batch, with rows padded differently, on a
    cache hit too, and the forward pass is bit-identical with and without them."""
    model = VLA(VLAConfig(backbone=backbone)).eval()
    texts = ["", "go", "There is a lead vehicle ahead, so slow down.", "The road curves ahead, so keep the lane."]
    inputs = model._vlm_inputs(model.prepare(observations * 2, texts))
    layout = (inputs["input_ids"], inputs["mm_token_type_ids"], inputs["attention_mask"], inputs["image_grid_thw"])
    assert len(set(inputs["attention_mask"].sum(1).tolist())) == 4  # four paddings: four layouts
    expected, _ = model.backbone.model.get_rope_index(
        inputs["input_ids"],
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs["image_grid_thw"],
        attention_mask=inputs["attention_mask"],
    )
    positions = RopePositions(model.backbone.model)
    assert torch.equal(positions(*layout), expected)
    assert len(positions._rows) == 4
    assert torch.equal(positions(*layout), expected) and len(positions._rows) == 4  # from the cache
    plans = model._vlm_inputs(model.prepare(observations * 3))  # one layout: every decision's prompt
    positions(plans["input_ids"], plans["mm_token_type_ids"], plans["attention_mask"], plans["image_grid_thw"])
    assert len(positions._rows) == 5
    with torch.no_grad():
        assert torch.equal(model.backbone(**inputs).logits, model._vlm_forward(inputs).logits)


def test_the_perception_probe_pools_image_tokens_of_the_last_layers_input_and_trains_only_the_vlm(observations):
    """Each target is an attention pool over the image tokens alone (text tokens do not move it), read
    from the hidden states the VLM's last layer computes its keys and values from; its gradient reaches
    the vision encoder and the language layers, never the action expert."""
    model = VLA(VLAConfig())
    model.add_perception_probe(3)
    reasoning = ["Stop.", "The road ahead is clear, so keep the current speed in my lane."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    wanted = torch.tensor([[0.2, 1.0, 0.0], [0.9, -0.3, 1.0]])
    losses = model.losses(observations, reasoning, target, torch.Generator().manual_seed(0), perception=wanted)
    batch = model.prepare(observations, reasoning)
    with torch.no_grad():
        hidden = model.backbone(**model._vlm_inputs(batch), output_hidden_states=True).hidden_states[-2]
        images = batch["mm_token_type_ids"].bool()
        probe = model.perception_probe
        seen = []
        for row in range(len(observations)):
            h = hidden[row, images[row]]  # [image tokens, H]
            w = torch.softmax(probe.score(h), 0)
            seen.append((w * probe.value(h)).sum(0))
        torch.testing.assert_close(losses["perception"], ((torch.stack(seen) - wanted) ** 2).mean())
        weighted = model.losses(
            observations, reasoning, target, perception=wanted, perception_weights=torch.tensor([1.0, 4.0])
        )["perception"]  # each sample's mean squared error times its weight, averaged over the batch
        by_sample = ((torch.stack(seen) - wanted) ** 2).mean(-1)
        torch.testing.assert_close(weighted, (by_sample[0] + 4.0 * by_sample[1]) / 2)
        moved = hidden.clone()
        moved[~images] += 5.0  # the text tokens' states alone
        torch.testing.assert_close(probe(moved, images), probe(hidden, images))
    model.zero_grad()
    losses["perception"].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None or not g.any() for n, g in grads.items() if n.startswith("expert."))
    assert any(g is not None and g.any() for n, g in grads.items() if n.startswith("backbone.model.visual."))
    assert grads["perception_probe.score.weight"].any()
    assert set(model.trainable_names("vlm")) >= {"perception_probe.score.weight", "perception_probe.value.bias"}
    assert not any(n.startswith("perception_probe.") for n in model.trainable_names("expert"))


def test_a_vla_with_a_perception_probe_saves_and_loads_it_and_refuses_a_missing_one(observations, tmp_path):
    model = VLA(VLAConfig())
    model.add_perception_probe(8)
    with pytest.raises(ValueError, match="has 8 targets, the data 5"):
        model.add_perception_probe(5)
    model.save_pretrained(tmp_path / "vla")
    again = VLA.from_pretrained(tmp_path / "vla")
    assert again.config.perception_targets == 8
    for (name, a), (_, b) in zip(
        model.perception_probe.state_dict().items(), again.perception_probe.state_dict().items()
    ):
        assert torch.equal(a, b), name
    without = VLA(VLAConfig())
    with pytest.raises(ValueError, match="no perception probe"):
        without.losses(observations, ["Stop."] * 2, torch.zeros(2, 64, 3), perception=torch.zeros(2, 8))
    (tmp_path / "vla" / "perception_probe.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"perception_probe\.safetensors: missing"):
        VLA.from_pretrained(tmp_path / "vla")


def test_perception_in_state_gives_the_state_token_what_the_probe_reads_in_every_pass(observations, tmp_path):
    """With ``perception_in_state`` the action expert's state token is the ego features and the probe's
    reading of the image tokens, the same in the plan, the RL log-probs (with and without sampled
    reasoning) and a reloaded copy; the flow loss trains the probe through it."""
    with pytest.raises(ValueError, match=r"perception_in_state: .* there is none"):
        VLA(VLAConfig(perception_in_state=True))
    model = VLA(VLAConfig(perception_targets=3, perception_in_state=True)).eval()
    assert model.expert.config.state_dim == STATE_FEATURES + 3
    batch = model.prepare(observations)
    model.encode(batch)
    with torch.no_grad():
        hidden = model.backbone(**model._vlm_inputs(batch), output_hidden_states=True).hidden_states[-2]
        read = model.perception_probe(hidden, batch["mm_token_type_ids"].bool())
    torch.testing.assert_close(model.planning_state(batch), torch.cat([batch["state"], read], 1))
    _plans_alike_in_every_pass_and_after_a_reload(model, observations, tmp_path)
    batch = model.prepare(observations)
    model.reason(batch)
    torch.testing.assert_close(batch["perceived"], read, atol=1e-5, rtol=0)
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    model.train().zero_grad()
    model.losses(observations, ["Stop."] * 2, target, torch.Generator().manual_seed(0))["flow"].backward()
    assert model.perception_probe.value.weight.grad.any()


def test_perception_truth_gives_the_flow_draws_the_targets_where_the_probes_reading_goes(observations):
    """With ``perception_truth = 1`` every flow draw's state token carries the given targets: the flow loss
    is the one of a probe that reads them exactly, whatever the probe reads, and none of the flow's
    gradient reaches the probe. A state token without the probe's reading is refused."""
    model = VLA(VLAConfig(perception_targets=3, perception_in_state=True)).train()
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    truth = torch.tensor([[0.2, 0.5, 1.0], [1.0, 0.0, 0.0]])

    def flow(share: float) -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        return model.losses(
            observations, ["Stop."] * 2, target, g, flow_samples=2, perception=truth, perception_truth=share
        )["flow"]

    given = flow(1.0)
    model.zero_grad()
    given.backward()
    assert model.perception_probe.value.weight.grad is None or not model.perception_probe.value.weight.grad.any()
    with torch.no_grad():
        model.perception_probe.value.bias += 0.3  # the probe reads something else
    torch.testing.assert_close(flow(1.0), given)
    assert not torch.allclose(flow(1e-9), given)  # the same coins drawn, the probe's reading given
    model.perception_probe.forward = lambda hidden, images: truth  # a probe that reads the targets exactly
    torch.testing.assert_close(flow(1e-9), given)
    without = VLA(VLAConfig(perception_targets=3))
    with pytest.raises(ValueError, match="perception_truth: needs perception targets and a state token"):
        without.losses(observations, ["Stop."] * 2, target, perception=truth, perception_truth=0.5)


def test_the_manoeuvre_head_chooses_from_image_tokens_and_ego_features_and_trains_only_the_vlm(observations):
    """Its logits are an attention pool over the image tokens (text tokens do not move them) and the state
    token's ego features, classified; cross-entropy against the data's classes; its gradient reaches the
    vision encoder, never the action expert."""
    model = VLA(VLAConfig())
    model.add_manoeuvre_head(3)
    with pytest.raises(ValueError, match="has 3 classes, the data 4"):
        model.add_manoeuvre_head(4)
    reasoning = ["Stop.", "The road ahead is clear, so keep the current speed in my lane."]
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    wanted = torch.tensor([1, 0])
    losses = model.losses(observations, reasoning, target, torch.Generator().manual_seed(0), manoeuvres=wanted)
    batch = model.prepare(observations, reasoning)
    head = model.manoeuvre_head
    with torch.no_grad():
        hidden = model.backbone(**model._vlm_inputs(batch), output_hidden_states=True).hidden_states[-2]
        images = batch["mm_token_type_ids"].bool()
        logits = []
        for row in range(len(observations)):
            h = hidden[row, images[row]]  # [image tokens, H]
            pooled = head.norm(torch.softmax(head.score(h), 0).T @ h)  # [queries, H]
            logits.append(head.classify(torch.cat([pooled.flatten(), batch["state"][row]])))
        torch.testing.assert_close(losses["manoeuvre"], F.cross_entropy(torch.stack(logits), wanted))
        moved = hidden.clone()
        moved[~images] += 5.0  # the text tokens' states alone
        torch.testing.assert_close(head(moved, images, batch["state"]), head(hidden, images, batch["state"]))
        other = batch["state"].clone()
        other[:, 0] += 1.0  # the speed
        assert not torch.allclose(head(hidden, images, other), head(hidden, images, batch["state"]))
    model.zero_grad()
    losses["manoeuvre"].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None or not g.any() for n, g in grads.items() if n.startswith("expert."))
    assert any(g is not None and g.any() for n, g in grads.items() if n.startswith("backbone.model.visual."))
    assert set(model.trainable_names("vlm")) >= {"manoeuvre_head.score.weight", "manoeuvre_head.classify.2.bias"}
    assert not any(n.startswith("manoeuvre_head.") for n in model.trainable_names("expert"))
    without = VLA(VLAConfig())
    with pytest.raises(ValueError, match="no manoeuvre head"):
        without.losses(observations, reasoning, target, manoeuvres=wanted)


def test_manoeuvre_in_state_plans_the_datas_manoeuvre_in_training_and_the_heads_choice_when_planning(
    observations, tmp_path
):
    """The state token ends in a one-hot: in the flow loss the data's manoeuvre (teacher forcing, so the
    head's logits get no gradient from it), when planning and in the RL log-probs the head's argmax;
    a reloaded copy plans the same, and a missing head file is refused."""
    with pytest.raises(ValueError, match=r"manoeuvre_in_state: .* there is no head"):
        VLA(VLAConfig(manoeuvre_in_state=True))
    model = VLA(VLAConfig(manoeuvres=3, manoeuvre_in_state=True)).eval()
    assert model.expert.config.state_dim == STATE_FEATURES + 3
    batch = model.prepare(observations)
    model.encode(batch)
    chosen = batch["manoeuvre_logits"].argmax(1)
    expected = torch.cat([batch["state"], F.one_hot(chosen, 3).float()], 1)
    torch.testing.assert_close(model.planning_state(batch), expected)
    _plans_alike_in_every_pass_and_after_a_reload(model, observations, tmp_path)
    batch = model.prepare(observations)
    model.reason(batch)
    assert torch.equal(batch["manoeuvre_logits"].argmax(1), chosen)
    # another manoeuvre, another plan: the head is given the one-hot on every token
    given = model.prepare(observations)
    ctx, mask = model.encode(given)
    plans = []
    for m in (0, 1):
        given["manoeuvre"] = torch.full((2,), m)
        plans.append(
            sample_ode(
                model.expert,
                2,
                ctx,
                mask,
                4,
                torch.Generator().manual_seed(3),
                model.device,
                state=model.planning_state(given),
            )
        )
    assert not torch.allclose(plans[0], plans[1])
    target = torch.from_numpy(np.stack([np.cumsum(np.full((64, 3), [0.5, 0.0, 0.0], np.float32), 0)] * 2))
    with pytest.raises(ValueError, match="pass manoeuvres"):
        model.losses(observations, ["Stop."] * 2, target)
    model.train().zero_grad()
    losses = model.losses(
        observations, ["Stop."] * 2, target, torch.Generator().manual_seed(0), manoeuvres=torch.tensor([2, 0])
    )
    losses["flow"].backward()
    assert model.expert.state_embed[0].weight.grad[:, -3:].any()  # the one-hot reaches the state token
    grad = model.manoeuvre_head.classify[2].weight.grad
    assert grad is None or not grad.any()  # teacher forcing: the choice is not in it
    (tmp_path / "vla" / "manoeuvre_head.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"manoeuvre_head\.safetensors: missing"):
        VLA.from_pretrained(tmp_path / "vla")


def test_observations_with_other_frame_counts_than_the_model_learnt_from_are_refused(observations):
    """Four frames per camera are four times the image tokens: a model trained on one must say so, not plan
    from a prompt it never saw (a custom agent wrapping it gets the suite's default set-up, four frames)."""
    from agents.base import ObservationSetup

    model = VLA(VLAConfig()).eval()
    frames = np.asarray(observations[0]["cameras"]).shape[1]
    model.prepare(observations)  # no recorded set-up: any frame count
    setup = ObservationSetup(rig="alpamayo4", camera_size=(56, 112), n_frames=frames, decision_every=5)
    model.config.observation = setup
    model.prepare(observations)
    model.config.observation = setup.model_copy(update={"n_frames": frames + 1})
    with pytest.raises(ValueError, match=rf"{frames} frame\(s\) per camera: this VLA learnt from {frames + 1}"):
        model.prepare(observations)


def test_manoeuvre_origin_starts_the_flow_from_the_planned_manoeuvres_mean_plan(observations, tmp_path):
    """The flow's source is centred on the planned manoeuvre's origin: the data's in the flow loss (its target
    velocity is the data minus that shifted noise), the head's choice when sampling (a chain at noise 0
    starts there), alike in every pass and after a reload; without a head or origins it is refused."""
    with pytest.raises(ValueError, match=r"manoeuvre_origin: .* there is no head"):
        VLA(VLAConfig(manoeuvre_origin=True))
    model = VLA(VLAConfig(manoeuvres=3, manoeuvre_origin=True)).eval()
    batch = model.prepare(observations)
    model.encode(batch)
    with pytest.raises(ValueError, match="no manoeuvre_origins"):
        model.flow_origin(batch)
    origins = torch.randn(3, 64, 2, generator=torch.Generator().manual_seed(4))
    model.config.manoeuvre_origins = origins.tolist()
    chosen = batch["manoeuvre_logits"].argmax(1)
    torch.testing.assert_close(model.flow_origin(batch), origins[chosen])
    _, chain, _, _ = model.sample_with_log_prob(observations, generator=torch.Generator().manual_seed(1), init_noise=0)
    torch.testing.assert_close(chain[0], origins[chosen])
    _plans_alike_in_every_pass_and_after_a_reload(model, observations, tmp_path)
    # the loss: the expert is asked for x1 - (origin + eps) at x_t = t x1 + (1 - t) (origin + eps)
    seen = {}

    def expert(x_t, t, *args, **kwargs):
        seen["x_t"], seen["t"] = x_t, t
        return torch.zeros_like(x_t)

    x1, origin = torch.randn(2, 64, 2), origins[[2, 0]]
    loss = flow_draw(expert, x1, generator=torch.Generator().manual_seed(5), origin=origin).loss
    g = torch.Generator().manual_seed(5)
    t = 0.001 + 0.998 * torch.rand(2, generator=g) ** (1 / 1.5)
    source = torch.randn(x1.shape, generator=g) + origin
    torch.testing.assert_close(seen["x_t"], t[:, None, None] * x1 + (1 - t[:, None, None]) * source)
    torch.testing.assert_close(loss, (x1 - source).pow(2).mean())


def test_route_origin_adds_the_routes_own_lateral_actions_to_the_manoeuvres_origin(observations):
    """With ``route_origin`` a plan's flow starts from its manoeuvre's origin (there: the mean residual) plus
    the route ahead's lateral actions in the head's units, in the lateral channel only; a chain at noise
    0 starts there; an observation without its route is refused by index."""
    from agents.vla.route_prior import route_origin

    config = VLAConfig(
        manoeuvres=3, manoeuvre_origin=True, route_origin=True, lateral_action="lateral_acceleration"
    ).model_copy(update={"action_mean": (0.1, 0.0), "action_std": (1.2, 0.9)})
    model = VLA(config).eval()
    origins = torch.randn(3, 64, 2, generator=torch.Generator().manual_seed(4))
    model.config.manoeuvre_origins = origins.tolist()
    batch = model.prepare(observations)
    model.encode(batch)
    routes = np.stack([np.asarray(o["route"], np.float64) for o in observations])
    route = torch.from_numpy(route_origin(routes, batch["v0"].numpy(), "lateral_acceleration", (1.2, 0.9)))
    assert route.abs().max() > 0.1  # the smoke bank's curve bends within the plan
    torch.testing.assert_close(batch["route_origin"], route)
    chosen = batch["manoeuvre_logits"].argmax(1)
    expected = origins[chosen] + torch.stack([torch.zeros_like(route), route], -1)
    torch.testing.assert_close(model.flow_origin(batch), expected)
    _, chain, _, _ = model.sample_with_log_prob(observations, generator=torch.Generator().manual_seed(1), init_noise=0)
    torch.testing.assert_close(chain[0], expected)
    with pytest.raises(ValueError, match=r"route_origin: observation\(s\) \[1\] have no 'route'"):
        model.prepare([observations[0], {k: v for k, v in observations[1].items() if k != "route"}])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_pixels_are_patched_there_as_on_the_cpu_and_the_route_origin_starts_its_flows(observations):
    """The uint8 pixels cross to the GPU and are patched there as on the CPU (to a float32 rounding: CUDA
    divides by a number as a multiplication by its reciprocal); the route's origin is computed as on the
    CPU and a chain at noise 0 starts there. (Plans are not compared: cuDNN's TF32 convolutions, the vision
    tower's patch embedding, move an untrained model's plan by centimetres.)"""
    import copy

    config = VLAConfig(manoeuvres=3, manoeuvre_origin=True, route_origin=True, lateral_action="lateral_acceleration")
    cpu = VLA(config).eval()
    cpu.config.manoeuvre_origins = torch.randn(3, 64, 2, generator=torch.Generator().manual_seed(4)).tolist()
    gpu = copy.deepcopy(cpu).to("cuda")
    on_cpu, on_gpu = cpu.prepare(observations), gpu.prepare(observations)
    assert on_gpu["pixel_values"].is_cuda and on_gpu["route_origin"].is_cuda
    torch.testing.assert_close(on_gpu["pixel_values"].cpu(), on_cpu["pixel_values"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(on_gpu["route_origin"].cpu(), on_cpu["route_origin"])
    gpu.encode(on_gpu)
    expected = gpu.flow_origin(on_gpu)
    assert expected.is_cuda
    _, chain, _, _ = gpu.sample_with_log_prob(
        observations, generator=torch.Generator("cuda").manual_seed(1), init_noise=0
    )
    torch.testing.assert_close(chain[0].to(expected.device), expected)


def test_a_held_lane_change_is_planned_for_its_decisions_and_each_episode_starts_free(observations, tmp_path):
    """``ManoeuvreHold(3)`` plans a change the head chooses at three decisions in a row (a new change takes
    over); the agent's ``hold`` plans exactly what the model plans given the held class, and a new
    episode holds nothing."""
    from agents.vla.agent import VLAAgent
    from agents.vla.manoeuvre import ManoeuvreHold

    hold = ManoeuvreHold(3)
    assert [hold(c) for c in (0, 1, 0, 0, 0, 2, 0, 1, 0, 0, 0)] == [0, 1, 1, 1, 0, 2, 2, 1, 1, 1, 0]
    VLA(VLAConfig(manoeuvres=3, manoeuvre_in_state=True)).save_pretrained(tmp_path / "vla")
    agent = VLAAgent(str(tmp_path / "vla"), reasoning=False, noise_scale=0.0, hold=3)
    model = agent.model

    def given(k):
        def always(chosen):
            return torch.full_like(chosen, k)

        return model.act_batch(observations[:1], reasoning=False, noise_scale=0.0, choose=always)[0]["trajectory"]

    left, keep = given(1), given(0)
    assert not np.array_equal(left, keep)
    head_says = iter([1, 0, 0, 0, 0, 0])  # change_left once, then keep_lane
    model.manoeuvre_head.forward = lambda *inputs: torch.eye(3)[[next(head_says)]] * 10.0
    agent.reset({"seed": 0})
    for i in range(5):
        np.testing.assert_array_equal(agent.act_batch(observations[:1])[0].trajectory, left if i < 3 else keep)
    agent.reset({"seed": 0})  # a new episode holds nothing from the last
    head_says = iter([1, 0])
    agent.act_batch(observations[:1])
    agent.reset({"seed": 0})
    np.testing.assert_array_equal(agent.act_batch(observations[:1])[0].trajectory, keep)
    with pytest.raises(ValueError, match="holds one episode's manoeuvre; 2 observations"):
        agent.act_batch(observations)


def test_an_oracle_perception_plans_what_the_model_plans_given_the_worlds_answers(observations, tmp_path):
    """``perception=oracle`` gives the state token the privileged world's ``perception_targets`` at each
    decision in place of the probe's reading: the agent plans exactly what the model plans given them,
    not what it plans from its probe, and follows the world as it moves. A plan that reads no probe,
    a batch of episodes and an agent without the world are refused, saying why."""
    from agents.vla.agent import VLAAgent
    from agents.vla.perception import PERCEPTION_TARGETS, perception_targets
    from rewards.scene import scene_facts

    VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS), perception_in_state=True)).save_pretrained(
        tmp_path / "vla"
    )
    agent = VLAAgent(str(tmp_path / "vla"), reasoning=False, noise_scale=0.0, perception="oracle")
    model = agent.model
    env = gym.make("LoopDrive-v0", bank="smoke", camera_size=(56, 112))
    obs, _ = env.reset(seed=0, options={"scenario": "lead_brake-000"})
    world = env.unwrapped.world
    agent.reset({"seed": 0, "world": world})
    truths = []
    for _ in range(3):
        truths.append(perception_targets(scene_facts(world))[None])
        plan = agent.act_batch([obs])[0].trajectory
        given = model.act_batch([obs], reasoning=False, noise_scale=0.0, perceive=lambda read: truths[-1])
        given = given[0]["trajectory"]
        np.testing.assert_array_equal(plan, given)
        probe = model.act_batch([obs], reasoning=False, noise_scale=0.0)[0]["trajectory"]
        assert not np.array_equal(plan, probe)
        obs, *_ = env.step(plan)
    assert truths[0][0, PERCEPTION_TARGETS.index("lead_gap")] == pytest.approx(16.7 / 60, abs=0.01)  # the lead car
    assert not np.array_equal(truths[0], truths[-1])  # read from the world as it moves
    with pytest.raises(ValueError, match="reads one episode's world; 2 observations"):
        agent.act_batch(observations)
    agent.reset({"seed": 0})
    with pytest.raises(ValueError, match=r"reset the agent with episode_info\['world'\]"):
        agent.act_batch([obs])
    with pytest.raises(ValueError, match=r"perceive: shape \(1, 3\), this VLA's probe reads \(1, 8\)"):
        model.act_batch([obs], reasoning=False, perceive=lambda read: np.zeros((1, 3), np.float32))
    for bad in ("eyes", "lead_gap,eyes", "lead_gap,lead_gap"):
        with pytest.raises(ValueError, match="perception must be one of"):
            VLAAgent(str(tmp_path / "vla"), perception=bad)
    VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS))).save_pretrained(tmp_path / "unread")
    with pytest.raises(ValueError, match="plan reads no perception probe"):
        VLAAgent(str(tmp_path / "unread"), perception="oracle")
    env.close()


def test_a_partial_oracle_gives_the_named_targets_from_the_world_and_keeps_the_probes_reading_of_the_rest(tmp_path):
    """``perception=lead_gap,lead_closing_speed`` plans exactly what the model plans given a state token
    that holds the world's gap and closing speed and the probe's own reading of every other target."""
    from agents.vla.agent import VLAAgent
    from agents.vla.perception import PERCEPTION_TARGETS, perception_targets
    from rewards.scene import scene_facts

    VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS), perception_in_state=True)).save_pretrained(
        tmp_path / "vla"
    )
    named = ("lead_gap", "lead_closing_speed")
    agent = VLAAgent(str(tmp_path / "vla"), reasoning=False, noise_scale=0.0, perception=",".join(named))
    assert agent.from_world == named
    model = agent.model
    env = gym.make("LoopDrive-v0", bank="smoke", camera_size=(56, 112))
    obs, _ = env.reset(seed=0, options={"scenario": "lead_brake-000"})
    agent.reset({"seed": 0, "world": env.unwrapped.world})
    mixed = model.read_perception([obs])
    truth = perception_targets(scene_facts(env.unwrapped.world))
    columns = [PERCEPTION_TARGETS.index(name) for name in named]
    assert not np.allclose(mixed[0, columns], truth[columns])  # the untrained probe misreads them
    mixed[0, columns] = truth[columns]
    plan = agent.act_batch([obs])[0].trajectory
    given = model.act_batch([obs], reasoning=False, noise_scale=0.0, perceive=lambda read: mixed)[0]["trajectory"]
    np.testing.assert_allclose(plan, given, rtol=0, atol=1e-6)
    oracle = model.act_batch([obs], reasoning=False, noise_scale=0.0, perceive=lambda read: truth[None])
    oracle = oracle[0]["trajectory"]
    assert not np.allclose(plan, oracle, atol=1e-4)  # the other targets are the probe's
    env.close()


def test_a_tracked_closing_speed_is_the_fall_of_the_gap_given_since_the_last_decision(tmp_path):
    """``closing=tracked`` (here on the world's gap, ``perception=lead_gap``) plans exactly what the model
    plans given the probe's reading with the world's gap and, from the second decision on, the gap's fall
    over the decision period as the closing speed; that reading follows the world's closing speed (the
    expert drives behind the car ahead). It is refused beside the world's closing speed, for a plan that
    reads no probe, and without the period."""
    from agents.expert import Expert
    from agents.vla.agent import VLAAgent
    from agents.vla.perception import CLOSING_SCALE_MPS, LEAD_RANGE_M, PERCEPTION_TARGETS, perception_targets
    from rewards.scene import scene_facts

    VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS), perception_in_state=True)).save_pretrained(
        tmp_path / "vla"
    )
    agent = VLAAgent(str(tmp_path / "vla"), reasoning=False, noise_scale=0.0, perception="lead_gap", closing="tracked")
    model = agent.model
    gap, closing = PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")
    env = gym.make("LoopDrive-v0", bank="smoke", camera_size=(56, 112))
    obs, _ = env.reset(seed=0, options={"scenario": "lead_brake-000"})
    world, expert = env.unwrapped.world, Expert()
    assert env.unwrapped.decision_s == pytest.approx(0.5)
    agent.reset({"seed": 0, "world": world, "decision_s": env.unwrapped.decision_s})
    expert.reset({"scenario": env.unwrapped.scenario, "world": world, "seed": 0})
    last_gap, tracked = None, []
    for _ in range(5):
        truth = perception_targets(scene_facts(world))
        now = float(truth[gap]) * LEAD_RANGE_M
        assert now < 30.0  # the car ahead, followed by the expert

        def expected(read: np.ndarray, truth=truth, now=now, last_gap=last_gap) -> np.ndarray:
            given = read.copy()
            given[0, gap] = truth[gap]
            if last_gap is not None:
                given[0, closing] = (last_gap - now) / 0.5 / CLOSING_SCALE_MPS
            return given

        plan = agent.act_batch([obs])[0].trajectory
        given = model.act_batch([obs], reasoning=False, noise_scale=0.0, perceive=expected)[0]["trajectory"]
        np.testing.assert_allclose(plan, given, rtol=0, atol=1e-6)
        if last_gap is not None:
            tracked.append(((last_gap - now) / 0.5, float(truth[closing]) * CLOSING_SCALE_MPS))
        last_gap = now
        obs, *_ = env.step(expert.act(obs).trajectory)
    for read, true in tracked:  # the fall over the last 0.5 s against the world's closing speed now
        assert read == pytest.approx(true, abs=0.5)
    assert any(abs(true) > 1.0 for _, true in tracked)  # the gap changes
    with pytest.raises(ValueError, match="gives the world's closing speed already"):
        VLAAgent(str(tmp_path / "vla"), perception="lead_gap,lead_closing_speed", closing="tracked")
    with pytest.raises(ValueError, match="closing must be one of"):
        VLAAgent(str(tmp_path / "vla"), closing="radar")
    with pytest.raises(ValueError, match=r"reset the agent with episode_info\['decision_s'\]"):
        agent.reset({"seed": 0, "world": world})
    VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS))).save_pretrained(tmp_path / "unread")
    with pytest.raises(ValueError, match="closing: this VLA's plan reads no perception probe"):
        VLAAgent(str(tmp_path / "unread"), closing="tracked")
    env.close()


def test_a_stop_is_planned_when_the_head_chooses_it_and_never_held(observations):
    """With ``manoeuvre_stop`` the head chooses among four classes: a stop is planned at the decision it is
    chosen, held by nothing and holding nothing back, while a held lane change goes on through it; the plan
    given the stop starts from the stop's own origin; a class count that is not the stop's, or a stop without a
    head, is refused."""
    from agents.vla.manoeuvre import MANOEUVRES, ManoeuvreHold

    hold = ManoeuvreHold(3)
    assert [hold(c) for c in (0, 3, 0, 1, 3, 0, 0, 3, 3, 2)] == [0, 3, 0, 1, 1, 1, 0, 3, 3, 2]
    origins = torch.zeros(len(MANOEUVRES), 64, 2)
    origins[MANOEUVRES.index("stop"), :, 0] = -3.0  # braking hard, in normalised actions
    config = VLAConfig(manoeuvres=4, manoeuvre_stop=True, manoeuvre_origin=True, manoeuvre_origins=origins.tolist())
    model = VLA(config).eval()

    def given(k):
        def always(chosen):
            return torch.full_like(chosen, k)

        plan = model.act_batch(observations[:1], reasoning=False, noise_scale=0.0, choose=always)[0]["trajectory"]
        return float(plan[-1, 0])  # how far it goes in 6.4 s

    assert given(MANOEUVRES.index("stop")) < given(MANOEUVRES.index("keep_lane")) - 1.0
    with pytest.raises(ValueError, match=r"manoeuvres = 3, but a head with manoeuvre_stop = True chooses among"):
        VLA(VLAConfig(manoeuvres=3, manoeuvre_stop=True, manoeuvre_in_state=True))
    with pytest.raises(ValueError, match="manoeuvre_stop: the stop is a class of the manoeuvre head, and there is no"):
        VLA(VLAConfig(manoeuvre_stop=True))
    with pytest.raises(ValueError, match="manoeuvre_stop_by_s: the time names the stop class, and manoeuvre_stop is"):
        VLA(VLAConfig(manoeuvres=3, manoeuvre_stop_by_s=6.4))
    with pytest.raises(ValueError, match="keep_origin_with_stops: the keep class's start with the stops needs"):
        VLA(VLAConfig(manoeuvres=4, manoeuvre_stop=True, keep_origin_with_stops=True))


def test_a_hold_steps_each_episode_of_a_batch_alone_and_a_held_sample_is_scored_given_its_class(observations):
    """``hold_manoeuvres`` on a batch of episodes is ``ManoeuvreHold`` on each; a sample planned given a held
    class (``choose``) has the same log-prob when scored given that class (``manoeuvres``), and another
    without it (the head's own choice); a VLA that plans no manoeuvre refuses one."""
    from agents.vla.manoeuvre import ManoeuvreHold, hold_manoeuvres

    rows = [[0, 1, 0, 0, 0, 2, 0, 1, 0, 0, 0], [2, 0, 1, 0, 0, 0, 0, 0, 2, 2, 0], [0] * 11]
    alone = [[hold(c) for c in row] for hold, row in zip([ManoeuvreHold(3) for _ in rows], rows)]
    held, left, planned = torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long), []
    for chosen in torch.tensor(rows).T:
        step, left = hold_manoeuvres(chosen, held, left, 3)
        held = step
        planned.append(step.tolist())
    assert [list(r) for r in zip(*planned)] == alone
    model = VLA(VLAConfig(manoeuvres=3, manoeuvre_in_state=True)).eval()
    model.manoeuvre_head.forward = lambda hidden, images, state: torch.eye(3)[[0] * len(hidden)] * 10.0
    _, chain, smask, logp = model.sample_with_log_prob(
        observations, generator=torch.Generator().manual_seed(1), choose=lambda chosen: torch.full_like(chosen, 2)
    )
    given = model.chain_log_prob(observations, chain, smask, manoeuvres=torch.tensor([2, 2]))
    torch.testing.assert_close(given, logp, atol=1e-4, rtol=0)
    assert not torch.allclose(model.chain_log_prob(observations, chain, smask), logp, atol=1e-2, rtol=0)
    plain = VLA(VLAConfig()).eval()
    _, chain, smask, _ = plain.sample_with_log_prob(observations, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="plan is given no manoeuvre"):
        plain.chain_log_prob(observations, chain, smask, manoeuvres=torch.tensor([1, 1]))


def _plans_alike_in_every_pass_and_after_a_reload(model: VLA, observations, tmp_path) -> None:
    """The Flow-SDE log-prob ratio is 1 with and without sampled reasoning (the RL passes read the image
    heads as sampling did), and a saved and reloaded copy plans the same, with and without reasoning
    (the prompt's pass of ``generate`` reads them as ``encode`` does)."""
    for reasoning in (False, True):
        out = model.sample_with_log_prob(observations, generator=torch.Generator().manual_seed(1), reasoning=reasoning)
        _, chain, smask, logp = out[:4]
        if reasoning:
            _, again = model.joint_log_prob(observations, out[4], chain, smask)
        else:
            again = model.chain_log_prob(observations, chain, smask)
        torch.testing.assert_close(again, logp, atol=1e-4, rtol=0)
    model.save_pretrained(tmp_path / "vla")
    reloaded = VLA.from_pretrained(tmp_path / "vla")
    for reasoning in (False, True):
        a = model.act_batch(observations, reasoning=reasoning, generator=torch.Generator().manual_seed(2))
        b = reloaded.act_batch(observations, reasoning=reasoning, generator=torch.Generator().manual_seed(2))
        assert all(np.array_equal(x["trajectory"], y["trajectory"]) for x, y in zip(a, b))


def test_the_clearance_loss_scores_each_flow_draws_estimate_against_the_car_ahead(observations):
    """``clearance_margin`` scores the plan each flow draw's prediction points at (``x_t + (1 - t) v``) by the
    metres it drives past the recorded car ahead less the margin, never below how far the label drives, and
    leaves the flow loss's draws as they were; no car ahead costs nothing. ``clearance_synthetic`` asks the
    expert again at the same noisy actions with a synthetic car in the state token, only for draws that keep
    their lane; it needs a state token that reads the car."""
    from agents.vla import action_space
    from agents.vla.clearance import clearance_loss, lead_bound
    from agents.vla.perception import PERCEPTION_TARGETS

    model = VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS), perception_in_state=True)).train()
    c = model.config
    braking = torch.zeros(2, 64, 2)
    braking[..., 0] = -9.8  # the label brakes as hard as it can: 3-5 m from the cars' 8-10 m/s
    label = action_space.integrate(braking, torch.tensor([8.0, 8.0]))  # (its positions; the actions are given)
    v0 = model.prepare(observations)["v0"]
    nothing = torch.tensor([[1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]] * 2)
    stopped = nothing.clone()
    stopped[:, 0], stopped[:, 1], stopped[:, 2] = 6.0 / 60, v0 / 10, 1.0  # a stopped car 6 m ahead
    calls = []
    forward = model.expert.forward

    def recorded(x_t, t, context=None, mask=None, state=None):
        calls.append((x_t, t, state, out := forward(x_t, t, context, mask, state)))
        return out

    model.expert.forward = recorded

    def losses(perception, **options):
        calls.clear()
        g = torch.Generator().manual_seed(0)
        return model.losses(observations, ["Stop."] * 2, label, g, 2, perception=perception, actions=braking, **options)

    plain = losses(stopped)
    given = losses(stopped, clearance_margin=2.0)
    torch.testing.assert_close(given["flow"], plain["flow"])  # the same draws
    assert len(calls) == 1
    x_t, t, _, v = calls[0]
    estimate = x_t + (1 - t.view(-1, 1, 1)) * v
    speeds = v0.repeat_interleave(2)
    bound = lead_bound(stopped.repeat_interleave(2, 0), speeds, 2.0, 64)
    assert float(bound.max()) == pytest.approx(4.0)  # 6 m less the margin, at every step
    normalised = action_space.normalise(braking, c.action_mean, c.action_std, c.lateral_action)
    drives = action_space.travel(normalised, v0, c.action_mean, c.action_std, c.lateral_action)
    drives = drives.repeat_interleave(2, 0)
    assert float(drives[:, -1].max()) > 4.0  # the label itself ends past that: the bound is the label's there
    driven = action_space.travel(estimate, speeds, c.action_mean, c.action_std, c.lateral_action)
    want = clearance_loss(driven, torch.maximum(bound, drives))
    torch.testing.assert_close(given["clearance"], want)
    assert float(given["clearance"].detach()) > 0
    model.zero_grad()
    given["clearance"].backward()
    assert model.expert.head.weight.grad.abs().sum() > 0
    assert float(losses(nothing, clearance_margin=2.0)["clearance"].detach()) == 0.0  # nothing within 60 m

    synthetic = losses(nothing, clearance_margin=2.0, clearance_synthetic=1.0)
    assert len(calls) == 2 and float(synthetic["clearance"].detach()) > 0  # every draw asked again
    (x_t2, t2, state, _), (x_t3, t3, state3, _) = calls
    torch.testing.assert_close(x_t3, x_t2)
    torch.testing.assert_close(t3, t2)
    torch.testing.assert_close(state3[:, :27], state[:, :27])  # the ego's features as they were
    assert (state3[:, 28] >= 0).all() and not torch.allclose(state3[:, 27:], state[:, 27:])  # a car, closing
    planner = VLA(
        VLAConfig(
            perception_targets=len(PERCEPTION_TARGETS), perception_in_state=True, manoeuvres=3, manoeuvre_in_state=True
        )
    )
    asked = []
    planner_forward = planner.expert.forward
    planner.expert.forward = lambda x_t, *rest: asked.append(len(x_t)) or planner_forward(x_t, *rest)
    for manoeuvres, again in (([1, 2], []), ([0, 1], [2])):  # only the draws that keep their lane
        asked.clear()
        planner.losses(
            observations,
            ["Stop."] * 2,
            label,
            torch.Generator().manual_seed(0),
            2,
            perception=nothing,
            actions=braking,
            manoeuvres=torch.tensor(manoeuvres),
            clearance_margin=2.0,
            clearance_synthetic=1.0,
        )
        assert asked == [4, *again]
    with pytest.raises(ValueError, match="clearance_margin: the clearance loss needs the perception targets"):
        model.losses(observations, ["Stop."] * 2, label, clearance_margin=2.0)
    unread = VLA(VLAConfig(perception_targets=len(PERCEPTION_TARGETS)))
    with pytest.raises(ValueError, match="clearance_synthetic: a synthetic car ahead reaches the plan"):
        unread.losses(
            observations, ["Stop."] * 2, label, perception=stopped, clearance_margin=2.0, clearance_synthetic=0.5
        )
