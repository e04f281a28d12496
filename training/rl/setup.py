"""What every RL algorithm does before its first update: find the policy to start from, describe the
environment the env runners build, and join (or start) Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agents.loading import recorded_observation
from evaluation.distributed import init_ray
from training.checkpoints import clean_stale, latest_checkpoint
from training.recipes import GRPORecipe, PPORecipe, RecipeError, RLSection


def starting_point(recipe: GRPORecipe | PPORecipe, run_dir: Path, resume: bool) -> tuple[Path | None, Path]:
    """(latest checkpoint when resuming, the policy to start from); RL fine-tunes a trained policy, so
    ``init_from`` is required, and the recipe renders the frames per camera it learnt from. Also sets the
    trainer's threads and clears a killed save's leftovers."""
    if not recipe.init_from:
        raise RecipeError(
            f"{recipe.algorithm} fine-tunes a trained policy: set init_from (--set init_from=RUN/checkpoints/final)"
        )
    if recipe.rl.threads:
        torch.set_num_threads(recipe.rl.threads)
    trained = recorded_observation(recipe.init_from)
    d = recipe.data
    if trained is not None and (why := trained.other_frames(d.n_frames, recipe.init_from, d.frame_every)):
        raise RecipeError(f"data.n_frames: init_from {why}")
    clean_stale(run_dir)
    ckpt = latest_checkpoint(run_dir) if resume else None
    return ckpt, Path(ckpt or recipe.init_from)


def module_config(recipe: GRPORecipe | PPORecipe, policy_path: str | Path) -> dict[str, Any]:
    """The ``VLAModule``'s ``model_config`` for the recipe's rollouts: the policy at ``policy_path``,
    how it samples (noise, stochastic steps, denoising steps, reasoning) and how it plans when evaluated."""
    rl = recipe.rl
    return {
        "path": str(Path(policy_path).resolve()),
        "noise_level": rl.noise_level,
        "stochastic": rl.stochastic,
        "eval_noise": recipe.eval.noise,
        "reasoning": rl.reasoning,
        "temperature": rl.temperature,
        "init_noise": rl.init_noise,
        "flow_steps": rl.flow_steps,
        "threads": 1 if rl.env_runners else None,
    }


def env_config(
    recipe: GRPORecipe | PPORecipe, image_size: tuple[int, int], scene_facts: bool = False
) -> dict[str, Any]:
    """The env runners' ``RLDriveEnv`` config: the recipe's bank and rewards, the data's observation
    set-up (the policy was trained on it), cameras resized to the policy's ``image_size``; with
    ``scene_facts`` every info carries the scene's causes (for the reasoning-consistency reward)."""
    from envs.interface import DEFAULT_OBSERVATIONS

    rl, d = recipe.rl, recipe.data
    cfg = {
        "bank": rl.bank,
        "split": rl.split,
        "rig": d.rig,
        "n_frames": d.n_frames,
        "frame_every": d.frame_every,
        "decision_every": d.decision_every,
        "camera_size": list(d.camera_size),
        "observations": list(DEFAULT_OBSERVATIONS),
        "image_size": list(image_size),
    }
    if rl.rewards is not None:
        cfg["rewards"] = dict(rl.rewards)
    if scene_facts:
        cfg["scene_facts"] = True
    if getattr(rl, "standing_starts", 0.0):  # (PPO's: GRPO's groups share one start)
        cfg |= {"standing_starts": rl.standing_starts, "standing_starts_seed": recipe.seed}
    return cfg


def connect_ray(rl: RLSection, eval_workers: int = 0) -> None:
    """Join ``rl.ray_address``, or start a local Ray with a CPU for each env runner and eval worker."""
    init_ray(max(2, rl.env_runners + max(1, eval_workers)), rl.ray_address)
