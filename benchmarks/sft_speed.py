"""SFT speed: a recipe's start-up (data, statistics, model), its training steps per second, and the fit of
the flow head's target actions (per batch, as every step paid before stop 68; once per dataset now).

    python benchmarks/sft_speed.py [--config configs/sft_manoeuvre_tiny.toml] [--steps 100]
        [--out benchmarks/results/sft_speed.json]

Runs the recipe's SFT on its expert data without DAgger rounds, checkpoints or evaluation: 2 steps
untimed (the data into the page cache, the numba kernels compiled), then ``--steps`` timed. The
steps' rate is the run's own (its last metrics line: samples since the first step over the time
since); the rest of the run's wall time is its start-up and finish (reading the data, the action
statistics, building the model, the curves). Wall times on a shared 2-core machine drift by 10-20%
between runs minutes apart, so the fit of the flow head's target actions is also timed on its own:
the median of ``--batches`` seeded batches of the recipe's size, and the whole dataset at once. The
recipe's data must be there (the recipe collects it on its first run, or ``loopdrive collect``).
Prints the benchmark JSON (DESIGN.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import tempfile
import time

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agents.policy import load_policy
from agents.vla import action_space
from benchmarks.machine import emit, machine_info
from evaluation.summary import git_revision
from training.dagger import MixedBatches
from training.data import DrivingDataset
from training.metrics_log import read_metrics
from training.recipes import load_recipe
from training.run import train


def timed_train(config: str, steps: int, run_dir: Path) -> tuple[float, float]:
    """(wall seconds of the whole run, its training steps per second)."""
    overrides = [
        "dagger.rounds=0",
        "eval.final=false",
        "eval.every=0",
        f"train.steps={steps}",
        "checkpoint.every=1000000",
        f"train.log_every={steps}",
    ]
    recipe = load_recipe(config, overrides)
    t0 = time.perf_counter()
    train(recipe, run_dir, progress=False)
    wall = time.perf_counter() - t0
    last = read_metrics(run_dir / "metrics.jsonl")[-1]
    return wall, last["samples_per_s"] / recipe.train.batch_size


def fit_times(data: DrivingDataset, lateral: action_space.LateralAction, batch: int, batches: int) -> dict:
    """Seconds to fit the target actions of one training batch (median, min, max) and of the whole data."""
    rng = np.random.default_rng(0)
    speeds = action_space.initial_speed(torch.from_numpy(data.arrays["ego_history"]))
    targets = torch.from_numpy(data.arrays["target"])
    times = []
    for _ in range(batches):
        idx = torch.from_numpy(rng.choice(len(data), batch, replace=False))
        t0 = time.perf_counter()
        action_space.from_trajectory(targets[idx], speeds[idx], lateral=lateral)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    data.target_actions(lateral)
    once = time.perf_counter() - t0
    ms = np.array(times) * 1e3
    return {
        "per_batch_ms": {
            "median": round(float(np.median(ms)), 1),
            "min": round(float(ms.min()), 1),
            "max": round(float(ms.max()), 1),
        },
        "whole_data_s": round(once, 2),
        "samples": len(data),
    }


def paired_steps(config: str, checkpoint: Path, blocks: int, steps: int = 10) -> dict:
    """Seconds per SFT step with the target actions given (fitted once) and fitted per batch (as before
    stop 68), in alternating blocks of ``steps`` in one process from the same start, so the machine's
    drift falls on both alike. The step is the recipe's: its flow draws, probe and manoeuvre labels."""
    recipe = load_recipe(config)
    cfg = recipe.train
    model = load_policy(checkpoint).train()
    data = DrivingDataset(recipe.data.path, max_gb=recipe.data.max_gb)
    batches = MixedBatches(data, recipe, model.config.lateral_action)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    noise = torch.Generator().manual_seed(recipe.seed)
    times: dict[str, list[float]] = {"given": [], "fitted_per_batch": []}
    for block in range(2 * blocks):
        mode = "given" if block % 2 == 0 else "fitted_per_batch"
        t0 = time.perf_counter()
        for _ in range(steps):
            batch = batches.next(cfg.batch_size)
            options = {"prompt_only": cfg.flow_prompt_only, "flow_samples": cfg.flow_samples}
            if model.perception_probe is not None:
                options["perception"] = torch.from_numpy(batch.perception)
            if model.manoeuvre_head is not None:
                options["manoeuvres"] = torch.from_numpy(batch.manoeuvre_classes_for(model.config))
            if mode == "given":
                options["actions"] = torch.from_numpy(batch.actions)
            targets = torch.from_numpy(batch.targets)
            losses = model.losses(batch.observations, batch.reasoning, targets, generator=noise, **options)
            sum(losses.values()).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        times[mode].append((time.perf_counter() - t0) / steps)
    ms = {mode: float(np.median(t)) * 1e3 for mode, t in times.items()}
    return {
        "blocks_each": blocks,
        "steps_per_block": steps,
        "step_ms_median": {mode: round(v, 1) for mode, v in ms.items()},
        "speed_up": round(ms["fitted_per_batch"] / ms["given"], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/sft_manoeuvre_tiny.toml")
    ap.add_argument("--steps", type=int, default=100, help="training steps timed")
    ap.add_argument("--batches", type=int, default=100, help="batches whose target actions are fitted one by one")
    ap.add_argument("--blocks", type=int, default=10, help="alternating blocks of 10 steps each way, paired")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()

    recipe = load_recipe(args.config)
    if not Path(recipe.data.path).exists():
        raise SystemExit(
            f"{args.config}: [data] path {recipe.data.path} is not there; run the recipe once to collect it"
        )
    torch.set_num_threads(recipe.train.threads or torch.get_num_threads())
    data = DrivingDataset(recipe.data.path, max_gb=recipe.data.max_gb)
    fit = fit_times(data, recipe.model.lateral_action, recipe.train.batch_size, args.batches)
    with tempfile.TemporaryDirectory() as tmp:
        timed_train(args.config, 2, Path(tmp) / "warm-up")
        wall, steps_per_s = timed_train(args.config, args.steps, Path(tmp) / "timed")
        paired = paired_steps(args.config, Path(tmp) / "timed" / "checkpoints" / "final", args.blocks)
    emit(
        {
            "benchmark": "sft_speed",
            "config": args.config,
            "git": git_revision(),
            "batch_size": recipe.train.batch_size,
            "threads": recipe.train.threads,
            "steps_timed": args.steps,
            "steps_per_s": round(steps_per_s, 3),
            "samples_per_s": round(steps_per_s * recipe.train.batch_size, 2),
            "startup_and_finish_s": round(wall - args.steps / steps_per_s, 2),
            "target_action_fit": fit,
            "paired_steps": paired,
            "machine": machine_info(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
