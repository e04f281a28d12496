"""``vla:PATH``: a saved VLA as an agent (reasoning on by default, ``vla:PATH?reasoning=0`` to skip;
``flow_steps`` overrides the model's denoising steps; ``guidance`` is context guidance's weight, one or
one per action dimension, for a model trained with ``flow_unconditional``; ``hold`` keeps a lane change
the manoeuvre head chooses for that many decisions, for a model whose plan is given its manoeuvre;
``perception=oracle`` gives the plan the privileged world's answers where the probe's reading goes,
for a model with ``perception_in_state``: a diagnostic of what the plan would do if it saw perfectly,
never a driver to score as the VLA)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agents.base import AgentOutput, ModelAgent
from agents.vla.flow import Guidance
from agents.vla.manoeuvre import ManoeuvreHold, why_nothing_to_hold
from agents.vla.perception import perception_targets
from rewards.scene import scene_facts

PERCEPTION_SOURCES = ("probe", "oracle")  # what the plan's state token is given as what is ahead


class VLAAgent(ModelAgent):
    name = "vla"

    def __init__(
        self,
        path: str,
        reasoning: bool = True,
        device: str | None = None,
        seed: int = 0,
        noise_scale: float = 1.0,
        flow_steps: int | None = None,
        guidance: Guidance | None = None,
        hold: int = 0,
        perception: str = "probe",
    ) -> None:
        from agents.vla.model import VLA

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = VLA.from_pretrained(path, device)
        self.reasoning, self.seed, self.noise_scale = reasoning, seed, noise_scale
        self.flow_steps, self.guidance, self.hold = flow_steps, guidance, hold
        self.model.check_guidance(guidance)  # at load time, not at the first decision
        if hold and (why := why_nothing_to_hold(self.model)):
            raise ValueError(f"hold = {hold}: this VLA cannot hold a manoeuvre: {why}")
        if perception not in PERCEPTION_SOURCES:
            raise ValueError(f"perception must be one of {PERCEPTION_SOURCES}, got {perception!r}")
        if perception == "oracle" and not self.model.config.perception_in_state:
            raise ValueError("perception = oracle: this VLA's plan reads no perception probe (perception_in_state)")
        self.perception = perception
        self._held: ManoeuvreHold | None = None
        self._world: Any = None

    def reset(self, episode_info: dict[str, Any]) -> None:
        super().reset(episode_info)
        self._held = ManoeuvreHold(self.hold) if self.hold else None
        self._world = episode_info.get("world") if isinstance(episode_info, dict) else None

    def act_batch(self, observations: list[dict[str, Any]]) -> list[AgentOutput]:
        choose = None
        if self._held is not None:
            if len(observations) != 1:
                raise ValueError(f"hold: an agent holds one episode's manoeuvre; {len(observations)} observations")
            choose = self._hold
        outs = self.model.act_batch(
            observations,
            self.reasoning,
            self.generator,
            self.noise_scale,
            self.flow_steps,
            self.guidance,
            choose,
            self._oracle(len(observations)) if self.perception == "oracle" else None,
        )
        return [AgentOutput(o["trajectory"], o["reasoning"]) for o in outs]

    def _oracle(self, n_observations: int) -> np.ndarray:
        """The privileged world's answers to the probe's questions, now: ``[1, perception_targets]``."""
        if n_observations != 1:
            raise ValueError(f"perception = oracle reads one episode's world; {n_observations} observations")
        if self._world is None:
            raise ValueError("perception = oracle reads the world: reset the agent with episode_info['world']")
        return perception_targets(scene_facts(self._world))[None]

    def _hold(self, chosen: torch.Tensor) -> torch.Tensor:
        """The manoeuvre planned: the head's choice, or the lane change this episode holds."""
        return chosen.new_tensor([self._held(int(c)) for c in chosen])
