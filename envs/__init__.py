"""LoopDrive environments: the embedded world, sensors, the trajectory controller and Gymnasium envs.

``import envs`` registers:
- ``LoopDrive-v0``: multi-camera observation, 64 x (x, y, yaw) trajectory action (DESIGN.md);
- ``LoopDriveState-v0``: the compact ``state`` vector only (no rendering), trajectory action;
- ``LoopDriveControl-v0``: ``state`` vector with normalised (accel, steer) control, for classic RL.
"""

from gymnasium.envs.registration import register as _register
from gymnasium.envs.registration import registry as _registry

from envs.controller import TrajectoryController
from envs.driver import RouteFollower
from envs.gym_env import InvalidActionError, LoopDriveEnv, compose_frame
from envs.world import DT, World, compile_scenario

ENV_IDS = ("LoopDrive-v0", "LoopDriveState-v0", "LoopDriveControl-v0")
_KWARGS = {
    "LoopDrive-v0": {},
    "LoopDriveState-v0": {"observations": ("state",)},
    "LoopDriveControl-v0": {"observations": ("state",), "action_mode": "control"},
}
for _id in ENV_IDS:
    if _id not in _registry:
        _register(id=_id, entry_point="envs.gym_env:LoopDriveEnv", kwargs=_KWARGS[_id])

__all__ = [
    "DT",
    "ENV_IDS",
    "InvalidActionError",
    "LoopDriveEnv",
    "RouteFollower",
    "TrajectoryController",
    "World",
    "compile_scenario",
    "compose_frame",
]
