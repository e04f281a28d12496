"""The Alpamayo-style VLA: a transformers VLM backbone (Qwen2.5-VL or Qwen3-VL) writing Chain-of-Causation
reasoning, and a flow-matching action expert attending to its KV cache, in the unicycle action space."""

from agents.vla.action_space import denormalise, from_trajectory, initial_speed, integrate, normalise
from agents.vla.config import VLAConfig
from agents.vla.flow import (
    ActionExpert,
    ExpertConfig,
    flow_draw,
    gaussian_log_prob,
    log_prob,
    sample_ode,
    sample_sde,
)
from agents.vla.model import VLA

__all__ = [
    "VLA",
    "ActionExpert",
    "ExpertConfig",
    "VLAConfig",
    "denormalise",
    "flow_draw",
    "from_trajectory",
    "gaussian_log_prob",
    "initial_speed",
    "integrate",
    "log_prob",
    "normalise",
    "sample_ode",
    "sample_sde",
]
