"""The fault sweep: what a careless user, a full disk or a kill -9 does to LoopDrive, counted.

    python benchmarks/fault_sweep.py [--kills 6] [--per-file 25] [--out FILE]

Three parts, printed as one JSON table:

- damaged artefacts (:mod:`loopdrive.faults`): saved VLAs, collected datasets, evaluation journals and
  training metrics logs, each damaged in every catalogued way and opened with its reader;
- hostile scenario files (:mod:`scenarios.fuzz`): mutations, truncations, depth / size / alias
  attacks on every smoke-bank file;
- kill -9: ``loopdrive eval`` and ``loopdrive collect`` killed at ``--kills`` points spread over an
  uninterrupted run's duration, then rerun to the end; the result must equal the uninterrupted one
  (the summary for eval; every array and the dataset card for collect), else "data lost".

Each row counts what was tried, clean answers (a reason naming the file, or an exact resume), crashes
(a traceback, or a resume that differs), silent loads, hangs and runs that lost data.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EVAL = ["eval", "--bank", "smoke", "--agent", "expert", "--seeds", "3"]
COLLECT = ["collect", "--bank", "smoke", "--split", "all", "--n-frames", "1", "--chunk", "16"]
COLLECT += ["--scenarios", "lead_brake-000,curve-000,straight-000,cut_in-000,s_bend-000", "--perturb-fraction", "0.5"]


def artefacts(folder: Path) -> list[dict[str, Any]]:
    from loopdrive.faults import FAULT_SETS, sweep

    rows = []
    for faults in FAULT_SETS:
        outcomes = sweep(faults, folder / faults.artefact.replace(" ", "_"))
        counts = Counter(o.result for o in outcomes)
        rows.append(
            {
                "artefact": faults.artefact,
                "tried": len(outcomes),
                **{k: counts.get(k, 0) for k in ("clean", "crash", "loaded", "hang")},
                "data_lost": 0,
                "not_clean": [vars(o) for o in outcomes if o.result != "clean"],
            }
        )
    return rows


def scenarios(per_file: int) -> dict[str, Any]:
    from scenarios.fuzz import sweep

    s = sweep("smoke", per_file=per_file)
    return {
        "artefact": "scenario file",
        "tried": s["tried"],
        "clean": s["ran"] + s["clean"],  # valid files that ran, and refusals naming file: field: reason
        "crash": s["crash"],
        "loaded": 0,
        "hang": 0,
        "data_lost": 0,
        "valid_and_ran": s["ran"],
        "slowest_load_s": s["slowest_load_s"],
        "peak_rss_mb": s["peak_rss_mb"],
        "not_clean": s["crashes"],
    }


def _cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "loopdrive.cli", *args]


def _run(args: list[str], kill_after: float | None = None) -> float:
    """Run the command (killed with SIGKILL after ``kill_after`` seconds if given); its wall time."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(_cli(args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    if kill_after is None and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed with exit code {proc.returncode}")
    return time.perf_counter() - t0


def _summary(run: Path) -> dict[str, Any]:
    summary = json.loads((run / "summary.json").read_text())
    summary["provenance"] = None  # the git state, not a result
    return summary


def _dataset(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    import numpy as np

    from training.data import DrivingDataset

    ds = DrivingDataset(path)
    arrays = {k: np.asarray(v).tobytes() for k, v in ds.arrays.items()} | {k: tuple(v) for k, v in ds.text.items()}
    return arrays, {**ds.card, "path": None}


def kills(folder: Path, n: int) -> list[dict[str, Any]]:
    """kill -9 at ``n`` points of an eval and of a collect; each resumed run must equal the uninterrupted one."""
    jobs = {
        "eval (kill -9, rerun)": (lambda out: [*EVAL, "--out", str(out)], _summary),
        "collect (kill -9, rerun)": (lambda out: [*COLLECT, "--out", str(out)], _dataset),
    }
    rows = []
    for name, (command, result) in jobs.items():
        reference = folder / f"{name.split()[0]}_reference.zarr"
        duration = _run(command(reference))
        expected = result(reference)
        counts = Counter()
        for i in range(n):
            out = folder / f"{name.split()[0]}_killed_{i}.zarr"
            _run(command(out), kill_after=max(1.0, duration * (i + 1) / (n + 1)))
            _run(command(out))  # the rerun finishes the job
            try:
                counts["clean" if result(out) == expected else "data_lost"] += 1
            except Exception:
                counts["crash"] += 1
        rows.append(
            {"artefact": name, "tried": n, **{k: counts.get(k, 0) for k in ("clean", "crash", "data_lost")}}
            | {"loaded": 0, "hang": 0, "uninterrupted_s": round(duration, 1)}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=6, help="kill -9 points per resumable command")
    parser.add_argument("--per-file", type=int, default=25, help="mutations per smoke-bank scenario file")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    from benchmarks.machine import emit, machine_info

    with tempfile.TemporaryDirectory() as tmp:
        rows = [scenarios(args.per_file), *artefacts(Path(tmp)), *kills(Path(tmp), args.kills)]
    total = {k: sum(r[k] for r in rows) for k in ("tried", "clean", "crash", "loaded", "hang", "data_lost")}
    emit({"benchmark": "fault_sweep", "machine": machine_info(), "rows": rows, "total": total}, args.out)


if __name__ == "__main__":
    main()
