"""Compile a ``Scenario`` into the static arrays the world steps over.

Everything here is computed once per scenario and shared by every episode and snapshot of it:
the road map, the lane index, the actor table, the path table, signal programs, the ego route and
its stop lines, the lane grid and the prepared drivable area.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from envs.world.junctions import JunctionRules, junction_rules
from envs.world.lanegrid import AreaGrid, LaneGrid, StackedAreas
from envs.world.paths import PathTable
from envs.world.state import GREEN, ActorTable, Behaviour, Kind, Motion, SignalState
from scenarios import geometry as geo
from scenarios.banks import load_map
from scenarios.families import idm_actor, random_path
from scenarios.maps import DRIVABLE_MARGIN, RoadMap
from scenarios.schema import ActorSpec, Scenario
from scenarios.towns import lanes_near

OFFROAD_TOLERANCE = 0.3  # metres (nuPlan's drivable-area tolerance)
EGO_ID = "ego"
_KINDS = {"vehicle": Kind.VEHICLE, "pedestrian": Kind.PEDESTRIAN, "cyclist": Kind.CYCLIST, "static": Kind.STATIC}
_BEHAVIOURS = {
    "idm": Behaviour.IDM,
    "hard_brake": Behaviour.HARD_BRAKE,
    "lane_change": Behaviour.LANE_CHANGE,
    "walk": Behaviour.WALK,
    "static": Behaviour.STATIC,
    "replay": Behaviour.REPLAY,
}


@dataclass
class BackgroundPool:
    """Where background actors of one kind may appear (spawn points every ``SPAWN_SPACING`` m on the
    lanes near the route, each with the path an actor spawned there follows) and the rows they use."""

    rows: np.ndarray  # actor rows of the pool
    xy: np.ndarray  # [K, 2] spawn points
    path: np.ndarray  # [K] path of an actor spawned there
    s: np.ndarray  # [K] its arc length on that path
    speed: np.ndarray  # [K] its speed when it appears
    density: float  # actors per 100 m of the lanes the spawn points lie on
    walking: bool  # pedestrians (walk their path) rather than vehicles (IDM)


@dataclass
class FlowPool:
    """An actor flow's rows and where its vehicles enter and leave (see ``scenarios.schema.ActorFlow``)."""

    rows: np.ndarray
    path: int
    s: float  # source arc length on the path
    end_s: float  # sink
    speed: float
    gap: tuple[float, float]
    lateral: float
    appear_at: float
    leave_at: float


@dataclass(frozen=True)
class ClearZone:
    """A ``ClearBackground`` zone with its lanes as lane indices."""

    appear_at: float
    leave_at: float
    ahead_to: float
    oncoming: bool
    lanes: frozenset[int]


@dataclass(frozen=True)
class WindowRows:
    """A scenario window (``ScenarioWindow``) with its actors as rows and its flows as indices."""

    name: str
    start: float
    end: float  # inf: over by time only
    timeout_s: float  # inf: none
    duration_s: float  # inf: none
    rows: np.ndarray
    flows: np.ndarray
    emergency_vehicle: int  # row, -1: none


@dataclass(frozen=True)
class HoldRows:
    """A ``SignalHold`` with its signals as indices: each one's phase ends (cumulative s) and states."""

    at: float
    until: float
    signals: tuple[tuple[int, np.ndarray, np.ndarray], ...]


@dataclass
class CompiledScenario:
    scenario: Scenario
    road_map: RoadMap
    lane_ids: list[str]
    lane_index: dict[str, int]
    lane_speed_limit: np.ndarray
    lane_in_junction: np.ndarray
    actors: ActorTable
    paths: PathTable
    init: dict[str, np.ndarray]  # initial per-actor arrays: x, y, yaw, speed, s, d, path_id
    # index sets by motion model
    idx_path: np.ndarray
    idx_lane_members: np.ndarray  # actors on lanes, seen by lane-matching leader search
    idx_walk: np.ndarray
    idx_replay: np.ndarray
    idx_obstacles: np.ndarray  # ego + walkers + replayed actors: seen geometrically by traffic
    # signals
    signal_ids: list[str]
    sig_cum_end: np.ndarray  # [S, P] cumulative phase ends
    sig_states: np.ndarray  # [S, P]
    sig_cycle: np.ndarray
    sig_offset: np.ndarray
    path_stop_s: np.ndarray  # [P, K] stop lines on each path (inf padded)
    path_stop_sig: np.ndarray  # [P, K] signal index, -1 = stop sign
    junctions: JunctionRules  # right of way where no light decides
    # ego route
    route_path: int
    route_xy: np.ndarray
    route_s: np.ndarray
    route_heading: list[float]  # per route vertex (Python floats: read one at a time per step)
    route_speed_limit: list[float]
    route_stop_s: np.ndarray
    route_stops: tuple[tuple[float, int], ...]  # the same as Python numbers, for the per-step loop
    route_start: float
    goal_distance: float
    corridor: np.ndarray  # [n_lanes] bool: lanes counted as "on the route"
    grid: LaneGrid
    drivable: AreaGrid  # drivable area grown by the off-road tolerance, rasterised at 0.1 m
    stacked: StackedAreas | None  # where drivable lanes lie over each other: drivable per level
    speed_cap: np.ndarray | None = None  # route speed cap (limit, curvature), filled by the first planner
    levels: bool = False  # whether paths leave the ground plane (bridges, hills): actors' heights are tracked
    background: tuple[BackgroundPool, ...] = ()  # actors spawned and despawned around the ego
    background_radius: float = 0.0
    # actors that appear / leave with the ego's route progress, in threshold order
    appear_order: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    appear_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    leave_order: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    leave_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    flows: tuple[FlowPool, ...] = ()
    idx_timed: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # static actors that leave in time
    front_brakes: tuple[tuple[float, float], ...] = ()  # (route arc length, metres ahead), in order
    clear_background: tuple[ClearZone, ...] = ()
    windows: tuple[WindowRows, ...] = ()
    signal_holds: tuple[HoldRows, ...] = ()
    leaderboard_rules: bool = False  # a route file's episode: the Leaderboard's min-speed test
    _held_states: tuple[float, float, np.ndarray] | None = field(default=None, repr=False)  # (from, until, states)

    def signal_states(self, t: float) -> np.ndarray:
        """Every signal's state at time ``t`` (read-only). The states hold until the next phase change
        of any signal, so a town's thousand signals are evaluated a few times a cycle, not every step."""
        held = self._held_states
        if held is not None and (t == held[0] or held[0] <= t < held[1] - 1e-6):  # near a change: afresh
            return held[2]
        if not len(self.signal_ids):
            return np.zeros(0, np.int8)
        tt = (t + self.sig_offset) % self.sig_cycle
        k = (self.sig_cum_end <= tt[:, None]).sum(1)
        rows = np.arange(len(self.signal_ids))
        states = self.sig_states[rows, k]
        states.flags.writeable = False
        next_change = np.where(
            k < self.sig_cum_end.shape[1], self.sig_cum_end[rows, np.minimum(k, self.sig_cum_end.shape[1] - 1)], np.inf
        )
        until = t + float(np.min(np.minimum(next_change, self.sig_cycle) - tt))
        self._held_states = (t, until, states)
        return states


def _route_limits(
    paths: PathTable, route_path: int, route_s: np.ndarray, road_map: RoadMap, lane_ids: list[str]
) -> list[float]:
    """Speed limit of the lane under every route vertex."""
    lanes, _ = paths.lane_at(np.full(len(route_s), route_path), route_s)
    return [float(road_map.lanes[lane_ids[i]].speed_limit) for i in lanes]


def scenario_key(scn: Scenario) -> str:
    return hashlib.sha1(json.dumps(scn.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


_CACHE: dict[str, CompiledScenario] = {}
CACHE_ENTRIES = 33  # compiled scenarios kept for the next reset of the same one (a bank's, across seeds)
CACHE_BYTES = 1_000_000_000  # ... and no more than this much of their path tables (a 10 km route: 100-250 MB)


def compile_scenario(scn: Scenario, road_map: RoadMap | None = None) -> CompiledScenario:
    """The compiled form of ``scn``, kept for later resets of it: the most recent ones, as many as fit
    ``CACHE_ENTRIES`` and ``CACHE_BYTES`` (counted in path tables, the bulk of a compiled route; by
    count alone an evaluation of 10 km routes held 33 of them, 8-12 GB per worker)."""
    key = scenario_key(scn)
    if key not in _CACHE:
        _CACHE[key] = _compile(scn, road_map if road_map is not None else load_map(scn))
        held = sum(c.paths.nbytes for c in _CACHE.values())
        while len(_CACHE) > 1 and (len(_CACHE) > CACHE_ENTRIES or held > CACHE_BYTES):
            held -= _CACHE.pop(next(iter(_CACHE))).paths.nbytes
    return _CACHE[key]


_GRIDS: dict[object, tuple[RoadMap, object]] = {}


def _drivable_for(road_map: RoadMap) -> AreaGrid:
    key = ("drivable", id(road_map))
    hit = _GRIDS.get(key)
    if hit is None or hit[0] is not road_map:
        if len(_GRIDS) > 32:
            _GRIDS.pop(next(iter(_GRIDS)))
        hit = _GRIDS[key] = (road_map, AreaGrid(road_map.drivable_parts, DRIVABLE_MARGIN + OFFROAD_TOLERANCE))
    return hit[1]


def _stacked_for(road_map: RoadMap) -> StackedAreas | None:
    key = ("stacked", id(road_map))
    hit = _GRIDS.get(key)
    if hit is None or hit[0] is not road_map:
        hit = _GRIDS[key] = (road_map, StackedAreas.of(road_map, DRIVABLE_MARGIN + OFFROAD_TOLERANCE))
    return hit[1]


def _grid_for(road_map: RoadMap, lane_index: dict[str, int]) -> LaneGrid:
    """One lane grid per map object (families cache their maps, so scenarios share grids)."""
    hit = _GRIDS.get(id(road_map))
    if hit is None or hit[0] is not road_map:
        if len(_GRIDS) > 16:
            _GRIDS.pop(next(iter(_GRIDS)))
        hit = _GRIDS[id(road_map)] = (road_map, LaneGrid(road_map, lane_index))
    return hit[1]


def _compile(scn: Scenario, road_map: RoadMap) -> CompiledScenario:
    lane_ids = list(road_map.lanes)
    lane_index = {k: i for i, k in enumerate(lane_ids)}
    paths = PathTable()

    # --- ego route ---------------------------------------------------------------------------------
    route_path = paths.add_lanes(road_map, scn.ego.route, lane_index)
    route_xy = road_map.lane_sequence_polyline(scn.ego.route)
    route_s = geo.arc_lengths(route_xy)
    goal = scn.ego.goal_distance if scn.ego.goal_distance is not None else route_s[-1] - scn.ego.s - 1.0
    goal = float(max(min(goal, route_s[-1] - scn.ego.s - 3.0), 0.5))

    # --- background traffic: spawn points and paths, and pools of rows that start inactive -------------
    pools, extra = _background_pools(scn, road_map, paths, lane_index) if scn.background is not None else ([], [])
    flows, flow_actors = _flow_pools(scn, road_map, paths, lane_index, first_row=len(scn.actors) + len(extra) + 1)
    actors = list(scn.actors) + extra + flow_actors

    # --- actors (row 0 = ego) ---------------------------------------------------------------------------
    n = len(actors) + 1
    f = lambda v=0.0: np.full(n, v, float)  # noqa: E731
    table = ActorTable(
        ids=[EGO_ID] + [a.id for a in actors],
        kind=np.zeros(n, np.int8),
        motion=np.zeros(n, np.int8),
        behaviour=np.zeros(n, np.int8),
        length=f(scn.ego.length),
        width=f(scn.ego.width),
        height=f(1.5),
        desired_speed=f(),
        time_headway=f(1.5),
        min_gap=f(2.0),
        max_accel=f(1.5),
        comfort_decel=f(2.5),
        reacts_to_signals=np.zeros(n, bool),
        yields_at_junctions=np.zeros(n, bool),
        follows_speed_limit=np.zeros(n, bool),
        trigger_time=f(np.inf),
        trigger_distance=f(-np.inf),
        brake_decel=f(),
        brake_hold=f(),
        lc_target_path=np.full(n, -1),
        lc_duration=f(1.0),
        parked=np.zeros(n, bool),
        walk_speed=f(),
    )
    x, y, yaw, speed, s, d = f(), f(), f(), f(), f(), f()
    path_id = np.full(n, -1)
    ex, ey = geo.interpolate(route_xy, route_s, scn.ego.s)
    x[0], y[0], yaw[0], speed[0], s[0], path_id[0] = ex[0], ex[1], float(ey), scn.ego.speed, scn.ego.s, route_path
    table.kind[0], table.motion[0] = Kind.EGO, Motion.EGO

    for i, a in enumerate(actors, start=1):
        beh = a.behaviour
        table.kind[i] = _KINDS[a.kind]
        table.behaviour[i] = _BEHAVIOURS[beh.type]
        table.length[i], table.width[i], table.height[i] = a.length, a.width, a.height
        speed[i] = a.speed
        trig = getattr(beh, "trigger", None)
        if trig is not None:
            table.trigger_time[i] = trig.time if trig.time is not None else np.inf
            table.trigger_distance[i] = trig.ego_distance if trig.ego_distance is not None else -np.inf
        if a.lane is not None:
            lanes = list(a.path) if a.path else road_map.follow(a.lane, 600.0)
            if lanes[0] != a.lane:
                lanes = [a.lane, *lanes]
            path_id[i] = paths.add_lanes(road_map, lanes, lane_index)
            s[i], d[i] = a.s, a.lateral
        if beh.type in ("idm", "hard_brake", "lane_change"):
            table.motion[i] = Motion.PATH
            table.desired_speed[i] = beh.desired_speed if beh.desired_speed is not None else 0.0
            table.follows_speed_limit[i] = beh.desired_speed is None
            table.time_headway[i], table.min_gap[i] = beh.time_headway, beh.min_gap
            table.max_accel[i], table.comfort_decel[i] = beh.max_accel, beh.comfort_decel
            table.reacts_to_signals[i] = beh.reacts_to_signals
            table.yields_at_junctions[i] = beh.yields_at_junctions
            if beh.type == "hard_brake":
                table.brake_decel[i], table.brake_hold[i] = beh.decel, beh.hold
            if beh.type == "lane_change":
                target = road_map.follow(beh.target_lane, 600.0)
                table.lc_target_path[i] = paths.add_lanes(road_map, target, lane_index)
                table.lc_duration[i] = beh.duration
                table.parked[i] = beh.starts_parked
        elif beh.type == "walk":
            table.motion[i] = Motion.WALK
            path_id[i] = paths.add(np.asarray(beh.path, float))
            s[i], d[i] = 0.0, 0.0
            table.walk_speed[i] = beh.speed
        elif beh.type == "replay":
            table.motion[i] = Motion.REPLAY
            table.replay_tracks[i] = np.asarray(beh.track, float)
        else:
            table.motion[i] = Motion.STATIC
            if beh.remove_after is not None:
                table.brake_hold[i] = beh.remove_after  # (a static actor's hold: seconds until it leaves)
        if a.position is not None and a.lane is None:
            x[i], y[i], yaw[i] = a.position
    paths.freeze()

    # poses of lane-placed and walking actors
    placed = np.flatnonzero(path_id >= 0)
    placed = placed[placed > 0]
    if len(placed):
        px, py, ph = paths.pose(path_id[placed], s[placed], d[placed])
        x[placed], y[placed], yaw[placed] = px, py, ph
    for i, track in table.replay_tracks.items():
        x[i], y[i], yaw[i] = track[0, 1], track[0, 2], track[0, 3]

    active = np.ones(n, bool)
    for pool in [*pools, *flows]:  # spawned by the world around the ego / at the flow's source
        active[pool.rows] = False
        x[pool.rows] = y[pool.rows] = 1e6
        table.trigger_time[pool.rows] = np.inf
    if scn.front_brakes:  # every lane follower can be told to stop by a front-brake event
        following = (table.motion == Motion.PATH) & (table.behaviour != Behaviour.HARD_BRAKE)
        following[0] = False
        table.brake_decel[following], table.brake_hold[following] = FRONT_BRAKE_DECEL, FRONT_BRAKE_HOLD
    appear = np.array([-np.inf] + [-np.inf if a.appear_at is None else a.appear_at for a in actors])
    leave = np.array([np.inf] + [np.inf if a.leave_at is None else a.leave_at for a in actors])
    active &= (appear <= scn.ego.s) & (leave > scn.ego.s)
    later = np.flatnonzero(appear > scn.ego.s)
    gone = np.flatnonzero(np.isfinite(leave) & (leave > scn.ego.s))
    later, gone = later[np.argsort(appear[later], kind="stable")], gone[np.argsort(leave[gone], kind="stable")]

    motion = table.motion
    idx_walk = np.flatnonzero(motion == Motion.WALK)
    idx_replay = np.flatnonzero(motion == Motion.REPLAY)
    idx_lane = np.flatnonzero((path_id >= 0) & (motion != Motion.WALK) & (motion != Motion.EGO))

    # --- signals ---------------------------------------------------------------------------------------------
    signal_ids = list(road_map.signals)
    sig_index = {k: i for i, k in enumerate(signal_ids)}
    S = len(signal_ids)
    Pmax = max([len(p.phases) for p in scn.signals.values()] + [1])
    cum = np.full((S, Pmax), np.inf)
    states = np.full((S, Pmax + 1), GREEN, np.int8)
    cycle, offset = np.ones(S), np.zeros(S)
    for sid, prog in scn.signals.items():
        k = sig_index[sid]
        durs = np.array([p.duration for p in prog.phases])
        cum[k, : len(durs)] = np.cumsum(durs)
        states[k, : len(durs)] = [SignalState[p.state.upper()] for p in prog.phases]
        cycle[k], offset[k] = durs.sum(), prog.offset
    for k in range(S):  # the padded tail must never be selected: repeat the last phase's state
        n_ph = int(np.isfinite(cum[k]).sum())
        states[k, n_ph:] = states[k, max(n_ph - 1, 0)]

    n_paths = len(paths.length)
    stops: list[list[tuple[float, int]]] = [[] for _ in range(n_paths)]
    on_paths: dict[int, list[tuple[int, int]]] = {}  # lane index -> (path, the lane's first slot on it)
    for p in range(n_paths):
        for slot, li in enumerate(paths.lanes[p].tolist()):
            places = on_paths.setdefault(li, [])
            if not places or places[-1][0] != p:
                places.append((p, slot))
    for sl in road_map.stop_lines:
        if sl.give_way:
            continue  # yield lines are junction entry rules (junctions.py), never a place to stop
        sig = sig_index[sl.signal] if sl.signal is not None else -1
        for p, slot in on_paths.get(lane_index[sl.lane], ()):
            stops[p].append((float(paths.lane_start[p, slot] + sl.s), sig))
    K = max([len(x) for x in stops] + [1])
    stop_s, stop_sig = np.full((n_paths, K), np.inf), np.full((n_paths, K), -1)
    for p, lst in enumerate(stops):
        for k, (sv, sg) in enumerate(sorted(lst)):
            stop_s[p, k], stop_sig[p, k] = sv, sg

    # --- route corridor: route lanes, their same-direction neighbours and junction lanes ----------------
    corridor = np.zeros(len(lane_ids), bool)
    for lid in scn.ego.route:
        todo = [lid]
        while todo:
            cur = todo.pop()
            if corridor[lane_index[cur]]:
                continue
            corridor[lane_index[cur]] = True
            lane = road_map.lanes[cur]
            todo += [x for x in (lane.left, lane.right) if x is not None]

    grid = _grid_for(road_map, lane_index)
    drivable = _drivable_for(road_map)
    route_stop = stop_s[route_path], stop_sig[route_path]
    finite = np.isfinite(route_stop[0])

    return CompiledScenario(
        scenario=scn,
        road_map=road_map,
        lane_ids=lane_ids,
        lane_index=lane_index,
        lane_speed_limit=np.array([road_map.lanes[k].speed_limit for k in lane_ids]),
        lane_in_junction=np.array([road_map.lanes[k].junction is not None for k in lane_ids]),
        actors=table,
        paths=paths,
        init={"x": x, "y": y, "yaw": yaw, "speed": speed, "s": s, "d": d, "path_id": path_id, "active": active},
        idx_path=np.flatnonzero(motion == Motion.PATH),
        idx_lane_members=idx_lane,
        idx_walk=idx_walk,
        idx_replay=idx_replay,
        idx_obstacles=np.concatenate([[0], idx_walk, idx_replay]).astype(int),
        signal_ids=signal_ids,
        sig_cum_end=cum,
        sig_states=states,
        sig_cycle=cycle,
        sig_offset=offset,
        path_stop_s=stop_s,
        path_stop_sig=stop_sig,
        junctions=junction_rules(road_map, lane_index, paths),
        route_path=route_path,
        route_xy=route_xy,
        route_s=route_s,
        route_heading=[float(h) for h in geo.headings(route_xy)],
        route_speed_limit=[
            float(paths_limit) for paths_limit in _route_limits(paths, route_path, route_s, road_map, lane_ids)
        ],
        route_stop_s=route_stop[0][finite],
        route_stops=tuple((float(a), int(b)) for a, b in zip(route_stop[0][finite], route_stop[1][finite])),
        route_start=float(scn.ego.s),
        goal_distance=goal,
        corridor=corridor,
        grid=grid,
        drivable=drivable,
        stacked=_stacked_for(road_map) if paths.has_heights else None,
        levels=paths.has_heights,
        background=tuple(pools),
        background_radius=scn.background.radius if scn.background is not None else 0.0,
        appear_order=later,
        appear_s=appear[later],
        leave_order=gone,
        leave_s=leave[gone],
        flows=tuple(flows),
        idx_timed=np.flatnonzero(
            (motion == Motion.STATIC) & (np.isfinite(table.trigger_time) | (table.trigger_distance > 0))
        ),
        front_brakes=tuple(sorted((b.at, b.ahead) for b in scn.front_brakes)),
        clear_background=_clear_zones(scn, lane_index) if pools else (),
        windows=_windows(scn, table.ids),
        signal_holds=_holds(scn, sig_index),
        leaderboard_rules=scn.rules == "leaderboard",
    )


def _clear_zones(scn: Scenario, lane_index: dict[str, int]) -> tuple[ClearZone, ...]:
    out = []
    for k, z in enumerate(scn.clear_background):
        unknown = sorted(set(z.lanes) - set(lane_index))
        if unknown:
            raise ValueError(f"clear_background[{k}].lanes: no lane {unknown[0]!r} on the map")
        lanes = frozenset(lane_index[lane] for lane in z.lanes)
        out.append(ClearZone(z.appear_at, z.leave_at, z.ahead_to, z.oncoming, lanes))
    return tuple(out)


def _holds(scn: Scenario, sig_index: dict[str, int]) -> tuple[HoldRows, ...]:
    out = []
    for hold in scn.signal_holds:
        unknown = sorted(set(hold.signals) - set(sig_index))
        if unknown:
            raise ValueError(f"scenario {scn.id}: signal_holds name signals the map does not have: {unknown}")
        rows = tuple(
            (
                sig_index[sid],
                np.cumsum([p.duration for p in phases]),
                np.array([SignalState[p.state.upper()] for p in phases], np.int8),
            )
            for sid, phases in sorted(hold.signals.items())
        )
        out.append(HoldRows(hold.at, hold.until, rows))
    return tuple(out)


def _windows(scn: Scenario, ids: list[str]) -> tuple[WindowRows, ...]:
    row = {k: i for i, k in enumerate(ids)}
    flow_index = {f.id: k for k, f in enumerate(scn.flows)}
    inf = float("inf")
    return tuple(
        WindowRows(
            w.name,
            w.start,
            inf if w.end is None else w.end,
            inf if w.timeout_s is None else w.timeout_s,
            inf if w.duration_s is None else w.duration_s,
            np.array([row[a] for a in w.actors if a in row], int),
            np.array([flow_index[a] for a in w.actors if a in flow_index], int),
            row[w.emergency_vehicle] if w.emergency_vehicle else -1,
        )
        for w in sorted(scn.windows, key=lambda w: w.start)  # (the world opens them in this order)
    )


SPAWN_SPACING = 5.0  # metres between the spawn points on a background lane
BACKGROUND_PATH_M = {"driving": 300.0, "sidewalk": 150.0}  # metres a background actor's path runs past its lane
FRONT_BRAKE_DECEL = 6.0  # m/s^2 of the vehicles a front-brake event stops
FRONT_BRAKE_HOLD = 5.0  # seconds they stand before driving on
ONCOMING_BEYOND = 100.0  # metres past a ClearBackground's ``ahead_to`` that its oncoming lanes are kept clear
WALK_SPEED = 1.3  # m/s of background pedestrians


def _background_pools(
    scn: Scenario, road_map: RoadMap, paths: PathTable, lane_index: dict[str, int]
) -> tuple[list[BackgroundPool], list[ActorSpec]]:
    """The vehicle pool (spawn points on the driving lanes near the route) and the pedestrian pool
    (on the sidewalks near the route, and at both ends of its crosswalks), each spawn point with the
    path an actor spawned there follows (drawn once, from the scenario's seed), and their actors."""
    spec = scn.background
    rng = np.random.default_rng([scn.seed, 0xB6])
    pools, actors = [], []

    def spawn_points(kind: str) -> tuple[list, list, list, list]:
        xy, path, s_on, speed = [], [], [], []
        for lane_id in lanes_near(road_map, scn.ego.route, spec.near_route, kind):
            lane = road_map.lanes[lane_id]
            if lane.length <= 10.0:
                continue
            ahead = lane.length + BACKGROUND_PATH_M[kind]  # (past the lane's end: an actor appears anywhere on it)
            p = paths.add_lanes(road_map, random_path(road_map, lane_id, ahead, rng), lane_index)
            s = np.arange(3.0, lane.length - 3.0, SPAWN_SPACING)
            centre = lane.centerline
            xy.append(np.column_stack([np.interp(s, lane.s, centre[:, 0]), np.interp(s, lane.s, centre[:, 1])]))
            path.append(np.full(len(s), p))
            s_on.append(s)
            speed.append(np.full(len(s), 0.6 * lane.speed_limit if kind == "driving" else WALK_SPEED))
        return xy, path, s_on, speed

    if spec.max_vehicles > 0:
        xy, path, s_on, speed = spawn_points("driving")
        if xy:
            rows = len(scn.actors) + 1 + np.arange(spec.max_vehicles)
            pools.append(
                BackgroundPool(rows, *(np.concatenate(v) for v in (xy, path, s_on, speed)), spec.density, False)
            )
            spare = scn.ego.route[0]  # (a placeholder: the world gives each its path when it appears)
            actors += [
                ActorSpec.model_validate(
                    idm_actor(f"background{k}", spare, 1.0, 0.0, [spare], yields_at_junctions=True)
                )
                for k in range(spec.max_vehicles)
            ]
    if spec.max_pedestrians > 0:
        xy, path, s_on, speed = spawn_points("sidewalk")
        near = np.concatenate([road_map.lanes[x].centerline for x in scn.ego.route])[::5]
        crossings = 0
        for cw in road_map.crosswalks:
            p = cw.polygon
            ends = (0.5 * (p[0] + p[1]), 0.5 * (p[3] + p[2]))
            if np.min(np.hypot(*(near - ends[0]).T)) > spec.near_route:
                continue
            for a, b in (ends, ends[::-1]):  # cross from either side
                xy.append(a[None])
                path.append(np.array([paths.add(np.stack([a, b]))]))
                s_on.append(np.zeros(1))
                speed.append(np.full(1, WALK_SPEED))
                crossings += 1
        if xy:
            first = len(scn.actors) + 1 + len(actors)
            rows = first + np.arange(spec.max_pedestrians)
            pools.append(
                BackgroundPool(rows, *(np.concatenate(v) for v in (xy, path, s_on, speed)), spec.pedestrians, True)
            )
            walker = {"kind": "pedestrian", "length": 0.5, "width": 0.6, "height": 1.8, "position": [0.0, 0.0, 0.0]}
            actors += [
                ActorSpec.model_validate(
                    walker
                    | {"id": f"walker{k}", "behaviour": {"type": "walk", "path": [[0, 0], [1, 0]], "speed": WALK_SPEED}}
                )
                for k in range(spec.max_pedestrians)
            ]
    return pools, actors


def _flow_pools(
    scn: Scenario, road_map: RoadMap, paths: PathTable, lane_index: dict[str, int], first_row: int
) -> tuple[list[FlowPool], list[ActorSpec]]:
    """Each actor flow's path and the rows (IDM vehicles at the flow's speed) it cycles through."""
    pools, actors = [], []
    row = first_row
    for flow in scn.flows:
        path = paths.add_lanes(road_map, flow.path, lane_index)
        length = float(sum(road_map.lanes[k].length for k in flow.path))
        end_s = min(flow.end_s if flow.end_s is not None else length, length - 1.0)
        rows = row + np.arange(flow.max_actors)
        row += flow.max_actors
        pools.append(
            FlowPool(rows, path, flow.s, end_s, flow.speed, flow.gap, flow.lateral, flow.appear_at, flow.leave_at)
        )
        size = {"length": 1.8, "width": 0.7, "height": 1.7} if flow.kind == "cyclist" else {}
        for k in range(flow.max_actors):
            # (a one-lane placeholder path, as background rows have: the world puts each on the flow's path)
            first = flow.path[0]
            spec = idm_actor(
                f"{flow.id}.{k}", first, 0.0, flow.speed, [first], flow.speed, reacts_to_signals=flow.reacts_to_signals
            )
            actors.append(ActorSpec.model_validate(spec | {"kind": flow.kind} | size))
    return pools, actors
