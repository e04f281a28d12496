"""CARLA Leaderboard route files (1.0 and 2.0, and Bench2Drive's, read from the user's copy).

A file holds ``<route id town>`` elements with keypoints (2.0: ``<position x y z>``, sparse; 1.0:
``<waypoint x y z yaw>``, dense), weathers, and (2.0) ``<scenario name type>`` elements with a
``<trigger_point>`` and typed parameters (``<distance value="100"/>``, ``<frequency from to/>``).
Keypoints are in CARLA's frame, the frame :func:`scenarios.opendrive.import_opendrive` uses by default.

:func:`plan_route` densifies the keypoints on a town's lane graph as the Leaderboard does (each keypoint
onto its driving lane, then the shortest lane path between consecutive ones), and attaches a scenario
to the route when its trigger point lies within 2 m and 10 degrees of it. Bench2Drive's files are
CC BY-NC-ND: read them from where the user keeps them; never copy or convert them.
"""

from __future__ import annotations

import hashlib
import json
import math
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scenarios import geometry as geo
from scenarios.leaderboard import NOT_PLAYED, play
from scenarios.maps import RoadMap
from scenarios.schema import Scenario
from scenarios.towns import route_between, signal_plans, time_budget

ATTACH_DISTANCE, ATTACH_ANGLE = 2.0, math.radians(10.0)
ROUTE_DENSITY = 0.75  # background vehicles per 100 m of lane near the route (the towns bank's middle)
ROUTE_PEDESTRIANS = 2.0  # background pedestrians per 100 m of sidewalk
MAX_DURATION_S = 3600.0
MAX_DETOUR = 3.0  # a lane path this many times longer than its keypoints' gap is not the route meant
LANE_CHANGE_COST = 30.0  # metres a lane change costs the route planner (it prefers to stay in lane)
MAX_BYTES = 64 * 2**20


class RouteFileError(ValueError):
    """A route file that cannot be read: names the file, the route id, the element and the reason."""


@dataclass(frozen=True)
class Keypoint:
    x: float
    y: float
    z: float = 0.0
    yaw: float | None = None  # radians (1.0 files give it in degrees)


@dataclass(frozen=True)
class RouteScenario:
    name: str
    type: str
    trigger: Keypoint
    params: dict[str, Any] = field(default_factory=dict)  # value -> float or str; from / to -> (lo, hi)


@dataclass(frozen=True)
class Route:
    id: str
    town: str
    keypoints: tuple[Keypoint, ...]
    scenarios: tuple[RouteScenario, ...] = ()
    weathers: tuple[dict[str, float], ...] = ()


def parse_route_ids(text: str) -> list[str]:
    """``"0,3-5"`` -> ``["0", "3", "4", "5"]``; a malformed part is a ``ValueError`` naming it."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, sep, hi = part.partition("-")
        if sep and lo.isdigit() and hi.isdigit() and int(lo) <= int(hi):
            out += [str(i) for i in range(int(lo), int(hi) + 1)]
        elif not sep and part:
            out.append(part)
        else:
            raise ValueError(f"route ids: {part!r} is neither an id nor a range like 3-5")
    return out


def _float(el: ET.Element, attr: str, where: str) -> float:
    raw = el.get(attr)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise RouteFileError(f"{where}: <{el.tag}> {attr}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise RouteFileError(f"{where}: <{el.tag}> {attr}={raw!r} is not finite")
    return value


def _keypoint(el: ET.Element, where: str) -> Keypoint:
    yaw = el.get("yaw")
    return Keypoint(
        _float(el, "x", where),
        _float(el, "y", where),
        _float(el, "z", where) if el.get("z") is not None else 0.0,
        math.radians(_float(el, "yaw", where)) if yaw is not None else None,
    )


def _param(el: ET.Element, where: str) -> Any:
    if "from" in el.attrib or "to" in el.attrib:
        return (_float(el, "from", where), _float(el, "to", where))
    raw = el.get("value")
    if raw is None:
        return dict(el.attrib)
    try:
        return float(raw)
    except ValueError:
        return raw


def read_routes(path: str | Path, route_ids: list[str] | None = None) -> list[Route]:
    """The routes of a route file (all, or those of ``route_ids``, in the file's order)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RouteFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES or b"<!DOCTYPE" in data[:4096] or b"<!ENTITY" in data[:65536]:
        raise RouteFileError(f"{path}: over {MAX_BYTES // 2**20} MB, or a DTD / entity declaration")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise RouteFileError(f"{path}: not well-formed XML ({e})") from None
    wanted = set(route_ids) if route_ids is not None else None
    routes = []
    for el in root.iter("route"):
        rid = el.get("id")
        where = f"{path}: route {rid}"
        if rid is None or el.get("town") is None:
            raise RouteFileError(f"{path}: a <route> needs id and town")
        if wanted is not None and rid not in wanted:
            continue
        points = tuple(_keypoint(p, where) for p in el.iter() if p.tag in ("position", "waypoint"))
        if len(points) < 2:
            raise RouteFileError(f"{where}: fewer than 2 keypoints")
        scenarios = []
        for sc in el.iter("scenario"):
            trigger = sc.find("trigger_point")
            name = sc.get("name", sc.get("type", "?"))
            if trigger is None or sc.get("type") is None:
                raise RouteFileError(f"{where}: scenario {name}: needs a type and a <trigger_point>")
            params = {c.tag: _param(c, f"{where}: scenario {name}") for c in sc if c.tag != "trigger_point"}
            trigger_point = _keypoint(trigger, f"{where}: scenario {name}")
            scenarios.append(RouteScenario(name, sc.get("type"), trigger_point, params))
        weathers = tuple({k: _float(w, k, where) for k in w.attrib} for w in el.iter("weather") if w.attrib)
        routes.append(Route(rid, el.get("town"), points, tuple(scenarios), weathers))
    if wanted is not None:
        missing = sorted(wanted - {r.id for r in routes})
        if missing:
            raise RouteFileError(f"{path}: no route with id {missing}")
    return routes


@dataclass
class RoutePlan:
    """A route on a town's lanes: the lane sequence, where each keypoint lies, the scenarios on it."""

    lanes: list[str]
    length: float
    keypoint_offsets: list[float]  # distance from each keypoint to its lane's centre (m)
    scenarios: list[tuple[RouteScenario, float]]  # (scenario, arc length of its trigger along the route)
    unplaced: list[str] = field(default_factory=list)  # scenarios whose trigger is not on the route
    start_s: float = 0.0  # the first keypoint's arc length on the first lane
    goal_s: float = 0.0  # the last keypoint's arc length along the whole route


_LANE_CELLS: dict[int, tuple[RoadMap, np.ndarray, dict, list]] = {}
LANE_CELL = 50.0  # metres: the squares the driving lanes are indexed by


def _driving_lanes_at(road_map: RoadMap, xy: np.ndarray) -> list:
    """The driving lanes whose box (grown by 5 m) meets the 50 m square holding ``xy``: a spatial index
    built once per map, so a keypoint looks at a few lanes, not a town's thousands."""
    hit = _LANE_CELLS.get(id(road_map))
    if hit is None or hit[0] is not road_map:
        lanes = [lane for lane in road_map.lanes.values() if lane.kind == "driving"]
        boxes = np.array([[*(ln.centerline.min(0) - 5.0), *(ln.centerline.max(0) + 5.0)] for ln in lanes]).reshape(
            -1, 4
        )
        origin = boxes[:, :2].min(0) if len(boxes) else np.zeros(2)
        hit = _LANE_CELLS[id(road_map)] = (road_map, origin, dict(geo.items_by_block(boxes, origin, LANE_CELL)), lanes)
    _, origin, cells, lanes = hit
    key = (int((xy[1] - origin[1]) // LANE_CELL), int((xy[0] - origin[0]) // LANE_CELL))
    return [lanes[i] for i in cells.get(key, ())]


def _nearest_lane(road_map: RoadMap, kp: Keypoint, heading: float | None) -> tuple[str, float, float]:
    """(lane, its arc length at the projection, distance) of the driving lane under ``kp``, preferring the lane
    whose direction matches ``heading`` among those within 3 m of the nearest."""
    best: list[tuple[float, str, float, float]] = []
    xy = np.array([kp.x, kp.y])
    for lane in _driving_lanes_at(road_map, xy):
        lo, hi = lane.centerline.min(0) - 5.0, lane.centerline.max(0) + 5.0
        if (xy < lo).any() or (xy > hi).any():
            continue
        s, lat, _ = geo.project(lane.centerline, lane.s, xy)
        d = abs(lat) if 0.0 <= s <= lane.length else math.hypot(*(lane.pose_at(s)[0] - xy))
        h = float(np.interp(s, lane.s, np.unwrap(lane.heading)))
        best.append((d, lane.id, s, h))
    if not best:
        raise ValueError(f"keypoint ({kp.x:.1f}, {kp.y:.1f}) is off every driving lane")
    best.sort()
    if heading is not None:
        near = [b for b in best if b[0] <= best[0][0] + 3.0]
        near.sort(key=lambda b: (math.cos(b[3] - heading) < 0.5, b[0]))
        best = near
    d, lane_id, s, _ = best[0]
    return lane_id, s, d


def _extend(road_map: RoadMap, lanes: list[str], nxt: str) -> None:
    """Append ``nxt`` to a route; a second lane change in a row (keypoints a lane apart along one lane
    section) merges with the first into one change across, or cancels it if it comes back."""
    if len(lanes) > 1 and road_map.is_lane_change(lanes[-2], lanes[-1]) and road_map.is_lane_change(lanes[-1], nxt):
        lanes.pop()
        if nxt == lanes[-1]:
            return
    lanes.append(nxt)


def plan_route(route: Route, road_map: RoadMap, max_offset: float = 5.0) -> RoutePlan:
    """Densify ``route`` on ``road_map``: a ``ValueError`` names the keypoint that is off every lane or the pair
    no lane path connects."""
    lanes: list[str] = []
    offsets: list[float] = []
    points = route.keypoints
    for i, kp in enumerate(points):
        nxt = points[min(i + 1, len(points) - 1)]
        prev = points[max(i - 1, 0)]
        heading = kp.yaw
        if heading is None:
            a, b = (kp, nxt) if i + 1 < len(points) else (prev, kp)
            heading = math.atan2(b.y - a.y, b.x - a.x)
        where = f"route {route.id}: keypoint {i} ({kp.x:.1f}, {kp.y:.1f})"
        try:
            lane_id, s_on_lane, d = _nearest_lane(road_map, kp, heading)
        except ValueError:
            raise ValueError(f"{where} is not near any driving lane") from None
        if i == 0:
            start_s = prev_s = s_on_lane
        if d > max_offset:
            raise ValueError(f"{where} is {d:.1f} m from any driving lane")
        offsets.append(d)
        if not lanes:
            lanes.append(lane_id)
        elif lane_id != lanes[-1]:
            path = route_between(road_map, lanes[-1], lane_id, LANE_CHANGE_COST)
            pair = f"keypoint {i - 1} ({lanes[-1]}) to {i} ({lane_id})"
            if path is None:
                raise ValueError(f"route {route.id}: from {pair}: no lane path connects them")
            gap = math.dist((points[i - 1].x, points[i - 1].y), (kp.x, kp.y))
            driven = road_map.lane_sequence(path)[2][-1] + s_on_lane - prev_s  # keypoint to keypoint
            if driven > max(MAX_DETOUR * gap, gap + 300.0):
                why = f"the lanes detour {driven:.0f} m for a {gap:.0f} m gap"
                raise ValueError(f"route {route.id}: from {pair}: {why}")
            for nxt in path[1:]:
                _extend(road_map, lanes, nxt)
        prev_s = s_on_lane
    polyline, _, starts = road_map.lane_sequence(lanes)
    s_line = geo.arc_lengths(polyline)
    attached, unplaced = [], []
    for sc in route.scenarios:
        xy = np.array([sc.trigger.x, sc.trigger.y])
        s, lat, _ = geo.project(polyline, s_line, xy)
        heading = geo.interpolate(polyline, s_line, s)[1]
        ok = abs(lat) <= ATTACH_DISTANCE and (
            sc.trigger.yaw is None or math.cos(float(heading) - sc.trigger.yaw) >= math.cos(ATTACH_ANGLE)
        )
        if ok:
            attached.append((sc, float(s)))
        else:
            unplaced.append(sc.name)
    # the last keypoint on the last lane (projecting it on the whole line would find the start of a
    # route that comes back to where it began)
    goal_s = starts[-1] + min(max(s_on_lane, 0.0), road_map.lanes[lanes[-1]].length)
    return RoutePlan(lanes, float(s_line[-1]), offsets, attached, unplaced, start_s, float(goal_s))


def path_tag(route: Route) -> str:
    """``path:<crc32>`` of the route's town and keypoints: the Leaderboard 2.0 files drive each path
    several times (another weather), and runs of one path are not independent samples."""
    points = ";".join(f"{k.x:.1f},{k.y:.1f}" for k in route.keypoints)
    return f"path:{zlib.crc32(f'{route.town}|{points}'.encode()):08x}"


def route_scenario(
    route: Route, plan: RoutePlan, map_file: str | Path, road_map: RoadMap, seed: int = 0, strict: bool = False
) -> Scenario:
    """An embedded-world scenario of a planned route: the ego from the first keypoint to the last,
    background traffic kept around the ego as it drives (the towns bank's middle density; a fixed pool,
    so a 10 km route costs what a short one does per step) and a signal plan per junction, drawn from
    ``seed`` and the route id, and the route's Leaderboard scenarios played (``scenarios.leaderboard``):
    their actors, flows, front-brake events and held lights. ``params`` lists the types played, the
    elements skipped (with why) and the types not supported; with ``strict`` an unsupported type refuses
    the route (a ``ValueError``)."""
    rng = np.random.default_rng([seed, zlib.crc32(route.id.encode())])
    first = road_map.lanes[plan.lanes[0]]
    start = min(max(plan.start_s, 0.0), first.length - 0.5)
    goal = plan.goal_s - start
    if goal < 10.0:
        raise ValueError(f"route {route.id}: its keypoints span only {goal:.1f} m of road")
    elements = [(sc.name, sc.type, sc.params, s, (sc.trigger.x, sc.trigger.y)) for sc, s in plan.scenarios]
    played = play(plan.lanes, road_map, elements, f"route {route.id}")
    if strict and played.unsupported:
        raise ValueError(f"route {route.id}: scenario types not supported (--strict): {', '.join(played.unsupported)}")
    types = sorted(set(played.types))
    data = {
        "id": f"route_{route.id}",
        "family": "route",
        "description": f"Route {route.id} on {route.town}: {goal:.0f} m, {len(plan.scenarios)} scenario(s) on it.",
        "split": "test",
        "seed": seed,
        "params": {
            "route_id": route.id,
            "town": route.town,
            "route_m": round(goal, 1),
            "scenario_types": types,
            "scenarios_played": dict(sorted(Counter(played.types).items())),
            "scenarios_skipped": played.skipped,
            "scenario_types_unsupported": played.unsupported,
            "scenarios_off_route": plan.unplaced,
        },
        "map": {"file": str(map_file)},
        "ego": {
            "lane": plan.lanes[0],
            "s": round(start, 3),
            "speed": 0.0,
            "route": plan.lanes,
            "goal_distance": round(goal, 1),
        },
        "background": {
            "density": ROUTE_DENSITY,
            "radius": 100.0,
            "max_vehicles": 40,
            "pedestrians": ROUTE_PEDESTRIANS,
            "max_pedestrians": 20,
        },
        "actors": played.played.actors,
        "flows": played.played.flows,
        "front_brakes": played.played.front_brakes,
        "clear_background": played.played.clear_background,
        "windows": played.played.windows,
        "signal_holds": played.played.signal_holds,
        "rules": "leaderboard",
        "signals": signal_plans(road_map, rng) | played.played.signals,
        "duration_s": round(min(MAX_DURATION_S, time_budget(road_map, plan.lanes, goal)), 1),
        "tags": ["route", route.town, path_tag(route), *[f"scenario:{t}" for t in types]],
    }
    return Scenario.model_validate(data)


@dataclass(frozen=True)
class RouteBankSpec:
    """A route file as a scenario bank: which file, where its towns are, which routes, which seed.

    It travels as a string (``routes:{json}``) wherever a bank name does (env workers, eval configs),
    and the scenarios are made in memory from the user's file each time: a route file is never
    converted into files (Bench2Drive's licence forbids derivatives)."""

    file: str
    maps: tuple[str, ...]
    route_ids: str | None = None
    seed: int = 0
    strict: bool = False  # refuse a route with a scenario type that is not supported

    PREFIX = "routes:"

    def to_string(self) -> str:
        body = {"file": self.file, "maps": list(self.maps), "route_ids": self.route_ids, "seed": self.seed}
        if self.strict:
            body["strict"] = True
        return self.PREFIX + json.dumps(body, sort_keys=True)

    @classmethod
    def names(cls, bank_ref: str) -> bool:
        """Whether a bank name is a route bank spec (``routes:{json}``)."""
        return str(bank_ref).startswith(cls.PREFIX)

    @classmethod
    def parse(cls, text: str) -> RouteBankSpec:
        try:
            body = json.loads(text[len(cls.PREFIX) :])
            return cls(
                str(body["file"]),
                tuple(map(str, body["maps"])),
                body.get("route_ids"),
                int(body.get("seed", 0)),
                bool(body.get("strict", False)),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a route bank spec ({e}): {text[:200]!r}") from None


_MADE: dict[tuple, tuple[list[Scenario], dict[str, str], str]] = {}  # this process's route banks


def shipped_towns() -> Path:
    """The folder of the towns that ship with LoopDrive (Town01, 02, 04, 06, 10HD)."""
    return Path(__file__).resolve().parent / "towns"


def route_bank(spec: RouteBankSpec) -> tuple[list[Scenario], dict[str, str], str]:
    """The scenarios of a route file's routes, the routes refused (id -> why: a town not found, a
    keypoint off the road, a lane change the route would need) and the file's SHA-256."""
    from scenarios.opendrive.cache import find_town, load_map

    data = Path(spec.file).read_bytes()
    key = (spec, hashlib.sha256(data).hexdigest())
    if key in _MADE:
        return _MADE[key]
    routes = read_routes(spec.file, parse_route_ids(spec.route_ids) if spec.route_ids else None)
    scenarios, refused = [], {}
    for route in routes:
        try:
            map_file = find_town(route.town, list(spec.maps))
            road_map = load_map(map_file)[0]
            plan = plan_route(route, road_map)
            scenarios.append(route_scenario(route, plan, map_file.resolve(), road_map, spec.seed, spec.strict))
        except (ValueError, FileNotFoundError) as e:
            refused[f"route_{route.id}"] = str(e)
    _MADE[key] = (scenarios, refused, key[1])
    return _MADE[key]


def played_summary(scenarios: list[Scenario]) -> dict[str, Any]:
    """Over a route bank: scenario elements played per type, those skipped (route -> element -> why),
    the types not supported and the Leaderboard types that are not played at all."""
    played: Counter[str] = Counter()
    skipped, unsupported = {}, set()
    for scn in scenarios:
        played.update(scn.params.get("scenarios_played", {}))
        if scn.params.get("scenarios_skipped"):
            skipped[scn.id] = scn.params["scenarios_skipped"]
        unsupported |= set(scn.params.get("scenario_types_unsupported", []))
    return {
        "scenarios_played": dict(sorted(played.items())),
        "scenarios_skipped": skipped,
        "scenario_types_unsupported": sorted(unsupported),
        "scenario_types_not_played": NOT_PLAYED,
    }
