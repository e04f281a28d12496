"""Simple baselines: constant velocity (the classic open-loop reference) and stop."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import AgentOutput, BaseAgent

HORIZON = np.arange(1, 65) * 0.1


class ConstantVelocity(BaseAgent):
    """Keeps the current speed and yaw rate (a constant-curvature arc), as in open-loop benchmarks."""

    name = "constant_velocity"
    observations = ("ego_state",)

    def act(self, observation: dict[str, Any]) -> AgentOutput:
        speed, yaw_rate = speed_and_yaw_rate(observation)
        if abs(yaw_rate) < 1e-4 or speed < 0.1:
            traj = np.stack([speed * HORIZON, np.zeros(64), np.zeros(64)], 1)
        else:
            r, yaw = speed / yaw_rate, yaw_rate * HORIZON
            traj = np.stack([r * np.sin(yaw), r * (1 - np.cos(yaw)), yaw], 1)
        return AgentOutput(traj.astype(np.float32), "Keep the current speed and heading.")


class Stop(BaseAgent):
    """Brakes comfortably to a standstill and stays there."""

    name = "stop"
    observations = ("ego_state",)

    def act(self, observation: dict[str, Any]) -> AgentOutput:
        speed, _ = speed_and_yaw_rate(observation)
        decel = 3.0
        t_stop = speed / decel
        t = np.minimum(HORIZON, t_stop)
        x = speed * t - 0.5 * decel * t**2
        traj = np.stack([x, np.zeros(64), np.zeros(64)], 1).astype(np.float32)
        return AgentOutput(traj, "Stop and stay stopped.")


def speed_and_yaw_rate(observation: dict[str, Any]) -> tuple[float, float]:
    if "ego_state" in observation:
        s = observation["ego_state"]
        return float(s[0]), float(s[2])
    if "ego_history" in observation:
        h = observation["ego_history"]
        return float(h[-1, 3]), float((h[-1, 2] - h[-2, 2]) / 0.1)
    if "state" in observation:
        s = observation["state"]
        return float(s[0]), float(s[2])
    raise KeyError("constant-velocity / stop baselines need 'ego_state', 'ego_history' or 'state' in the observation")
