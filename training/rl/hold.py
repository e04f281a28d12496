"""The manoeuvre hold inside RLlib's env runners: each episode's last decision, read back into the batch.

A hold (``rl.hold``, as ``vla:PATH?hold=N`` evaluates) is state that lives across an episode's decisions:
the lane change being held and the decisions it has left. The module keeps both as outputs of every
decision (``manoeuvre``, ``hold_left``: RLlib stores them in the episode beside the chain), and this
env-to-module piece hands an episode's last pair to its next decision (``held``, ``held_for``); an
episode that starts holds nothing. RLlib resets episodes inside its vector env, so the state follows
them without the module knowing which env a row came from, and the learner never needs it: it scores
each chain given the stored ``manoeuvre``. (RLlib's recurrent ``STATE_IN`` / ``STATE_OUT`` would carry
it too, at the price of sequences and zero-padding in every learner batch.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2

from training.rl.module import HELD, HELD_FOR, HOLD_LEFT, MANOEUVRE


class HeldManoeuvres(ConnectorV2):
    """Adds ``held`` and ``held_for`` (int64, one per episode) to the module's batch: the class the episode's
    last decision planned and the decisions its hold has left; 0 and 0 where the episode has no decision."""

    def __call__(self, *, rl_module, batch: dict[str, Any], episodes: list, **kwargs) -> dict[str, Any]:
        for episode in self.single_agent_episode_iterator(episodes):
            held, held_for = 0, 0
            if (len(episode) > 0 or episode.t_started > 0) and MANOEUVRE in episode.extra_model_outputs:
                held = episode.get_extra_model_outputs(key=MANOEUVRE, indices=-1)
                held_for = episode.get_extra_model_outputs(key=HOLD_LEFT, indices=-1)
            self.add_batch_item(batch, HELD, np.int64(held), single_agent_episode=episode)
            self.add_batch_item(batch, HELD_FOR, np.int64(held_for), single_agent_episode=episode)
        return batch


def held_manoeuvres_connector(env: Any = None, spaces: Any = None, device: Any = None) -> list[ConnectorV2]:
    """``config.env_runners(env_to_module_connector=...)``: the hold's piece before RLlib's defaults."""
    return [HeldManoeuvres()]
