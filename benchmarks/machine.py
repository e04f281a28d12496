"""Machine description, core pinning and JSON output shared by the benchmarks."""

from __future__ import annotations

import os
import platform
import sys


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numpy

    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "platform": platform.platform(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def pin_to_one_core() -> int | None:
    """Pin this process to one core so 'steps per second on one core' means what it says."""
    if hasattr(os, "sched_setaffinity"):
        core = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {core})
        return core
    return None


def timed(fn, device: str, repeats: int):
    """``fn()``'s last result and its best wall time over ``repeats`` calls, in seconds (CUDA synchronised)."""
    import time

    import torch

    out, best = None, float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return out, best


def emit(result: dict, out: str | None = None) -> dict:
    """Print a benchmark's JSON result, and write it to ``out`` when given. JSON has no NaN: a figure with
    nothing to measure (no samples of its kind) is written as null."""
    import json
    from pathlib import Path

    from evaluation.episode import json_safe

    text = json.dumps(json_safe(result), indent=1, allow_nan=False)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return result
