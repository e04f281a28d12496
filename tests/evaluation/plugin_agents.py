"""Misbehaving agents for the evaluation tests, loaded by spec (``tests.evaluation.plugin_agents:Crashes``).

Importable by Ray workers too: the tests put this folder on PYTHONPATH.
"""

from __future__ import annotations

import os
import time

import numpy as np

from agents import AgentOutput
from agents.baselines import ConstantVelocity
from agents.expert import Expert


class Crashes(ConstantVelocity):
    """Raises on its third decision in curve scenarios, drives normally elsewhere."""

    def reset(self, episode_info):
        super().reset(episode_info)
        self.calls, self.family = 0, episode_info["scenario"].family

    def act(self, observation):
        self.calls += 1
        if self.family == "curve" and self.calls == 3:
            raise RuntimeError("planner exploded on purpose")
        return super().act(observation)


class ReturnsNaN(ConstantVelocity):
    """A NaN trajectory in straight-road scenarios."""

    def act(self, observation):
        out = super().act(observation)
        if self.episode_info["scenario"].family == "straight":
            out.trajectory[10:, 1] = np.nan
        return out


class Hangs(ConstantVelocity):
    def act(self, observation):
        time.sleep(30)
        return super().act(observation)


class KillsItsWorker(Expert):
    """Takes the whole process down (as a segfault would) in the cut-in scenario."""

    def reset(self, episode_info):
        super().reset(episode_info)
        if episode_info["scenario"].family == "cut_in":
            os._exit(3)


class NoisyExpert(Expert):
    """The expert with a seeded random lateral wobble: the result depends on the agent's episode seed."""

    def reset(self, episode_info):
        super().reset(episode_info)
        self.rng = np.random.default_rng(episode_info["seed"])

    def act(self, observation):
        out = super().act(observation)
        traj = out.trajectory.copy()
        traj[:, 1] += self.rng.normal(0, 0.3) * np.linspace(0, 1, len(traj))
        return AgentOutput(traj, out.reasoning)


class SwallowsTimeouts(ConstantVelocity):
    """Catches every Exception inside act and keeps trying: a time-out must still end its episode."""

    def act(self, observation):
        while True:
            try:
                time.sleep(0.05)
            except Exception:
                continue


class _Malformed(ConstantVelocity):
    """Returns ``self.bad(trajectory)`` instead of a plan after its second decision."""

    def reset(self, episode_info):
        super().reset(episode_info)
        self.calls = 0

    def act(self, observation):
        out = super().act(observation)
        self.calls += 1
        if self.calls <= 2:
            return out
        return AgentOutput(self.bad(out.trajectory), "bad")


class ReturnsList(_Malformed):
    bad = staticmethod(lambda t: [["a", "b", "c"]] * 64)


class ReturnsObjects(_Malformed):
    bad = staticmethod(lambda t: np.array([object()] * 192, dtype=object).reshape(64, 3))


class ReturnsString(_Malformed):
    bad = staticmethod(lambda t: "turn left")


class ReturnsInts(_Malformed):
    bad = staticmethod(lambda t: t.astype(np.int64))


class ReturnsHuge(_Malformed):
    bad = staticmethod(lambda t: t * 1e30)


class ReturnsNothing(ConstantVelocity):
    def act(self, observation):
        return None


class TurnsScaled(ConstantVelocity):
    """Plans at 5 m/s along the road's bend scaled by ``GAIN``: its heading at every metre is ``GAIN``
    times the route's heading change up to there (0: straight ahead, 0.5: turns half as much). Reads
    only the route ahead, so the curvature ratio of its plans is known by construction."""

    GAIN = 1.0
    SPEED = 5.0
    observations = ("route", "ego_state")

    def act(self, observation):
        road = np.asarray(observation["route"], np.float64)  # from 2 m ahead of the ego's projection
        step = np.diff(road, axis=0)
        length = np.hypot(step[:, 0], step[:, 1])
        keep = length > 1e-6  # (a route's end repeats its last point)
        heading = np.unwrap(np.arctan2(step[keep, 1], step[keep, 0]))
        starts = np.concatenate([[0.0], np.cumsum(length[keep])[:-1]])
        ds = self.SPEED * 0.1
        s = np.arange(1, 65) * ds
        yaw = self.GAIN * (np.interp(s, starts, heading) - heading[0])  # no pull back to the route: pure bend
        x, y = np.cumsum(ds * np.cos(yaw)), np.cumsum(ds * np.sin(yaw))
        return AgentOutput(np.stack([x, y, yaw], 1).astype(np.float32), None)


class FollowsRoad(TurnsScaled):
    """Ratio 1: pursues the route itself (its plan runs from the ego through the route's points), so it also
    steers back from what the controller's lag leaves: it stays on the road."""

    def act(self, observation):
        road = np.vstack([np.zeros(2), np.asarray(observation["route"], np.float64)])
        step = np.diff(road, axis=0)
        length = np.hypot(step[:, 0], step[:, 1])
        keep = length > 1e-6
        step, length = step[keep], length[keep]
        ends = np.cumsum(length)
        s = np.minimum(np.arange(1, 65) * self.SPEED * 0.1, ends[-1])
        k = np.minimum(np.searchsorted(ends, s), len(ends) - 1)
        start = road[:-1][keep][k]
        f = ((s - (ends[k] - length[k])) / length[k])[:, None]
        xy = start + f * step[k]
        return AgentOutput(np.column_stack([xy, np.arctan2(step[k, 1], step[k, 0])]).astype(np.float32), None)


class TurnsHalf(TurnsScaled):
    GAIN = 0.5


class DrivesStraight(TurnsScaled):
    GAIN = 0.0
