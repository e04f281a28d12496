"""The curves every training run draws at its end (``RUN/curves.png``): seconds per plot.

    python benchmarks/curves_plot.py [--panels 31] [--steps 300] [--repeats 3] [--out FILE]

A synthetic ``metrics.jsonl`` of ``--panels`` scalars logged at ``--steps`` steps (a GRPO run logs about 31),
plotted ``--repeats`` times; prints the benchmark JSON with the best and median seconds. Run it on two
commits to compare their plotting.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import math
import statistics
import tempfile
import time

from benchmarks.machine import emit, machine_info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--panels", type=int, default=31)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from training.metrics_log import MetricsLogger

    with tempfile.TemporaryDirectory() as run_dir:
        logger = MetricsLogger(run_dir)
        for step in range(1, args.steps + 1):
            logger.log(step, {f"group_{i % 4}/metric_{i}": math.sin(step / (i + 1)) for i in range(args.panels)})
        seconds = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            logger.plot()
            seconds.append(time.perf_counter() - t0)
        logger.close()
    emit(
        {
            "benchmark": "curves_plot",
            "machine": machine_info(),
            "panels": args.panels,
            "steps": args.steps,
            "repeats": args.repeats,
            "seconds_best": round(min(seconds), 3),
            "seconds_median": round(statistics.median(seconds), 3),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
