"""Rewards: reward terms of world transitions, a registry for built-in and user terms, episode metrics."""

from rewards import terms as _terms  # noqa: F401  (registers the built-in terms)
from rewards.metrics import leaderboard_score
from rewards.registry import REWARD_TERMS, RewardComposer, RewardConfigError, register, resolve
from rewards.terms import DEFAULT_REWARDS
from rewards.transition import EgoState, Transition

__all__ = [
    "DEFAULT_REWARDS",
    "REWARD_TERMS",
    "EgoState",
    "RewardComposer",
    "RewardConfigError",
    "Transition",
    "leaderboard_score",
    "register",
    "resolve",
]
