"""Does the plan act on what the state token says is ahead? A diagnostic of a VLA with ``perception_in_state``.

    python benchmarks/plan_sensitivity.py --checkpoint RUN/checkpoints/final --data DATA.zarr
        [--ttc 4.0] [--min-speed 5.0] [--samples 48] [--out FILE]

Takes the data's samples near the car ahead (under ``--ttc`` seconds at its recorded closing speed, the
ego above ``--min-speed`` m/s; a seeded draw of ``--samples``) and plans each deterministically (no
reasoning, no noise) four times, with the state token's perception given as: what the probe reads, the
recorded truth, nothing ahead, and a stopped car 3 m ahead closing at the ego's speed. Prints the mean
and median distance each plan covers in its first 3 s, and the recorded future's, as JSON (and writes it
with ``--out``). A plan that acts on what is ahead covers far less with the stopped car than with
nothing; ``vla:PATH?perception=oracle`` measures the same closed loop.
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

STEP_3S = 29  # the plan's pose at 3.0 s (64 poses, 0.1 s apart, the first at 0.1 s)
CONDITIONS = ("probe", "truth", "nothing_ahead", "stopped_car_3m")


def given_perception(truth: np.ndarray, speeds: np.ndarray, condition: str) -> np.ndarray | None:
    """The state token's perception for ``condition`` (None: the probe's own reading)."""
    from agents.vla.perception import CLOSING_SCALE_MPS, LEAD_RANGE_M, PERCEPTION_TARGETS

    if condition == "probe":
        return None
    gap, closing, stopped = (PERCEPTION_TARGETS.index(k) for k in ("lead_gap", "lead_closing_speed", "lead_stopped"))
    given = truth.astype(np.float32).copy()
    if condition == "nothing_ahead":
        given[:, gap], given[:, closing], given[:, stopped] = 1.0, 0.0, 0.0
    elif condition == "stopped_car_3m":
        given[:, gap], given[:, stopped] = 3.0 / LEAD_RANGE_M, 1.0
        given[:, closing] = np.clip(speeds / CLOSING_SCALE_MPS, -1.0, 1.0)
    return given


def _mean_and_median(values: list[float]) -> dict[str, float]:
    return {"mean": round(float(np.mean(values)), 2), "median": round(float(np.median(values)), 2)}


def main(argv: list[str] | None = None) -> dict:
    from benchmarks.probe_reading import add_near_options

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a saved VLA with perception_in_state")
    p.add_argument("--data", required=True, help="a LoopDrive driving dataset with perception targets")
    add_near_options(p)
    p.add_argument("--samples", type=int, default=48)
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)

    from agents.vla.model import VLA
    from agents.vla.perception import LEAD_RANGE_M, PERCEPTION_TARGETS
    from benchmarks.machine import emit
    from benchmarks.probe_reading import dataset_with_perception, near_samples

    model = VLA.from_pretrained(args.checkpoint)
    if not model.config.perception_in_state:
        raise SystemExit(f"{args.checkpoint}: its plan reads no perception probe (perception_in_state)")
    data = dataset_with_perception(args.data)
    truth = np.asarray(data.arrays["perception"][: len(data)])
    speed = np.asarray(data.arrays["ego_state"][: len(data)])[:, 0]
    near = np.flatnonzero(near_samples(truth, speed, args.ttc, args.min_speed))
    if len(near) == 0:
        raise SystemExit(f"{args.data}: no sample under {args.ttc} s from the car ahead above {args.min_speed} m/s")
    chosen = np.sort(np.random.default_rng(0).choice(near, min(args.samples, len(near)), replace=False))
    covered = {c: [] for c in ("recorded", *CONDITIONS)}
    read_gap = []
    for start in range(0, len(chosen), 8):
        batch = data.batch(chosen[start : start + 8])
        speeds = np.array([o["ego_state"][0] for o in batch.observations], np.float32)
        covered["recorded"] += batch.targets[:, STEP_3S, 0].tolist()
        for condition in CONDITIONS:
            given = given_perception(batch.perception, speeds, condition)
            perceive = None if given is None else lambda read, given=given: given
            plans = model.act_batch(batch.observations, reasoning=False, noise_scale=0.0, perceive=perceive)
            covered[condition] += [float(plan["trajectory"][STEP_3S, 0]) for plan in plans]
        read_gap += (
            model.read_perception(batch.observations)[:, PERCEPTION_TARGETS.index("lead_gap")] * LEAD_RANGE_M
        ).tolist()
    gap = truth[chosen, PERCEPTION_TARGETS.index("lead_gap")] * LEAD_RANGE_M
    result = {
        "checkpoint": args.checkpoint,
        "data": args.data,
        "near_samples": int(len(near)),
        "samples": int(len(chosen)),
        "of": len(data),
        "gap_m": {"true_median": float(np.median(gap)), "probe_median": float(np.median(read_gap))},
        "distance_in_3s_m": {k: _mean_and_median(v) for k, v in covered.items()},
    }
    return emit(result, args.out)


if __name__ == "__main__":
    main()
