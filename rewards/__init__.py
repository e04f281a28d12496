"""Rewards: reward terms of world transitions, a registry for built-in and user terms, episode metric
suites, how an episode ended, meta-action detectors, scene facts and reasoning-consistency critics."""

from rewards import terms as _terms  # noqa: F401  (registers the built-in terms)
from rewards.comfort import NUPLAN, ComfortBounds, comfort_checks, comfort_series
from rewards.ending import Ending, episode_ending
from rewards.events import Event, EventKind
from rewards.metrics import METRICS, SUITES, EpisodeLog, compute_suites, register_metric
from rewards.registry import REWARD_TERMS, RewardComposer, RewardConfigError, register, resolve
from rewards.terms import DEFAULT_REWARDS, ade
from rewards.transition import EgoState, Transition

__all__ = [
    "DEFAULT_REWARDS",
    "METRICS",
    "NUPLAN",
    "REWARD_TERMS",
    "SUITES",
    "ComfortBounds",
    "EgoState",
    "Ending",
    "EpisodeLog",
    "Event",
    "EventKind",
    "RewardComposer",
    "RewardConfigError",
    "Transition",
    "ade",
    "comfort_checks",
    "comfort_series",
    "compute_suites",
    "episode_ending",
    "register",
    "register_metric",
    "resolve",
]
