"""Reasoning-action consistency as a reward: meta-actions of the trajectory + scene facts -> critic."""

from __future__ import annotations

from typing import Any

import numpy as np

from rewards.critics import Critic, RulesCritic
from rewards.critics.base import ConsistencyScore
from rewards.meta_actions import detect, detect_plan, dominant


def consistency_score(
    reasoning: str,
    trajectory: np.ndarray,
    causes: set[str],
    critic: Critic | None = None,
    speed0: float | None = None,
    dt: float = 0.1,
) -> ConsistencyScore:
    """Score a Chain-of-Causation text against the trajectory the car drove (or planned) and the scene.

    ``trajectory`` is an ego-frame plan ``[T, 3]`` when ``speed0`` is given, else world-frame
    ``[T, 2+]`` positions of the executed motion.
    """
    critic = critic or RulesCritic()
    traj = np.asarray(trajectory, float)
    meta = detect_plan(traj, speed0, dt) if speed0 is not None else detect(traj[:, :2], dt)
    executed = dominant(meta)
    result = critic.score(reasoning, executed, set(causes))
    result.details["executed_actions"] = sorted(executed)
    return result


def consistency_reward(
    reasoning: str, trajectory: np.ndarray, causes: set[str], critic: Critic | None = None, **kw: Any
) -> float:
    """The overall score in [0, 1] (mean of behaviour consistency and causal grounding)."""
    return consistency_score(reasoning, trajectory, causes, critic, **kw).overall
