"""DAgger rounds inside SFT: when a round starts, what it collects, and the batches that mix the
expert's data with the policy's.

The schedule is ``[train] steps`` on the expert's data, then ``[dagger] rounds`` of ``steps`` each
(with a ``round0_driver``, a round 0 before the first step: another driver's states, the expert's labels).
A round starts by checkpointing the policy, publishing it as ``checkpoints/dagger_round_R`` and letting
it drive (``collect`` with ``target = "expert"`` into ``RUN/dagger/round_R.zarr``, resumable); every
batch after that takes ``expert_fraction`` of its samples from the expert's data and the rest from
all rounds so far (DAgger aggregates), uniformly or with more weight where the policy's plan and the
expert's label disagreed (``focus``). The rounds' data and positions are in the checkpoints' state,
so a killed run resumes where it was, in the middle of a round's collection too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agents.vla.action_space import LateralAction
from rewards.terms import ade
from training.checkpoints import checkpoint_dir, publish_final
from training.data import DatasetError, DrivingDataset, SampleBatch, collect
from training.loop import EpochSampler, WeightedSampler, draw_weights
from training.recipes import SFTRecipe


def total_steps(recipe: SFTRecipe) -> int:
    return recipe.train.steps + recipe.dagger.rounds * recipe.dagger.steps


def round_starting_at(step: int, recipe: SFTRecipe) -> int | None:
    """The round whose training starts at ``step``, else None: round 0 (a ``round0_driver``'s) at step 0,
    rounds 1..rounds after the ``[train]`` steps (at least one), ``[dagger] steps`` apart."""
    if step == 0 and recipe.dagger.round0_driver:
        return 0
    offset = step - recipe.train.steps
    if offset < 0 or offset % recipe.dagger.steps or offset // recipe.dagger.steps >= recipe.dagger.rounds:
        return None
    return offset // recipe.dagger.steps + 1


def round_scenarios(recipe: SFTRecipe, round_: int) -> list[str] | None:
    """The scenarios the policy drives in ``round_``: a seeded draw from the data's split, in bank order."""
    if recipe.dagger.episodes is None:
        return None
    from scenarios import load_bank

    ids = [s.id for s in load_bank(recipe.data.bank, split=recipe.data.split)]
    pick = np.random.default_rng([recipe.seed, round_]).permutation(len(ids))[: recipe.dagger.episodes]
    return [ids[i] for i in sorted(pick)]


def round_data(run_dir: Path, round_: int) -> Path:
    return Path(run_dir) / "dagger" / f"round_{round_}.zarr"


def disagreement(data: DrivingDataset) -> np.ndarray:
    """Per sample, how wrong the policy was there: its plan's average displacement error (m) against
    the expert's label over the 6.4 s. A closer lead's sample (``closer_lead``: a state no policy drove
    into, with no plan) counts as the round's average."""
    if "plan" not in data.arrays:
        raise DatasetError(
            f"{data.path}: dagger.focus = 'disagreement' needs the policy's plans, and this round's data "
            "was collected before they were recorded; collect the round again or use focus = 'uniform'"
        )
    wrong = ade(data.arrays["plan"], data.arrays["target"])
    planned = np.isfinite(wrong)
    return np.where(planned, wrong, wrong[planned].mean() if planned.any() else 0.0)


def publish_policy(recipe: SFTRecipe, run_dir: Path, round_: int, policy_checkpoint: Path) -> str:
    """The policy as round ``round_``'s driver (published once: a resumed round keeps the policy it
    started with), as an agent spec that drives as the evaluations do."""
    policy = checkpoint_dir(run_dir) / f"dagger_round_{round_}"
    if not policy.exists():
        publish_final(run_dir, policy_checkpoint, policy.name)
    return f"vla:{policy}?{recipe.eval.agent_options()}"


def collect_round(
    recipe: SFTRecipe, run_dir: Path, round_: int, driver: str, progress: bool | None = None
) -> DrivingDataset:
    """``driver`` drives the round's scenarios; the expert labels every ``label_every``-th state."""
    settings = recipe.data.settings().model_copy(
        update={
            "agent": driver,
            "target": "expert",
            "label_every": recipe.dagger.label_every,
            "closer_lead": recipe.dagger.closer_lead,
            "offset_ego": recipe.dagger.offset_ego,
            "scenarios": round_scenarios(recipe, round_),
            "seeds": 1,
            "perturb_fraction": 0.0,
            "max_episodes": None,
        }
    )
    path = round_data(run_dir, round_)
    collect(settings, path, progress=progress)
    return DrivingDataset(path, max_gb=recipe.data.max_gb)


class MixedBatches:
    """Training batches: the expert's data alone, and after the first DAgger round a fixed share of
    each batch from it and the rest from the rounds' data (one seeded order over all of it, renewed
    when a round adds data). With a ``lateral`` action, batches carry their targets' actions in it
    (:meth:`DrivingDataset.target_actions`)."""

    def __init__(self, expert: DrivingDataset, recipe: SFTRecipe, lateral: LateralAction | None = None) -> None:
        self.expert, self.recipe, self.lateral = expert, recipe, lateral
        self.sampler = self._expert_sampler()
        self.rounds: list[DrivingDataset] = []
        self.round_numbers: list[int] = []  # 0 is a round0_driver's
        self.on_policy: EpochSampler | None = None
        self._offsets = np.zeros(1, int)

    def add_round(self, data: DrivingDataset, number: int) -> None:
        self.rounds.append(data)
        self.round_numbers.append(number)
        self._offsets = np.cumsum([0, *(len(d) for d in self.rounds)])
        self.on_policy = self._on_policy_sampler()

    def _expert_sampler(self, **position: int) -> EpochSampler | WeightedSampler:
        if not self.recipe.train.weights_draws:  # each sample once per epoch
            return EpochSampler(len(self.expert), self.recipe.seed, **position)
        return WeightedSampler(draw_weights(self.expert, self.recipe.train), self.recipe.seed, **position)

    def _on_policy_sampler(self, **position: int) -> EpochSampler | WeightedSampler:
        seed = self.recipe.seed + 1000 * len(self.rounds)
        if self.recipe.dagger.focus == "uniform" and not self.recipe.train.weights_draws:
            return EpochSampler(int(self._offsets[-1]), seed, **position)
        w = np.concatenate([draw_weights(d, self.recipe.train) for d in self.rounds])
        if self.recipe.dagger.focus == "disagreement":  # half the draws uniform, half by how wrong
            wrong = np.concatenate([disagreement(d) for d in self.rounds])
            w = w * (wrong + wrong.mean())
        return WeightedSampler(w, seed, **position)

    def next(self, batch_size: int) -> SampleBatch:
        if self.on_policy is None:
            return self.expert.batch(self.sampler.next(batch_size), self.lateral)
        n_expert = int(round(self.recipe.dagger.expert_fraction * batch_size))
        parts = [self.expert.batch(self.sampler.next(n_expert), self.lateral)] if n_expert else []
        for i in self.on_policy.next(batch_size - n_expert):
            r = int(np.searchsorted(self._offsets, i, side="right") - 1)
            parts.append(self.rounds[r].batch([i - self._offsets[r]], self.lateral))
        return SampleBatch.concatenate(parts)

    def __len__(self) -> int:
        return len(self.expert) + int(self._offsets[-1])

    def state(self) -> dict[str, Any]:
        on_policy = self.on_policy.state() if self.on_policy else None
        return {"sampler": self.sampler.state(), "dagger_rounds": self.round_numbers, "dagger_sampler": on_policy}

    def restore(self, state: dict[str, Any], run_dir: Path) -> None:
        """A checkpoint's positions, and the data of the rounds it had reached."""
        self.sampler = self._expert_sampler(**state["sampler"])
        numbers = state.get("dagger_rounds", 0)  # a count of rounds 1.. in checkpoints before round 0 existed
        for r in numbers if isinstance(numbers, list) else range(1, numbers + 1):
            self.add_round(DrivingDataset(round_data(run_dir, r), max_gb=self.recipe.data.max_gb), r)
        if state.get("dagger_sampler"):
            self.on_policy = self._on_policy_sampler(**state["dagger_sampler"])
