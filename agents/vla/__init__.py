"""The Alpamayo-style VLA, built up from its parts: the unicycle action space and the flow-matching
action expert (with Euler ODE and Flow-GRPO SDE sampling). The transformers backbone, prompt and
tokenizer that feed the expert its context come next (issue 4)."""

from agents.vla.action_space import denormalise, from_trajectory, initial_speed, integrate, normalise
from agents.vla.flow import (
    ActionExpert,
    ExpertConfig,
    flow_matching_loss,
    gaussian_log_prob,
    log_prob,
    sample_ode,
    sample_sde,
)

__all__ = [
    "ActionExpert",
    "ExpertConfig",
    "denormalise",
    "flow_matching_loss",
    "from_trajectory",
    "gaussian_log_prob",
    "initial_speed",
    "integrate",
    "log_prob",
    "normalise",
    "sample_ode",
    "sample_sde",
]
