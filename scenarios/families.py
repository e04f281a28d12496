"""Procedural scenario families.

A family is a parameter space (``Range`` / ``Choice``), a map builder and a populator that places
the ego, its route and the actors. ``make_scenario(family, params, seed)`` is a pure function: the
same inputs give the same scenario, which is how banks are regenerated bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from scenarios import geometry as geo
from scenarios.maps import RoadMap
from scenarios.roads import LANE_WIDTH, MapBuilder, junction
from scenarios.schema import Scenario


@dataclass(frozen=True)
class Range:
    """Sampling range [lo, hi]; ``valid`` are the hard limits a hand-written scenario may use
    (default: lo / 4 .. hi * 4 for positive ranges), so a typo cannot ask for a 10 km map."""

    lo: float
    hi: float
    integer: bool = False
    log: bool = False
    valid: tuple[float, float] | None = None

    def check(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if not -1e9 < value < 1e9 or not math.isfinite(value):  # (a huge int is no float for numpy)
            return f"{value!r} is not a finite number of sensible size"
        if self.integer and int(value) != value:
            return f"must be an integer, got {value!r}"
        lo, hi = self.valid or (self.lo / 4 if self.lo > 0 else self.lo, self.hi * 4 if self.hi > 0 else self.hi)
        if not lo <= value <= hi:
            return f"{value!r} is outside the valid range [{lo}, {hi}] (sampled from [{self.lo}, {self.hi}])"
        return None

    def sample(self, rng: np.random.Generator) -> float | int:
        if self.integer:
            return int(rng.integers(int(self.lo), int(self.hi) + 1))
        if self.log:
            return float(np.exp(rng.uniform(np.log(self.lo), np.log(self.hi))))
        return float(rng.uniform(self.lo, self.hi))


@dataclass(frozen=True)
class Choice:
    options: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        return self.options[int(rng.integers(len(self.options)))]

    def check(self, value: Any) -> str | None:
        return None if value in self.options else f"{value!r} is not one of {list(self.options)}"


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    params: dict[str, Range | Choice]
    build_map: Callable[[dict[str, Any]], RoadMap]
    populate: Callable[[RoadMap, dict[str, Any], np.random.Generator], dict[str, Any]]
    tags: tuple[str, ...] = ()

    def sample_params(self, rng: np.random.Generator) -> dict[str, Any]:
        return {k: v.sample(rng) for k, v in self.params.items()}


FAMILIES: dict[str, Family] = {}


def family(name: str, description: str, params: dict[str, Range | Choice], build_map, tags=()):
    """Register ``populate`` under ``name`` together with its map builder and parameter space."""

    def wrap(populate):
        FAMILIES[name] = Family(name, description, params, build_map, populate, tuple(tags))
        return populate

    return wrap


def _round(params: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in params.items()}


@lru_cache(maxsize=64)
def _cached_map(name: str, frozen: tuple) -> RoadMap:
    return FAMILIES[name].build_map(dict(frozen))


def build_family_map(name: str, params: dict[str, Any]) -> RoadMap:
    if name not in FAMILIES:
        raise KeyError(f"unknown map family {name!r}; known: {sorted(FAMILIES)}")
    fam = FAMILIES[name]
    full = {k: params[k] for k in fam.params if k in params}
    missing = [k for k in fam.params if k not in full]
    if missing:
        raise ValueError(f"map family {name!r} needs parameters {missing}")
    for key, space in fam.params.items():
        problem = space.check(full[key])
        if problem:
            raise ValueError(f"params.{key}: {problem}")
    return _cached_map(name, tuple(sorted(full.items())))


def make_scenario(name: str, params: dict[str, Any], seed: int, scenario_id: str, split: str = "test") -> Scenario:
    fam = FAMILIES[name]
    params = _round(params)
    road_map = build_family_map(name, params)
    rng = np.random.default_rng(seed)
    body = fam.populate(road_map, params, rng)
    tags = sorted({name, *fam.tags, *body.pop("tags", [])})
    return Scenario.model_validate(
        {
            "id": scenario_id,
            "family": name,
            "description": fam.description,
            "split": split,
            "seed": seed,
            "params": params,
            "map": {"family": name, "params": params},
            "tags": tags,
            **body,
        }
    )


# --- helpers shared by populators -------------------------------------------------------------------
def _ego(road_map: RoadMap, route: list[str], s: float, speed: float, goal: float | None = None) -> dict:
    total = sum(road_map.lanes[x].length for x in route) - s - 6.0  # stop short of the map's edge
    goal = min(goal, total) if goal is not None else total
    return {
        "lane": route[0],
        "s": round(s, 2),
        "speed": round(speed, 2),
        "route": route,
        "goal_distance": round(goal, 1),
    }


def random_path(road_map: RoadMap, start: str, length: float, rng: np.random.Generator) -> list[str]:
    """Lanes from ``start`` along randomly chosen successors for ``length`` m (or to a dead end); a lane
    that runs out merges into the lane beside (``RoadMap.merges_into``) and goes on from there."""
    ids, total = [start], road_map.lanes[start].length
    while total < length or road_map.merges_into(ids[-1]):  # (never ends in a lane that runs out)
        succ = road_map.lanes[ids[-1]].successors
        if not succ:
            into = road_map.merges_into(ids[-1])
            if into is None:
                break
            succ = road_map.lanes[into].successors
            ids.append(into)  # (a lane change along the lane that runs out: no length of its own)
        ids.append(succ[int(rng.integers(len(succ)))])
        total += road_map.lanes[ids[-1]].length
    return ids


def idm_actor(
    aid: str, lane: str, s: float, speed: float, path: list[str], desired: float | None = None, **kw: Any
) -> dict:
    beh = {"type": "idm", **kw}
    if desired is not None:
        beh["desired_speed"] = round(desired, 2)
    return {"id": aid, "lane": lane, "s": round(s, 2), "speed": round(speed, 2), "path": path, "behaviour": beh}


def _traffic(
    road_map: RoadMap,
    lanes: list[str],
    density: float,
    rng: np.random.Generator,
    keep_clear: dict[str, tuple[float, float]] | None = None,
    prefix: str = "car",
    speed_factor: tuple[float, float] = (0.7, 1.0),
    path_length: float = 400.0,
    start_index: int = 0,
) -> list[dict]:
    """IDM vehicles on ``lanes`` at ``density`` vehicles per 100 m, spaced >= 12 m, off keep-clear zones."""
    actors = []
    keep_clear = keep_clear or {}
    for lane_id in lanes:
        lane = road_map.lanes[lane_id]
        n = int(rng.poisson(density * lane.length / 100.0))
        slots = np.sort(rng.uniform(5.0, max(6.0, lane.length - 8.0), size=n))
        last = -1e9
        for s in slots:
            lo_hi = keep_clear.get(lane_id)
            if s - last < 12.0 or (lo_hi and lo_hi[0] <= s <= lo_hi[1]):
                continue
            last = s
            speed = lane.speed_limit * rng.uniform(*speed_factor)
            path = random_path(road_map, lane_id, path_length, rng)
            desired = lane.speed_limit * rng.uniform(*speed_factor)
            actors.append(idm_actor(f"{prefix}{start_index + len(actors)}", lane_id, s, speed, path, desired))
    return actors


def two_phase_program(green_a: float, green_b: float, offset: float) -> tuple[dict, dict]:
    """Signal programs for two conflicting groups: A goes first, then B, with yellow and all-red."""
    y, allred = 3.0, 1.0
    a = [("green", green_a), ("yellow", y), ("red", allred + green_b + y + allred)]
    b = [("red", green_a + y + allred), ("green", green_b), ("yellow", y), ("red", allred)]
    mk = lambda ph: {"phases": [{"state": st, "duration": round(d, 2)} for st, d in ph], "offset": round(offset, 2)}  # noqa: E731
    return mk(a), mk(b)


# --- 1. straight multi-lane road -------------------------------------------------------------------
def _map_straight(p: dict) -> RoadMap:
    b = MapBuilder()
    b.road("r", geo.straight([0, 0], 0.0, p["length"]), p["lanes"], p["lanes"], p["speed_limit"])
    return b.build()


@family(
    "straight",
    "Multi-lane straight road with traffic in both directions.",
    {
        "lanes": Range(1, 3, integer=True),
        "length": Range(250, 400),
        "speed_limit": Choice((11.1, 13.9, 16.7, 22.2, 27.8)),
        "density": Range(0.2, 2.0, valid=(0.0, 10.0)),
    },
    _map_straight,
    tags=("lane_keeping",),
)
def _pop_straight(m: RoadMap, p: dict, rng) -> dict:
    lane_idx = int(rng.integers(p["lanes"]))
    start = f"r_f{lane_idx}"
    s0 = 25.0
    actors = _traffic(
        m,
        [f"r_f{i}" for i in range(p["lanes"])] + [f"r_b{i}" for i in range(p["lanes"])],
        p["density"],
        rng,
        keep_clear={start: (s0 - 15, s0 + 20)},
    )
    duration = 25.0
    return {
        "ego": _ego(m, [start], s0, p["speed_limit"] * 0.8, goal=p["speed_limit"] * duration * 0.6),
        "actors": actors,
        "duration_s": duration,
        "tags": ["multi_lane"] if p["lanes"] > 1 else [],
    }


# --- 2. curves ---------------------------------------------------------------------------------------
def _curve_speed(radius: float, limit: float) -> float:
    return float(min(limit, np.sqrt(2.0 * radius)))  # ~2 m/s^2 lateral acceleration


def _map_curve(p: dict) -> RoadMap:
    sign = 1.0 if p["direction"] == "left" else -1.0
    angle = np.deg2rad(p["angle"]) * sign
    ref = geo.chain(
        geo.straight([0, 0], 0.0, 60.0),
        geo.arc([60.0, 0.0], 0.0, p["radius"], angle),
    )
    end, h = geo.end_pose(ref)
    ref = geo.chain(ref, geo.straight(end, h, 80.0))
    b = MapBuilder()
    b.road("r", ref, 1, 1, _curve_speed(p["radius"], p["speed_limit"]))
    return b.build()


@family(
    "curve",
    "Single curve, gentle to sharp (radius 15-300 m), left or right.",
    {
        "radius": Range(15, 300, log=True),
        "angle": Range(45, 150),
        "direction": Choice(("left", "right")),
        "speed_limit": Choice((11.1, 13.9, 16.7)),
        "density": Range(0.0, 1.0, valid=(0.0, 10.0)),
    },
    _map_curve,
    tags=("curve",),
)
def _pop_curve(m: RoadMap, p: dict, rng) -> dict:
    limit = m.lanes["r_f0"].speed_limit
    actors = _traffic(m, ["r_b0"], p["density"], rng, prefix="onc")
    actors += _traffic(m, ["r_f0"], p["density"] * 0.5, rng, keep_clear={"r_f0": (0, 45)}, start_index=len(actors))
    tags = ["sharp_curve"] if p["radius"] < 40 else []
    duration = min(40.0, 10.0 + m.lanes["r_f0"].length / max(limit, 3.0))
    return {
        "ego": _ego(m, ["r_f0"], 10.0, limit * 0.8),
        "actors": actors,
        "duration_s": round(duration, 1),
        "tags": tags + [f"turn_{p['direction']}"],
    }


# --- 3. S-bend ---------------------------------------------------------------------------------------
def _map_sbend(p: dict) -> RoadMap:
    a = np.deg2rad(p["angle"])
    first = 1.0 if p["first"] == "left" else -1.0
    ref = geo.straight([0, 0], 0.0, 40.0)
    for sign in (first, -first):
        e, h = geo.end_pose(ref)
        ref = geo.chain(ref, geo.arc(e, h, p["radius"], sign * a))
    e, h = geo.end_pose(ref)
    ref = geo.chain(ref, geo.straight(e, h, 60.0))
    b = MapBuilder()
    b.road("r", ref, 1, 1, _curve_speed(p["radius"], p["speed_limit"]))
    return b.build()


@family(
    "s_bend",
    "S-bend: two opposite curves back to back.",
    {
        "radius": Range(20, 150, log=True),
        "angle": Range(40, 100),
        "first": Choice(("left", "right")),
        "speed_limit": Choice((11.1, 13.9, 16.7)),
        "density": Range(0.0, 1.0, valid=(0.0, 10.0)),
    },
    _map_sbend,
    tags=("curve",),
)
def _pop_sbend(m: RoadMap, p: dict, rng) -> dict:
    limit = m.lanes["r_f0"].speed_limit
    actors = _traffic(m, ["r_b0"], p["density"], rng, prefix="onc")
    duration = min(45.0, 10.0 + m.lanes["r_f0"].length / max(limit, 3.0))
    return {
        "ego": _ego(m, ["r_f0"], 8.0, limit * 0.8),
        "actors": actors,
        "duration_s": round(duration, 1),
        "tags": ["sharp_curve"] if p["radius"] < 40 else [],
    }


# --- junction families ---------------------------------------------------------------------------------
def _map_four_way(p: dict) -> RoadMap:
    b = MapBuilder()
    arms = junction(b, ["E", "N", "W", "S"], p["lanes"], 110.0, p["speed_limit"], crosswalks=True)
    stop_back = 5.0
    b.signal("sig_S", arms["S"].bwd, stop_back)
    b.signal("sig_N", arms["N"].bwd, stop_back)
    b.signal("sig_E", arms["E"].bwd, stop_back)
    b.signal("sig_W", arms["W"].bwd, stop_back)
    return b.build()


def _connector(m: RoadMap, incoming: str, out_arm: str) -> str:
    for succ in m.lanes[incoming].successors:
        if succ.split("->")[-1].startswith(f"{out_arm}_f"):
            return succ
    raise KeyError(f"no connector from {incoming} to arm {out_arm}")


MANEUVER_ARM = {"straight": "N", "left": "W", "right": "E"}  # for an ego arriving from the south


def _ego_route_through(m: RoadMap, incoming: str, out_arm: str) -> list[str]:
    conn = _connector(m, incoming, out_arm)
    out = m.lanes[conn].successors[0]
    return [incoming, conn, out]


@family(
    "signalized_intersection",
    "Signalised 4-way intersection, ego turning left, going straight or turning right, with cross traffic.",
    {
        "lanes": Range(1, 2, integer=True),
        "maneuver": Choice(("left", "straight", "right")),
        "speed_limit": Choice((11.1, 13.9)),
        "green_ns": Range(8, 25),
        "green_ew": Range(8, 25),
        "offset": Range(0, 40, valid=(0, 300)),
        "density": Range(0.3, 1.5, valid=(0.0, 10.0)),
    },
    _map_four_way,
    tags=("junction", "traffic_light"),
)
def _pop_signalized(m: RoadMap, p: dict, rng) -> dict:
    lane_i = 0 if p["maneuver"] == "left" else p["lanes"] - 1
    incoming = f"S_b{lane_i}"
    route = _ego_route_through(m, incoming, MANEUVER_ARM[p["maneuver"]])
    s0 = m.lanes[incoming].length - float(rng.uniform(45, 80))
    ns, ew = two_phase_program(p["green_ns"], p["green_ew"], p["offset"])
    signals = {"sig_N": ns, "sig_S": ns, "sig_E": ew, "sig_W": ew}
    incoming_lanes = [x for x in m.lanes if x.split("_")[0] in "NEWS" and "_b" in x and ":" not in x]
    actors = _traffic(
        m,
        incoming_lanes,
        p["density"],
        rng,
        keep_clear={incoming: (s0 - 15, m.lanes[incoming].length)},
        path_length=250.0,
    )
    return {
        "ego": _ego(m, route, s0, p["speed_limit"] * 0.7, goal=None),
        "actors": actors,
        "signals": signals,
        "duration_s": 55.0,
        "tags": [f"turn_{p['maneuver']}" if p["maneuver"] != "straight" else "straight"],
    }


def _map_unprotected(p: dict) -> RoadMap:
    b = MapBuilder()
    arms = junction(b, ["E", "N", "W", "S"], 1, 110.0, p["speed_limit"], crosswalks=True)
    for arm in "SNEW":
        b.signal(f"sig_{arm}", arms[arm].bwd, 5.0)
    return b.build()


@family(
    "unprotected_left",
    "Unprotected left turn on a shared green across a stream of oncoming traffic.",
    {
        "speed_limit": Choice((11.1, 13.9)),
        "oncoming": Range(1, 5, integer=True),
        "headway": Range(2.5, 7.0),
        "oncoming_speed": Range(6, 12),
    },
    _map_unprotected,
    tags=("junction", "traffic_light", "yield"),
)
def _pop_unprotected(m: RoadMap, p: dict, rng) -> dict:
    route = _ego_route_through(m, "S_b0", "W")
    s0 = m.lanes["S_b0"].length - float(rng.uniform(30, 50))
    green = {
        "phases": [
            {"state": "green", "duration": 60.0},
            {"state": "yellow", "duration": 3.0},
            {"state": "red", "duration": 30.0},
        ],
        "offset": 0.0,
    }
    red = {
        "phases": [
            {"state": "red", "duration": 64.0},
            {"state": "green", "duration": 26.0},
            {"state": "yellow", "duration": 3.0},
        ],
        "offset": 0.0,
    }
    onc_lane = "N_b0"
    straight_conn = _connector(m, onc_lane, "S")
    path = [onc_lane, straight_conn, m.lanes[straight_conn].successors[0]]
    L = m.lanes[onc_lane].length
    actors, s = [], L - float(rng.uniform(15, 35))
    for i in range(p["oncoming"]):
        if s < 5:
            break
        actors.append(
            idm_actor(f"onc{i}", onc_lane, s, p["oncoming_speed"], path, p["oncoming_speed"], reacts_to_signals=False)
        )
        s -= p["headway"] * p["oncoming_speed"] + float(rng.uniform(0, 4))
    return {
        "ego": _ego(m, route, s0, 6.0),
        "actors": actors,
        "signals": {"sig_S": green, "sig_N": green, "sig_E": red, "sig_W": red},
        "duration_s": 45.0,
        "tags": ["turn_left"],
    }


def _map_t(p: dict) -> RoadMap:
    b = MapBuilder()
    arms = junction(b, ["E", "W", "S"], 1, 110.0, p["speed_limit"], crosswalks=False)
    b.stop_sign(arms["S"].bwd[0], 1.0)
    return b.build()


@family(
    "t_junction",
    "T-junction: ego on the minor road with a stop sign, turning into major-road traffic.",
    {
        "maneuver": Choice(("left", "right")),
        "speed_limit": Choice((11.1, 13.9)),
        "density": Range(0.2, 1.2, valid=(0.0, 10.0)),
    },
    _map_t,
    tags=("junction", "stop_sign", "yield"),
)
def _pop_t(m: RoadMap, p: dict, rng) -> dict:
    route = _ego_route_through(m, "S_b0", "W" if p["maneuver"] == "left" else "E")
    s0 = m.lanes["S_b0"].length - float(rng.uniform(30, 50))
    actors = _traffic(m, ["E_b0", "W_b0"], p["density"], rng, path_length=250.0)
    for a in actors:  # major-road traffic has right of way and keeps going straight
        conn = next(c for c in m.lanes[a["lane"]].successors if "->W_f" in c or "->E_f" in c)
        a["path"] = [a["lane"], conn, m.lanes[conn].successors[0]]
    return {"ego": _ego(m, route, s0, 5.0), "actors": actors, "duration_s": 45.0, "tags": [f"turn_{p['maneuver']}"]}


# --- 7. highway on-ramp merge -------------------------------------------------------------------------
def _map_merge(p: dict) -> RoadMap:
    b = MapBuilder()
    n, limit, xm = p["lanes"], p["speed_limit"], 220.0
    up = b.road("hu", geo.straight([0, 0], 0.0, xm), n, 0, limit, sidewalks=False)
    down = b.road("hd", geo.straight([xm, 0], 0.0, 260.0), n, 0, limit, sidewalks=False)
    for a, c in zip(up.fwd, down.fwd):
        b.link(a, c)
    outer_y = -(n - 0.5) * LANE_WIDTH
    ramp_len = p["ramp_length"]
    start = np.array([xm - ramp_len - 60.0, outer_y - 14.0])
    ramp_line = geo.chain(
        geo.straight(start, 0.0, 40.0),
        geo.bezier(start + [40.0, 0.0], 0.0, np.array([xm - ramp_len, outer_y - LANE_WIDTH]), 0.0),
        geo.straight([xm - ramp_len, outer_y - LANE_WIDTH], 0.0, ramp_len - 25.0),
    )
    from scenarios.maps import Lane

    b.lanes["ramp"] = Lane("ramp", ramp_line, LANE_WIDTH, limit * 0.8, left_marking="solid", right_marking="solid")
    b.connector("ramp", down.fwd[-1], junction="merge", speed_limit=limit)
    return b.build()


@family(
    "highway_merge",
    "Highway on-ramp: merge into the outer lane through a gap in highway traffic.",
    {
        "lanes": Range(2, 3, integer=True),
        "speed_limit": Choice((22.2, 25.0, 27.8)),
        "density": Range(0.3, 1.5, valid=(0.0, 10.0)),
        "ramp_length": Range(80, 140),
    },
    _map_merge,
    tags=("merge", "highway"),
)
def _pop_merge(m: RoadMap, p: dict, rng) -> dict:
    route = ["ramp", f"merge:ramp->hd_f{p['lanes'] - 1}", f"hd_f{p['lanes'] - 1}"]
    lanes = [f"hu_f{i}" for i in range(p["lanes"])]
    actors = _traffic(m, lanes, p["density"], rng, speed_factor=(0.75, 0.95), path_length=500.0)
    return {"ego": _ego(m, route, 5.0, p["speed_limit"] * 0.6), "actors": actors, "duration_s": 35.0}


# --- 8-10. car following, overtaking, cut-ins ---------------------------------------------------------
def _map_two_same(p: dict) -> RoadMap:
    b = MapBuilder()
    b.road("r", geo.straight([0, 0], 0.0, p["length"]), 2, 1, p["speed_limit"])
    return b.build()


@family(
    "overtake",
    "Slow lead vehicle on a two-lane carriageway: change lanes to overtake, then return.",
    {
        "length": Range(350, 450),
        "speed_limit": Choice((13.9, 16.7, 22.2)),
        "lead_speed": Range(2.0, 6.0),
        "lead_gap": Range(30, 60),
        "density": Range(0.0, 0.6, valid=(0.0, 10.0)),
    },
    _map_two_same,
    tags=("lane_change", "overtake"),
)
def _pop_overtake(m: RoadMap, p: dict, rng) -> dict:
    s0 = 15.0
    route = ["r_f1"]
    lead = idm_actor("lead", "r_f1", s0 + p["lead_gap"], p["lead_speed"], ["r_f1"], p["lead_speed"])
    actors = [lead] + _traffic(m, ["r_b0"], p["density"], rng, prefix="onc")
    return {
        "ego": _ego(m, route, s0, p["speed_limit"] * 0.7, goal=p["speed_limit"] * 30 * 0.55),
        "actors": actors,
        "duration_s": 35.0,
    }


@family(
    "lead_brake",
    "Lead vehicle brakes hard without warning.",
    {
        "length": Range(300, 400),
        "speed_limit": Choice((13.9, 16.7, 22.2)),
        "gap": Range(18, 40),
        "brake_time": Range(2.0, 8.0),
        "decel": Range(4.0, 8.0),
    },
    _map_two_same,
    tags=("emergency_brake",),
)
def _pop_lead_brake(m: RoadMap, p: dict, rng) -> dict:
    s0, v = 20.0, p["speed_limit"] * 0.8
    lead = idm_actor("lead", "r_f0", s0 + p["gap"], v, ["r_f0"], v)
    lead["behaviour"] = {
        "type": "hard_brake",
        "desired_speed": round(v, 2),
        "decel": p["decel"],
        "trigger": {"time": p["brake_time"]},
    }
    return {"ego": _ego(m, ["r_f0"], s0, v, goal=v * 25 * 0.5), "actors": [lead], "duration_s": 25.0}


@family(
    "cut_in",
    "A vehicle in the adjacent lane cuts in close ahead of the ego.",
    {
        "length": Range(300, 400),
        "speed_limit": Choice((13.9, 16.7, 22.2)),
        "trigger_gap": Range(10.0, 22.0),
        "rel_speed": Range(-3.0, -0.5),
        "duration": Range(1.5, 3.5),
    },
    _map_two_same,
    tags=("cut_in",),
)
def _pop_cut_in(m: RoadMap, p: dict, rng) -> dict:
    s0, v = 20.0, p["speed_limit"] * 0.75
    v_cut = max(v + p["rel_speed"], 2.0)  # slower than the ego, which closes in from behind
    cutter = idm_actor("cutter", "r_f0", s0 + float(rng.uniform(30, 45)), v_cut, ["r_f0"], v_cut)
    cutter["behaviour"] = {
        "type": "lane_change",
        "desired_speed": round(v_cut, 2),
        "target_lane": "r_f1",
        "duration": p["duration"],
        "trigger": {"ego_distance": p["trigger_gap"] + 4.7},
    }
    return {"ego": _ego(m, ["r_f1"], s0, v, goal=v * 25 * 0.5), "actors": [cutter], "duration_s": 25.0}


# --- 11. pedestrians ------------------------------------------------------------------------------------
def _map_ped(p: dict) -> RoadMap:
    b = MapBuilder()
    road = b.road("r", geo.straight([0, 0], 0.0, 200.0), 2, 1, p["speed_limit"])
    if p["variant"] == "crosswalk":
        b.crosswalk_across(road, 100.0, 3.5, "cw_main")
    return b.build()


@family(
    "pedestrian_crossing",
    "Pedestrian crossing at a zebra crossing, or jaywalking from behind a parked car.",
    {
        "variant": Choice(("crosswalk", "jaywalk")),
        "speed_limit": Choice((8.3, 11.1, 13.9)),
        "ped_speed": Range(0.8, 2.2),
        "trigger_distance": Range(25, 45),
    },
    _map_ped,
    tags=("pedestrian",),
)
def _pop_ped(m: RoadMap, p: dict, rng) -> dict:
    lane = m.lanes["r_f0"]
    s_cross = 101.75 if p["variant"] == "crosswalk" else float(rng.uniform(80, 110))
    y_right = -2 * LANE_WIDTH - 1.2  # on the kerb, right side
    y_left = LANE_WIDTH + 1.2
    actors = []
    if p["variant"] == "jaywalk":  # parked cars in the outer (parking) lane hide the walker
        for k, ds in enumerate((-9.0, 3.0)):
            actors.append(
                {
                    "id": f"parked{k}",
                    "kind": "vehicle",
                    "lane": "r_f1",
                    "s": round(s_cross + ds, 2),
                    "lateral": -0.3,
                    "behaviour": {"type": "static"},
                }
            )
        start_y = -LANE_WIDTH * 1.5
    else:
        start_y = y_right
    ped = {
        "id": "ped0",
        "kind": "pedestrian",
        "length": 0.5,
        "width": 0.6,
        "height": 1.75,
        "position": [round(s_cross, 2), round(start_y, 2), float(np.pi / 2)],
        "behaviour": {
            "type": "walk",
            "path": [[round(s_cross, 2), round(start_y, 2)], [round(s_cross, 2), y_left]],
            "speed": p["ped_speed"],
            "trigger": {"ego_distance": p["trigger_distance"]},
        },
    }
    actors.append(ped)
    v = lane.speed_limit * 0.9
    return {
        "ego": _ego(m, ["r_f0"], 30.0, v, goal=150.0),
        "actors": actors,
        "duration_s": 30.0,
        "tags": [p["variant"]] + (["occluded"] if p["variant"] == "jaywalk" else []),
    }


# --- 12. parked vehicle blocking the lane: nudge into the oncoming lane -------------------------------------
def _map_nudge(p: dict) -> RoadMap:
    b = MapBuilder()
    b.road("r", geo.straight([0, 0], 0.0, 260.0), 1, 1, p["speed_limit"])
    return b.build()


@family(
    "parked_blocking",
    "A parked vehicle blocks the ego lane: nudge around it through the oncoming lane when it is clear.",
    {
        "speed_limit": Choice((8.3, 11.1, 13.9)),
        "parked_s": Range(70, 110),
        "oncoming": Range(0, 3, integer=True, valid=(0, 10)),
        "oncoming_gap": Range(25, 60),
    },
    _map_nudge,
    tags=("nudge", "blocked_lane"),
)
def _pop_nudge(m: RoadMap, p: dict, rng) -> dict:
    actors = [
        {
            "id": "parked",
            "kind": "vehicle",
            "lane": "r_f0",
            "s": p["parked_s"],
            "lateral": -0.3,
            "behaviour": {"type": "static"},
        }
    ]
    onc = m.lanes["r_b0"]
    s = 260.0 - p["parked_s"] - float(rng.uniform(20, 50))
    for i in range(p["oncoming"]):
        if s < 5:
            break
        actors.append(idm_actor(f"onc{i}", "r_b0", s, onc.speed_limit * 0.8, ["r_b0"], onc.speed_limit * 0.8))
        s -= p["oncoming_gap"]
    v = p["speed_limit"] * 0.8
    return {"ego": _ego(m, ["r_f0"], 20.0, v, goal=p["parked_s"] + 50.0), "actors": actors, "duration_s": 40.0}


# --- 13. dense traffic jam ---------------------------------------------------------------------------------------
def _map_jam(p: dict) -> RoadMap:
    b = MapBuilder()
    b.road("r", geo.straight([0, 0], 0.0, 500.0), p["lanes"], p["lanes"], 13.9)
    return b.build()


@family(
    "traffic_jam",
    "Dense stop-and-go traffic on a multi-lane road (20+ vehicles).",
    {
        "lanes": Range(2, 3, integer=True),
        "density": Range(3.0, 5.0, valid=(0.0, 10.0)),
        "jam_speed": Range(1.0, 5.0),
        "brake_time": Range(3.0, 10.0),
    },
    _map_jam,
    tags=("dense_traffic",),
)
def _pop_jam(m: RoadMap, p: dict, rng) -> dict:
    start = "r_f0"
    s0 = 30.0
    lanes = [f"r_f{i}" for i in range(p["lanes"])] + [f"r_b{i}" for i in range(p["lanes"])]
    actors = _traffic(
        m,
        lanes,
        p["density"],
        rng,
        keep_clear={start: (s0 - 12.0, s0 + 10.0)},
        speed_factor=(0.2, 0.5),
        path_length=600.0,
    )
    for a in actors:  # the queue ahead of the ego crawls and brakes now and then
        if a["lane"].startswith("r_f") and a["s"] > s0:
            a["behaviour"]["desired_speed"] = round(p["jam_speed"] + float(rng.uniform(0, 2)), 2)
    ahead = sorted((a for a in actors if a["lane"] == start and a["s"] > s0), key=lambda a: a["s"])
    if ahead:
        ahead[0]["behaviour"] = {
            "type": "hard_brake",
            "desired_speed": ahead[0]["behaviour"].get("desired_speed", 3.0),
            "decel": 3.0,
            "trigger": {"time": p["brake_time"]},
        }
    return {"ego": _ego(m, [start], s0, 3.0, goal=60.0), "actors": actors, "duration_s": 40.0}
