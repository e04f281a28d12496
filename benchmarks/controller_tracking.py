"""How the trajectory controller drives the expert's plans, per scenario family: the wheel's swing, the
yaw acceleration, and how far the car is from each plan's first five waypoints (0.1-0.5 s).

A two-step limit cycle (the wheel between the ends of its rate limit at every step) tracks a path as
closely as a steady wheel does, and the comfort suite's 3-step smoothing averages it away; this is where
it shows. "swing": the share of steps where the wheel's change reverses sign, both changes above 0.02 rad.

    python benchmarks/controller_tracking.py [--bank core] [--split train] [--per-family 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import argparse
import json

import numpy as np

from agents.expert import Expert
from benchmarks.machine import machine_info
from envs.gym_env import LoopDriveEnv
from envs.world import DT
from scenarios.banks import load_bank

SWING_RAD = 0.02
PLAN_STEPS_CHECKED = 5


def drive(env: LoopDriveEnv, scenario_id: str) -> tuple[list, list[tuple[int, np.ndarray]]]:
    """One expert episode: the ego's poses and each decision's (pose index, plan)."""
    obs, _ = env.reset(seed=0, options={"scenario": scenario_id})
    agent = Expert()
    agent.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    plans, done = [], False
    while not done:
        plan = np.asarray(agent.act(obs).trajectory)
        plans.append((len(env.ego_track) - 1, plan))
        obs, _, terminated, truncated, _ = env.step(plan)
        done = terminated or truncated
    return list(env.ego_track), plans


def plan_errors(track: list, plans: list[tuple[int, np.ndarray]]) -> list[float]:
    """Distances (m) between the plans' first waypoints and where the car was at those times."""
    errors = []
    for k, plan in plans:
        e = track[k]
        c, s = np.cos(e.yaw), np.sin(e.yaw)
        for j in range(min(PLAN_STEPS_CHECKED, len(track) - k - 1)):
            p = track[k + j + 1]
            dx, dy = p.x - e.x, p.y - e.y
            errors.append(float(np.hypot(c * dx + s * dy - plan[j, 0], -s * dx + c * dy - plan[j, 1])))
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", default="core")
    parser.add_argument("--split", default="train")
    parser.add_argument("--per-family", type=int, default=3)
    args = parser.parse_args()
    env = LoopDriveEnv(bank=args.bank, observations=("ego_state",))
    taken: dict[str, int] = {}
    rows: dict[str, dict[str, list[float]]] = {}
    for scenario in load_bank(args.bank, args.split).scenarios:
        if taken.get(scenario.family, 0) >= args.per_family:
            continue
        taken[scenario.family] = taken.get(scenario.family, 0) + 1
        track, plans = drive(env, scenario.id)
        change = np.diff([p.steer for p in track])
        swing = (change[1:] * change[:-1] < 0) & (np.abs(change[1:]) > SWING_RAD) & (np.abs(change[:-1]) > SWING_RAD)
        yaw_accel = np.abs(np.diff([p.yaw_rate for p in track])) / DT
        row = rows.setdefault(scenario.family, {"swing": [], "yaw_accel": [], "plan_error": []})
        row["swing"] += swing.tolist()
        row["yaw_accel"] += yaw_accel.tolist()
        row["plan_error"] += plan_errors(track, plans)
    families = {
        family: {
            "swing_share": round(float(np.mean(r["swing"])), 4),
            "mean_yaw_accel_rad_s2": round(float(np.mean(r["yaw_accel"])), 3),
            "plan_error_mean_m": round(float(np.mean(r["plan_error"])), 4),
            "plan_error_p99_m": round(float(np.quantile(r["plan_error"], 0.99)), 4),
        }
        for family, r in sorted(rows.items())
    }
    out = {"bank": args.bank, "split": args.split, "per_family": args.per_family, "families": families}
    print(json.dumps({"machine": machine_info(), **out}, indent=1))


if __name__ == "__main__":
    main()
