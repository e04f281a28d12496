"""DDRL: data-regularised diffusion RL of the world model, read top to bottom (REFERENCE.md section 4).

Each iteration takes real contexts from the rollouts (every camera a row), samples a group of
``group_size`` predictions per row with every flow step stochastic (the Flow-GRPO SDE, so each step is
Gaussian with a log-probability), and scores them with ``rewards.frames`` against the simulator's true
next frames. Advantages are normalised within the group and shaped by lambda(A) = -exp(-A). The loss is
the clipped surrogate on each step's probability ratio, plus ``kl_coef`` x the KL of each step's
Gaussian to the frozen starting model's (closed form: equal stds), plus ``data_beta`` x the ordinary
flow-matching loss on real data - DDRL's forward KL to the data, which keeps the model a model of
driving video while the reward pulls it. The surrogate is averaged per pixel (log-probs of whole
images are sums over ~19k dimensions), so ``lr`` and ``data_beta`` keep the scale of the flow loss.

Probes on held-out scenarios (fixed contexts and noise) log the reward of sampled predictions and the
data loss, so a run shows both: the reward rising, the data loss staying near its starting value.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.backends.world_model import WorldModel
from rewards.frames import FrameRewards
from training.checkpoints import Checkpointer, latest_checkpoint, publish_final, restore_trainer
from training.loop import EpochSampler, prepare_run
from training.metrics_log import MetricsLogger, progress_bar
from training.milestones import last_step_of_this_run
from training.recipes import DDRLRecipe, RecipeError
from training.rl.losses import ClipConfig, clipped_loss, group_advantages, informative_groups, log_ratio
from training.world_model.data import FrameSequences, per_camera


def shaped_advantages(rewards: torch.Tensor, shaping: str = "exp") -> torch.Tensor:
    """Group-normalised advantages ``[groups, G]`` (GRPO's, :func:`training.rl.losses.group_advantages`),
    shaped by lambda(A) = -exp(-A) with ``shaping="exp"``. A group whose rewards are all equal carries
    no signal: its advantages are 0 (also after shaping)."""
    groups = torch.arange(rewards.shape[0]).repeat_interleave(rewards.shape[1])
    flat = rewards.reshape(-1)
    adv = group_advantages(flat, groups, "group")
    if shaping == "exp":
        adv = torch.where(informative_groups(flat, groups), -torch.exp(-adv), torch.zeros_like(adv))
    return adv.view_as(rewards)


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float, pixels: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped loss (:func:`training.rl.losses.clipped_loss`) on each denoising step's ratio,
    over ``[B, steps]`` log-probs, averaged and divided by the pixels of an image."""
    ratio = torch.exp(log_ratio(logp, old_logp))
    per, clipped = clipped_loss(ratio, advantages[:, None].expand_as(ratio), ClipConfig(clip, clip, None))
    stats = {
        "clip_fraction": float(clipped.float().mean()),
        "log_ratio_abs": float((logp - old_logp).detach().abs().mean()),
    }
    return per.mean() / pixels, stats


def gaussian_step_kl(means: torch.Tensor, ref_means: torch.Tensor, stds: list[float]) -> torch.Tensor:
    """Mean over steps and pixels of KL(N(mean, s^2) || N(ref, s^2)) = (mean - ref)^2 / (2 s^2)."""
    per_step = [((m - r) ** 2).mean() / (2 * s * s) for m, r, s in zip(means, ref_means, stds)]
    return torch.stack(per_step).mean()


def _step_stds(model: WorldModel, noise_level: float, steps: int) -> list[float]:
    x = torch.zeros(1)
    return [model.sde_step(x, x, i, noise_level, steps)[1] for i in range(steps)]


def _rows(pairs, model: WorldModel, group: int):
    """Each camera row repeated ``group`` times (rows of a group are adjacent)."""
    ctx, motion, target, camera = per_camera(pairs, model)
    rep = torch.arange(len(ctx)).repeat_interleave(group)
    return ctx[rep], motion[rep], target[rep.numpy()], camera[rep]


def _score(
    model: WorldModel, rewards: FrameRewards, chain: torch.Tensor, ctx: torch.Tensor, target: np.ndarray
) -> tuple[torch.Tensor, dict[str, float]]:
    """Reward per row (mean over its frames) of the chain's final sample against the true frames."""
    pred = model.to_uint8(chain[-1], ctx)
    flat = (-1, *pred.shape[2:])
    total, terms = rewards(pred.reshape(flat), target.reshape(flat))
    per_row = torch.as_tensor(total.reshape(len(pred), -1).mean(1), dtype=torch.float32)
    return per_row, {f"reward/{k}": float(v.mean()) for k, v in terms.items()}


@torch.no_grad()
def probe(model: WorldModel, rewards: FrameRewards, probe_pairs, recipe: DDRLRecipe) -> dict[str, float]:
    """Held-out reward of SDE samples and the data (flow) loss, with fixed noise: comparable across iterations."""
    d = recipe.ddrl
    ctx, motion, target, camera = _rows(probe_pairs, model, d.group_size)
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    chain, _ = model.sample_sde(ctx, motion, camera, d.noise_level, d.noise_scale, gen, d.sde_steps)
    reward, terms = _score(model, rewards, chain, ctx, target)
    c, m, t, cam = per_camera(probe_pairs, model)
    fixed = torch.Generator().manual_seed(recipe.seed + 2)
    data_loss = float(model.loss(c, t, m, cam, fixed, recipe.world.relative_loss))  # the pre-training loss
    return {
        "probe/reward": float(reward.mean()),
        "probe/data_loss": data_loss,
        **{k.replace("reward/", "probe/"): v for k, v in terms.items()},
    }


def train_ddrl(
    recipe: DDRLRecipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None
) -> dict[str, Any]:
    run_dir, d = Path(run_dir), recipe.ddrl
    if not recipe.init_from:
        raise RecipeError("ddrl fine-tunes a trained world model: set init_from = RUN/checkpoints/final")
    dataset = prepare_run(recipe.data, recipe.train, run_dir, progress)
    data = FrameSequences(
        dataset, WorldModel.from_pretrained(recipe.init_from).config.context, recipe.world.val_fraction
    )
    rewards = FrameRewards(d.rewards)
    reference = WorldModel.from_pretrained(recipe.init_from).requires_grad_(False)
    ckpt = latest_checkpoint(run_dir) if resume else None
    model = WorldModel.from_pretrained(ckpt or recipe.init_from).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=d.lr, weight_decay=0.0)
    noise = torch.Generator().manual_seed(recipe.seed)
    contexts = EpochSampler(len(data.train_pairs), recipe.seed)
    real = EpochSampler(len(data.train_pairs), recipe.seed + 1)
    it = 0
    if ckpt is not None:
        state = restore_trainer(ckpt, optimizer, {"noise": noise})
        contexts = EpochSampler(len(data.train_pairs), recipe.seed, **state["contexts"])
        real = EpochSampler(len(data.train_pairs), recipe.seed + 1, **state["real"])
        it = state["step"]
    logger = MetricsLogger(run_dir, resume_step=it)
    spread = np.linspace(0, len(data.val_pairs) - 1, min(d.eval_contexts, len(data.val_pairs))).astype(int)
    probe_pairs = data.pairs(data.val_pairs[spread])
    stds = _step_stds(model, d.noise_level, d.sde_steps)
    pixels = int(np.prod(data.frame_shape[1:]))

    saver = Checkpointer(run_dir, recipe.checkpoint.keep_last)

    def checkpoint(at: int) -> Path:
        state = {"contexts": contexts.state(), "real": real.state()}
        return saver.save(at, model, optimizer, state, {"noise": noise.get_state()})

    if it == 0:
        logger.log(0, probe(model, rewards, probe_pairs, recipe))
    stop_at = last_step_of_this_run(d.iterations, it, d.max_iterations_this_run)
    bar = progress_bar("ddrl", d.iterations, it, "it", progress)
    last: dict[str, Any] = {}
    while it < stop_at:
        # 1. a group of SDE samples per real context row, scored against the simulator's next frames
        batch = data.pairs(data.train_pairs[contexts.next(d.contexts)])
        ctx, motion, target, camera = _rows(batch, model, d.group_size)
        model.eval()
        chain, old_logp = model.sample_sde(ctx, motion, camera, d.noise_level, d.noise_scale, noise, d.sde_steps)
        model.train()
        reward, terms = _score(model, rewards, chain, ctx, target)
        advantages = shaped_advantages(reward.view(-1, d.group_size), d.shaping).view(-1)
        # 2. one update: clipped per-step surrogate + KL to the start + data_beta x flow loss on real data
        logp, means = model.step_log_probs(chain, ctx, motion, camera, d.noise_level)
        rl_loss, stats = clipped_surrogate(logp, old_logp, advantages, d.clip, pixels)
        loss = d.rl_weight * rl_loss
        kl = torch.zeros(())
        if d.kl_coef > 0:
            with torch.no_grad():
                _, ref_means = reference.step_log_probs(chain, ctx, motion, camera, d.noise_level)
            kl = gaussian_step_kl(means, ref_means, stds)
            loss = loss + d.kl_coef * kl
        c, m, t, cam = per_camera(data.pairs(data.train_pairs[real.next(d.data_batch)]), model)
        data_loss = model.loss(c, t, m, cam, noise, recipe.world.relative_loss)  # the pre-training loss
        loss = loss + d.data_beta * data_loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), d.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        it += 1
        bar.update(1)
        last = {
            "reward": float(reward.mean()),
            **terms,
            "loss/rl": float(rl_loss.detach()),
            "loss/data": float(data_loss.detach()),
            "kl": float(kl.detach()),
            "grad_norm": float(grad_norm),
            "reward_std": float(reward.view(-1, d.group_size).std(1).mean()),
            **stats,
        }
        if it % d.eval_every == 0 or it == d.iterations:
            last |= probe(model, rewards, probe_pairs, recipe)
        logger.log(it, last)
        bar.set_postfix(reward=f"{last['reward']:.2f}", data=f"{last['loss/data']:.4f}", refresh=False)
        if it % recipe.checkpoint.every == 0 or it == d.iterations:
            checkpoint(it)
    bar.close()
    result: dict[str, Any] = {"step": it, **last}
    if it >= d.iterations:
        result["final"] = str(publish_final(run_dir, latest_checkpoint(run_dir)))
        result["ddrl_report"] = _report(logger.path)
        (run_dir / "ddrl_report.json").write_text(json.dumps(result["ddrl_report"], indent=1))
    logger.plot()
    logger.close()
    return result


def _report(metrics_path: Path) -> dict[str, Any]:
    """Probe reward and data loss before and after: DDRL's point is the first rising, the second not."""
    probes = [r for r in map(json.loads, metrics_path.read_text().splitlines()) if "probe/reward" in r]
    first, final = probes[0], probes[-1]
    change = (final["probe/data_loss"] - first["probe/data_loss"]) / max(abs(first["probe/data_loss"]), 1e-12)
    return {
        "reward_before": first["probe/reward"],
        "reward_after": final["probe/reward"],
        "data_loss_before": first["probe/data_loss"],
        "data_loss_after": final["probe/data_loss"],
        "data_loss_change": change,
        "data_loss_within_10pct": bool(math.fabs(change) <= 0.10),
        "probes": len(probes),
    }
