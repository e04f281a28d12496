"""The perception probe: an auxiliary training target that makes the VLM's image tokens carry what is
ahead (the gap to the car in the ego lane, how fast it closes, a red light's distance, ...).

Trained on the tiny VLA, the flow head's plan hardly moves with the cameras (docs/experiments/sft.md,
"A plan that does not look"): the image tokens are learnt only through the reasoning's few tokens
and the flow loss, and little in them tells the action expert where the car ahead is. The probe reads
the hidden states of the image tokens at the input of the VLM's last layer, the states that layer's
keys and values (the action expert's context) are computed from, and regresses the privileged
world's answers recorded with the data; its gradient shapes those states. One attention-pooling query
per target picks the image tokens that answer it (the car ahead is a few tokens of one camera).

``PERCEPTION_TARGETS`` are the questions, ``perception_targets`` the world's answers: recorded with the
data for the probe to learn, and given to the plan in place of the probe's reading by an agent's
``perception=oracle`` (what perfect perception would buy). ``LeadTracker`` reads the closing speed from
the gap's fall between decisions instead of from one frame (an agent's ``closing=tracked``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rewards.scene import SceneFacts

# What the perception probe learns to read off the image tokens (SFT's ``[train] perception_weight``):
# the privileged world's answer to "what is ahead of me", each scaled to about [0, 1] and defined when
# nothing is there (a gap reads as its range, a flag as 0), so every sample has all of them.
LEAD_RANGE_M = 60.0  # lead_gap's scale: the farthest gap it tells apart
NOTHING_AHEAD_M = 0.95 * LEAD_RANGE_M  # a gap read this far or farther reads as no car ahead
CLOSING_SCALE_MPS = 10.0  # lead_closing_speed's scale, and the largest closing speed it tells apart
BLOCKED_RANGE_M = 40.0  # blocked_gap's scale: an obstacle in the ego lane is counted within it (rewards.scene)
PERCEPTION_TARGETS = (
    "lead_gap",  # bumper-to-bumper gap to the nearest vehicle in the ego path, / 60 m (1: none within 60 m)
    "lead_closing_speed",  # ego speed - that vehicle's speed, / 10 m/s, clipped to [-1, 1] (0: none)
    "lead_stopped",  # 1 if that vehicle stands still
    "blocked_gap",  # gap to a parked or stopped obstacle in the ego lane, / 40 m (1: none within 40 m)
    "cut_in_gap",  # gap to a vehicle moving into the ego lane, / 30 m (1: none within 30 m)
    "stop_distance",  # metres to a red or yellow light's or a stop sign's line, / 50 m (1: none)
    "pedestrian_in_path",  # 1 if a pedestrian is in or near the path
    "oncoming",  # vehicles ahead in the oncoming direction within 60 m, / 3, at most 1
)


def perception_targets(facts: SceneFacts) -> np.ndarray:
    """The ``PERCEPTION_TARGETS`` of a scene, float32 in their order."""
    lead = facts.lead_vehicle
    stop = [facts.stop_sign_ahead] if facts.stop_sign_ahead is not None else []
    if facts.signal_ahead is not None and facts.signal_ahead["state"] in ("red", "yellow"):
        stop.append(facts.signal_ahead["distance"])
    values = {
        "lead_gap": min(lead["gap"], LEAD_RANGE_M) / LEAD_RANGE_M if lead else 1.0,
        "lead_closing_speed": float(np.clip((facts.speed - lead["speed"]) / CLOSING_SCALE_MPS, -1, 1)) if lead else 0.0,
        "lead_stopped": float(bool(lead and lead["stopped"])),
        "blocked_gap": min(facts.blocked_lane["gap"], BLOCKED_RANGE_M) / BLOCKED_RANGE_M if facts.blocked_lane else 1.0,
        "cut_in_gap": min(facts.cut_in["gap"], 30.0) / 30.0 if facts.cut_in else 1.0,
        "stop_distance": float(np.clip(min(stop), 0.0, 50.0)) / 50.0 if stop else 1.0,
        "pedestrian_in_path": float(any(p["in_path"] for p in facts.pedestrians)),
        "oncoming": min(facts.oncoming, 3) / 3.0,
    }
    return np.array([values[name] for name in PERCEPTION_TARGETS], np.float32)


def time_to_lead(perception: np.ndarray) -> np.ndarray:
    """Seconds until the ego reaches the car ahead at the current closing speed, per row of recorded
    ``perception`` targets (inf where no car is within 60 m or the gap is not closing by 0.5 m/s).
    The closing speed is read as recorded, clipped at 10 m/s: a faster one reads as more time."""
    gap = perception[..., PERCEPTION_TARGETS.index("lead_gap")] * LEAD_RANGE_M
    closing = perception[..., PERCEPTION_TARGETS.index("lead_closing_speed")] * CLOSING_SCALE_MPS
    ahead = (gap < LEAD_RANGE_M) & (closing > 0.5)
    return np.where(ahead, gap / np.where(ahead, closing, 1.0), np.inf)


@dataclass
class LeadTracker:
    """One episode's closing speed to the car ahead, read as the fall of its gap since the last decision.

    One frame per camera shows the gap and hardly how fast it closes: given the world's closing speed, a
    plan that acts on its state token gains about as much as given all of the world's answers, and so
    it does given the closing speed tracked from the world's gap; tracked from the probe's gap, whose
    error changes by about 5 m between decisions, it is not (docs/experiments/rl.md, stop 79). A gap
    read as nothing ahead ends the track; one that jumps more than ``gate_m`` from the track's
    prediction (another car: a cut-in, a lane change) starts a new one. A new track knows no closing
    speed yet (None: the plan keeps the one it reads)."""

    period_s: float  # seconds between decisions
    gate_m: float = 8.0
    gap: float | None = None  # the last gap, m
    rate: float | None = None  # the gap's change per second, m/s

    def __call__(self, gap_m: float) -> float | None:
        """The closing speed (m/s, positive when the gap falls) at this decision's gap, or None."""
        if gap_m >= NOTHING_AHEAD_M:
            self.gap = self.rate = None
            return None
        if self.gap is not None:
            predicted = self.gap + (self.rate or 0.0) * self.period_s
            if abs(gap_m - predicted) <= self.gate_m:
                self.rate, self.gap = (gap_m - self.gap) / self.period_s, gap_m
                return -self.rate
        self.gap, self.rate = gap_m, None
        return None


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
