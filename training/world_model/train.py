"""Train the world model on collected rollouts, and score it against the simulator, read top to bottom.

Training: flow matching on (context frames, executed motion) -> next frames, every camera of the rig
a batch row, with the ``[train]`` schedule; checkpoints, resume and metrics as for SFT.

Evaluation (``RUN/eval.json``): from held-out scenarios' real context, the model rolls ``horizons``
decisions forward on its own predictions, driven by the motion the expert actually executed; PSNR
and SSIM of each horizon's frames against the simulator's, beside copying the last real frame (the
baseline any video model must beat). ``RUN/eval.mp4`` shows true, predicted and copied frames.
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from envs.backends.world_model import WorldModel, WorldModelConfig
from envs.sensors.video import VideoRecorder
from rewards.frames import psnr, ssim
from training.checkpoints import Checkpointer, latest_checkpoint, publish_final, restore_trainer
from training.loop import EpochSampler, learning_rate, prepare_run
from training.metrics_log import MetricsLogger, progress_bar
from training.milestones import last_step_of_this_run
from training.recipes import WorldModelRecipe
from training.world_model.data import FrameSequences, per_camera


def build_world_model(recipe: WorldModelRecipe, data: FrameSequences, card: dict[str, Any]) -> WorldModel:
    torch.manual_seed(recipe.seed)
    cams, frames, h, w, _ = data.frame_shape
    w_cfg = recipe.world
    return WorldModel(
        WorldModelConfig(
            image_size=(h, w),
            rig=card["rig"],
            cameras=cams,
            frames=frames,
            decision_every=data.decision_every,
            context=w_cfg.context,
            channels=tuple(w_cfg.channels),
            patch=w_cfg.patch,
            mask=w_cfg.mask,
            flow_steps=w_cfg.flow_steps,
            change_scale=1.0 / max(data.change_std(), 1e-3),
        )
    )


def train_world_model(
    recipe: WorldModelRecipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None
) -> dict[str, Any]:
    run_dir, cfg = Path(run_dir), recipe.train
    dataset = prepare_run(recipe.data, recipe.train, run_dir, progress)
    data = FrameSequences(dataset, recipe.world.context, recipe.world.val_fraction)

    ckpt = latest_checkpoint(run_dir) if resume else None
    if ckpt is not None:
        model = WorldModel.from_pretrained(ckpt)
    elif recipe.init_from:
        model = WorldModel.from_pretrained(recipe.init_from)
    else:
        model = build_world_model(recipe, data, dataset.card)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    noise = torch.Generator().manual_seed(recipe.seed)
    sampler = EpochSampler(len(data.train_pairs), recipe.seed)
    step = 0
    if ckpt is not None:
        state = restore_trainer(ckpt, optimizer, {"noise": noise})
        sampler = EpochSampler(len(data.train_pairs), recipe.seed, **state["sampler"])
        step = state["step"]
    logger = MetricsLogger(run_dir, resume_step=step)

    saver = Checkpointer(run_dir, recipe.checkpoint.keep_last)

    def checkpoint(at: int) -> Path:
        return saver.save(at, model, optimizer, {"sampler": sampler.state()}, {"noise": noise.get_state()})

    last: dict[str, Any] = {}
    stop_at = last_step_of_this_run(cfg.steps, step, cfg.max_steps_this_run)
    bar = progress_bar("world model", cfg.steps, step, "step", progress)
    t0, seen = time.perf_counter(), 0
    while step < stop_at:
        lr = learning_rate(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        ctx, motion, target, camera = per_camera(data.pairs(data.train_pairs[sampler.next(cfg.batch_size)]), model)
        loss = model.loss(ctx, target, motion, camera, generator=noise, relative=recipe.world.relative_loss)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step, seen = step + 1, seen + len(ctx)
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if step % cfg.log_every == 0 or step == cfg.steps:
            last = {
                "loss/flow": loss.item(),
                "lr": lr,
                "grad_norm": float(grad_norm),
                "epoch": sampler.epoch,
                "images_per_s": seen / (time.perf_counter() - t0),
            }
            logger.log(step, last)
        if step % recipe.checkpoint.every == 0 or step == cfg.steps:
            checkpoint(step)
    bar.close()
    result: dict[str, Any] = {"step": step, **last}
    if step >= cfg.steps:
        final = publish_final(run_dir, latest_checkpoint(run_dir))
        result["final"] = str(final)
        if recipe.eval.final:
            report = evaluate_world_model(WorldModel.from_pretrained(final), data, recipe, run_dir)
            logger.log(step, {f"eval/psnr_{h:g}s": v for h, v in zip(report["horizons_s"], report["psnr"]["model"])})
            result["world_eval"] = report
    logger.plot()
    logger.close()
    return result


@torch.no_grad()
def evaluate_world_model(
    model: WorldModel, data: FrameSequences, recipe: WorldModelRecipe, out_dir: str | Path, batch: int = 8
) -> dict[str, Any]:
    """Roll the model ``world.horizons`` decisions forward from held-out real contexts; PSNR / SSIM per
    horizon vs the simulator's frames, beside copy-last-frame; ``eval.json`` and ``eval.mp4``."""
    w = recipe.world
    out_dir = Path(out_dir)
    starts = data.sequences(w.horizons, w.eval_sequences, recipe.seed)
    generator = torch.Generator().manual_seed(recipe.seed)
    scores = {
        k: {"model": [[] for _ in range(w.horizons)], "copy_last": [[] for _ in range(w.horizons)]}
        for k in ("psnr", "ssim")
    }
    videos: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for lo in range(0, len(starts), batch):
        chunk = starts[lo : lo + batch]
        pairs = data.pairs(chunk)
        b, k, cams = pairs.context.shape[:3]
        ctx = deque(
            list(pairs.context.swapaxes(1, 2).reshape(b * cams, k, *pairs.context.shape[3:]).swapaxes(0, 1)), maxlen=k
        )
        last_real = ctx[-1]
        camera = torch.arange(cams).repeat(b)
        steps: list[tuple[np.ndarray, np.ndarray]] = []
        for h in range(w.horizons):
            motion = torch.from_numpy(np.repeat(data.motion[chunk + h], cams, 0))
            pred = model.predict(model.pixels(np.stack(ctx, 1)), motion, camera, w.eval_noise, generator)
            true = data.cameras[chunk + h + 1].reshape(b * cams, *pred.shape[1:])
            flat = (-1, *pred.shape[2:])
            for name, fn in (("psnr", psnr), ("ssim", ssim)):
                scores[name]["model"][h].append(fn(pred.reshape(flat), true.reshape(flat)))
                scores[name]["copy_last"][h].append(fn(last_real.reshape(flat), true.reshape(flat)))
            ctx.append(pred)
            steps.append((true, pred))
        videos += [
            [
                (t[j * cams : (j + 1) * cams], p[j * cams : (j + 1) * cams], last_real[j * cams : (j + 1) * cams])
                for t, p in steps
            ]
            for j in range(b)
        ][: max(0, w.video_sequences - len(videos))]
    period = 0.1 * data.decision_every
    report = {
        "horizons_s": [round(period * (h + 1), 3) for h in range(w.horizons)],
        **{
            name: {k: [float(np.concatenate(v).mean()) for v in per] for k, per in s.items()}
            for name, s in scores.items()
        },
        "sequences": len(starts),
        "images_per_horizon": int(sum(len(v) for v in scores["psnr"]["model"][0])),
        "eval_noise": w.eval_noise,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval.json").write_text(json.dumps(report, indent=1))
    _write_video(videos, out_dir / "eval.mp4", report["horizons_s"])
    return report


def _write_video(sequences: list[list[tuple[np.ndarray, ...]]], path: Path, horizons_s: list[float]) -> None:
    """Per frame: rows true / predicted / copy-last, the rig's cameras side by side, scaled x2."""
    if not sequences:
        return
    with VideoRecorder(path, fps=2.0) as video:
        for seq in sequences:
            for h, (true, pred, copy) in enumerate(seq):
                rows = []
                for label, frames in (("simulator", true), ("world model", pred), ("copy last", copy)):
                    row = np.concatenate(list(frames[:, -1]), 1)
                    row = cv2.resize(row, (row.shape[1] * 2, row.shape[0] * 2), interpolation=cv2.INTER_NEAREST)
                    cv2.putText(
                        row,
                        f"{label}  +{horizons_s[h]:g} s",
                        (4, 14),
                        cv2.FONT_HERSHEY_SIMPLEX,
                        0.45,
                        (255, 255, 255),
                        1,
                        cv2.LINE_AA,
                    )
                    rows.append(row)
                video.add(np.concatenate(rows, 0))
