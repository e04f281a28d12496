"""Evaluation throughput: episodes per minute of ``loopdrive eval`` and where the wall time goes.

    python benchmarks/eval_throughput.py [--bank core] [--split test] [--episodes 65] [--vla-episodes 4]

1. The expert on the bank split (state observations, no cameras) in-process and with 1 and 2 Ray
   workers: episodes / minute.
2. A randomly initialised tiny VLA (cameras on: the default 4-camera x 4-frame rig, reasoning on)
   on a few episodes, in-process on one core: share of wall time in the agent, the world (simulation,
   controller, rewards), the renderer and the metrics. The suite's own overhead is everything but the
   agent; the target is under 20% of wall time.

Prints the benchmark JSON (DESIGN.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.machine import machine_info
from evaluation import EvalConfig, evaluate, read_episodes


def run(config: EvalConfig, out: Path) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    evaluate(config, out, progress=False, write_report=False)
    return time.perf_counter() - t0, read_episodes(out)


def shares(records: list[dict]) -> dict[str, float]:
    total = sum(r["wall_s"] for r in records)
    parts = {k: sum(r["timing"][k] for r in records) for k in ("agent", "env", "render", "metrics", "video")}
    parts["other"] = max(total - sum(parts.values()), 0.0)  # env construction, reset, bookkeeping
    return {k: v / total for k, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bank", default="core")
    ap.add_argument("--split", default="test")
    ap.add_argument("--episodes", type=int, default=65, help="scenarios of the split to run (first N)")
    ap.add_argument("--vla-episodes", type=int, default=4)
    args = ap.parse_args()

    from scenarios import load_bank

    ids = [s.id for s in load_bank(args.bank, split=args.split).scenarios][: args.episodes]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = EvalConfig(bank=args.bank, split=args.split, agent="expert", scenarios=ids)
        from evaluation.distributed import init_ray

        init_ray(2, None)  # started before the clock runs: the pool's start-up is timed, the cluster's is not
        for workers in (0, 1, 2):
            wall, recs = run(base.model_copy(update={"workers": workers}), tmp / f"expert_w{workers}")
            label = "in-process" if workers == 0 else f"{workers} Ray worker(s)"
            results.append(
                {
                    "name": f"expert episodes/min, {label}",
                    "value": round(60 * len(recs) / wall, 1),
                    "unit": "episodes/min",
                }
            )
            if workers == 0:
                for k, v in shares(recs).items():
                    results.append({"name": f"expert wall-time share: {k}", "value": round(100 * v, 1), "unit": "%"})

        import torch

        from agents.vla.model import VLA, VLAConfig

        torch.set_num_threads(1)
        torch.manual_seed(0)
        VLA(VLAConfig(size="tiny")).save_pretrained(tmp / "vla")
        vla = EvalConfig(
            bank=args.bank,
            split=args.split,
            agent=f"vla:{tmp / 'vla'}",
            scenarios=ids[: args.vla_episodes],
            episode_timeout_s=3600,
        )
        wall, recs = run(vla, tmp / "vla_run")
        sh = shares(recs)
        decisions = sum(r.get("decisions", 0) for r in recs)
        results.append(
            {
                "name": "tiny VLA episodes/min, in-process, 1 core",
                "value": round(60 * len(recs) / wall, 2),
                "unit": "episodes/min",
            }
        )
        results.append({"name": "tiny VLA decisions/s", "value": round(decisions / wall, 2), "unit": "decisions/s"})
        for k, v in sh.items():
            results.append({"name": f"tiny VLA wall-time share: {k}", "value": round(100 * v, 1), "unit": "%"})
        results.append(
            {
                "name": "tiny VLA suite overhead (all but the agent)",
                "value": round(100 * (1 - sh["agent"]), 1),
                "unit": "%",
            }
        )
    print(
        json.dumps(
            {
                "benchmark": "eval_throughput",
                "machine": machine_info(),
                "bank": args.bank,
                "split": args.split,
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
