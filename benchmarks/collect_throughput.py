"""DAgger collection throughput: how fast a policy's episodes are driven and labelled by the expert,
in-process and on Ray workers (``[data] workers``), and whether the data is the same.

    python benchmarks/collect_throughput.py [--checkpoint DIR] [--bank core] [--split train]
        [--episodes 12] [--out benchmarks/results/collect_throughput.json]

A DAgger round of the SFT recipe is such a collection: the VLA drives (one sample per decision, 2 Hz),
the expert drives 6.4 s from every decision's restored snapshot for the label. The VLA is the
checkpoint given, else a randomly initialised tiny VLA at the recipe's input (one 56x112 frame per
camera). Timed: in-process with the agent on 2 torch threads (how rounds ran before stop 67), and
with ``agent_threads = 1`` in-process and on 2 Ray workers (the local Ray started before the clock
runs: the pool's start-up is timed, the cluster's is not), after an untimed episode that compiles
the simulator's kernels. Prints the benchmark JSON (DESIGN.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from benchmarks.machine import emit, machine_info
from training.data import CollectSettings, DrivingDataset, collect


def timed_collect(settings: CollectSettings, out: Path) -> tuple[float, DrivingDataset]:
    t0 = time.perf_counter()
    collect(settings, out, progress=False)
    return time.perf_counter() - t0, DrivingDataset(out)


def same_data(a: DrivingDataset, b: DrivingDataset) -> bool:
    return a.text == b.text and all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", help="a VLA checkpoint folder (default: a random tiny VLA)")
    ap.add_argument("--bank", default="core")
    ap.add_argument("--split", default="train")
    ap.add_argument("--episodes", type=int, default=12, help="scenarios of the split (first N), one episode each")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()

    import torch

    from evaluation.distributed import init_ray
    from scenarios import load_bank

    ids = [s.id for s in load_bank(args.bank, split=args.split).scenarios][: args.episodes]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        checkpoint = args.checkpoint
        if checkpoint is None:
            from agents.vla import VLA, VLAConfig

            torch.manual_seed(0)
            VLA(VLAConfig(size="tiny", image_size=(56, 112))).save_pretrained(tmp / "vla")
            checkpoint = tmp / "vla"
        base = CollectSettings(
            bank=args.bank,
            split=args.split,
            scenarios=ids,
            agent=f"vla:{checkpoint}?reasoning=0&noise=0",
            target="expert",
            n_frames=1,
            image_size=(56, 112),
        )
        init_ray(2, None)
        torch.set_num_threads(2)
        collect(base.model_copy(update={"scenarios": ids[:1]}), tmp / "warm_up.zarr", progress=False)  # numba, imports
        runs = {
            "in-process, agent on 2 threads (before)": base.model_copy(update={"agent_threads": 2}),
            "in-process, agent on 1 thread": base,
            "2 Ray workers, agent on 1 thread each": base.model_copy(update={"workers": 2}),
        }
        results, data = [], {}
        for i, (name, settings) in enumerate(runs.items()):
            wall, data[name] = timed_collect(settings, tmp / f"run{i}.zarr")
            results += [
                {"name": f"episodes/min, {name}", "value": round(60 * args.episodes / wall, 2), "unit": "episodes/min"},
                {"name": f"samples/s, {name}", "value": round(len(data[name]) / wall, 2), "unit": "samples/s"},
            ]
        one, two = data["in-process, agent on 1 thread"], data["2 Ray workers, agent on 1 thread each"]
        results.append({"name": "same data on 2 workers as in-process", "value": same_data(one, two), "unit": "bool"})
        results.append({"name": "samples", "value": len(one), "unit": "samples"})
    emit(
        {
            "benchmark": "collect_throughput",
            "machine": machine_info(),
            "bank": args.bank,
            "split": args.split,
            "episodes": args.episodes,
            "checkpoint": str(args.checkpoint) if args.checkpoint else "random tiny VLA",
            "results": results,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
