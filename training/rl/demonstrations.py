"""The recipe's SFT data as a behaviour-cloning anchor for RL (``rl.bc_weight``).

Each learner step adds ``bc_weight`` x the SFT loss on a seeded batch of the recipe's ``[data]``
(the expert's driven futures) to the RL objective, as ReCogDrive's BC term and Waymo's BC-SAC do: the
policy gradient moves the plan where the reward points, the demonstrations hold it where the reward
says little (a rare collision in a batch does not outweigh a metre of progress paid every decision).
GRPO and PPO use the same anchor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.alpamayo.model import AlpamayoR1
from agents.vla import VLA
from loopdrive.seeding import rng as seeded_rng
from training.data import DrivingDataset
from training.recipes import GRPORecipe, PPORecipe


class Demonstrations:
    """Seeded batches of demonstrations and their SFT loss under a policy.

    ``with_text``: add the reasoning tokens' cross-entropy (when RL moves the VLM too; with only the
    action expert trainable the flow-matching loss is all that has a gradient)."""

    def __init__(self, path: str | Path, seed: int, batch: int, with_text: bool, max_gb: float = 8.0) -> None:
        self.data = DrivingDataset(path, max_gb=max_gb)
        self.seed, self.batch, self.with_text = seed, batch, with_text

    def loss(self, policy: VLA | AlpamayoR1, step: int) -> torch.Tensor:
        """The SFT loss of ``policy`` on the batch of learner step ``step`` (the same batch for the same step)."""
        rng = seeded_rng("demonstrations", self.seed, step)
        idx = np.sort(rng.choice(len(self.data), size=min(self.batch, len(self.data)), replace=False))
        vla = isinstance(policy, VLA)
        batch = self.data.batch(idx, policy.config.lateral_action if vla else None)  # actions fitted once
        gen = torch.Generator(device=policy.device).manual_seed(int(rng.integers(2**31)))
        targets = torch.from_numpy(batch.targets).to(policy.device)
        options = {} if batch.actions is None else {"actions": torch.from_numpy(batch.actions)}
        if vla and policy.plans_a_manoeuvre:  # given the data's manoeuvre, as in SFT
            options["manoeuvres"] = torch.from_numpy(batch.manoeuvre_classes_for(policy.config))
        losses = policy.losses(batch.observations, batch.reasoning, targets, generator=gen, **options)
        return losses["flow"] + (losses["text"] if self.with_text else 0.0)


def demonstration_args(recipe: GRPORecipe | PPORecipe) -> dict[str, Any] | None:
    """``Demonstrations``' arguments for a recipe with ``rl.bc_weight > 0`` (plain values: RLlib copies a
    learner's config), else None."""
    rl = recipe.rl
    if rl.bc_weight <= 0:
        return None
    return {
        "path": str(Path(recipe.data.path).resolve()),
        "seed": recipe.seed,
        "batch": rl.bc_batch,
        "with_text": rl.train != "expert",
        "max_gb": recipe.data.max_gb,
    }
