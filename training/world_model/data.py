"""Driving data (``loopdrive collect`` zarr) as a world model sees it: consecutive decisions of an episode.

A training pair is (context: the camera frames of the last ``context`` decisions, motion: where the ego
then went during the next decision, target: the frames at the next decision). Decisions are consecutive
when they share an episode and lie one decision period apart (the collector filters some samples out:
a gap ends a run). Where an episode has fewer past decisions than the context, the oldest available
frames repeat, as in the world-model backend's warm start. Scenarios are held out by id for the
evaluation, so a held-out sequence is never a neighbour of a training one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch

from envs.backends.world_model import WorldModel, decision_motion
from training.data import DrivingDataset


@dataclass
class Pairs:
    context: np.ndarray  # uint8 [B, K, cams, F, H, W, 3]
    motion: np.ndarray  # float32 [B, 2 x decision_every + 1]
    target: np.ndarray  # uint8 [B, cams, F, H, W, 3]


class FrameSequences:
    def __init__(self, dataset: DrivingDataset, context: int, val_fraction: float = 0.1) -> None:
        a = dataset.arrays
        card = dataset.card
        if card.get("frame_every", 1) != 1:  # the world-model backend draws a decision's last frames
            raise ValueError(
                f"{dataset.path}: frames {card['frame_every']} steps apart; a world model learns from "
                "frame_every = 1 data (the frames it generates are a decision's last)"
            )
        self.decision_every = int(card["decision_every"])
        self.cameras = a["cameras"]  # [N, cams, F, H, W, 3]
        self.context = context
        self.motion = np.stack(
            [decision_motion(tgt[: self.decision_every, :2], v) for tgt, v in zip(a["target"], a["speed0"])]
        )
        period = 0.1 * self.decision_every
        ep, t = a["episode"], a["t"]
        follows = np.zeros(len(ep), bool)  # sample i + 1 is the decision right after sample i
        follows[:-1] = (ep[1:] == ep[:-1]) & (np.abs(t[1:] - t[:-1] - period) < 1e-3)
        self.follows = follows
        scenario = dataset.text["scenario"]
        held = np.array([zlib.crc32(s.encode()) % 1000 < val_fraction * 1000 for s in scenario])
        self.train_pairs = np.flatnonzero(follows & ~held)
        self.val_pairs = np.flatnonzero(follows & held)
        if len(self.train_pairs) == 0:
            raise ValueError("the dataset has no consecutive decisions outside the held-out scenarios to train on")

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return self.cameras.shape[1:]  # (cams, F, H, W, 3)

    def change_std(self, limit: int = 512) -> float:
        """Spread of the frame-to-frame change (pixels in [-1, 1]) over up to ``limit`` training pairs."""
        idx = self.train_pairs[np.linspace(0, len(self.train_pairs) - 1, min(limit, len(self.train_pairs))).astype(int)]
        change = (self.cameras[idx + 1].astype(np.float32) - self.cameras[idx].astype(np.float32)) / 127.5
        return float(change.std())

    def context_indices(self, i: int) -> list[int]:
        """Sample indices of the ``context`` decisions ending at ``i`` (oldest first, the earliest repeated)."""
        idx = [i]
        while len(idx) < self.context:
            j = idx[0]
            idx.insert(0, j - 1 if j > 0 and self.follows[j - 1] else j)
        return idx

    def pairs(self, starts: np.ndarray) -> Pairs:
        ctx = np.stack([self.cameras[self.context_indices(int(i))] for i in starts])
        return Pairs(ctx, self.motion[starts], self.cameras[np.asarray(starts) + 1])

    def sequences(self, horizon: int, limit: int, seed: int = 0) -> np.ndarray:
        """Held-out starts with ``horizon`` consecutive decisions after them (up to ``limit``, spread out)."""
        ok = [i for i in self.val_pairs if all(self.follows[i + h] for h in range(horizon))]
        if not ok:
            raise ValueError(
                f"no held-out sequence of {horizon} consecutive decisions: collect more data, or lower world.horizons"
            )
        rng = np.random.default_rng(seed)
        return np.sort(rng.choice(ok, size=min(limit, len(ok)), replace=False))


def per_camera(pairs: Pairs, model: WorldModel) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor]:
    """Every camera a row: (context pixels, motion, uint8 target, camera ids)."""
    b, k, cams = pairs.context.shape[:3]
    ctx = pairs.context.swapaxes(1, 2).reshape(b * cams, k, *pairs.context.shape[3:])
    motion = torch.from_numpy(np.repeat(pairs.motion, cams, 0))
    camera = torch.arange(cams).repeat(b)
    return model.pixels(ctx), motion, pairs.target.reshape(b * cams, *pairs.target.shape[2:]), camera
