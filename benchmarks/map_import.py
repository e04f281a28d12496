"""OpenDRIVE towns: import time cold and cached, peak memory, size, and the errors against the carla client.

    python benchmarks/map_import.py [--maps FILE_OR_DIR ...] [--every 2] [--out FILE]

By default the shipped towns (scenarios/towns) and any Town*.xodr(.gz) in ../shared/roads/carla_towns.
Each town is measured in a fresh process (so its peak RSS is its own): a cold import (no cache), a
load from the cache, then ``compare_with_carla`` (lane centres sampled every ``--every`` m; Town12 every
10 m). Prints the benchmark JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time

from benchmarks.machine import emit, machine_info

ROOT = Path(__file__).resolve().parents[1]


def measure(path: str, every: float) -> dict:
    """Runs in its own process: cold import, cached load, oracle."""
    from scenarios.opendrive.cache import load_map

    t0 = time.perf_counter()
    road_map, report, cached = load_map(path, use_cache=True, memo=False)
    cold = time.perf_counter() - t0
    assert not cached
    t0 = time.perf_counter()
    _, _, cached = load_map(path, memo=False)
    warm = time.perf_counter() - t0
    out = {
        "town": Path(path).name.split(".")[0],
        "roads": report.roads,
        "junctions": report.junctions,
        "lanes": len(road_map.lanes),
        "driving_km": round(sum(lane.length for lane in road_map.lanes.values() if lane.kind == "driving") / 1e3, 1),
        "traffic_lights": report.traffic_lights,
        "import_cold_s": round(cold, 2),
        "load_cached_s": round(warm, 3),
        "peak_rss_gb_import": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "warnings": len(report.warnings),
    }
    try:
        from scenarios.opendrive.oracle import compare_with_carla

        r = compare_with_carla(path, every)
        out |= {
            "position_error_median_m": r["position_error_m"]["median"],
            "position_error_max_m": r["position_error_m"]["max"],
            "width_error_max_m": r["width_error_m"]["max"],
            "heading_error_max_deg": r["heading_error_deg"]["max"],
            "topology_edges": r["topology"]["edges_carla"],
            "edges_only_ours": r["topology"]["n_only_ours"],
            "edges_only_carla": r["topology"]["n_only_carla"],
            "edges_only_carla_unlinked_in_file": r["topology"]["n_only_carla_unlinked_in_file"],
            "oracle_samples": r["samples"],
        }
    except ImportError:
        out["oracle"] = "the carla client is not installed"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", nargs="*", default=None)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this file in this process
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.every)))
        return
    paths = []
    for item in args.maps or [str(ROOT / "scenarios" / "towns"), str(ROOT.parent / "shared" / "roads" / "carla_towns")]:
        p = Path(item)
        paths += sorted(p.glob("Town*.xodr*")) if p.is_dir() else [p]
    seen, rows = set(), []
    with tempfile.TemporaryDirectory() as cache:
        for p in paths:
            name = p.name.split(".")[0]
            if name in seen:
                continue
            seen.add(name)
            every = 10.0 if name in ("Town12", "Town13", "Town15") else args.every
            env = os.environ | {"LOOPDRIVE_CACHE": f"{cache}/{name}"}
            cmd = [sys.executable, __file__, "--one", str(p), "--every", str(every)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    results = []
    for r in rows:
        for key, value in r.items():
            if key != "town" and isinstance(value, int | float):
                results.append({"name": f"{r['town']}/{key}", "value": value, "unit": key.rsplit("_", 1)[-1]})
    emit({"benchmark": "map_import", "machine": machine_info(), "towns": rows, "results": results}, args.out)


if __name__ == "__main__":
    main()
