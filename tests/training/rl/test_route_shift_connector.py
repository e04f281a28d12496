"""The route shift inside the env runners moves an episode's observations as the evaluated agent does."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray.rllib")


def _observation(lateral: float, speed: float = 10.0) -> dict[str, np.ndarray]:
    """A straight route ahead of a car ``lateral`` metres left of it."""
    from envs.observations import EGO_STATE_DIM, LATERAL_ERROR

    ego = np.zeros(EGO_STATE_DIM, np.float32)
    ego[0], ego[LATERAL_ERROR] = speed, lateral
    route = np.stack([np.arange(20, dtype=np.float32) * 2.0, np.full(20, -lateral, np.float32)], 1)
    return {"route": route, "ego_state": ego}


def test_shifted_routes_move_each_new_observation_as_the_agents_route_shift_once_per_step():
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from agents.vla.manoeuvre import ManoeuvreHold
    from agents.vla.route_shift import RouteShift
    from training.rl.module import HOLD_CLASS, HOLD_LEFT, MANOEUVRE, SHIFT_SIDE
    from training.rl.route_shift import ShiftedRoutes

    raw = [_observation(lateral=0.1 * k) for k in range(6)]
    # the module's outputs at each decision: a left change chosen at the first, held for three, then keep
    decided = [(1, 1, 2), (0, 1, 1), (0, 1, 0), (0, 0, 0), (0, 0, 0)]  # (planned, hold class, left)
    connector = ShiftedRoutes(metres=3.5, decision_s=0.5, hold=3)
    reference = RouteShift(3.5, 0.5)
    episode = SingleAgentEpisode(observations=[raw[0]])
    sides, moved = [], []
    for k in range(len(raw)):
        if k:
            planned, kept, left = decided[k - 1]
            outputs = {MANOEUVRE: np.int64(planned), HOLD_CLASS: np.int64(kept), HOLD_LEFT: np.int64(left)}
            episode.add_env_step(raw[k], np.zeros((64, 3), np.float32), 0.0, extra_model_outputs=outputs)
        held = ManoeuvreHold(3, *decided[k - 1][1:]) if k else ManoeuvreHold(3)
        expected = reference(raw[k], held)
        for _ in range(2):  # a second pass over the same step moves nothing further
            batch: dict = {}
            connector(rl_module=None, batch=batch, episodes=[episode])
            observation = episode.get_observations(-1)
            np.testing.assert_array_equal(observation["route"], expected["route"])
            np.testing.assert_array_equal(observation["ego_state"], expected["ego_state"])
        sides.append(int(next(iter(batch[SHIFT_SIDE].values()))[0]))
        moved.append(float(raw[k]["route"][0, 1] - observation["route"][0, 1]))
    assert sides == [0, 1, 1, 0, 0, 0]  # drawn left from the decision after the change, while the hold lasts
    assert moved[0] == moved[1] == 0.0 and moved[2] < -0.1 and moved[3] < moved[2]  # the route moves left ...
    assert moved[5] > moved[3]  # ... and back once the hold has ended
    # a new episode (RLlib resets inside its vector env) starts a shift of its own; the old one's is dropped
    fresh = SingleAgentEpisode(observations=[raw[3]])
    connector(rl_module=None, batch={}, episodes=[fresh])
    np.testing.assert_array_equal(fresh.get_observations(-1)["route"], raw[3]["route"])
    assert list(connector._shifts) == [fresh.id_]


def test_the_route_shift_needs_the_decisions_period():
    from training.rl.hold import HeldManoeuvres, HoldConnectors
    from training.rl.route_shift import ShiftedRoutes

    with pytest.raises(ValueError, match=r"route_shift = 3\.5: give the decisions' period decision_s > 0"):
        HoldConnectors(12, 3.5)
    assert [type(c) for c in HoldConnectors(12)()] == [HeldManoeuvres]
    assert [type(c) for c in HoldConnectors(12, 3.5, 0.5)()] == [HeldManoeuvres, ShiftedRoutes]
