"""``alpamayo:PATH``: a checkpoint in Alpamayo-R1's released layout as an agent.

Options: ``base=DIR`` (the base VLM folder, when ``vlm_name_or_path`` does not resolve locally),
``reasoning=0`` (plan from the prompt alone, its reasoning empty),
``temperature=`` (reasoning sampling, the release's 0.6; 0 = greedy), ``noise=`` (the flow's starting
noise scale; 0 = the deterministic plan). Plans are clipped to the env's action space like the VLA's.
"""

from __future__ import annotations

from typing import Any

import torch

from agents.base import AgentOutput, ModelAgent


class AlpamayoAgent(ModelAgent):
    name = "alpamayo"

    def __init__(
        self,
        path: str,
        base: str | None = None,
        reasoning: bool = True,
        temperature: float = 0.6,
        noise_scale: float = 1.0,
        device: str | None = None,
        seed: int = 0,
    ) -> None:
        from agents.alpamayo.model import AlpamayoR1

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = AlpamayoR1.from_pretrained(path, base, device)
        if device == "cuda":
            self.model.in_dtype(torch.bfloat16)
        self.reasoning, self.temperature, self.noise_scale, self.seed = reasoning, temperature, noise_scale, seed

    def act_batch(self, observations: list[dict[str, Any]]) -> list[AgentOutput]:
        outs = self.model.act_batch(observations, self.reasoning, self.generator, self.noise_scale, self.temperature)
        return [AgentOutput(o["trajectory"], o["reasoning"]) for o in outs]
