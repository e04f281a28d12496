"""The clearance loss: the plan must stay behind the car ahead.

Stop 75 measured that the tiny VLA's plan hardly acts on what is ahead: given a stopped car 3 m ahead in
its state token it covers 0.9-3.4 m less in 3 s than given nothing ahead (docs/experiments/rl.md). The
flow loss cannot teach that link: the expert brakes early, so its data holds almost no state where the
car ahead decides the future (118 of 6,803 samples under 4 s from it at speed, none closer than 9.4 m).
This loss scores the plan itself against what is ahead, which needs no expert label:

- the plan is what each flow-matching draw's prediction points at, ``x_t + (1 - t) v`` (the one-step
  estimate of the clean actions), at the same noisy actions the flow loss scores: the flow loss holds the
  prediction to the label there, so slowing every plan costs what it gains. (Scored on the deterministic
  plan from the flow's origin instead, which the flow loss barely constrains, the plan slowed everywhere:
  the policy stood still at 92% of its decisions in its first DAgger round; stop 76);
- the car ahead is the perception targets' lead (``agents.vla.perception``): its gap and, from the
  closing speed, its speed, driving on at that speed (a car that brakes is only nearer);
- the plan's distance along its path (:func:`agents.vla.action_space.travel`) may reach at most the car's
  position less a margin at every step; what it drives past that bound is the loss (metres, averaged over
  the steps and the draws). A real sample's bound is never below how far its own label drives, so the
  loss never contradicts the expert;
- a share of the draws that keep their lane asks the expert again at the same noisy actions, given a
  **synthetic car ahead** in the state token (:func:`synthetic_leads`: nearer than the recorded one,
  stopped or slower than the ego): the states the data lacks, where only the state token says that a car
  is there. The same noisy actions with the data's reading must still lead to the label, so the plan can
  only tell the two apart by what the token says is ahead.
"""

from __future__ import annotations

import torch

from agents.vla.action_space import DT
from agents.vla.perception import BLOCKED_RANGE_M, CLOSING_SCALE_MPS, LEAD_RANGE_M, PERCEPTION_TARGETS

_GAP, _CLOSING, _STOPPED, _BLOCKED = (
    PERCEPTION_TARGETS.index(name) for name in ("lead_gap", "lead_closing_speed", "lead_stopped", "blocked_gap")
)
STOPPED_SHARE = 0.5  # of the synthetic cars ahead, the share that stands still (the others drive slower)


def lead_bound(perception: torch.Tensor, v0: torch.Tensor, margin_m: float, steps: int) -> torch.Tensor:
    """How far ``[B, steps]`` a plan may drive by the end of each step behind the car ahead that the
    perception targets ``[B, n]`` record (its gap, its speed ``v0`` less the closing speed, kept): that
    car's position less ``margin_m``, never below 0; ``inf`` where no car is within ``LEAD_RANGE_M``."""
    gap = perception[:, _GAP] * LEAD_RANGE_M
    lead_speed = (v0 - perception[:, _CLOSING] * CLOSING_SCALE_MPS).clamp_min(0.0)
    t = torch.arange(1, steps + 1, dtype=perception.dtype, device=perception.device) * DT
    bound = (gap[:, None] + lead_speed[:, None] * t - margin_m).clamp_min(0.0)
    return torch.where((gap < LEAD_RANGE_M)[:, None], bound, torch.full_like(bound, float("inf")))


def synthetic_leads(
    perception: torch.Tensor, v0: torch.Tensor, share: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``share`` of the rows (a seeded coin each) given a car ahead that is not in the data: a gap drawn
    uniformly up to the recorded lead's (or ``LEAD_RANGE_M``), standing still in ``STOPPED_SHARE`` of them
    (then also blocking the lane, as a stopped car does) and otherwise driving at a uniform draw of the ego's
    speed ``v0``. Returns the perception targets with those rows replaced, and the rows' mask ``[B]``."""
    B = len(perception)
    draws = torch.rand(B, 4, generator=generator, device=perception.device, dtype=perception.dtype)
    chosen = draws[:, 0] < share
    recorded_gap = perception[:, _GAP] * LEAD_RANGE_M
    gap = draws[:, 1] * recorded_gap
    stopped = draws[:, 2] < STOPPED_SHARE
    speed = torch.where(stopped, torch.zeros_like(v0), draws[:, 3] * v0)
    synthetic = perception.clone()
    synthetic[:, _GAP] = gap / LEAD_RANGE_M
    synthetic[:, _CLOSING] = ((v0 - speed) / CLOSING_SCALE_MPS).clamp(-1.0, 1.0)
    synthetic[:, _STOPPED] = stopped.to(perception.dtype)
    recorded_blocked = perception[:, _BLOCKED] * BLOCKED_RANGE_M
    blocked = torch.where(stopped, torch.minimum(gap, recorded_blocked), recorded_blocked)
    synthetic[:, _BLOCKED] = blocked / BLOCKED_RANGE_M
    return torch.where(chosen[:, None], synthetic, perception), chosen


def clearance_loss(travel: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """Metres a plan drives past its bound, averaged over the steps and the rows (``[B, T]`` both)."""
    return (travel - bound).clamp_min(0.0).mean()
