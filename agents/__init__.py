"""Agents: the protocol, the privileged expert, baselines, and loading by spec string."""

from agents.base import Agent, AgentOutput, BaseAgent
from agents.baselines import ConstantVelocity, Stop
from agents.expert import Expert
from agents.loading import BUILTIN, AgentSpecError, load_agent

__all__ = [
    "BUILTIN",
    "Agent",
    "AgentOutput",
    "AgentSpecError",
    "BaseAgent",
    "ConstantVelocity",
    "Expert",
    "Stop",
    "load_agent",
]
