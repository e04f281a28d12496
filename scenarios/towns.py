"""Scenarios on real road networks: routes over a town's lane graph, background traffic, signal plans.

``generate_town_bank(maps, per_map, seed, out)`` writes a bank like ``core``'s: for each OpenDRIVE map,
``per_map`` scenarios, each a random route of 200-1,000 m found by A* over the lane graph (lane to
successor, cost = length), IDM background traffic on the driving lanes around the route, and a
fixed-time plan per signalised junction that gives one approach green at a time (as CARLA cycles a
junction's lights).
Splits are stratified per map, as ``core``'s are per family.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from scenarios.families import idm_actor, random_path
from scenarios.maps import RoadMap
from scenarios.schema import BankManifest, Scenario

ROUTE_LENGTH = (200.0, 1000.0)
DENSITY = (0.3, 1.2)  # background vehicles per 100 m of driving lane near the route
NEAR = 120.0  # m: background traffic on the lanes within this distance of the route


def route_between(
    road_map: RoadMap, start: str, goal: str, lane_change_cost: float | None = None, changed_into_start: bool = False
) -> list[str] | None:
    """The shortest lane sequence from ``start`` to ``goal`` along successors (A*), or None. With a
    ``lane_change_cost`` (metres per lane crossed) the route may also move into a same-direction lane
    beside it along a lane (not twice in a row: not at once if ``changed_into_start``), as the
    Leaderboard's planner changes lanes to reach a keypoint."""
    lanes = road_map.lanes
    target = lanes[goal].centerline[0]

    def h(lane_id: str) -> float:
        return float(np.hypot(*(lanes[lane_id].centerline[-1] - target)))

    first = (start, changed_into_start)  # (lane, reached by a lane change)
    frontier = [(h(start), 0.0, first)]
    came: dict[tuple[str, bool], tuple[str, bool] | None] = {first: None}
    cost = {first: 0.0}
    while frontier:
        _, g, state = heapq.heappop(frontier)
        lane_id, changed = state
        if lane_id == goal:
            path = [state]
            while came[path[-1]] is not None:
                path.append(came[path[-1]])
            return [lane for lane, _ in path[::-1]]
        if g > cost[state]:
            continue
        moves = [((nxt, False), g + lanes[lane_id].length) for nxt in lanes[lane_id].successors]
        if lane_change_cost is not None and not changed:
            beside = road_map.lanes_beside(lane_id)
            moves += [((n, True), g + lane_change_cost * k) for n, k in beside.items()]
        for nxt, g2 in moves:
            if lanes[nxt[0]].kind != "driving":
                continue
            if g2 < cost.get(nxt, math.inf):
                cost[nxt], came[nxt] = g2, state
                heapq.heappush(frontier, (g2 + h(nxt[0]), g2, nxt))
    return None


def _route(road_map: RoadMap, rng: np.random.Generator) -> list[str]:
    starts = [x for x in road_map.lanes.values() if x.kind == "driving" and x.junction is None and x.length > 25]
    goals = [x.id for x in starts]
    for _ in range(200):
        start = starts[int(rng.integers(len(starts)))].id
        goal = goals[int(rng.integers(len(goals)))]
        route = route_between(road_map, start, goal) if goal != start else None
        if route is None:
            continue
        length = sum(road_map.lanes[x].length for x in route)
        if ROUTE_LENGTH[0] <= length <= ROUTE_LENGTH[1] + road_map.lanes[goal].length:
            return route
    raise ValueError("no route of 200-1,000 m found on this map (too small or disconnected?)")


def signal_plans(road_map: RoadMap, rng: np.random.Generator) -> dict[str, dict]:
    """Per junction, one approach green at a time (as CARLA cycles a junction's light group): signals
    facing the same way (within 30 degrees) share a slot; each slot is green, yellow, then all-red."""
    by_junction: dict[str, list[str]] = {}
    for sid, sig in road_map.signals.items():
        junctions = sorted({road_map.lanes[x].junction for x in sig.lanes if road_map.lanes[x].junction is not None})
        by_junction.setdefault(junctions[0] if junctions else f"signal-{sid}", []).append(sid)
    plans: dict[str, dict] = {}
    yellow, all_red = 3.0, 1.0
    for sids in by_junction.values():
        slots: list[list[str]] = []
        for sid in sorted(sids, key=lambda k: road_map.signals[k].facing % (2 * math.pi)):
            facing = road_map.signals[sid].facing
            same = [g for g in slots if math.cos(road_map.signals[g[0]].facing - facing) > math.cos(math.radians(30))]
            if same:
                same[0].append(sid)
            else:
                slots.append([sid])
        greens = [float(rng.uniform(8, 15)) for _ in slots]
        cycle = sum(g + yellow + all_red for g in greens)
        offset = float(rng.uniform(0, cycle))
        start = 0.0
        for slot, green in zip(slots, greens):
            before, after = start, cycle - start - green - yellow
            phases = ([("red", before)] if before > 0 else []) + [("green", green), ("yellow", yellow), ("red", after)]
            program = {
                "phases": [{"state": st, "duration": round(d, 2)} for st, d in phases],
                "offset": round(offset, 2),
            }
            for sid in slot:
                plans[sid] = program
            start += green + yellow + all_red
    return plans


def lanes_near(road_map: RoadMap, route: list[str], within: float = NEAR, kind: str = "driving") -> list[str]:
    """The lanes of ``kind`` (other than the route's first) that come within ``within`` metres of the route."""
    points = np.concatenate([road_map.lanes[x].centerline for x in route])[::5]
    lo, hi = points.min(0) - within, points.max(0) + within
    out = []
    for lane in road_map.lanes.values():
        if lane.kind != kind or lane.id == route[0]:
            continue
        sample = lane.centerline[:: max(1, len(lane.centerline) // 8)]
        if ((sample < lo) | (sample > hi)).any(1).all():
            continue
        d = np.min(np.hypot(*(sample[:, None, :] - points[None]).T))
        if d < within:
            out.append(lane.id)
    return sorted(out)


def background_traffic(
    road_map: RoadMap, route: list[str], density: float, rng: np.random.Generator, clear: list[np.ndarray]
) -> list[dict[str, Any]]:
    """IDM vehicles on the driving lanes within ``NEAR`` of ``route``, ``density`` per 100 m of lane,
    each on a random 300 m path through the junctions, at least 15 m from each other and from the
    points in ``clear`` (the ego's start)."""
    actors: list[dict[str, Any]] = []
    occupied = list(clear)
    for lane_id in lanes_near(road_map, route):
        lane = road_map.lanes[lane_id]
        if lane.length < 10.0:
            continue
        n = int(rng.poisson(density * lane.length / 100))
        for s in np.sort(rng.uniform(3.0, lane.length - 3.0, n)):
            xy = lane.pose_at(float(s))[0]
            if min(np.hypot(*(xy - o)) for o in occupied) < 15.0:
                continue
            occupied.append(xy)
            path = random_path(road_map, lane_id, 300.0, rng)
            speed = lane.speed_limit * rng.uniform(0.3, 0.8)
            desired = lane.speed_limit * rng.uniform(0.7, 1.0)
            actors.append(idm_actor(f"car{len(actors)}", lane_id, float(s), speed, path, desired))
    return actors


def time_budget(road_map: RoadMap, route: list[str], length: float) -> float:
    """Seconds a route gets: 30 s, plus 5 m/s over its length, plus a light cycle per signalised stop."""
    signalled = sum(1 for sl in road_map.stop_lines if sl.signal is not None and sl.lane in set(route))
    return 30.0 + length / 5.0 + 60.0 * signalled


def town_scenario(map_file: str, road_map: RoadMap, seed: int, scenario_id: str, split: str) -> Scenario:
    """One scenario on ``road_map`` (loaded from ``map_file``, which the scenario names)."""
    rng = np.random.default_rng(seed)
    route = _route(road_map, rng)
    first = road_map.lanes[route[0]]
    total = sum(road_map.lanes[x].length for x in route)
    density = float(rng.uniform(*DENSITY))
    actors = background_traffic(road_map, route, density, rng, [first.pose_at(2.0)[0]])
    data = {
        "id": scenario_id,
        "family": "town",
        "description": f"A {total:.0f} m route through {Path(map_file).name.split('.')[0]} with background traffic.",
        "split": split,
        "seed": seed,
        "params": {"map": Path(map_file).name, "route_m": round(total, 1), "density": round(density, 3)},
        "map": {"file": map_file},
        "ego": {
            "lane": route[0],
            "s": 2.0,
            "speed": round(float(first.speed_limit * rng.uniform(0.0, 0.5)), 2),
            "route": route,
            "goal_distance": round(total - 2.0 - 6.0, 1),
        },
        "actors": actors,
        "signals": signal_plans(road_map, rng),
        "duration_s": round(min(600.0, time_budget(road_map, route, total)), 1),  # a red light can cost a cycle
        "tags": ["town", Path(map_file).name.split(".")[0]],
    }
    return Scenario.model_validate(data)


def generate_town_bank(
    maps: list[str | Path],
    per_map: int,
    seed: int,
    out: str | Path,
    name: str = "towns",
    version: str = "1.0.0",
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> BankManifest:
    """Write ``per_map`` scenarios per OpenDRIVE map into ``out`` (``scenarios/`` + ``bank.toml``)."""
    from scenarios.banks import manifest_toml
    from scenarios.opendrive.cache import load_map

    out = Path(out)
    scen_dir = out / "scenarios"
    scen_dir.mkdir(parents=True, exist_ok=True)
    for old in scen_dir.glob("*.json"):
        old.unlink()
    counts = {"train": 0, "val": 0, "test": 0}
    root = np.random.SeedSequence(seed)
    for path, seq in zip(maps, root.spawn(len(maps))):
        path = Path(path).resolve()
        road_map = load_map(path)[0]
        town = path.name.split(".")[0]
        relative = os.path.relpath(path, scen_dir.resolve())  # the bank stays valid where it moves with the maps
        n_train, n_val = int(round(per_map * split_fractions[0])), int(round(per_map * split_fractions[1]))
        for k, s in enumerate(seq.spawn(per_map)):
            split = "train" if k < n_train else "val" if k < n_train + n_val else "test"
            scn = town_scenario(relative, road_map, int(s.generate_state(1)[0]), f"{town}-{k:03d}", split)
            counts[split] += 1
            (scen_dir / f"{scn.id}.json").write_text(json.dumps(scn.model_dump(mode="json", exclude_none=True)) + "\n")
    manifest = BankManifest(
        name=name,
        version=version,
        description=f"Random routes with background traffic on {', '.join(Path(m).name.split('.')[0] for m in maps)}",
        seed=seed,
        families=["town"],
        count=sum(counts.values()),
        splits={k: v for k, v in counts.items() if v},
        generator={"maps": [Path(m).name for m in maps], "per_map": per_map, "split_fractions": list(split_fractions)},
    )
    (out / "bank.toml").write_text(manifest_toml(manifest))
    return manifest
