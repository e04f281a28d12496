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
