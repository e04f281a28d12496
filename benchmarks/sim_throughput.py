"""Simulator throughput on one core: LoopDrive (state only, and with the 4-camera rig) vs highway-env.

Scenarios are the ``core`` bank scenarios with 20+ traffic vehicles, and the ``towns`` test split (CARLA
towns, background traffic around a route), all of it and Town10HD alone; with ``--town12 PATH`` (default:
``../shared/roads/carla_towns/Town12.xodr.gz`` where it exists) also a bank of 10 Town12 routes made in a
temporary folder. Each town's load is measured in a fresh process: the OpenDRIVE import cold and from the
cache, the first ``reset`` (the world's rasters and the camera geometry of the whole town) and the
process's peak memory. One LoopDrive step is 0.1 s of
simulated time (``decision_every=1``); a ``highway-fast-v0`` step is 1 s, so the comparison is in
simulated seconds per wall-clock second. The agent holds a straight 10 m/s ego-frame plan (cheap,
so the figure is the simulator's, not an agent's).

    python benchmarks/sim_throughput.py [--seconds 20] [--quick] [--town12 PATH]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.machine import machine_info, pin_to_one_core  # noqa: E402

SHARED_TOWN12 = Path(__file__).resolve().parents[2] / "shared" / "roads" / "carla_towns" / "Town12.xodr.gz"
PLAN = np.zeros((64, 3), np.float32)
PLAN[:, 0] = np.arange(1, 65) * 0.1 * 10.0


def dense_scenarios(min_vehicles: int = 20) -> list[str]:
    from scenarios import load_bank

    return [s.id for s in load_bank("core") if sum(a.kind == "vehicle" for a in s.actors) >= min_vehicles]


def loopdrive_rate(scenario_ids: list[str], seconds: float, bank: str = "core", **env_kwargs) -> tuple[float, int]:
    import envs  # noqa: F401

    env = gym.make("LoopDrive-v0", bank=bank, decision_every=1, **env_kwargs)
    env = env.unwrapped  # measure the env, not the passive checker / order-enforcing wrappers
    steps, busy, k = 0, 0.0, 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        env.reset(seed=k, options={"scenario": scenario_ids[k % len(scenario_ids)]})
        k += 1
        done = False
        t0 = time.perf_counter()
        while not done:
            _, _, term, trunc, _ = env.step(PLAN)
            steps += 1
            done = term or trunc or steps % 400 == 0
        busy += time.perf_counter() - t0
    return steps / busy, steps


def town_load(map_path: str, bank: str, scenario: str) -> dict[str, float]:
    """Load figures for one town, in this (fresh) process: import cold, load cached, first reset, peak RSS."""
    import resource
    import tempfile

    import envs  # noqa: F401
    from scenarios.opendrive.cache import load_map

    with tempfile.TemporaryDirectory() as cache:
        os.environ["LOOPDRIVE_CACHE"] = cache
        t0 = time.perf_counter()
        load_map(map_path, memo=False)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        load_map(map_path, memo=False)  # from the disk cache the first load wrote
        cached = time.perf_counter() - t0
        env = gym.make("LoopDrive-v0", bank=bank, decision_every=1).unwrapped
        t0 = time.perf_counter()
        env.reset(seed=0, options={"scenario": scenario})
        first_reset = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    return {"import_cold_s": cold, "load_cached_s": cached, "first_reset_s": first_reset, "peak_rss_gb": peak}


def in_fresh_process(fn, *args):
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def highway_rate(seconds: float) -> tuple[float, float]:
    import highway_env  # noqa: F401

    env = gym.make("highway-fast-v0").unwrapped
    per_step = 1.0 / env.config["policy_frequency"]
    steps, busy, k = 0, 0.0, 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        env.reset(seed=k)
        k += 1
        done = False
        t0 = time.perf_counter()
        while not done:
            _, _, term, trunc, _ = env.step(1)  # IDLE
            steps += 1
            done = term or trunc
        busy += time.perf_counter() - t0
    return steps / busy, per_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="wall time per measurement")
    p.add_argument("--quick", action="store_true", help="2 s per measurement (smoke test of the script)")
    p.add_argument("--town12", default=str(SHARED_TOWN12), help="Town12's OpenDRIVE file (rows skipped if absent)")
    args = p.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    pinned = pin_to_one_core()
    warnings.filterwarnings("ignore")
    ids = dense_scenarios()
    state_rate, _state_steps = loopdrive_rate(ids, seconds, observations=("state",))
    cams_rate, _ = loopdrive_rate(
        ids, seconds, observations=("cameras", "ego_history", "ego_state", "route", "command")
    )
    cams = ("cameras", "ego_history", "ego_state", "route", "command")
    from scenarios import load_bank

    towns = load_bank("towns", split="test")
    town_ids = [x.id for x in towns]
    town10 = [x.id for x in towns if "Town10HD" in x.tags]
    towns_state, _ = loopdrive_rate(town_ids, seconds, bank="towns", observations=("state",))
    towns_cams, _ = loopdrive_rate(town_ids, seconds, bank="towns", observations=cams)
    town10_state, _ = loopdrive_rate(town10, seconds, bank="towns", observations=("state",))
    town10_cams, _ = loopdrive_rate(town10, seconds, bank="towns", observations=cams)
    rows = []
    loads = {"town10hd": in_fresh_process(town_load, towns.get(town10[0]).map.file, "towns", town10[0])}
    with tempfile.TemporaryDirectory() as folder:
        if Path(args.town12).is_file():
            from scenarios.opendrive.cache import load_map
            from scenarios.towns import generate_town_bank

            generate_town_bank([str(Path(args.town12).resolve())], 10, 2026, Path(folder) / "town12", name="town12")
            town12 = [x.id for x in load_bank(str(Path(folder) / "town12"))]
            loads["town12"] = in_fresh_process(town_load, args.town12, str(Path(folder) / "town12"), town12[0])
            load_map(args.town12)  # warm this process's memo, so the rates measure stepping only
            state, _ = loopdrive_rate(town12, seconds, bank=str(Path(folder) / "town12"), observations=("state",))
            cams12, _ = loopdrive_rate(town12, seconds, bank=str(Path(folder) / "town12"), observations=cams)
            rows += [
                {"name": "town12_state_steps_per_s", "value": round(state, 1), "unit": "steps/s"},
                {"name": "town12_cams_steps_per_s", "value": round(cams12, 1), "unit": "steps/s"},
            ]
    for town, figures in loads.items():
        rows += [
            {"name": f"{town}_{key}", "value": round(value, 3), "unit": "GB" if key.endswith("gb") else "s"}
            for key, value in figures.items()
        ]
    hw_rate, hw_dt = highway_rate(seconds)
    out = {
        "benchmark": "sim_throughput",
        "machine": machine_info() | {"pinned_core": pinned},
        "config": {
            "bank": "core",
            "scenarios": len(ids),
            "min_vehicles": 20,
            "seconds_per_measurement": seconds,
            "loopdrive_step_s": 0.1,
            "highway_step_s": hw_dt,
            "camera_rig": "alpamayo4 4 x 128x256, 1 frame/step",
        },
        "results": [
            {"name": "loopdrive_state_steps_per_s", "value": round(state_rate, 1), "unit": "steps/s"},
            {"name": "loopdrive_state_sim_s_per_s", "value": round(state_rate * 0.1, 1), "unit": "sim s/s"},
            {"name": "loopdrive_cams_steps_per_s", "value": round(cams_rate, 1), "unit": "steps/s"},
            {"name": "towns_state_steps_per_s", "value": round(towns_state, 1), "unit": "steps/s"},
            {"name": "towns_cams_steps_per_s", "value": round(towns_cams, 1), "unit": "steps/s"},
            {"name": "town10hd_state_steps_per_s", "value": round(town10_state, 1), "unit": "steps/s"},
            {"name": "town10hd_cams_steps_per_s", "value": round(town10_cams, 1), "unit": "steps/s"},
            *rows,
            {"name": "highway_fast_steps_per_s", "value": round(hw_rate, 1), "unit": "steps/s"},
            {"name": "highway_fast_sim_s_per_s", "value": round(hw_rate * hw_dt, 1), "unit": "sim s/s"},
            {
                "name": "state_vs_highway_sim_time_ratio",
                "value": round(state_rate * 0.1 / (hw_rate * hw_dt), 2),
                "unit": "x",
            },
        ],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
