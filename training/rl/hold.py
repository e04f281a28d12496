"""The manoeuvre hold inside RLlib's env runners: each episode's last decision, read back into the batch.

A hold (``rl.hold``, as ``vla:PATH?hold=N`` evaluates) is state that lives across an episode's decisions:
the lane change being held and the decisions it has left. The module keeps both as outputs of every
decision (``hold_class``, ``hold_left``: RLlib stores them in the episode beside the chain), and this
env-to-module piece hands an episode's last pair to its next decision (``held``, ``held_for``); an
episode that starts holds nothing. RLlib resets episodes inside its vector env, so the state follows
them without the module knowing which env a row came from, and the learner never needs it: it scores
each chain given the stored ``manoeuvre``, the class its plan was given (``keep_lane`` where the route
shift, :mod:`training.rl.route_shift`, carries the change held). (RLlib's recurrent ``STATE_IN`` /
``STATE_OUT`` would carry it too, at the price of sequences and zero-padding in every learner batch.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2

from training.rl.module import HELD, HELD_FOR, HOLD_CLASS, HOLD_LEFT


def last_hold(episode: Any) -> tuple[int, int]:
    """The class an episode's last decision holds and the decisions its hold has left; 0 and 0 where the
    episode has no decision yet."""
    if (len(episode) > 0 or episode.t_started > 0) and HOLD_CLASS in episode.extra_model_outputs:
        held = episode.get_extra_model_outputs(key=HOLD_CLASS, indices=-1)
        return int(held), int(episode.get_extra_model_outputs(key=HOLD_LEFT, indices=-1))
    return 0, 0


class HeldManoeuvres(ConnectorV2):
    """Adds ``held`` and ``held_for`` (int64, one per episode) to the module's batch: :func:`last_hold`."""

    def __call__(self, *, rl_module, batch: dict[str, Any], episodes: list, **kwargs) -> dict[str, Any]:
        for episode in self.single_agent_episode_iterator(episodes):
            held, held_for = last_hold(episode)
            self.add_batch_item(batch, HELD, np.int64(held), single_agent_episode=episode)
            self.add_batch_item(batch, HELD_FOR, np.int64(held_for), single_agent_episode=episode)
        return batch


@dataclass(frozen=True)
class HoldConnectors:
    """``config.env_runners(env_to_module_connector=...)``: the hold's pieces before RLlib's defaults, with
    the route drawn into the lane held where ``route_shift`` (metres) is given
    (:class:`training.rl.route_shift.ShiftedRoutes`; ``decision_s``, the decisions' period, paces it)."""

    hold: int
    route_shift: float = 0.0
    decision_s: float = 0.0

    def __post_init__(self) -> None:
        if self.route_shift and self.decision_s <= 0:
            raise ValueError(f"route_shift = {self.route_shift}: give the decisions' period decision_s > 0")

    def __call__(self, env: Any = None, spaces: Any = None, device: Any = None) -> list[ConnectorV2]:
        if not self.route_shift:
            return [HeldManoeuvres()]
        from training.rl.route_shift import ShiftedRoutes

        return [HeldManoeuvres(), ShiftedRoutes(metres=self.route_shift, decision_s=self.decision_s, hold=self.hold)]
