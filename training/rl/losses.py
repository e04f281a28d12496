"""Policy-gradient losses for GRPO and PPO, as pure tensor functions (REFERENCE.md section 4).

Every function takes per-sample tensors (one sample = one decision's log-prob, or one reasoning
text's) and returns tensors, so each line can be checked against a hand computation. Conventions
follow cosmos-rl: ratio = exp(clamp(logp - logp_old, +-20)); loss = -min(ratio A, clip(ratio,
1 - eps_low, 1 + eps_high) A); dual-clip caps the loss of negative advantages at -c A.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Variant = Literal["grpo", "dapo", "gspo", "aipo"]
Normalise = Literal["group", "batch", "none"]
LOG_RATIO_LIMIT = 20.0


def group_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, normalise: Normalise | bool = "group", eps: float = 1e-6
) -> torch.Tensor:
    """The reward centred on its group's mean, then divided by a standard deviation:

    - ``"group"`` (GRPO): its own group's, so every informative group weighs the same;
    - ``"batch"``: the centred rewards' std over the whole batch (Dr. GRPO / REINFORCE++ style), so a
      group whose rollouts differ by a collision outweighs one that differs by a few centimetres;
    - ``"none"`` (or ``False``): not divided.

    The stds are unbiased sample stds (as ``torch.std``); a group of one, or of equal rewards, gets
    zero advantage.
    """
    mode = ("group" if normalise else "none") if isinstance(normalise, bool) else normalise
    if mode not in ("group", "batch", "none"):
        raise ValueError(f"unknown advantage normalisation {normalise!r}; choose group, batch or none")
    rewards = rewards.double()
    _, index = torch.unique(groups, return_inverse=True)
    n_groups = int(index.max()) + 1 if len(index) else 0
    count = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, index, torch.ones_like(rewards))
    mean = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, index, rewards) / count
    centred = torch.where(count[index] > 1, rewards - mean[index], torch.zeros_like(rewards))
    if mode == "none":
        return centred.float()
    if mode == "batch":
        return (centred / (centred.std() + eps) if len(centred) > 1 else centred).float()
    sq = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, index, centred**2)
    std = torch.sqrt(sq / (count - 1).clamp_min(1))
    return (centred / (std[index] + eps)).float()


def informative_groups(rewards: torch.Tensor, groups: torch.Tensor, tol: float = 1e-9) -> torch.Tensor:
    """DAPO's dynamic sampling: a mask of the samples whose group's rewards are not all equal."""
    keep = torch.zeros(len(rewards), dtype=torch.bool)
    for g in torch.unique(groups):
        sel = groups == g
        r = rewards[sel]
        keep[sel] = bool((r.max() - r.min()) > tol)
    return keep


def log_ratio(logp: torch.Tensor, logp_old: torch.Tensor) -> torch.Tensor:
    return torch.clamp(logp - logp_old, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(current || reference): exp(ref - cur) - (ref - cur) - 1 >= 0."""
    d = torch.clamp(logp_ref - logp, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.exp(d) - d - 1


@dataclass
class ClipConfig:
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: float | None = 10.0  # c (cosmos-rl's lower_bound_ratio); None: off
    rho_max: float = 2.0  # AIPO's truncation of the importance ratio


def clipped_loss(ratio: torch.Tensor, adv: torch.Tensor, c: ClipConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample PPO-clip loss with dual-clip, and a mask of the samples where a clip was active."""
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - c.eps_low, 1 + c.eps_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = clipped < unclipped
    if c.dual_clip is not None:
        capped = torch.minimum(loss, -c.dual_clip * adv)
        dual = (adv < 0) & (capped < loss)
        loss = torch.where(adv < 0, capped, loss)
        was_clipped = was_clipped | dual
    return loss, was_clipped


def policy_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    clip: ClipConfig,
    variant: Variant = "grpo",
    sequences: torch.Tensor | None = None,
    logp_ref: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO-family objective over a batch of samples (lower is better) and its statistics.

    ``grpo`` / ``dapo``: token-level clip (DAPO differs in which groups reach here, see
    :func:`informative_groups`). ``gspo``: one ratio per sequence (``sequences`` ids, e.g. the
    episode of each decision) from the mean log-ratio of its samples. ``aipo``: -min(ratio, rho_max) A.
    """
    lr = log_ratio(logp, logp_old)
    if variant == "gspo":
        if sequences is None:
            raise ValueError("variant 'gspo' needs the sequence id of every sample")
        _, index = torch.unique(sequences, return_inverse=True)
        n = int(index.max()) + 1
        count = torch.zeros(n, dtype=lr.dtype, device=lr.device).index_add_(0, index, torch.ones_like(lr))
        seq_lr = torch.zeros(n, dtype=lr.dtype, device=lr.device).index_add_(0, index, lr) / count
        seq_adv = torch.zeros(n, dtype=adv.dtype, device=adv.device).index_add_(0, index, adv) / count
        ratio = torch.exp(seq_lr)
        per, clipped = clipped_loss(ratio, seq_adv, clip)
    elif variant == "aipo":
        ratio = torch.exp(lr)
        per = -torch.clamp(ratio, max=clip.rho_max) * adv
        clipped = ratio > clip.rho_max
    elif variant in ("grpo", "dapo"):
        ratio = torch.exp(lr)
        per, clipped = clipped_loss(ratio, adv, clip)
    else:
        raise ValueError(f"unknown GRPO variant {variant!r}; choose grpo, dapo, gspo or aipo")
    loss = per.mean()
    stats = {
        "ratio_mean": float(ratio.detach().mean()),
        "clip_fraction": float(clipped.float().mean()),
        "approx_kl_old": float((-lr).detach().mean()),
    }
    if logp_ref is not None and kl_coef > 0:
        kl = k3_kl(logp, logp_ref).mean()
        loss = loss + kl_coef * kl
        stats["kl_ref"] = float(kl.detach())
    return loss, stats


def value_loss(
    values: torch.Tensor, values_old: torch.Tensor, targets: torch.Tensor, clip: float | None = None
) -> torch.Tensor:
    """PPO's value loss: 0.5 (V - target)^2, with the optional clip of V around the old value."""
    loss = (values - targets) ** 2
    if clip is not None:
        v_clipped = values_old + torch.clamp(values - values_old, -clip, clip)
        loss = torch.maximum(loss, (v_clipped - targets) ** 2)
    return 0.5 * loss.mean()
