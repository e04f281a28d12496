"""The embedded world: state arrays, traffic, signals, events, snapshot / restore."""

from envs.world.compile import GREEN, RED, YELLOW, Compiled, compile_scenario
from envs.world.state import ActorTable, Behaviour, Kind, Mode, Motion, WorldState
from envs.world.world import ACCEL_LIMITS, DT, MAX_SPEED, MAX_STEER, WHEELBASE, World

__all__ = [
    "ACCEL_LIMITS",
    "DT",
    "GREEN",
    "MAX_SPEED",
    "MAX_STEER",
    "RED",
    "WHEELBASE",
    "YELLOW",
    "ActorTable",
    "Behaviour",
    "Compiled",
    "Kind",
    "Mode",
    "Motion",
    "World",
    "WorldState",
    "compile_scenario",
]
