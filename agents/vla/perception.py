"""The perception probe: an auxiliary training target that makes the VLM's image tokens carry what is
ahead (the gap to the car in the ego lane, how fast it closes, a red light's distance, ...).

Trained on the tiny VLA, the flow head's plan hardly moves with the cameras (docs/experiments/sft.md,
"A plan that does not look"): the image tokens are learnt only through the reasoning's few tokens
and the flow loss, and little in them tells the action expert where the car ahead is. The probe reads
the hidden states of the image tokens at the input of the VLM's last layer, the states that layer's
keys and values (the action expert's context) are computed from, and regresses the privileged
world's answers recorded with the data; its gradient shapes those states. One attention-pooling query
per target picks the image tokens that answer it (the car ahead is a few tokens of one camera).
"""

from __future__ import annotations

import torch
from torch import nn


class PerceptionProbe(nn.Module):
    def __init__(self, hidden_size: int, n_targets: int) -> None:
        super().__init__()
        self.score = nn.Linear(hidden_size, n_targets)  # one pooling query per target
        self.value = nn.Linear(hidden_size, n_targets)  # each token's answer to each target

    def forward(self, hidden: torch.Tensor, image_tokens: torch.Tensor) -> torch.Tensor:
        """``[B, n_targets]`` from hidden states ``[B, T, H]`` pooled over ``image_tokens`` ``[B, T]`` (bool)."""
        scores = self.score(hidden).float().masked_fill(~image_tokens[..., None], float("-inf"))
        weights = torch.softmax(scores, dim=1)  # over the image tokens, per target
        return (weights * self.value(hidden).float()).sum(1)
