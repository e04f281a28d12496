"""An exponential moving average of the trained weights: the policy a supervised run saves when
``[train] ema_decay`` is set.

The last iterate of a short run at a small batch carries the noise of its last few hundred batches, and
in closed loop that noise is a different policy: two draws of the same recipe differ by more than the
options measured against them. Flow-matching and diffusion policies are saved as an average for that
reason (openpi's pi0 recipes average with decay 0.99, Diffusion Policy with up to 0.9999). The decay
warms up as ``min(ema_decay, (1 + n) / (10 + n))`` after ``n`` updates, so the first steps' weights
(the random start) leave the average quickly. The averaging itself is ``torch.optim.swa_utils``'.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def warmed_decay(decay: float, updates: int) -> float:
    """The decay of the update after ``updates`` earlier ones: ``decay``, smaller while the average is young."""
    return min(decay, (1 + updates) / (10 + updates))


def _warmed_ema(decay: float):
    """``AveragedModel``'s ``multi_avg_fn``: torch's EMA update at the warmed decay."""

    def update(averaged: list[torch.Tensor], current: list[torch.Tensor], updates: torch.Tensor | int) -> None:
        get_ema_multi_avg_fn(warmed_decay(decay, int(updates)))(averaged, current, updates)

    return update


class WeightAverage:
    """The running average of ``model``'s parameters (its buffers follow the model's): ``update(model)``
    after every optimizer step, ``policy`` is the averaged model to save and evaluate."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self._averaged = AveragedModel(model, multi_avg_fn=_warmed_ema(decay))

    @property
    def policy(self) -> nn.Module:
        return self._averaged.module

    @property
    def updates(self) -> int:
        """How many steps the average holds (a resume sets it back, with the average as its model)."""
        return int(self._averaged.n_averaged)

    @updates.setter
    def updates(self, n: int) -> None:
        self._averaged.n_averaged.fill_(n)

    def update(self, model: nn.Module) -> None:
        self._averaged.update_parameters(model)
