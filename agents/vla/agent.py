"""``vla:PATH``: a saved VLA as an agent (reasoning on by default, ``vla:PATH?reasoning=0`` to skip;
``flow_steps`` overrides the model's denoising steps; ``guidance`` is context guidance's weight, one or
one per action dimension, for a model trained with ``flow_unconditional``)."""

from __future__ import annotations

from typing import Any

import torch

from agents.base import AgentOutput, ModelAgent
from agents.vla.flow import Guidance


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
    ) -> None:
        from agents.vla.model import VLA

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = VLA.from_pretrained(path, device)
        self.reasoning, self.seed, self.noise_scale = reasoning, seed, noise_scale
        self.flow_steps, self.guidance = flow_steps, guidance
        self.model.check_guidance(guidance)  # at load time, not at the first decision

    def act_batch(self, observations: list[dict[str, Any]]) -> list[AgentOutput]:
        outs = self.model.act_batch(
            observations, self.reasoning, self.generator, self.noise_scale, self.flow_steps, self.guidance
        )
        return [AgentOutput(o["trajectory"], o["reasoning"]) for o in outs]
