"""Hostile and careless scenario files, for the fuzz test and the fault sweep.

``variants(seed_files, n, rng)`` yields ``(name, text_or_bytes, suffix)``: mutations of valid files
(keys dropped, values of the wrong type, huge, negative, zero, NaN and infinite numbers, wrong
lane references), files truncated at random points, random bytes, and targeted attacks: nesting
thousands deep, a YAML alias bomb, a map file that is a device or a relative path, NaN map
coordinates. ``check(path)`` loads one and says what happened: ``valid``, ``clean`` (a
``ScenarioError`` whose every line is ``file: field: reason``) or ``crash`` (anything else).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from scenarios.banks import load_scenario
from scenarios.schema import ScenarioError

HOSTILE_VALUES: list[Any] = [
    1e20,
    -1e20,
    2**64,
    3.5,
    "r_f0",
    ["r_f0", 5],
    [[0, 0]],
    {"type": "idm"},
    list(range(50)),
    None,
    "",
    "x" * 10,
    -1,
    0,
    10**100,
    -(10**100),
    1e308,
    float("nan"),
    float("inf"),
    -float("inf"),
    [],
    {},
    [1, 2],
    {"a": 1},
    True,
    "nan",
    "../../etc/passwd",
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:4]):
            out += _paths(v, (*prefix, i))
    return out


def _set(node: Any, path: tuple, value: Any, delete: bool = False) -> None:
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def _get(node: Any, path: tuple) -> Any:
    for key in path:
        node = node[key]
    return node


def _dump(data: Any) -> str:
    return json.dumps(data, allow_nan=True)


def mutations(data: dict[str, Any], n: int, rng: np.random.Generator) -> Iterator[tuple[str, str]]:
    """``n`` mutations of a parsed scenario, each of one to three points: a value replaced by a
    hostile one, a key deleted, or a value swapped in from elsewhere in the file (a lane id where a
    number belongs, a list where a lane id belongs)."""
    paths = _paths(data)
    for _ in range(n):
        mutated, what = copy.deepcopy(data), []
        for _ in range(int(rng.integers(1, 4))):
            live = _paths(mutated)
            path = live[int(rng.integers(len(live)))] if live else paths[0]
            dice = rng.random()
            try:
                if dice < 0.15 and isinstance(path[-1], str):
                    _set(mutated, path, None, delete=True)
                    what.append(f"delete {'.'.join(map(str, path))}")
                elif dice < 0.35:
                    other = live[int(rng.integers(len(live)))]
                    value = _get(mutated, other)
                    _set(mutated, path, copy.deepcopy(value))
                    what.append(f"{'.'.join(map(str, path))} = <{'.'.join(map(str, other))}>")
                else:
                    value = HOSTILE_VALUES[int(rng.integers(len(HOSTILE_VALUES)))]
                    _set(mutated, path, value)
                    what.append(f"{'.'.join(map(str, path))} = {value!r:.20}")
            except (KeyError, IndexError, TypeError):  # an earlier mutation removed the path
                continue
        yield "; ".join(what), _dump(mutated)


def attacks(valid: dict[str, Any], tmp: Path) -> Iterator[tuple[str, str | bytes, str]]:
    """Size, depth and reference attacks (name, content, file suffix)."""
    yield "nested 100,000 deep (JSON)", '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", ".json"
    yield "nested 100,000 deep (YAML)", "id: deep\nx: " + "[" * 100_000 + "]" * 100_000 + "\n", ".yaml"
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        bomb += f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    yield "YAML alias bomb", bomb, ".yaml"
    inside = "\n".join("  " + line for line in bomb.splitlines())  # in a field the schema walks
    yield "YAML alias bomb in params", _yaml_scenario(valid) + f"\nparams:\n{inside}\n", ".yaml"
    yield "a 200 MB file of spaces", b" " * 200_000_000, ".json"
    yield "random bytes", bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)), ".json"
    yield "invalid UTF-8", b'{"id": "\xff\xfe"}', ".json"
    yield "a list, not a mapping", "[1, 2, 3]", ".json"
    for name, file in (("a device", "/dev/zero"), ("a folder", "."), ("missing", "no/such/map.json")):
        data = copy.deepcopy(valid)
        data["map"] = {"file": file}
        yield f"map.file is {name}", _dump(data), ".json"
    road = {"lanes": [{"id": "r_f0", "centerline": [[0, 0], [float("nan"), 5], [300, 0]]}]}
    (tmp / "nan_map.json").write_text(json.dumps(road, allow_nan=True))
    data = copy.deepcopy(valid) | {"actors": [], "signals": {}}
    data["map"] = {"file": "nan_map.json"}  # relative: resolved against the scenario's folder
    data["ego"] = {**data["ego"], "lane": "r_f0", "route": ["r_f0"], "s": 1.0}
    yield "map with NaN coordinates", _dump(data), ".json"
    good = {"lanes": [{"id": "r_f0", "centerline": [[0, 0], [300, 0]]}]}
    (tmp / "good_map.json").write_text(json.dumps(good))
    data["map"] = {"file": "good_map.json"}
    yield "a valid map file by a relative path", _dump(data), ".json"


def _yaml_scenario(valid: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump({k: v for k, v in valid.items() if k != "params"})


def truncations(text: str, n: int, rng: np.random.Generator) -> Iterator[tuple[str, str]]:
    for _ in range(n):
        cut = int(rng.integers(1, len(text)))
        yield f"truncated at byte {cut}", text[:cut]


PROBLEM = re.compile(r"^\S.*: \S.*: .+$")


def check(path: Path) -> tuple[str, str]:
    """Load one file: ``("valid", "")``, ``("clean", first problem)`` or ``("crash", the exception)``."""
    try:
        load_scenario(path)
    except ScenarioError as e:
        bad = [p for p in e.problems if not PROBLEM.match(p) or not p.startswith(str(path))]
        if bad or not e.problems:
            return "crash", f"malformed problem line: {bad[:1]}"
        return "clean", e.problems[0]
    except (RecursionError, MemoryError, Exception) as e:
        return "crash", f"{type(e).__name__}: {str(e)[:200]}"
    return "valid", ""


def _runs(path: Path) -> None:
    """What validates must run: build its env, reset it, drive three decisions."""
    from agents import load_agent
    from envs import LoopDriveEnv

    env = LoopDriveEnv(scenario=load_scenario(path), observations=("ego_state",))
    agent = load_agent("constant_velocity")
    obs, _ = env.reset(seed=0)
    agent.reset({})
    for _ in range(3):
        obs, _, terminated, truncated, _ = env.step(agent.act(obs).trajectory)
        if terminated or truncated:
            break


def sweep(bank: str = "smoke", per_file: int = 25, truncated: int = 5, seed: int = 0) -> dict[str, Any]:
    """Fuzz every file of ``bank``: mutations, truncations and the attacks. Returns the counts, the
    slowest load, and every crash (a load that raised anything but a clean ``ScenarioError``, or a
    valid file that failed to run)."""
    import resource
    import tempfile
    import time

    from scenarios.banks import load_bank

    rng = np.random.default_rng(seed)
    files = sorted((load_bank(bank).path / "scenarios").glob("*.json"))
    counts = {"tried": 0, "valid": 0, "clean": 0, "crash": 0, "ran": 0}
    crashes, slowest = [], 0.0
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        cases: list[tuple[str, str | bytes, str]] = []
        for f in files:
            text = f.read_text()
            cases += [(f"{f.name}: {n}", t, ".json") for n, t in mutations(json.loads(text), per_file, rng)]
            cases += [(f"{f.name}: {n}", t, ".json") for n, t in truncations(text, truncated, rng)]
        cases += [(f"attack: {n}", c, s) for n, c, s in attacks(json.loads(files[0].read_text()), tmp)]
        for k, (name, content, suffix) in enumerate(cases):
            path = tmp / f"case{k}{suffix}"
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
            t0 = time.perf_counter()
            status, message = check(path)
            slowest = max(slowest, time.perf_counter() - t0)
            counts["tried"] += 1
            counts[status] += 1
            if status == "valid":
                try:
                    _runs(path)
                    counts["ran"] += 1
                except Exception as e:
                    status, message = "crash", f"validated but failed to run: {type(e).__name__}: {e}"
                    counts["crash"] += 1
            if status == "crash":
                crashes.append({"case": name, "error": message[:300]})
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return counts | {"slowest_load_s": round(slowest, 3), "peak_rss_mb": round(peak_mb), "crashes": crashes}


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="Fuzz a scenario bank's files; prints JSON.")
    p.add_argument("--bank", default="smoke")
    p.add_argument("--per-file", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print(json.dumps(sweep(args.bank, args.per_file, seed=args.seed), indent=1))
