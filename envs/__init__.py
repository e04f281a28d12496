"""LoopDrive environments: the embedded world, sensors, the trajectory controller and Gymnasium envs.

``import envs`` registers:
- ``LoopDrive-v0``: multi-camera observation, 64 x (x, y, yaw) trajectory action (DESIGN.md);
- ``LoopDriveState-v0``: the compact ``state`` vector only (no rendering), trajectory action;
- ``LoopDriveControl-v0``: ``state`` vector with normalised (accel, steer) control, for classic RL.

Each takes ``backend=``: ``"embedded"`` (default), ``"worldmodel"`` (cameras from a learned model) or
``"carla"`` (a CARLA server: :class:`envs.backends.carla_env.CarlaDriveEnv`); :func:`make_env` picks the class.
"""

from gymnasium.envs.registration import register as _register
from gymnasium.envs.registration import registry as _registry

from envs.controller import TrajectoryController
from envs.driver import RouteFollower
from envs.gym_env import LoopDriveEnv, compose_frame
from envs.interface import InvalidActionError
from envs.world import DT, World, compile_scenario


def make_env(backend: str = "embedded", **kwargs):
    """The ``LoopDrive`` env of a backend: the embedded world (optionally with world-model cameras) or CARLA."""
    if backend == "carla":
        from envs.backends.carla_env import CarlaDriveEnv

        return CarlaDriveEnv(backend=backend, **kwargs)
    return LoopDriveEnv(backend=backend, **kwargs)


ENV_IDS = ("LoopDrive-v0", "LoopDriveState-v0", "LoopDriveControl-v0")
_KWARGS = {
    "LoopDrive-v0": {},
    "LoopDriveState-v0": {"observations": ("state",)},
    "LoopDriveControl-v0": {"observations": ("state",), "action_mode": "control"},
}
for _id in ENV_IDS:
    if _id not in _registry:
        _register(id=_id, entry_point="envs:make_env", kwargs=_KWARGS[_id])

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
    "make_env",
]
