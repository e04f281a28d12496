"""What the supervised trainers (SFT, the world model, DDRL's data term) share: the dataset they read,
the seeded order they read it in, and the learning-rate schedule."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from agents.vla.perception import time_to_lead
from loopdrive.seeding import rng as seeded_rng
from training.checkpoints import clean_stale
from training.data import DatasetError, DrivingDataset, collect, scenario_families
from training.recipes import DataSection, TrainSection


class EpochSampler:
    """Batches of indices from a seeded permutation per epoch; its position is part of the state."""

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0) -> None:
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position
        self._perm = self._permutation()

    def _permutation(self) -> np.ndarray:
        return seeded_rng(self.seed, self.epoch).permutation(self.n)

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


class WeightedSampler:
    """Batches drawn with replacement in proportion to ``weights`` (all zero: uniformly), each from its
    own seeded stream, so the count of batches drawn is its position (``drawn`` counts the samples,
    for the epoch a trainer logs)."""

    def __init__(self, weights: np.ndarray, seed: int, draws: int = 0, drawn: int = 0) -> None:
        w = np.asarray(weights, np.float64)
        w = w if w.sum() > 0 else np.ones_like(w)
        self.p, self.seed, self.draws, self.drawn = w / w.sum(), seed, draws, drawn

    def next(self, batch: int) -> np.ndarray:
        out = seeded_rng(self.seed, self.draws).choice(len(self.p), size=batch, p=self.p)
        self.draws, self.drawn = self.draws + 1, self.drawn + batch
        return out

    @property
    def epoch(self) -> int:
        """Whole passes' worth of samples drawn so far."""
        return self.drawn // len(self.p)

    def state(self) -> dict[str, int]:
        return {"draws": self.draws, "drawn": self.drawn}


def meta_action_weights(data: DrivingDataset, weights: Mapping[str, float]) -> np.ndarray:
    """Each sample's draw weight: the largest of ``weights`` over the meta-actions its target shows
    (1 where it shows none of them), so a rare manoeuvre is seen as often as its weight says."""
    out = np.ones(len(data))
    if weights:
        for i, labels in enumerate(data.text["meta_actions"][: len(data)]):
            shown = [weights[a] for a in json.loads(labels) if a in weights] if labels else []
            out[i] = max(shown, default=1.0)
    return out


def hazard_weights(data: DrivingDataset, ttc_s: float, weight: float) -> np.ndarray:
    """Each sample's draw weight: ``weight`` where the car ahead is less than ``ttc_s`` seconds away at
    the recorded closing speed (``agents.vla.perception.time_to_lead``), else 1. The expert brakes early,
    so those states are rare in its data (203 of core train's 6,841 within 4 s)."""
    if "perception" not in data.arrays:
        raise DatasetError(
            f"{data.path}: train.hazard_weight needs the perception targets, and this data was collected "
            "before they were recorded; collect it again or leave hazard_weight at 1"
        )
    ttc = time_to_lead(np.asarray(data.arrays["perception"][: len(data)]))
    return np.where(ttc < ttc_s, weight, 1.0)


def perception_loss_weights(perception: np.ndarray, train: TrainSection) -> np.ndarray | None:
    """Each sample's weight in the perception probe's loss, from a batch's recorded ``perception`` targets:
    ``perception_hazard_weight`` where the car ahead is under ``hazard_ttc_s`` seconds away at its closing
    speed (as :func:`hazard_weights` picks), else 1; None when the recipe weights nothing."""
    if train.perception_hazard_weight == 1.0:
        return None
    near = time_to_lead(perception) < train.hazard_ttc_s
    return np.where(near, train.perception_hazard_weight, 1.0).astype(np.float32)


def family_weights(data: DrivingDataset, weights: Mapping[str, float]) -> np.ndarray:
    """Each sample's draw weight from its scenario's family (1 for a family not named): a family's share
    of the batches, which a dataset's counts set otherwise. The families are read from the data's bank;
    a name that is no family there is refused (a misspelt family would weight nothing)."""
    if not weights:
        return np.ones(len(data))
    bank_name = data.card["source"]["bank"]
    families = set(scenario_families(bank_name).values())
    unknown = sorted(set(weights) - families)
    if unknown:
        raise DatasetError(
            f"train.family_weights: {unknown} are no family of bank {bank_name!r}, which {data.path} was "
            f"collected on (its families: {sorted(families)})"
        )
    return np.array([weights.get(family, 1.0) for family in data.families()])


def draw_weights(data: DrivingDataset, train: TrainSection) -> np.ndarray:
    """How often each sample is drawn relative to the others: the largest of its meta-action weight and
    its hazard weight, times its family's weight (all 1 when the recipe weights nothing)."""
    weights = meta_action_weights(data, train.meta_action_weights)
    if train.hazard_weight != 1.0:
        weights = np.maximum(weights, hazard_weights(data, train.hazard_ttc_s, train.hazard_weight))
    return weights * family_weights(data, train.family_weights)


def learning_rate(step: int, cfg: TrainSection, total: int | None = None) -> float:
    """Linear warm-up, then cosine decay to 10% at ``total`` (default ``cfg.steps``; SFT with DAgger
    rounds decays over all its steps). A function of the step: nothing to checkpoint."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, (total or cfg.steps) - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def ensure_dataset(data: DataSection, progress: bool | None = None) -> DrivingDataset:
    """Read the recipe's dataset, collecting (or finishing) it first when allowed."""
    path = Path(data.path)
    if data.collect:
        collect(data.settings(), path, progress=progress)
    elif not path.exists():
        raise DatasetError(f"data.path {path} does not exist and data.collect is false")
    return DrivingDataset(path, max_gb=data.max_gb)


def prepare_run(data: DataSection, train: TrainSection, run_dir: Path, progress: bool | None = None) -> DrivingDataset:
    """What a trainer on collected data does first: torch threads, leftovers of a killed save, the data."""
    if train.threads:
        torch.set_num_threads(train.threads)
    clean_stale(run_dir)
    return ensure_dataset(data, progress)
