"""The agent protocol: ``reset(episode_info)`` then ``act(observation) -> AgentOutput`` every decision.

``episode_info`` carries the scenario, the seconds between decisions (``episode_info["decision_s"]``)
and, for privileged agents (the expert), the world itself (``episode_info["world"]``); learned agents
use only the observation (and the period, to read change between decisions). ``act_batch`` exists so
vectorised rollouts can batch inference; the default loops over ``act``. An agent may declare the
observation keys it reads (``observations``), so an evaluation skips rendering cameras nobody looks at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class ObservationSetup(BaseModel):
    """How the observations a model learnt from were made: an evaluation of the model renders the same
    unless told otherwise (a model trained on one frame per camera reads four as a different input)."""

    model_config = ConfigDict(extra="forbid")

    rig: str = Field(description="the camera rig of the training data")
    camera_size: tuple[int, int] = Field(description="rendered camera size (H, W)")
    n_frames: int = Field(ge=1, description="frames per camera in an observation")
    decision_every: int = Field(ge=1, description="world steps (0.1 s) per decision")
    frame_every: int = Field(1, ge=1, description="world steps (0.1 s) between a camera's frames")

    def other_frames(self, n_frames: int, model: str, frame_every: int = 1) -> str | None:
        """Why ``n_frames`` frames per camera, ``frame_every`` steps apart, are not ``model``'s input
        (None when they are)."""
        if (n_frames, frame_every) == (self.n_frames, self.frame_every):
            return None
        where = "its vla_config.json observation"
        return (
            f"{model} was trained on {self.n_frames} frame(s) per camera {self.frame_every} step(s) apart ({where}), "
            f"not {n_frames} frame(s) {frame_every} step(s) apart"
        )


# the suite's default (DESIGN.md): what an evaluation renders for an agent that records no set-up of its own
DEFAULT_OBSERVATION = ObservationSetup(rig="alpamayo4", camera_size=(128, 256), n_frames=4, decision_every=5)


@dataclass
class AgentOutput:
    trajectory: np.ndarray  # [64, 3] ego-frame (x, y, yaw) at 0.1 .. 6.4 s
    reasoning: str | None = None  # Chain-of-Causation text
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Agent(Protocol):
    name: str
    privileged: bool  # needs episode_info["world"]

    def reset(self, episode_info: dict[str, Any]) -> None: ...

    def act(self, observation: dict[str, Any]) -> AgentOutput: ...


class BaseAgent:
    """Convenience base: a name, no privileges, and a looping ``act_batch``."""

    name = "agent"
    privileged = False
    observations: tuple[str, ...] | None = None  # what act() reads; None = the env's defaults (cameras...)

    def reset(self, episode_info: dict[str, Any]) -> None:
        self.episode_info = episode_info

    def act(self, observation: dict[str, Any]) -> AgentOutput:
        raise NotImplementedError

    def act_batch(self, observations: Sequence[dict[str, Any]]) -> list[AgentOutput]:
        return [self.act(o) for o in observations]


class ModelAgent(BaseAgent):
    """An agent around a torch ``model`` that acts in batches: each episode reseeds its generator (from
    ``episode_info["seed"]``), so a run's plans do not depend on the order or grouping of episodes."""

    model: Any
    seed: int = 0

    def reset(self, episode_info: dict[str, Any]) -> None:
        super().reset(episode_info)
        import torch

        seed = int(episode_info.get("seed", self.seed)) if isinstance(episode_info, dict) else self.seed
        self.generator = torch.Generator(device=self.model.device).manual_seed(seed)

    def act(self, observation: dict[str, Any]) -> AgentOutput:
        return self.act_batch([observation])[0]
