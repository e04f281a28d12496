"""The manoeuvre head: which way the future leaves the lane (keep it, change to the left, to the right),
predicted from the image tokens and the state token's ego features, and handed to the plan.

Trained on the tiny VLA, the flow head never produces the expert's lane change: not from its own
training samples, not with the teacher's "... change lanes to the left" in its context, not with lane
changes drawn four times as often (docs/experiments/sft.md). What the head does follow is its state
token. With ``manoeuvre_in_state`` the manoeuvre is a one-hot in that token: the flow loss sees the
data's own (teacher forcing), so the head learns to plan a given manoeuvre; this head learns to choose
one, and at planning time its argmax is the one planned. The split is conditional imitation learning's
(Codevilla et al. 2018: a command picks the branch), with the command predicted instead of given, as
Alpamayo's meta-actions are decided before the trajectory. Measured on the tiny VLA (stop 60): with
the perception probe's loss the head learns to pass a parked car; the deterministic plan given that
choice leaves its lane by a fifth of the expert's offset, while sampled plans make the whole swerve.
Started from the class's mean plan (``manoeuvre_origin``), the plan leaves the lane; with the choice
held for a few decisions (:class:`ManoeuvreHold`) the car passes a stopped car (stop 62).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import nn

# What the manoeuvre head predicts and, with ``[model] manoeuvre_in_state``, what the plan is conditioned on
# (SFT's ``[train] manoeuvre_weight``): whether the driven future leaves the lane, and to which side. Turns
# follow the route, which the state token already carries; a nudge round an obstacle counts with the lane
# change to its side (9 of core train's 6,841 samples). Every recorded sample has its meta-actions, so
# every dataset has these classes. With ``[model] manoeuvre_stop`` a fourth: a moving car whose future keeps
# its lane and stands (training.data.labels.stops_by); a head without it knows the first three.
MANOEUVRES = ("keep_lane", "change_left", "change_right", "stop")
LANE_CHANGES = (MANOEUVRES.index("change_left"), MANOEUVRES.index("change_right"))


def manoeuvre_names(stop: bool) -> tuple[str, ...]:
    """The classes a head chooses among: the lane's three, and with ``stop`` the stop."""
    return MANOEUVRES if stop else MANOEUVRES[: MANOEUVRES.index("stop")]


def is_lane_change(classes: torch.Tensor) -> torch.Tensor:
    """Which of ``classes`` (indices in ``MANOEUVRES``) leave the lane: what a hold holds, not a car to stop for."""
    return torch.isin(classes, torch.tensor(LANE_CHANGES, device=classes.device))


# What a lane change class names (training.data.labels.manoeuvre_classes): "ego", its start, in the car's own
# frame; "route", the lane the future is in beside the route's, until the car drives back
ManoeuvreFrame = Literal["ego", "route"]
MANOEUVRE_FRAMES: tuple[str, ...] = get_args(ManoeuvreFrame)


class ManoeuvreHead(nn.Module):
    def __init__(self, hidden_size: int, state_size: int, n_classes: int, queries: int = 4, width: int = 128) -> None:
        super().__init__()
        self.score = nn.Linear(hidden_size, queries)  # attention-pooling queries over the image tokens
        self.norm = nn.LayerNorm(hidden_size)  # the residual stream's scale, not the classifier's business
        self.classify = nn.Sequential(
            nn.Linear(queries * hidden_size + state_size, width), nn.SiLU(), nn.Linear(width, n_classes)
        )

    def forward(self, hidden: torch.Tensor, image_tokens: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, n_classes]`` from hidden states ``[B, T, H]`` pooled over ``image_tokens`` ``[B, T]``
        (bool) and the state token's features ``[B, state_size]``."""
        scores = self.score(hidden).float().masked_fill(~image_tokens[..., None], float("-inf"))
        weights = torch.softmax(scores, dim=1)  # [B, T, queries], over the image tokens
        pooled = self.norm(torch.einsum("btq,bth->bqh", weights, hidden.float()))
        return self.classify(torch.cat([pooled.flatten(1), state.float()], 1))


def why_nothing_to_hold(policy: object) -> str | None:
    """Why a hold cannot be asked of ``policy`` (None: it can): its plan must be given a manoeuvre."""
    if getattr(policy, "plans_a_manoeuvre", False):
        return None
    return (
        "its plan is given no manoeuvre (its vla_config.json has neither manoeuvre_in_state nor "
        "manoeuvre_origin), so there is none to hold"
    )


def hold_manoeuvres(
    chosen: torch.Tensor, held: torch.Tensor, left: torch.Tensor, decisions: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decision of a hold, for a batch of episodes ``[B]``: the manoeuvres planned given the head's
    choices ``chosen``, the class each episode held ``held`` and the decisions it was still to be held for
    ``left``; and the decisions each planned class is held for after this one. A lane change the head chooses
    is planned and held for ``decisions`` - 1 more; where it chooses to keep its lane (or to stop) a held
    change goes on until its decisions are spent, and otherwise its choice is planned. Episodes that start
    hold nothing (``held`` = ``left`` = 0)."""
    change = is_lane_change(chosen)
    holding = ~change & (left > 0)
    planned = torch.where(change | ~holding, chosen, held)
    left_after = torch.where(change, torch.full_like(left, decisions - 1), (left - 1).clamp_min(0))
    return planned, left_after


@dataclass
class ManoeuvreHold:
    """One episode's lane change, held once the head chooses it: planned at ``decisions`` decisions in a row
    (the one it was chosen at included) unless the head chooses another change (:func:`hold_manoeuvres`).
    Closed loop the head's choice flickers in front of a parked car (a change at a third to two thirds of the
    decisions), and a plan that obeys each decision edges out and back into the car; measured in
    docs/experiments/rl.md."""

    decisions: int
    held: int = 0  # the class being held (0: keep_lane, none)
    left: int = 0  # further decisions it is held for

    def __call__(self, chosen: int) -> int:
        """The manoeuvre to plan at this decision, given the head's choice."""
        planned, left = hold_manoeuvres(
            torch.tensor([chosen]), torch.tensor([self.held]), torch.tensor([self.left]), self.decisions
        )
        self.held, self.left = int(planned[0]), int(left[0])
        return self.held
