"""Supervised fine-tuning of the VLA on labelled driving data, read top to bottom.

Loss = ``text_weight`` x cross-entropy on the teacher's reasoning + ``flow_weight`` x flow matching
on the trajectory the car drove: both heads learn (a text-only SFT cannot fix a biased trajectory
head). ``two_stage`` follows Alpamayo's public recipe: stage 1 trains the VLM on the text, stage 2
the action expert with the VLM frozen. Everything that decides the next step - weights, AdamW
moments, the data order and position, the RNG of the flow noise - is in the checkpoint, so a
resumed run continues exactly where an uninterrupted one would be.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from training.checkpoints import (
    clean_stale,
    latest_checkpoint,
    restore_trainer,
    save_checkpoint,
)
from training.config import Recipe
from training.data import CollectConfig, DatasetError, DrivingDataset, collect
from training.metrics_log import MetricsLogger
from training.milestones import after_step, finish


class EpochSampler:
    """Batches of indices from a seeded permutation per epoch; its position is part of the state."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0) -> None:
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._perm = self._permutation()

    def _permutation(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.n)

    def next(self, batch: int) -> np.ndarray:
        out = []
        while len(out) < batch:
            if self.position >= self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._perm = self._permutation()
            take = min(batch - len(out), self.n - self.position)
            out += self._perm[self.position : self.position + take].tolist()
            self.position += take
        return np.asarray(out)

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}


def ensure_dataset(recipe: Recipe, progress: bool | None = None) -> DrivingDataset:
    """Read the recipe's dataset, collecting (or finishing) it first when allowed."""
    d = recipe.data
    path = Path(d.path)
    if d.collect:
        fields = {k: v for k, v in d.model_dump().items() if k in CollectConfig.__dataclass_fields__}
        fields["image_size"] = tuple(recipe.model.image_size)
        collect(CollectConfig(**fields), path, progress=progress)
    elif not path.exists():
        raise DatasetError(f"data.path {path} does not exist and data.collect is false")
    return DrivingDataset(path, max_gb=d.max_gb)


def prepare_run(recipe: Recipe, run_dir: Path, progress: bool | None = None) -> DrivingDataset:
    """What a trainer on collected data does first: torch threads, leftovers of a killed save, the data."""
    if recipe.train.threads:
        torch.set_num_threads(recipe.train.threads)
    clean_stale(run_dir)
    return ensure_dataset(recipe, progress)


def build_model(recipe: Recipe):
    from agents.vla.model import VLA, VLAConfig

    if recipe.init_from:
        return VLA.from_pretrained(recipe.init_from)
    torch.manual_seed(recipe.seed)
    m = recipe.model
    return VLA(VLAConfig(backbone=m.backbone, size=m.size, backbone_path=m.backbone_path,
                         image_size=tuple(m.image_size), max_reasoning_tokens=m.max_reasoning_tokens,
                         flow_steps=m.flow_steps, seed=recipe.seed))  # fmt: skip


def action_statistics(dataset: DrivingDataset, limit: int = 4096) -> tuple[list[float], list[float]]:
    """Mean and std of the (accel, curvature) targets, as the flow head will see them."""
    from agents.vla import action_space

    idx = np.linspace(0, len(dataset) - 1, min(limit, len(dataset))).astype(int)
    hist = torch.from_numpy(dataset.arrays["ego_history"][idx])
    actions = action_space.from_trajectory(torch.from_numpy(dataset.arrays["target"][idx]),
                                           action_space.initial_speed(hist))  # fmt: skip
    flat = actions.reshape(-1, 2).double()
    std = torch.maximum(flat.std(0), torch.tensor([0.1, 0.002], dtype=torch.float64))
    return flat.mean(0).tolist(), std.tolist()


def state_statistics(dataset: DrivingDataset, limit: int = 4096) -> tuple[list[float], list[float]]:
    """Mean and std of the action expert's state-token features (constant features get std 1)."""
    from agents.vla.model import state_features

    idx = np.linspace(0, len(dataset) - 1, min(limit, len(dataset))).astype(int)
    observations, _, _ = dataset.batch(idx)
    feats = np.stack([state_features(o) for o in observations]).astype(np.float64)
    std = feats.std(0)
    return feats.mean(0).tolist(), np.where(std > 1e-3, std, 1.0).tolist()


def learning_rate(step: int, cfg) -> float:
    """Linear warm-up, then cosine decay to 10% (a function of the step: nothing to checkpoint)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def stage_of(step: int, cfg) -> int:
    """0: joint training; 1: VLM only; 2: action expert only (VLM frozen)."""
    if not cfg.two_stage:
        return 0
    return 1 if step < int(cfg.steps * cfg.stage1_fraction) else 2


def _set_trainable(model, stage: int) -> None:
    for p in model.backbone.parameters():
        p.requires_grad_(stage in (0, 1))
    for p in model.expert.parameters():
        p.requires_grad_(stage in (0, 2))


def train_sft(recipe: Recipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None,
              evaluate_fn=None) -> dict[str, Any]:  # fmt: skip
    """Train; returns the last logged metrics (and the final evaluation's summary, if any)."""
    run_dir, cfg = Path(run_dir), recipe.train
    dataset = prepare_run(recipe, run_dir, progress)

    ckpt = latest_checkpoint(run_dir) if resume else None
    if ckpt is not None:
        from agents.vla.model import VLA

        model = VLA.from_pretrained(ckpt)
    else:
        model = build_model(recipe)
        if not recipe.init_from:  # a fresh flow head works on the data's standardised actions
            model.config.action_mean, model.config.action_std = action_statistics(dataset)
            model.config.state_mean, model.config.state_std = state_statistics(dataset)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    noise = torch.Generator(device=device).manual_seed(recipe.seed)
    sampler = EpochSampler(len(dataset), recipe.seed)
    step = 0
    if ckpt is not None:
        state = restore_trainer(ckpt, optimizer, {"noise": noise})
        sampler = EpochSampler(len(dataset), recipe.seed, **state["sampler"])
        step = state["step"]
    logger = MetricsLogger(run_dir, resume_step=step)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda" and cfg.bf16)

    def checkpoint(at: int) -> Path:
        return save_checkpoint(run_dir, at, model, optimizer, {"sampler": sampler.state(), "samples": len(dataset)},
                               {"noise": noise.get_state()}, recipe.checkpoint.keep_last)  # fmt: skip

    last: dict[str, Any] = {}
    stop_at = cfg.steps if cfg.max_steps_this_run is None else min(cfg.steps, step + cfg.max_steps_this_run)
    bar = tqdm(
        total=cfg.steps, initial=step, desc="sft", unit="step", disable=None if progress is None else not progress
    )
    t0, seen = time.perf_counter(), 0
    while step < stop_at:
        stage = stage_of(step, cfg)
        _set_trainable(model, stage)
        w_text = cfg.text_weight if stage in (0, 1) else 0.0
        w_flow = cfg.flow_weight if stage in (0, 2) else 0.0
        lr = learning_rate(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        sums = {"text": 0.0, "flow": 0.0}
        for _ in range(cfg.grad_accum):
            obs, reasoning, target = dataset.batch(sampler.next(cfg.batch_size))
            with autocast:
                losses = model.losses(obs, reasoning, torch.from_numpy(target).to(device), generator=noise,
                                      flow_samples=cfg.flow_samples)  # fmt: skip
            loss = (w_text * losses["text"] + w_flow * losses["flow"]) / cfg.grad_accum
            loss.backward()
            for k in sums:
                sums[k] += float(losses[k].detach()) / cfg.grad_accum
            seen += len(obs)
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        bar.set_postfix(text=f"{sums['text']:.3f}", flow=f"{sums['flow']:.3f}", refresh=False)
        if step % cfg.log_every == 0 or step == cfg.steps:
            last = {
                "loss/text": sums["text"],
                "loss/flow": sums["flow"],
                "lr": lr,
                "grad_norm": float(grad_norm),
                "stage": stage,
                "epoch": sampler.epoch,
                "samples_per_s": seen / (time.perf_counter() - t0),
            }
            logger.log(step, last)
        after_step(step, cfg.steps, recipe, checkpoint, evaluate_fn, logger, run_dir)
    bar.close()
    return finish(step, cfg.steps, recipe, evaluate_fn, logger, run_dir, {"step": step, **last})
