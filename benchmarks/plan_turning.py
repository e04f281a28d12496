"""Does the plan turn, brake and steer back as the data does? An open-loop diagnostic of the flow head.

    python benchmarks/plan_turning.py --data DATA.zarr [--checkpoint RUN/checkpoints/final [--rendered]]
        [--samples 16] [--out FILE]

Per scenario family of the data: how much of the recorded futures' lateral action (rms) the route's own
actions leave unexplained (``agents.vla.route_prior``, what ``[model] route_origin`` starts the flow
from), and the **offset census**: the samples whose route starts more than 0.5 / 1 m to the car's left
or right (the car off its lane's centre) and where the recorded future is 3 s on. With
``--checkpoint``, on a seeded draw of ``--samples`` per family, the deterministic plan's (no reasoning,
no noise) **turn ratio** against the recorded future's (as ``evaluation.steering`` reads a closed loop:
the heading change over their common arc, up to 40 m, where the future turns by more than 0.05 rad; 1
turns as much, 0 drives straight) and its **braking ratio** (the speed change over 3 s, where the future
slows by more than 1 m/s); the **offset fit**: on the data's straight-road samples more than 0.5 m off
the centre, how the plan's lateral position at 3 s follows the lateral and heading error beside how the
recorded future does (``offset_fit``); and the **offset response**: on the straight-road samples above
3 m/s (the ``--samples`` of each of ``STRAIGHT_FAMILIES``), where the plan is at 3 s and 6.4 s with the route (and
the lateral error the state token reads) moved ``OFFSET_M`` to the left or right (the cameras as they
were). A plan that steers back ends near the moved route on either side. With ``--rendered``, the
same with the ego itself moved in the simulator, the cameras rendered there, beside the expert's way
back from there (``rendered_offset_response``). Prints JSON (and writes it with ``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from envs.observations import LATERAL_ERROR  # the ego state's lateral error (its sign opposite to the route's offset)

STEP_3S = 29  # the pose at 3.0 s (64 poses, 0.1 s apart, the first at 0.1 s)
MIN_TURN = 0.05  # rad: futures that turn less say nothing about turning (evaluation.steering's threshold)
MIN_SLOWING = 1.0  # m/s over 3 s: futures that slow less say nothing about braking
STRAIGHT_FAMILIES = ("straight", "traffic_jam", "pedestrian_crossing")  # roads without a bend or a lane change
OFFSET_M = 1.5  # how far the offset response moves the route
WARMUP_DECISIONS = 6  # the rendered offset response's decisions of the expert first: 3 s, at speed


def turn_pairs(futures: np.ndarray, plans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(future_turn, plan_turn)`` per sample of ``[N, 64, >=2]`` ego-frame poses: heading change over the
    common arc (up to ``MAX_ARC_M``), NaN where either is shorter than ``MIN_ARC_M``."""
    from evaluation.steering import MAX_ARC_M, MIN_ARC_M, arc_lengths, polyline_turn

    out = np.full((len(futures), 2), np.nan)
    for i, (future, plan) in enumerate(zip(futures, plans)):
        f, p = (np.vstack([np.zeros(2), x[:, :2]]) for x in (future, plan))
        arc = min(arc_lengths(f)[-1], arc_lengths(p)[-1], MAX_ARC_M)
        if arc >= MIN_ARC_M:
            out[i] = polyline_turn(f, arc), polyline_turn(p, arc)
    return out[:, 0], out[:, 1]


def speed_at(poses: np.ndarray, step: int) -> np.ndarray:
    """Speed ``[N]`` around pose ``step`` of ``[N, 64, >=2]`` poses 0.1 s apart (central difference)."""
    return np.hypot(*(poses[:, step + 1, :2] - poses[:, step - 1, :2]).T) / 0.2


def ratio(agent: np.ndarray, data: np.ndarray) -> float | None:
    """Least-squares slope through the origin of ``agent`` on ``data`` (None without data)."""
    return float((agent * data).sum() / (data**2).sum()) if len(data) and (data**2).sum() > 0 else None


def plan_report(futures: np.ndarray, plans: np.ndarray, v0: np.ndarray) -> dict:
    """Turn and braking ratios of ``plans`` against ``futures`` (``[N, 64, 3]`` each), ``v0`` ``[N]`` the speed now."""
    future_turn, plan_turn = turn_pairs(futures, plans)
    turning = np.abs(future_turn) > MIN_TURN  # (NaN compares False)
    future_dv, plan_dv = speed_at(futures, STEP_3S) - v0, speed_at(plans, STEP_3S) - v0
    braking = future_dv < -MIN_SLOWING
    return {
        "turning": int(turning.sum()),
        "turn_ratio": ratio(plan_turn[turning], future_turn[turning]),
        "braking": int(braking.sum()),
        "braking_ratio": ratio(plan_dv[braking], future_dv[braking]),
    }


def offset_census(route: np.ndarray, futures: np.ndarray, families: np.ndarray) -> dict:
    """Samples whose route starts 0.5-1 m and more than 1 m to the left / right of the car (its first
    point's lateral offset; ``route`` ``[N, P, 2]``): how many, where their futures are at 3 s (mean y,
    left positive), and of which families."""
    start = route[:, 0, 1]
    out = {}
    for side, sign in (("left", 1.0), ("right", -1.0)):
        for name, lo, hi in (("0.5-1m", 0.5, 1.0), ("over_1m", 1.0, np.inf)):
            rows = (sign * start > lo) & (sign * start <= hi)
            kinds, counts = np.unique(families[rows], return_counts=True)
            out[f"{side}_{name}"] = {
                "samples": int(rows.sum()),
                "future_y_at_3s_m": round(float(futures[rows, STEP_3S, 1].mean()), 2) if rows.any() else None,
                "families": {str(k): int(c) for k, c in zip(kinds, counts)},
            }
    return out


def moved_route(observations: list[dict], metres: float) -> list[dict]:
    """The observations with the route ``metres`` to the left (the lateral error read accordingly)."""
    out = []
    for obs in observations:
        route, ego = np.array(obs["route"], np.float32), np.array(obs["ego_state"], np.float32)
        route[:, 1] += metres
        ego[LATERAL_ERROR] -= metres
        out.append(obs | {"route": route, "ego_state": ego})
    return out


def offset_response(model, observations: list[dict]) -> dict:
    """Where ``model``'s deterministic plans are at 3 s and 6.4 s (mean lateral position, left positive) with
    the route moved ``OFFSET_M`` to either side of the car, and not moved."""
    response = {}
    for metres in (-OFFSET_M, 0.0, OFFSET_M):
        planned = model.act_batch(moved_route(observations, metres), reasoning=False, noise_scale=0.0)
        plans = np.stack([o["trajectory"] for o in planned])
        response[f"route_{metres:+.1f}m"] = {
            "plan_y_at_3s_m": round(float(plans[:, STEP_3S, 1].mean()), 2),
            "plan_y_at_6.4s_m": round(float(plans[:, -1, 1].mean()), 2),
        }
    return response


def offset_fit(errors: np.ndarray, futures: np.ndarray, plans: np.ndarray) -> dict:
    """How the recorded futures and the plans at 3 s (y, left positive) follow the ego's lateral and heading
    error to the route (``errors`` ``[N, 2]``, m and rad, as the ego state holds them): least-squares
    coefficients of ``y = a * lateral + b * heading + c`` for each. A plan that answers an offset as the
    data does has the futures' coefficients; one that answers it at half strength, half of them."""
    x = np.column_stack([errors, np.ones(len(errors))])
    out = {"samples": int(len(errors))}
    for name, poses in (("future", futures), ("plan", plans)):
        a, b, _ = np.linalg.lstsq(x, poses[:, STEP_3S, 1], rcond=None)[0]
        out[name] = {"per_lateral_m": round(float(a), 3), "per_heading_rad": round(float(b), 2)}
    return out


def rendered_offset_response(model, card: dict, per_family: int) -> dict:
    """The offset response with the ego itself moved (``LoopDriveEnv.shift_ego``: the cameras rendered
    there, the route and the state read there), as a collection's ``offset_ego`` branch puts it: on the
    first ``per_family`` scenarios of each of ``STRAIGHT_FAMILIES`` in the data's bank and split, in the
    env the data was recorded with, ``WARMUP_DECISIONS`` into the expert's drive, ``OFFSET_M`` to either
    side and not moved. Where ``model``'s deterministic plan is at 3 s and 6.4 s, and the expert's driven
    future from there (``ExpertLabeller``): the way back the data teaches. Scenarios where a move would
    leave the road or touch another are skipped on all three."""
    from agents import load_agent
    from envs import LoopDriveEnv
    from scenarios import load_bank
    from training.data.dagger import ExpertLabeller

    source = card["source"]
    env = LoopDriveEnv(
        bank=source["bank"],
        split=source["split"],
        rig=card["rig"],
        camera_size=tuple(card["camera_size"]),
        n_frames=card["n_frames"],
        frame_every=card["frame_every"],
        decision_every=card["decision_every"],
        observations=("cameras", "ego_history", "ego_state", "route", "command"),
    )
    expert, labeller = load_agent("expert"), ExpertLabeller(source["bank"], source["split"], card["decision_every"])
    bank = load_bank(source["bank"], split=source["split"])
    by_family = {f: [s.id for s in bank.scenarios if s.family == f] for f in STRAIGHT_FAMILIES}
    ids = [sid for family_ids in by_family.values() for sid in family_ids[:per_family]]
    offsets = (-OFFSET_M, 0.0, OFFSET_M)
    plans, futures = {m: [] for m in offsets}, {m: [] for m in offsets}
    for sid in ids:
        obs, _ = env.reset(seed=0, options={"scenario": sid})
        expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
        for _ in range(WARMUP_DECISIONS):
            obs, _, terminated, truncated, _ = env.step(expert.act(obs).trajectory)
            if terminated or truncated:
                break
        decision = env.snapshot()
        moved = {}
        for metres in offsets:
            env.restore(decision)
            if (obs := env.shift_ego(metres, 0.0)) is None:
                break
            moved[metres] = (obs, labeller.label(env.snapshot()))
        if len(moved) < len(offsets) or any(label.target is None for _, label in moved.values()):
            continue
        planned = model.act_batch([o for o, _ in moved.values()], reasoning=False, noise_scale=0.0)
        for metres, out in zip(offsets, planned):
            plans[metres].append(out["trajectory"])
            futures[metres].append(moved[metres][1].target)
    response = {"scenarios": len(plans[0.0])}
    for metres in offsets:
        plan, future = np.stack(plans[metres]), np.stack(futures[metres])
        response[f"ego_{metres:+.1f}m"] = {
            "plan_y_at_3s_m": round(float(plan[:, STEP_3S, 1].mean()), 2),
            "plan_y_at_6.4s_m": round(float(plan[:, -1, 1].mean()), 2),
            "expert_y_at_3s_m": round(float(future[:, STEP_3S, 1].mean()), 2),
            "expert_y_at_6.4s_m": round(float(future[:, -1, 1].mean()), 2),
        }
    return response


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a LoopDrive driving dataset")
    p.add_argument("--checkpoint", help="a saved VLA whose deterministic plans to compare")
    p.add_argument("--samples", type=int, default=16, help="per family, with --checkpoint")
    p.add_argument("--lateral", default="lateral_acceleration", choices=("lateral_acceleration", "curvature"))
    p.add_argument(
        "--rendered", action="store_true", help="with --checkpoint: the offset response with the ego moved and rendered"
    )
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)

    from agents.vla.route_prior import route_lateral_actions
    from benchmarks.machine import emit
    from training.data import DrivingDataset, dataset_card

    data = DrivingDataset(args.data)
    families = data.families()
    lateral = data.target_actions(args.lateral)[..., 1]
    v0 = data.initial_speeds
    route_actions = route_lateral_actions(data.arrays["route"], v0, args.lateral)
    census = offset_census(data.arrays["route"], data.arrays["target"], families)
    model = None
    if args.checkpoint:
        from agents.vla.model import VLA

        model = VLA.from_pretrained(args.checkpoint)
    rng = np.random.default_rng(0)
    by_family = {}
    for family in sorted(set(families)):
        rows = np.flatnonzero(families == family)
        row = {
            "samples": int(len(rows)),
            "lateral_rms": round(float(np.sqrt(np.mean(lateral[rows] ** 2))), 3),
            "residual_from_route_rms": round(float(np.sqrt(np.mean((lateral[rows] - route_actions[rows]) ** 2))), 3),
        }
        if model is not None:
            chosen = np.sort(rng.choice(rows, min(args.samples, len(rows)), replace=False))
            futures, plans = [], []
            for start in range(0, len(chosen), 8):
                batch = data.batch(chosen[start : start + 8])
                futures.append(batch.targets)
                planned = model.act_batch(batch.observations, reasoning=False, noise_scale=0.0)
                plans += [o["trajectory"] for o in planned]
            row |= plan_report(np.concatenate(futures), np.stack(plans), v0[chosen])
        by_family[family] = row
    result = {"data": args.data, "checkpoint": args.checkpoint, "lateral": args.lateral, "by_family": by_family}
    result["offset_census"] = census
    if model is not None:
        straight = np.flatnonzero(np.isin(families, STRAIGHT_FAMILIES) & (v0 > 3.0))
        chosen = np.sort(rng.choice(straight, min(args.samples * len(STRAIGHT_FAMILIES), len(straight)), replace=False))
        response = offset_response(model, data.batch(chosen).observations)
        result["offset_response"] = {"samples": int(len(chosen)), **response}
        off = np.abs(data.arrays["ego_state"][:, LATERAL_ERROR]) > 0.5
        beside = np.flatnonzero(np.isin(families, STRAIGHT_FAMILIES) & (v0 > 3.0) & off)
        result["offset_fit"] = None
        if len(beside) >= 3:  # the data's own samples off the centre (offset_ego's, perturbed starts')
            chosen = np.sort(rng.choice(beside, min(args.samples * len(STRAIGHT_FAMILIES), len(beside)), replace=False))
            batch = data.batch(chosen)
            plans = np.stack(
                [o["trajectory"] for o in model.act_batch(batch.observations, reasoning=False, noise_scale=0.0)]
            )
            errors = data.arrays["ego_state"][chosen][:, LATERAL_ERROR : LATERAL_ERROR + 2]
            result["offset_fit"] = offset_fit(errors, batch.targets, plans)
        if args.rendered:
            result["rendered_offset_response"] = rendered_offset_response(model, dataset_card(args.data), args.samples)
    return emit(result, args.out)


if __name__ == "__main__":
    main()
