"""The world model: SDE log-probs, DDRL's loss pieces, frame rewards, save / load, training + evaluation +
DDRL end to end on tiny data, resume, and the ``worldmodel`` env backend (check_env, evaluation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers LoopDrive-v0)
from envs.backends.world_model import WorldModel, WorldModelConfig, motion_from_track
from rewards.frames import FrameRewards, psnr, ssim
from training.data import CollectSettings, collect
from training.recipes import load_recipe
from training.run import main as run_main
from training.world_model.ddrl import clipped_surrogate, gaussian_step_kl, shaped_advantages

TINY = dict(image_size=(16, 32), cameras=2, frames=1, decision_every=5, context=2, channels=(8, 16), flow_steps=3)


def _tiny(**kw) -> WorldModel:
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig(**(TINY | kw)))
    for p in model.unet.head.parameters():  # a head that is not zero, so predictions depend on the inputs
        torch.nn.init.normal_(p, std=0.05)
    return model.eval()


def _inputs(model: WorldModel, batch: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    c = model.config
    frames = rng.integers(0, 256, (batch, c.context, c.frames, *c.image_size, 3), dtype=np.uint8)
    motion = torch.from_numpy(rng.normal(size=(batch, c.motion_dim)).astype(np.float32))
    return model.pixels(frames), motion, torch.arange(batch) % c.cameras


def test_sde_steps_are_gaussian_and_their_log_probs_recompute_exactly():
    model = _tiny()
    ctx, motion, cam = _inputs(model)
    chain, logp = model.sample_sde(ctx, motion, cam, noise_level=0.7, generator=torch.Generator().manual_seed(1))
    assert chain.shape == (4, 3, 3, 16, 32) and logp.shape == (3, 3)
    again, means = model.step_log_probs(chain, ctx, motion, cam, noise_level=0.7)
    assert torch.equal(torch.exp(again - logp), torch.ones_like(logp))  # an unchanged model's ratio is exactly 1
    # step 1 of sample 0, against torch's own Normal density
    mean, std = model.sde_step(chain[1], model.velocity(chain[1], torch.full((3,), 1 / 3), ctx, motion, cam), 1, 0.7)
    assert torch.allclose(mean, means[1], atol=1e-6)
    expected = torch.distributions.Normal(mean[0], std).log_prob(chain[2][0]).sum()
    assert torch.allclose(logp[0, 1], expected.to(logp.dtype), rtol=1e-5)


def test_zero_noise_prediction_is_deterministic_and_the_untrained_model_copies_the_last_frame():
    model = _tiny()
    ctx, motion, cam = _inputs(model)
    a, b = model.predict(ctx, motion, cam), model.predict(ctx, motion, cam)
    assert a.dtype == np.uint8 and a.shape == (3, 1, 16, 32, 3) and np.array_equal(a, b)
    last = ((ctx[:, -3:] + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    for extra in ({}, {"patch": 2, "mask": True}):  # a zero-initialised head: "nothing moves"
        fresh = WorldModel(WorldModelConfig(**(TINY | extra)))
        assert np.array_equal(fresh.predict(ctx, motion, cam)[:, 0], last)


def test_save_load_round_trip_gives_identical_predictions(tmp_path):
    model = _tiny()
    ctx, motion, cam = _inputs(model)
    model.save_pretrained(tmp_path / "wm")
    loaded = WorldModel.from_pretrained(tmp_path / "wm")
    assert loaded.config == model.config
    assert np.array_equal(loaded.predict(ctx, motion, cam), model.predict(ctx, motion, cam))
    with pytest.raises(FileNotFoundError, match="not a saved world model"):
        WorldModel.from_pretrained(tmp_path)


def test_the_relative_loss_weighs_each_image_by_its_change():
    model = _tiny()
    ctx, motion, cam = _inputs(model, batch=2)
    last = model.to_uint8(torch.zeros(2, 3, 16, 32), ctx)
    still, moved = last.copy(), (255 - last).copy()
    twin = ctx[[0, 0]], motion[[0, 0]], cam[[0, 0]]
    for target in (still[[0, 0]], moved[[0, 0]]):  # equal changes: the plain MSE
        plain = model.loss(twin[0], target, twin[1], twin[2], torch.Generator().manual_seed(3))
        relative = model.loss(twin[0], target, twin[1], twin[2], torch.Generator().manual_seed(3), relative=0.1)
        assert torch.allclose(plain, relative, rtol=1e-5)
    # a still image beside a moving one: its error counts 1 / 0.1 against 1 / (its change's mean square + 0.1)
    mixed = np.stack([still[0], moved[1]])
    g = torch.Generator().manual_seed(3)
    x1 = model.target_change(mixed, ctx)
    t, eps = torch.rand(2, generator=g), torch.randn(x1.shape, generator=g)
    x_t = t.view(2, 1, 1, 1) * x1 + (1 - t.view(2, 1, 1, 1)) * eps
    error = (model.denoise(x_t, t, ctx, motion, cam) - x1).pow(2).flatten(1).mean(1)
    weight = 1 / (x1.pow(2).flatten(1).mean(1) + 0.1)
    expected = (error * weight).sum() / weight.sum()
    got = model.loss(ctx, mixed, motion, cam, torch.Generator().manual_seed(3), relative=0.1)
    assert torch.allclose(got, expected, rtol=1e-5) and weight[0] > 5 * weight[1]


def test_config_rejects_sizes_the_unet_cannot_halve():
    with pytest.raises(ValueError, match="multiple of 4"):
        WorldModelConfig(image_size=(18, 32), channels=(8, 16, 16))


def test_ddrl_advantages_surrogate_and_kl_by_hand():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    shaped = shaped_advantages(rewards, "exp")
    assert torch.allclose(shaped[0], torch.tensor([-math.e, -1.0, -1 / math.e]), atol=1e-5)
    assert torch.equal(shaped[1], torch.zeros(3))  # a group without spread carries no signal
    assert torch.allclose(shaped_advantages(rewards, "none")[0], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-5)

    old = torch.zeros(2, 1)
    new = torch.log(torch.tensor([[1.5], [0.5]]))
    loss, stats = clipped_surrogate(new, old, torch.tensor([1.0, -1.0]), clip=0.2, pixels=10)
    # min(1.5 x 1, 1.2 x 1) = 1.2 and min(0.5 x -1, 0.8 x -1) = -0.8 -> -(1.2 - 0.8) / 2 / 10
    assert loss.item() == pytest.approx(-0.02) and stats["clip_fraction"] == 1.0
    same, _ = clipped_surrogate(old, old, torch.tensor([2.0, -1.0]), clip=1e-4, pixels=1)
    assert same.item() == pytest.approx(-0.5)

    kl = gaussian_step_kl([torch.ones(4)], [torch.zeros(4)], [0.5])
    assert kl.item() == pytest.approx(2.0)  # 1^2 / (2 x 0.25)


def test_frame_rewards_psnr_ssim_and_plugins():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 246, (2, 24, 32, 3), dtype=np.uint8)
    assert np.allclose(psnr(a, a), 60.0) and np.allclose(ssim(a, a), 1.0)
    assert np.allclose(psnr(a + 10, a), 10 * np.log10(255**2 / 100), atol=1e-4)
    assert (ssim(255 - a, a) < 0.5).all()
    total, terms = FrameRewards({"psnr": 1.0, "ssim": 10.0})(a + 10, a)
    assert np.allclose(total, terms["psnr"] + 10 * terms["ssim"])
    plug, _ = FrameRewards({"rewards.frames:psnr": 2.0})(a + 10, a)
    assert np.allclose(plug, 2 * terms["psnr"])
    with pytest.raises(ValueError, match="unknown frame reward 'sharp'"):
        FrameRewards({"sharp": 1.0})
    with pytest.raises(ValueError, match="one shape"):
        psnr(a, a[:, :10])


# --- end to end on tiny data -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rollouts(tmp_path_factory):
    """Expert rollouts of two smoke scenarios at 28 x 56 (curve-000 is the held-out one at val_fraction 0.5)."""
    path = tmp_path_factory.mktemp("wm") / "smoke.zarr"
    collect(
        CollectSettings(
            bank="smoke",
            split=None,
            scenarios=["lead_brake-000", "curve-000"],
            n_frames=1,
            chunk=16,
            image_size=(28, 56),
            camera_size=(64, 128),
        ),
        path,
        progress=False,
    )
    return path


def _wm_recipe(tmp: Path, data: Path, algorithm: str = "world_model", **extra: str) -> Path:
    top = "".join(f"{k} = {v}\n" for k, v in extra.items())
    text = f"""algorithm = "{algorithm}"
seed = 1
{top}[data]
path = "{data}"
collect = false
n_frames = 1
[world]
channels = [8, 16]
flow_steps = 3
val_fraction = 0.5
horizons = 2
eval_sequences = 4
video_sequences = 1
[train]
steps = 4
batch_size = 2
lr = 1e-3
warmup_steps = 1
threads = 1
log_every = 1
[ddrl]
iterations = 2
contexts = 1
group_size = 3
data_batch = 2
eval_contexts = 2
eval_every = 1
rewards = {{ psnr = 1.0, ssim = 5.0 }}
kl_coef = 0.1
[checkpoint]
every = 2
keep_last = 2
"""
    if algorithm != "ddrl":  # each recipe type has exactly its algorithm's sections
        text = text[: text.index("[ddrl]")] + text[text.index("[checkpoint]") :]
    path = tmp / f"{algorithm}.toml"
    path.write_text(text)
    return path


def test_world_model_trains_evaluates_and_ddrl_fine_tunes_it(rollouts, tmp_path, capsys):
    run = tmp_path / "wm"
    assert run_main(["--config", str(_wm_recipe(tmp_path, rollouts)), "--run-dir", str(run)]) == 0
    report = json.loads((run / "eval.json").read_text())
    assert report["horizons_s"] == [0.5, 1.0]
    for metric in ("psnr", "ssim"):
        assert set(report[metric]) == {"model", "copy_last"} and len(report[metric]["model"]) == 2
        assert all(np.isfinite(report[metric]["model"]))
    assert (run / "eval.mp4").stat().st_size > 0 and (run / "curves.png").exists()
    final = run / "checkpoints" / "final"
    assert WorldModel.from_pretrained(final).config.image_size == (28, 56)

    ddrl = tmp_path / "ddrl"
    recipe = _wm_recipe(tmp_path, rollouts, "ddrl", init_from=json.dumps(str(final)))
    assert run_main(["--config", str(recipe), "--run-dir", str(ddrl)]) == 0
    lines = [json.loads(x) for x in (ddrl / "metrics.jsonl").read_text().splitlines()]
    assert "probe/data_loss" in lines[0] and {"reward", "loss/rl", "loss/data", "kl", "clip_fraction"} <= set(lines[1])
    assert lines[1]["kl"] == 0.0 and lines[2]["kl"] > 0.0  # the first update starts at the reference
    summary = json.loads((ddrl / "ddrl_report.json").read_text())
    assert summary["probes"] == 3 and np.isfinite(summary["data_loss_change"])
    moved = WorldModel.from_pretrained(ddrl / "checkpoints" / "final").state_dict()
    start = WorldModel.from_pretrained(final).state_dict()
    assert any(not torch.equal(moved[k], start[k]) for k in start)


def test_ddrl_without_a_world_model_to_start_from_is_a_clear_error(rollouts, tmp_path, capsys):
    assert run_main(["--config", str(_wm_recipe(tmp_path, rollouts, "ddrl")), "--run-dir", str(tmp_path / "r")]) == 2
    assert "init_from" in capsys.readouterr().err


def test_world_model_resume_matches_an_uninterrupted_run(rollouts, tmp_path):
    recipe = _wm_recipe(tmp_path, rollouts)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert run_main(["--config", str(recipe), "--run-dir", str(whole), "--set", "eval.final=false"]) == 0
    assert (
        run_main(
            [
                "--config",
                str(recipe),
                "--run-dir",
                str(parts),
                "--set",
                "eval.final=false",
                "--set",
                "train.max_steps_this_run=2",
            ]
        )
        == 0
    )
    assert not (parts / "checkpoints" / "final").exists()
    assert run_main(["--resume", str(parts)]) == 0  # the saved recipe stops 2 steps later: at the end
    a = WorldModel.from_pretrained(whole / "checkpoints" / "final").state_dict()
    b = WorldModel.from_pretrained(parts / "checkpoints" / "final").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_shipped_world_model_recipes_validate():
    for name in ("world_model_tiny", "ddrl_tiny"):
        recipe = load_recipe(Path(__file__).resolve().parents[3] / "configs" / f"{name}.toml")
        assert recipe.algorithm == name.removesuffix("_tiny")


# --- the backend ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def front_model(tmp_path_factory) -> Path:
    """A random world model for the single-camera rig at 32 x 64 (its head left at zero: copy the last frame)."""
    path = tmp_path_factory.mktemp("wm_front") / "model"
    WorldModel(WorldModelConfig(**(TINY | {"image_size": (32, 64), "cameras": 1}))).save_pretrained(path)
    return path


def _backend_env(model: Path, **kw):
    args = dict(
        bank="smoke",
        scenario="curve-000",
        rig="front_only",
        n_frames=1,
        camera_size=(32, 64),
        backend="worldmodel",
        world_model=str(model),
    )
    return gym.make("LoopDrive-v0", **(args | kw)).unwrapped


def test_worldmodel_backend_passes_check_env(front_model):
    check_env(_backend_env(front_model), skip_render_check=True)


def test_worldmodel_backend_shows_imagined_frames_while_the_world_moves(front_model):
    imagined, rendered = _backend_env(front_model), _backend_env(front_model, backend="embedded", world_model=None)
    first, _ = imagined.reset(seed=0)
    rendered.reset(seed=0)
    plan = np.zeros((64, 3), np.float32)
    plan[:, 0] = np.linspace(0.8, 51.2, 64)
    for _ in range(4):
        obs, *_ = imagined.step(plan)
        real, *_ = rendered.step(plan)
    assert imagined.world.state.x[0] == rendered.world.state.x[0]  # the same world underneath
    assert np.array_equal(obs["cameras"], first["cameras"])  # a copy-last model imagines the first frame
    assert not np.array_equal(real["cameras"], first["cameras"])  # while the renderer shows the car moving
    motion = motion_from_track(imagined.ego_track, 0, 5)
    assert motion.shape == (11,) and motion[8] > 1.0  # ~2 m ahead after 0.5 s


def test_worldmodel_backend_rejects_a_model_of_another_set_up(front_model):
    with pytest.raises(ValueError, match="trained with n_frames 1, the env has 2"):
        _backend_env(front_model, n_frames=2)
    with pytest.raises(ValueError, match="camera rig size 1, the env has 4"):
        _backend_env(front_model, rig="alpamayo4")
    with pytest.raises(ValueError, match="needs world_model=PATH"):
        _backend_env(front_model, world_model=None)


def test_evaluation_on_the_worldmodel_backend(front_model, tmp_path):
    from evaluation import EvalConfig, evaluate

    cfg = EvalConfig(
        bank="smoke",
        agent="constant_velocity",
        scenarios=["curve-000"],
        rigs=["front_only"],
        n_frames=1,
        camera_size=(32, 64),
        backend="worldmodel",
        world_model=str(front_model),
    )
    summary = evaluate(cfg, tmp_path / "eval", progress=False)
    assert summary["episodes"]["ok"] == 1
    assert json.loads((tmp_path / "eval" / "config.json").read_text())["backend"] == "worldmodel"
