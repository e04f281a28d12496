"""What every ``LoopDrive-v0`` backend shares: its spaces, the action check, the episode summary.

The embedded world (:class:`envs.gym_env.LoopDriveEnv`) and CARLA
(:class:`envs.backends.carla_env.CarlaDriveEnv`) build their observation and action spaces, check an
agent's action and summarise a finished episode here, so an agent or a metric cannot tell them apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from envs import observations as obs_mod
from envs.controller import PLAN_STEPS
from envs.world import ACCEL_LIMITS, MAX_STEER
from rewards import EpisodeLog, compute_suites
from rewards.events import ENDS_ROUTE, Event, EventKind
from scenarios import Scenario, load_bank

ALL_OBSERVATIONS = ("cameras", "ego_history", "ego_state", "route", "command", "bev", "state")
DEFAULT_OBSERVATIONS = ("cameras", "ego_history", "ego_state", "route", "command")
TRAJ_LOW = np.tile(np.array([-50.0, -100.0, -math.pi], np.float32), (PLAN_STEPS, 1))
TRAJ_HIGH = np.tile(np.array([300.0, 100.0, math.pi], np.float32), (PLAN_STEPS, 1))


class InvalidActionError(ValueError):
    pass


def check_options(
    action_mode: str,
    invalid_action: str,
    observations: Sequence[str],
    render_mode: str | None,
    n_frames: int,
    frame_every: int = 1,
) -> None:
    """Raise ``ValueError`` naming the first bad constructor argument."""
    if action_mode not in ("trajectory", "control"):
        raise ValueError(f"action_mode must be 'trajectory' or 'control', got {action_mode!r}")
    if invalid_action not in ("raise", "terminate"):
        raise ValueError(f"invalid_action must be 'raise' or 'terminate', got {invalid_action!r}")
    unknown = [o for o in observations if o not in ALL_OBSERVATIONS]
    if unknown or not observations:
        raise ValueError(f"unknown observations {unknown}; choose from {list(ALL_OBSERVATIONS)}")
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    if frame_every < 1:
        raise ValueError(f"frame_every must be >= 1 (world steps of 0.1 s between frames), got {frame_every}")


def load_scenarios(bank: str, scenario: str | Scenario | None, split: str | None) -> tuple[list[Scenario], str, str]:
    """The env's scenarios (one given, one of a bank, or a bank's split) and the bank's name and version."""
    if isinstance(scenario, Scenario):
        return [scenario], "custom", "0"
    loaded = load_bank(bank, split=split)
    scenarios = [loaded.get(scenario)] if scenario is not None else loaded.scenarios
    if not scenarios:
        raise ValueError(f"bank {bank!r} has no scenarios in split {split!r}")
    return scenarios, loaded.name, loaded.version


def pick_scenario(
    scenarios: Sequence[Scenario], choice: str | int | None, rng: np.random.Generator, bank_name: str
) -> Scenario:
    """``reset(options={"scenario": ...})``: by id, by index, or at random."""
    if choice is None:
        return scenarios[int(rng.integers(len(scenarios)))]
    if isinstance(choice, (int, np.integer)):
        return scenarios[int(choice) % len(scenarios)]
    for s in scenarios:
        if s.id == choice:
            return s
    raise KeyError(f"scenario {choice!r} is not in this environment's bank {bank_name!r}")


def decision_period(decision_every: int | None, action_mode: str) -> int:
    """World steps (0.1 s) per decision: 5 (2 Hz) for trajectories, 1 for direct control by default."""
    n = int(decision_every if decision_every is not None else (5 if action_mode == "trajectory" else 1))
    if n < 1:
        raise ValueError(f"decision_every must be >= 1, got {decision_every}")
    return n


def observation_space(
    keys: Sequence[str], n_cameras: int, n_frames: int, camera_size: tuple[int, int], bev_size: int
) -> spaces.Dict:
    h, w = camera_size
    space: dict[str, spaces.Space] = {}
    if "cameras" in keys:
        space["cameras"] = spaces.Box(0, 255, (n_cameras, n_frames, h, w, 3), np.uint8)
    if "ego_history" in keys:
        space["ego_history"] = spaces.Box(-np.inf, np.inf, (obs_mod.HISTORY_STEPS, 4), np.float32)
    if "ego_state" in keys:
        space["ego_state"] = spaces.Box(-np.inf, np.inf, (obs_mod.EGO_STATE_DIM,), np.float32)
    if "route" in keys:
        space["route"] = spaces.Box(-np.inf, np.inf, (obs_mod.ROUTE_POINTS, 2), np.float32)
    if "command" in keys:
        space["command"] = spaces.Discrete(len(obs_mod.COMMANDS))
    if "bev" in keys:
        space["bev"] = spaces.Box(0, 255, (bev_size, bev_size, 3), np.uint8)
    if "state" in keys:
        space["state"] = spaces.Box(-np.inf, np.inf, (obs_mod.STATE_DIM,), np.float32)
    return spaces.Dict(space)


def action_space(action_mode: str) -> spaces.Box:
    """64 x (x, y, yaw) ego-frame waypoints, or normalised (accel, steer) control."""
    if action_mode == "trajectory":
        return spaces.Box(TRAJ_LOW, TRAJ_HIGH, dtype=np.float32)
    return spaces.Box(-1.0, 1.0, (2,), np.float32)


def check_action(action: Any, space: spaces.Box, action_mode: str) -> tuple[float, float] | None:
    """None for a valid trajectory (the controller tracks it); (accel m/s^2, steer rad) for control.

    Raises :class:`InvalidActionError` naming what is wrong: not an array of floating-point numbers
    (a list of strings, an object array, integers), the wrong shape, non-finite values, or positions
    outside the action space (a trajectory's yaw may wind past +-pi; a waypoint 1e30 m away may not).
    """
    try:
        a = np.asarray(action)
    except (TypeError, ValueError) as e:
        raise InvalidActionError(f"{action_mode} action is not an array ({type(action).__name__}): {e}") from None
    if a.dtype.kind != "f":
        raise InvalidActionError(
            f"{action_mode} action must be floating-point numbers, got dtype {a.dtype} ({type(action).__name__})"
        )
    if a.shape != space.shape:
        raise InvalidActionError(f"{action_mode} action must have shape {space.shape}, got {a.shape}")
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[:3].tolist()
        raise InvalidActionError(f"{action_mode} action has non-finite values at {bad}")
    if action_mode == "trajectory":
        xy, low, high = a[:, :2], space.low[:, :2], space.high[:, :2]
        outside = (xy < low) | (xy > high)
        if outside.any():
            k, axis = np.argwhere(outside)[0]
            raise InvalidActionError(
                f"trajectory waypoint {k} has {'xy'[axis]} = {xy[k, axis]:g} m, outside [{low[k, axis]:g}, "
                f"{high[k, axis]:g}] (ego frame)"
            )
        return None
    u_acc, u_steer = float(np.clip(a[0], -1, 1)), float(np.clip(a[1], -1, 1))
    accel = u_acc * (ACCEL_LIMITS[1] if u_acc > 0 else -ACCEL_LIMITS[0])
    return accel, u_steer * MAX_STEER


def terminal_event(events: Sequence[Event], terminate_on_collision: bool) -> Event | None:
    """The first of ``events`` that ends the episode: the route done or abandoned, or a collision the
    ego caused (when that ends episodes); None when none does."""
    for e in events:
        if e.kind in ENDS_ROUTE or (e.kind is EventKind.COLLISION and e.at_fault and terminate_on_collision):
            return e
    return None


def is_terminal(events: Sequence[Event], terminate_on_collision: bool) -> bool:
    """The route is done or abandoned, or the ego caused a collision (when that ends episodes)."""
    return terminal_event(events, terminate_on_collision) is not None


def summarise_episode(
    log: EpisodeLog, stats: Mapping[str, float], returns: Mapping[str, float], leaderboard_version: str
) -> dict[str, Any]:
    """An episode's summary (``info["metrics"]``): statistics, infractions and every metric suite."""
    counts: dict[str, int] = {}
    for e in log.events:
        counts[e.kind.value] = counts.get(e.kind.value, 0) + 1
    suites = compute_suites(log, leaderboard_version)
    return {
        **stats,
        "events": counts,
        "infractions": log.infractions(),
        "at_fault_collisions": log.count(EventKind.COLLISION, at_fault=True),
        "suites": suites,
        "leaderboard": suites["leaderboard"],
        "reward_returns": dict(returns),
    }
