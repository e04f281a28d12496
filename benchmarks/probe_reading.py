"""What the perception probe reads of the car ahead, and whether its gap readings could be tracked into
a closing speed. A diagnostic of a VLA with a perception probe.

    python benchmarks/probe_reading.py --checkpoint RUN/checkpoints/final --data DATA.zarr
        [--ttc 4.0] [--min-speed 5.0] [--out FILE]

Runs the probe on every driven sample of the data (a closer lead's moved sample is left out: no decision
follows it) and compares what it reads with the recorded truth, as JSON:

- ``near``: the samples under ``--ttc`` seconds from the car ahead at its recorded closing speed, the ego
  above ``--min-speed`` m/s (where a plan must brake); ``with_lead``: every sample with a car within
  60 m and the ego above 2 m/s. For each, the gap read and true (medians, m), the gap's error (mean and
  standard deviation), the closing speed read and true (medians, m/s) with the reading's mean absolute
  error and correlation, and the share of samples the reading also puts under ``--ttc``.
- ``tracking``: successive decisions of one episode, a car ahead in both (``with_lead``'s kind), one
  decision period apart (``near``: the second one near). One frame shows a gap and hardly how fast it
  falls; a tracker (an agent's ``closing=tracked``) reads the closing speed as the gap's fall over the
  period, so its error is the change of the gap's error over the period, divided by the period. The gap
  errors' correlation between the two decisions, each reading's (tracked, the probe's, and ``mean``: the two
  averaged) mean absolute error and correlation with the truth, and how often each reads a car closing
  fast as closing, and a steady one as closing, say whether tracking the probe's gap reads better than
  the probe's closing speed, and how.
- ``near_by_family``: ``near`` and its ``tracking`` again for each scenario family with near samples. The
  world's car ahead is the nearest one in the ego's path: in a cut-in or an overtake it may sit beside the
  lane's axis, where a reading fails that reads a braking car dead ahead well.
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

FAST_MPS = 4.0  # a car closing this fast or faster (m/s) is one a plan must brake for
CLOSING_MPS = 2.0  # a reading at least this (m/s) counts as seeing the car close


def _median(values: np.ndarray) -> float:
    return round(float(np.median(values)), 2) if len(values) else float("nan")


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return round(float(np.corrcoef(a, b)[0, 1]), 3)


def _readings(read: np.ndarray, truth: np.ndarray, ttc: float) -> dict[str, float]:
    """How the probe's ``read`` targets compare with the ``truth`` at the same samples (rows)."""
    from agents.vla.perception import CLOSING_SCALE_MPS, LEAD_RANGE_M, PERCEPTION_TARGETS, time_to_lead

    gap, closing = PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")
    gap_error = (read[:, gap] - truth[:, gap]) * LEAD_RANGE_M
    closing_read, closing_true = read[:, closing] * CLOSING_SCALE_MPS, truth[:, closing] * CLOSING_SCALE_MPS
    return {
        "samples": len(read),
        "gap_read_median": _median(read[:, gap] * LEAD_RANGE_M),
        "gap_true_median": _median(truth[:, gap] * LEAD_RANGE_M),
        "gap_error_mean": round(float(np.mean(gap_error)), 2) if len(read) else float("nan"),
        "gap_error_sd": round(float(np.std(gap_error)), 2) if len(read) else float("nan"),
        "closing_read_median": _median(closing_read),
        "closing_true_median": _median(closing_true),
        "closing_read_mae": round(float(np.mean(np.abs(closing_read - closing_true))), 2)
        if len(read)
        else float("nan"),
        "closing_read_correlation": _correlation(closing_read, closing_true),
        "read_under_ttc": round(float(np.mean(time_to_lead(read) < ttc)), 3) if len(read) else float("nan"),
    }


def reading_report(
    read: np.ndarray,
    truth: np.ndarray,
    speed: np.ndarray,
    episode: np.ndarray,
    t: np.ndarray,
    ttc: float = 4.0,
    min_speed: float = 5.0,
    family: np.ndarray | None = None,
) -> dict:
    """The report for driven samples in recorded order: the probe's ``read`` and the ``truth``
    (``[N, perception_targets]``), the ego's ``speed``, each sample's ``episode`` and time ``t``, and with
    each sample's scenario ``family`` the near samples' figures by family too."""
    from agents.vla.perception import PERCEPTION_TARGETS

    gap = PERCEPTION_TARGETS.index("lead_gap")
    near = near_samples(truth, speed, ttc, min_speed)
    with_lead = (truth[:, gap] < 1.0) & (speed > 2.0)
    same_episode = episode[1:] == episode[:-1]
    steps = np.round(np.diff(t)[same_episode], 3)
    report = {
        "near": _readings(read[near], truth[near], ttc),
        "with_lead": _readings(read[with_lead], truth[with_lead], ttc),
    }
    if len(steps) == 0:
        return report | {"tracking": {"with_lead": {"pairs": 0}, "near": {"pairs": 0}}}
    values, counts = np.unique(steps, return_counts=True)
    period = float(values[np.argmax(counts)])  # the decision period: most successive samples are one apart
    first = np.flatnonzero(same_episode & np.isclose(np.diff(t), period) & with_lead[:-1] & with_lead[1:])
    report["tracking"] = {
        "period_s": period,
        "with_lead": _tracking(read, truth, first, period),
        "near": _tracking(read, truth, first[near[first + 1]], period),
    }
    if family is not None:
        report["near_by_family"] = {}
        for name in sorted(set(family[near].tolist())):
            mine = near & (family == name)
            tracking = _tracking(read, truth, first[mine[first + 1]], period)
            report["near_by_family"][name] = _readings(read[mine], truth[mine], ttc) | {"tracking": tracking}
    return report


def _tracking(read: np.ndarray, truth: np.ndarray, first: np.ndarray, period: float) -> dict[str, float]:
    """The closing speed read as the gap's fall from each decision ``first`` to the next, against the
    probe's own reading at the next, the two averaged, and the truth there. ``fast``: pairs closing at
    ``FAST_MPS`` or more, ``steady``: under 1 m/s either way; ``*_read_closing`` the share read as closing
    at ``CLOSING_MPS`` or more (a car seen closing; in ``steady``, one that is not)."""
    from agents.vla.perception import CLOSING_SCALE_MPS, LEAD_RANGE_M, PERCEPTION_TARGETS

    if len(first) == 0:
        return {"pairs": 0}
    gap, closing = PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")
    error = (read[:, gap] - truth[:, gap]) * LEAD_RANGE_M
    true = truth[first + 1, closing] * CLOSING_SCALE_MPS
    readings = {
        "tracked": -(read[first + 1, gap] - read[first, gap]) * LEAD_RANGE_M / period,
        "probe": read[first + 1, closing] * CLOSING_SCALE_MPS,
    }
    # the two averaged: the tracker's error follows the gap's jumps, the probe's under-reads a braking car
    readings["mean"] = (readings["tracked"] + readings["probe"]) / 2
    fast, steady = true >= FAST_MPS, np.abs(true) < 1.0
    out = {
        "pairs": len(first),
        "fast_pairs": int(fast.sum()),
        "steady_pairs": int(steady.sum()),
        "gap_error_correlation": _correlation(error[first], error[first + 1]),
        "gap_error_change_sd": round(float(np.std(error[first + 1] - error[first])), 2),
        "true_gap_change_sd": round(float(np.std((truth[first + 1, gap] - truth[first, gap]) * LEAD_RANGE_M)), 2),
    }
    for name, value in readings.items():
        out[f"{name}_closing_mae"] = round(float(np.mean(np.abs(value - true))), 2)
        out[f"{name}_closing_correlation"] = _correlation(value, true)
        for kind, mask in (("fast", fast), ("steady", steady)):
            share = float(np.mean(value[mask] >= CLOSING_MPS)) if mask.any() else float("nan")
            out[f"{name}_{kind}_read_closing"] = round(share, 3)
    return out


def near_samples(perception: np.ndarray, speed: np.ndarray, ttc: float = 4.0, min_speed: float = 5.0) -> np.ndarray:
    """Which samples are near the car ahead: under ``ttc`` seconds from it at its recorded closing speed, the
    ego above ``min_speed`` m/s (where a plan must brake)."""
    from agents.vla.perception import time_to_lead

    return (time_to_lead(perception) < ttc) & (speed > min_speed)


def add_near_options(parser: argparse.ArgumentParser) -> None:
    """``--ttc`` and ``--min-speed``: what a near sample is, in every perception benchmark."""
    parser.add_argument("--ttc", type=float, default=4.0, help="seconds to the car ahead under which a sample is near")
    parser.add_argument("--min-speed", type=float, default=5.0, help="the ego's speed above which a sample is near")


def dataset_with_perception(path: str):
    """The driving dataset at ``path``, which must record the perception targets."""
    from training.data import DrivingDataset

    data = DrivingDataset(path)
    if "perception" not in data.arrays:
        raise SystemExit(f"{path}: no perception targets recorded")
    return data


def driven_samples(data) -> np.ndarray:
    """The indices of a dataset's driven samples: a closer lead's moved sample has no plan, and no decision
    follows it."""
    n = len(data)
    return np.flatnonzero(~np.isnan(np.asarray(data.arrays["plan"][:n])).all(axis=(1, 2)))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a saved VLA with a perception probe")
    p.add_argument("--data", required=True, help="a LoopDrive driving dataset with perception targets")
    add_near_options(p)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)

    from agents.vla.model import VLA
    from benchmarks.machine import emit

    model = VLA.from_pretrained(args.checkpoint)
    if model.perception_probe is None:
        raise SystemExit(f"{args.checkpoint}: this VLA has no perception probe ([train] perception_weight)")
    data = dataset_with_perception(args.data)
    n = len(data)
    driven = driven_samples(data)
    batches = (driven[start : start + args.batch] for start in range(0, len(driven), args.batch))
    read = [model.read_perception(data.batch(indices).observations) for indices in batches]
    arrays = {k: np.asarray(data.arrays[k][:n])[driven] for k in ("perception", "ego_state", "episode", "t")}
    result = {
        "checkpoint": args.checkpoint,
        "data": args.data,
        "driven_samples": len(driven),
        "of": n,
        **reading_report(
            np.concatenate(read),
            arrays["perception"],
            arrays["ego_state"][:, 0],
            arrays["episode"],
            arrays["t"],
            args.ttc,
            args.min_speed,
            data.families()[driven],
        ),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    main()
