"""The route shift inside RLlib's env runners: each episode's route drawn into the lane of the change held,
as ``vla:PATH?hold=N&route_shift=M`` draws it when the policy is evaluated (:mod:`agents.vla.route_shift`).

The shift is an episode's state (where the route is drawn, how far the move across has gone) read off the
hold its last decision left (``hold_class``, ``hold_left``, :mod:`training.rl.hold`). This env-to-module
piece keeps one :class:`~agents.vla.route_shift.RouteShift` per running episode, moves the episode's new
observation and writes it back into the episode, so the learner scores each stored chain on the route its
plan read; ``shift_side`` tells the module where the route is drawn, where a change held is planned as
``keep_lane`` (:func:`~agents.vla.route_shift.planned_on_route`). RLlib starts episodes anew inside its
vector env: a new episode's id starts a new shift, and the shifts of episodes no longer passed are
dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2

from agents.vla.manoeuvre import ManoeuvreHold
from agents.vla.route_shift import RouteShift
from training.rl.hold import last_hold
from training.rl.module import SHIFT_SIDE


class ShiftedRoutes(ConnectorV2):
    """Moves each episode's latest observation's route (in the episode) into the lane of the change its
    hold keeps, and adds ``shift_side`` (int64, one per episode) to the module's batch."""

    def __init__(self, *args: Any, metres: float, decision_s: float, hold: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metres, self.decision_s, self.hold = metres, decision_s, hold
        self._shifts: dict[str, tuple[RouteShift, int]] = {}  # per episode: its shift, the step it moved last

    def __call__(self, *, rl_module, batch: dict[str, Any], episodes: list, **kwargs) -> dict[str, Any]:
        shifts = {}
        for episode in self.single_agent_episode_iterator(episodes):
            known = self._shifts.get(episode.id_)  # (a new episode starts a shift of its own)
            shift, moved_at = known if known else (RouteShift(self.metres, self.decision_s), -1)
            step = episode.t
            if step != moved_at:  # (a second pass over the same step must not move the route twice)
                held, left = last_hold(episode)
                observation = episode.get_observations(-1)
                moved = shift(observation, ManoeuvreHold(self.hold, held, left))
                if moved is not observation:
                    episode.set_observations(new_data=moved, at_indices=-1)
            shifts[episode.id_] = (shift, step)
            self.add_batch_item(batch, SHIFT_SIDE, np.int64(shift.drawn), single_agent_episode=episode)
        self._shifts = shifts
        return batch
