"""``vla:PATH``: a saved VLA as an agent (reasoning on by default, ``vla:PATH?reasoning=0`` to skip;
``flow_steps`` overrides the model's denoising steps; ``guidance`` is context guidance's weight, one or
one per action dimension, for a model trained with ``flow_unconditional``; ``hold`` keeps a lane change
the manoeuvre head chooses for that many decisions, for a model whose plan is given its manoeuvre;
``route_shift`` moves the route the plan reads that many metres (a lane) to the side of the change held,
and back when the hold ends (:mod:`agents.vla.route_shift`);
``perception=oracle`` gives the plan the privileged world's answers where the probe's reading goes,
for a model with ``perception_in_state``: a diagnostic of what the plan would do if it saw perfectly,
never a driver to score as the VLA; ``perception=lead_gap,lead_closing_speed`` gives it the world's
answers to those of the probe's questions only, and the probe's reading of the rest, to tell which
answer a plan misses; ``closing=tracked`` gives it the closing speed to the car ahead read as the fall
of the gap it is given since the last decision, :class:`LeadTracker`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agents.base import AgentOutput, ModelAgent
from agents.vla.flow import Guidance
from agents.vla.manoeuvre import ManoeuvreHold, why_nothing_to_hold
from agents.vla.perception import (
    CLOSING_SCALE_MPS,
    LEAD_RANGE_M,
    PERCEPTION_TARGETS,
    LeadTracker,
    perception_targets,
)
from agents.vla.route_shift import RouteShift
from rewards.scene import scene_facts

PERCEPTION_SOURCES = ("probe", "oracle")  # what the plan's state token is given as what is ahead
CLOSING_SOURCES = ("probe", "tracked")  # where its closing speed to the car ahead comes from
GAP, CLOSING = PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")


def targets_from_world(perception: str) -> tuple[str, ...]:
    """The probe's questions an agent's ``perception`` answers from the privileged world: none for
    ``probe``, all for ``oracle``, else the comma-separated ``PERCEPTION_TARGETS`` named."""
    if perception in PERCEPTION_SOURCES:
        return PERCEPTION_TARGETS if perception == "oracle" else ()
    named = tuple(name.strip() for name in perception.split(","))
    unknown = [name for name in named if name not in PERCEPTION_TARGETS]
    if unknown or len(set(named)) != len(named):
        raise ValueError(
            f"perception must be one of {PERCEPTION_SOURCES} or distinct targets of {PERCEPTION_TARGETS} "
            f"separated by commas, got {perception!r}"
        )
    return named


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
        route_shift: float = 0.0,
        perception: str = "probe",
        closing: str = "probe",
    ) -> None:
        from agents.vla.model import VLA

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = VLA.from_pretrained(path, device)
        self.reasoning, self.seed, self.noise_scale = reasoning, seed, noise_scale
        self.flow_steps, self.guidance, self.hold = flow_steps, guidance, hold
        self.model.check_guidance(guidance)  # at load time, not at the first decision
        if hold and (why := why_nothing_to_hold(self.model)):
            raise ValueError(f"hold = {hold}: this VLA cannot hold a manoeuvre: {why}")
        if route_shift < 0 or (route_shift and not hold):
            raise ValueError(f"route_shift = {route_shift}: give metres >= 0, with a hold (the lane change it moves)")
        if route_shift and not self.model.config.route_inputs:
            raise ValueError("route_shift: this VLA reads no route (its vla_config.json has route_inputs = false)")
        self.route_shift = route_shift
        self.from_world = targets_from_world(perception)
        if closing not in CLOSING_SOURCES:
            raise ValueError(f"closing must be one of {CLOSING_SOURCES}, got {closing!r}")
        if closing == "tracked" and "lead_closing_speed" in self.from_world:
            raise ValueError(f"closing = tracked: perception = {perception} gives the world's closing speed already")
        for option, given in (("perception", self.from_world), ("closing", closing == "tracked")):
            if given and not self.model.config.perception_in_state:
                raise ValueError(f"{option}: this VLA's plan reads no perception probe (perception_in_state)")
        self.perception, self.closing = perception, closing
        self._world_columns = [PERCEPTION_TARGETS.index(name) for name in self.from_world]
        self._held: ManoeuvreHold | None = None
        self._shift: RouteShift | None = None
        self._tracker: LeadTracker | None = None
        self._world: Any = None

    def reset(self, episode_info: dict[str, Any]) -> None:
        super().reset(episode_info)
        self._held = ManoeuvreHold(self.hold) if self.hold else None
        if self.route_shift:
            if "decision_s" not in episode_info:
                raise ValueError("route_shift: reset the agent with episode_info['decision_s'] (its period)")
            self._shift = RouteShift(self.route_shift, float(episode_info["decision_s"]))
        self._world = episode_info.get("world") if isinstance(episode_info, dict) else None
        if self.closing == "tracked":
            if "decision_s" not in episode_info:
                raise ValueError("closing = tracked: reset the agent with episode_info['decision_s'] (its period)")
            self._tracker = LeadTracker(float(episode_info["decision_s"]))

    def act_batch(self, observations: list[dict[str, Any]]) -> list[AgentOutput]:
        choose = None
        if self._held is not None:
            if len(observations) != 1:
                raise ValueError(f"hold: an agent holds one episode's manoeuvre; {len(observations)} observations")
            choose = self._hold
        if self._shift is not None and self._held is not None:
            observations = [self._shift(observations[0], self._held)]
        outs = self.model.act_batch(
            observations,
            self.reasoning,
            self.generator,
            self.noise_scale,
            self.flow_steps,
            self.guidance,
            choose,
            self._perceive if self.from_world or self._tracker else None,
        )
        return [AgentOutput(o["trajectory"], o["reasoning"]) for o in outs]

    def _perceive(self, read: np.ndarray) -> np.ndarray:
        """What the plan's state token is given for what the probe ``read`` (``[1, perception_targets]``):
        the world's answers to ``from_world`` now, then with ``closing = tracked`` the closing speed
        tracked from the gap given (the probe's where the tracker knows none yet)."""
        if len(read) != 1:
            raise ValueError(f"perception / closing: an agent reads one episode's world; {len(read)} observations")
        given = read.copy()
        if self.from_world:
            if self._world is None:
                raise ValueError(
                    f"perception = {self.perception} reads the world: reset the agent with episode_info['world']"
                )
            given[0, self._world_columns] = perception_targets(scene_facts(self._world))[self._world_columns]
        if self._tracker is not None and (closing := self._tracker(float(given[0, GAP]) * LEAD_RANGE_M)) is not None:
            given[0, CLOSING] = np.clip(closing / CLOSING_SCALE_MPS, -1.0, 1.0)
        return given

    def _hold(self, chosen: torch.Tensor) -> torch.Tensor:
        """The manoeuvre planned: the head's choice, or the lane change this episode holds."""
        planned = [self._held(int(c)) for c in chosen]
        if self._shift is not None:  # on a route moved into the lane, the plan keeps that lane
            planned = [self._shift.planned(p) for p in planned]
        return chosen.new_tensor(planned)
