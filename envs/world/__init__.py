"""The embedded world: state arrays, traffic, signals, events, snapshot / restore."""

from envs.world.compile import CompiledScenario, compile_scenario
from envs.world.state import GREEN, RED, YELLOW, ActorTable, Behaviour, Kind, Mode, Motion, SignalState, WorldState
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
    "CompiledScenario",
    "Kind",
    "Mode",
    "Motion",
    "SignalState",
    "World",
    "WorldState",
    "compile_scenario",
]
