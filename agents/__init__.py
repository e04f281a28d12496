"""Agents: the protocol, the privileged expert, baselines, and loading by spec string."""

from agents.base import DEFAULT_OBSERVATION, Agent, AgentOutput, BaseAgent, ObservationSetup
from agents.baselines import ConstantVelocity, Stop
from agents.expert import Expert
from agents.loading import BUILTIN, AgentSpecError, load_agent, trained_observation

__all__ = [
    "BUILTIN",
    "DEFAULT_OBSERVATION",
    "Agent",
    "AgentOutput",
    "AgentSpecError",
    "BaseAgent",
    "ConstantVelocity",
    "Expert",
    "ObservationSetup",
    "Stop",
    "load_agent",
    "trained_observation",
]
