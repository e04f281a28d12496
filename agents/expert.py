"""The privileged expert: a rule-based planner on the world state, and the teacher for datasets.

Each decision it (1) sees every actor near its route in route coordinates (arc length s, lateral
offset), (2) picks a lateral target: stay in lane, overtake through a free same-direction lane, move
over for an emergency vehicle behind (into a lane open now, as for a lane change), or nudge out round a
standing obstacle through the oncoming lane and back when the oncoming traffic leaves time for the whole
pass, (3) plans a speed profile with IDM on the tightest of: the leader on the path it plans (the body
follows that path; a car moving across into it counts; a slower one where it would catch it up, the
route's line moving across meanwhile), pedestrians near it, red lights and stop signs, and yield points
where its junction path conflicts with traffic that has priority (unprotected left turns, stop signs,
merges; the traffic predicted with the world's own right-of-way rules and both bodies' extent; a car
that gets into our lane before us is followed, one that would run up behind us as we come out waited
for; held there long by a scenario's flow, which never gives way, it creeps up and goes when the flow's
next vehicle can brake for it; going straight on with the right of way, only a vehicle that keeps no
rules, or that the rules let in all the same, counts) and lane changes the route makes (along an
acceleration lane it keeps to its lane a little slower than the car in the way and goes in behind it),
capped by the lane limit, curvature and caution near occluders and cars waiting to pull out, and (4)
writes the Chain-of-Causation text from those same decision factors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from agents.base import AgentOutput, BaseAgent
from agents.prediction import EgoPass, Oncoming, next_oncoming_from_flows, pass_completes
from envs.driver import next_stop_line, route_speed_cap, speed_profile, to_ego_frame
from envs.world import Behaviour, Kind, Mode, kernels, traffic
from envs.world.junctions import Rule
from scenarios import geometry as geo
from scenarios.maps import smoothstep

PEDESTRIAN, STATIC = int(Kind.PEDESTRIAN), int(Kind.STATIC)


@dataclass
class Seen:
    """An actor in route coordinates."""

    index: int
    id: str
    kind: int
    s: float  # arc length of its centre on the ego route
    lat: float  # lateral offset from the route centreline (left +)
    v_along: float  # speed along the route direction (negative = oncoming)
    v_lat: float  # speed across it (left +)
    speed: float
    length: float  # its footprint along our route
    width: float  # and across it
    static: bool
    pulls_out: bool  # a car waiting to pull out into the traffic (a cut-in, a parking exit: its trigger armed)
    merging: bool = False  # on a lane that runs into ours ahead, coming alongside: to let in ahead of us


@dataclass
class _TheirPath:
    """Where another vehicle's path meets our junction path (metre by metre, as far as it drives while
    we are on ours): ``edge``, our front's arc length on our path at which it sees us (the world's
    traffic reads our body as a point half our width behind the bumper, reaching half our width: seen
    once that comes within its half width and a margin of its path; inf: its path passes beside ours,
    clear of both bodies); ``meet``, metres along its path to where its body reaches ours (our path's
    ``heading`` at each point: ``_body_reach``); ``ahead``, how far it drives by each of the ``times``
    ahead."""

    edge: float
    meet: float
    times: np.ndarray
    ahead: np.ndarray

    @classmethod
    def of(
        cls,
        world,
        j: int,
        path: np.ndarray,
        along: np.ndarray,
        heading: np.ndarray,
        times: np.ndarray,
        ahead: np.ndarray,
    ) -> _TheirPath:
        st, c = world.state, world.compiled
        a = c.actors
        ego_w = float(a.width[0])
        s_j = st.s[j] + np.arange(0.0, float(ahead[-1]) + 1.0, 1.0)
        jx, jy, jyaw = c.paths.pose(np.full(len(s_j), st.path_id[j]), s_j)
        d = np.hypot(jx[:, None] - path[None, :, 0], jy[:, None] - path[None, :, 1])
        reach = d.min(axis=0)  # how near its path comes to each point of ours
        seen_from = np.flatnonzero(reach < (a.width[j] + ego_w) / 2 + kernels.OBSTACLE_MARGIN)
        edge = float(along[seen_from[0]]) + ego_w / 2 if len(seen_from) else math.inf
        crossing = np.flatnonzero((d < _body_reach(world, j, jyaw, heading)).any(axis=1))
        meet = float(crossing[0]) if len(crossing) else math.inf
        return cls(edge, meet, times, ahead)


CROSS_ACCEL = 2.0  # m/s^2 the expert counts on when it crosses or enters a junction
CROSS_SPEED = 8.0  # m/s it crosses at, at most
CROSS_MARGIN_M = 4.0  # metres of its junction path kept clear ahead of and behind it when it sets off
CONFLICT_MARGIN_M = 1.0  # metres between our body and a crossing vehicle's across the path that count as meeting
FOLLOW_S = 1.0  # seconds a vehicle coming up behind us where our junction path ends must be back, at least
FOLLOWER_DECEL = 3.0  # m/s^2 it is counted on to brake at to match our speed there
COMMITTED_MARGIN_M = 1.0  # ... and once it has set off: it stops again only for a vehicle that would hit it
PULL_AWAY = 3.0  # m/s faster than us that a vehicle beside us goes to be a leader once past, not in the way now
ASSERT_AFTER_S = 10.0  # seconds held at a junction entry by traffic that does not give way before it asserts itself
YIELD_DECEL = 7.0  # m/s^2 a vehicle that sees us in its path is counted on to brake at, once we assert ourselves
# (the world's traffic brakes at up to 9 for an ego on its path; at 5, busy junction turns timed out)
ASSERT_ACCEL = 1.5  # m/s^2 it counts on for itself then (what its plan reaches from a standstill, not CROSS_ACCEL)
CREEP_SPEED = 1.5  # m/s it creeps at (the cars queued behind it follow at walking pace, and stop with it)
CREEP_STANDOFF_M = 0.3  # metres short of where a conflicting vehicle would see it that it creeps up to, waiting
LANE_CHANGE_BEHIND_M = 30.0  # metres behind us in the lane a short change moves into that it checks
CUT_IN_HORIZON_S = 3.0  # seconds ahead a vehicle moving across towards our path is projected
CUT_IN_MIN_SLOPE = 0.25  # ... if it heads across our route at 14 degrees or more
BEHIND_M = 160.0  # metres of route behind it that it looks along (an emergency vehicle, a car coming up)
EMERGENCY_LOOK_BACK_S = 8.0  # it makes way for an emergency vehicle this many seconds before it reaches it
EMERGENCY_LOOK_BACK_M = 80.0  # ... or this close behind, whichever is further
SIGHT_M = 160.0  # metres it sees (an oncoming flow closing at 15 m/s is 10 s away there)
MIN_RAMP_M = 4.5  # metres of the shortest move across (a swerve at walking pace)
RAMP_S = 2.5  # seconds a move across takes
APPROACH_M = 60.0  # metres before an obstacle to pass through the oncoming lane that it decides to drive on
APPROACH_DECEL = 4.0  # m/s^2 it could still stop behind the obstacle at, while it drives on towards it
OUT_MARGIN_M = 2.0  # metres before the obstacle's rear that it counts itself out in the oncoming lane
RAMP_MIN_SPEED = 3.0  # m/s the move back into lane after a pass is laid out for, at least
HOLD_END_M = 15.0  # metres before its lane ends that a long lane change held off waits, at the latest
MERGE_SLOWER = 1.5  # m/s slower than the car in the way that it drives, waiting to change in behind it
MERGE_LOOK_M = 80.0  # metres ahead that it looks for a lane running into its route
MERGE_HORIZON_S = 2.0  # seconds ahead that a faster vehicle on a lane joining ours is projected to come alongside
MERGE_HEADING = math.cos(math.radians(30.0))  # ... heading our way within 30 degrees
MERGE_BESIDE_M = 10.0  # ... and within this far of our route's line
MERGE_MIN_SPEED = 2.0  # m/s we drive at, at least, for braking to let it by to be of use
CATCH_UP_S = 8.0  # seconds ahead it looks for where it would catch up a slower car (its lateral there)
MAKE_WAY_SLOWER = 5.0  # m/s slower than an emergency vehicle behind us that it drives, making way
MAKE_WAY_MIN_SPEED = 2.0  # ... at least
PASS_ACCEL = 2.5  # m/s^2 it accelerates at through the oncoming lane (1.5 elsewhere: the gaps are short)


def _body_reach(world, j: int, their_yaw: np.ndarray, our_heading: np.ndarray) -> np.ndarray:
    """How near (m) vehicle ``j``'s centre, heading ``their_yaw`` (one per row), may come to each point of
    our path (heading ``our_heading``, one per column) before the two bodies come within
    ``CONFLICT_MARGIN_M`` of each other: its body's reach across our path (its half length crossing it,
    its half width alongside it) and half our width. A car in the next lane passes beside us; one
    crossing our path is met a half length before its centre gets there."""
    a = world.compiled.actors
    angle = their_yaw[:, None] - our_heading[None, :]
    across = 0.5 * a.length[j] * np.abs(np.sin(angle)) + 0.5 * a.width[j] * np.abs(np.cos(angle))
    return across + 0.5 * a.width[0] + CONFLICT_MARGIN_M


def _tangents(path: np.ndarray) -> np.ndarray:
    """Heading of a polyline at each vertex (central differences: lanes joined end to start repeat a vertex)."""
    g = np.gradient(path, axis=0)
    return np.arctan2(g[:, 1], g[:, 0])


def _to_our_exit(world, j: int, exit_xy: np.ndarray) -> float:
    """Metres along vehicle ``j``'s path from its centre to where our junction path ends (``exit_xy``):
    negative once past it, nan if its path does not go there (it does not end up in our lane)."""
    st, c = world.state, world.compiled
    s_exit, off = c.paths.project(int(st.path_id[j]), exit_xy)
    return float(s_exit - st.s[j]) if abs(off) < 1.0 else math.nan


def _lane_of(world, j: int) -> int:
    """Index (into ``compiled.lane_ids``) of the lane vehicle ``j`` is on (-1: none)."""
    st, c = world.state, world.compiled
    p_lanes, p_start = c.paths.lanes, c.paths.lane_start
    return int(p_lanes[st.path_id[j], kernels.lane_slot(p_lanes, p_start, st.path_id[j], st.s[j])])


def _junction_of(world, j: int) -> str | None:
    """The map junction vehicle ``j`` is in (None: on a road)."""
    c = world.compiled
    lane = _lane_of(world, j)
    return c.road_map.lanes[c.lane_ids[lane]].junction if lane >= 0 else None


def _leads_us(
    world, j: int, path: np.ndarray, along: np.ndarray, heading: np.ndarray, front: float, to_exit: float
) -> bool:
    """Whether vehicle ``j``, ``to_exit`` metres from where our junction path (``path``: arc lengths
    ``along``, headings ``heading``) ends, is in front of us going our way: past that end, or on our path
    or in the lane beside it (a merge's) wholly ahead of our front (arc length ``front``), or beside us with
    its centre past our front and pulling away (``PULL_AWAY``). The car that merges in just before us is
    followed, not waited for."""
    st, a = world.state, world.compiled.actors
    gap = np.hypot(path[:, 0] - st.x[j], path[:, 1] - st.y[j])
    k = int(np.argmin(gap))
    if math.cos(float(st.yaw[j]) - float(heading[k])) < math.cos(math.radians(30.0)):
        return False
    pulling_away = st.speed[j] > st.speed[0] + PULL_AWAY and front < along[k] < front + a.length[j]  # (beside us)
    beside = gap[k] < 5.0 and k < len(path) - 1 and (along[k] - a.length[j] / 2 > front or pulling_away)
    return beside or to_exit < 0.0


def _on_our_heels(
    world, j: int, to_exit: float, past_exit: np.ndarray, ahead: np.ndarray, taus: np.ndarray, v: float
) -> bool:
    """Whether moving vehicle ``j``, ``to_exit`` metres from where our junction path ends, would come up
    on us too fast to follow us once we are out (our front ``past_exit`` metres past that point and it
    ``ahead`` metres on, by the ``taus`` ahead): merging in front of a faster car is a conflict even if
    it never touches our path while we are on it."""
    st, a = world.state, world.compiled.actors
    speed = float(st.speed[j])
    if speed < 0.5 or to_exit - a.length[j] / 2 < a.length[0] - past_exit[0]:
        return False  # standing, or not behind us (beside us: the path check's business)
    gap = past_exit[-1] - a.length[0] + (to_exit - ahead[-1] - a.length[j] / 2)
    ours = min(v + CROSS_ACCEL * float(taus[-1]), max(v, CROSS_SPEED))
    return gap < FOLLOW_S * speed + max(speed - ours, 0.0) ** 2 / (2.0 * FOLLOWER_DECEL) + 2.0


def _in_own_lane(s_ego: float, first: float, length: float, side: float, ahead: np.ndarray) -> np.ndarray:
    """The lateral offsets ``ahead`` metres on that keep us in our own lane while the route's line moves
    ``side`` metres across over the ``length`` metres from arc length ``first`` (a lane change held off)."""
    return -side * smoothstep((s_ego + np.asarray(ahead) - first) / length)


def _lane_change_commit(length: float, across: float, inside: float) -> float:
    """Metres into a lane change whose route line moves ``across`` metres over a lane ``length`` long
    (the map's ``smoothstep``) at which our side reaches the new lane (our centre ``inside`` metres off our own
    lane's centre)."""
    if across <= inside:
        return 0.0
    f = np.linspace(0.0, 1.0, 101)
    return float(np.interp(inside / across, smoothstep(f), f) * length)


def _distance_covered(t: np.ndarray, v: float, accel: float = CROSS_ACCEL, top: float = CROSS_SPEED) -> np.ndarray:
    """Metres covered in ``t`` seconds from speed ``v``, accelerating at ``accel`` up to ``top``."""
    top = max(v, top)
    t_top = (top - v) / accel
    ramp = v * t + 0.5 * accel * t**2
    return np.where(t < t_top, ramp, v * t_top + 0.5 * accel * t_top**2 + top * (t - t_top))


def _capped_progress(
    v: float, reach: float, x_cap: np.ndarray, v_cap: np.ndarray, top: float = CROSS_SPEED
) -> tuple[np.ndarray, np.ndarray]:
    """Metres covered (a 0.25 m grid up to ``reach``) and the seconds to cover them, from speed ``v``,
    accelerating at ``CROSS_ACCEL`` up to ``max(v, top)`` as ``_distance_covered`` does, but never
    faster than the route's speed cap ``v_cap`` at ``x_cap`` metres ahead (its curves and limits,
    braked into at 2 m/s^2, as the plan drives them) and accelerating again from that: fast on the
    approach to a turn, we slow for it, and reach and stay on its path later and longer than our
    present speed says."""
    x = np.arange(0.0, reach + 0.25, 0.25)
    cap = np.minimum(np.interp(x, x_cap, v_cap), max(v, top))
    # the speed reachable at x from every earlier point's cap (and from v at 0), accelerating: a running minimum
    w = cap**2 - 2.0 * CROSS_ACCEL * x
    w[0] = v * v
    speed = np.sqrt(np.maximum(np.minimum(np.minimum.accumulate(w) + 2.0 * CROSS_ACCEL * x, cap**2), 0.0))
    speed[0] = v
    mid = np.maximum((speed[1:] + speed[:-1]) / 2.0, 0.1)
    return x, np.concatenate([[0.0], np.cumsum(0.25 / mid)])


def _time_to_cover(distance: float, v: float, accel: float = CROSS_ACCEL) -> float:
    """Seconds to cover ``distance`` metres the same way (the inverse of ``_distance_covered``)."""
    top = max(v, CROSS_SPEED)
    t_top = (top - v) / accel
    ramp = v * t_top + 0.5 * accel * t_top**2
    if distance <= ramp:
        return (-v + math.sqrt(v * v + 2.0 * accel * distance)) / accel
    return t_top + (distance - ramp) / top


def _braking_room(speed: float, after_s: float) -> float:
    """Metres a vehicle at ``speed`` that sees us in its path ``after_s`` seconds from now needs to stop
    short of us, braking at ``YIELD_DECEL``, with 2 m to spare."""
    return 2.0 + speed * after_s + speed**2 / (2.0 * YIELD_DECEL)


def _behind_gap(o: Seen, s_ego: float, ego_len: float) -> float:
    """Metres from vehicle ``o``'s front back to our rear (negative: it is alongside us)."""
    return (s_ego - ego_len / 2) - (o.s + o.length / 2)


def _closing(o: Seen, v: float) -> float:
    """How much faster than us ``o`` drives along our route (m/s, 0 if not)."""
    return max(o.v_along - max(v, 0.0), 0.0)


def _comes_up_behind(o: Seen, s_ego: float, v: float, ego_len: float) -> bool:
    """Whether moving vehicle ``o``, behind us in a lane we move into, is alongside us or would catch us
    up within 3 s and 6 m of our rear (a car following at our speed is no reason to wait)."""
    if o.static or o.s >= s_ego:
        return False
    behind, closing = _behind_gap(o, s_ego, ego_len), _closing(o, v)
    return behind < 0.5 or (closing > 0.5 and behind < 6.0 + 3.0 * closing)


class Expert(BaseAgent):
    name = "expert"
    privileged = True
    observations = ("ego_state",)  # it plans on the world state

    def __init__(self, time_headway: float = 1.4, min_gap: float = 3.0, caution_speed: float = 6.0) -> None:
        self.T, self.s0, self.caution_speed = time_headway, min_gap, caution_speed

    def reset(self, episode_info: dict[str, Any]) -> None:
        super().reset(episode_info)
        self.world = episode_info.get("world")
        if self.world is None:
            raise ValueError("the expert is privileged: pass episode_info['world'] (the env's world) to reset()")
        self.offset = 0.0  # lateral target relative to the route centreline
        self.maneuver: str | None = None  # "overtake_left", "nudge_left", ...
        self.blocker: str | None = None
        self.pass_end = -math.inf  # route arc length of the far end of what a nudge goes around
        self.approach: str | None = None  # an obstacle it drives on towards, to pass at speed
        self._stopped_at: dict[int, float] = {}
        self._crossing: float | None = None  # route arc length of the junction entry it has set off into
        self._held: tuple[float, float] | None = None  # (junction entry, since when) it has stood held there
        self._held_change: tuple[float, float] | None = None  # (lane change, since when) it has stood held there
        self._waved: set[str] = set()  # vehicles that brake for it, counted on while it crosses their path
        self._creeping = False  # up to the edge of a flow's path, at a junction it asserts itself at
        self._merge_speed = math.inf  # m/s it keeps to while a car in the lane it changes into draws ahead
        self._merge_hold: tuple[float, float, float] | None = None  # (start, length, side) of a long change held off
        self._moved: tuple[float, float, float] | None = None  # (start, length, side) of the long change it made
        self._last_s = -math.inf  # route arc length at its last decision
        c = self.world.compiled
        self._emergency_rows = {w.emergency_vehicle for w in c.windows if w.emergency_vehicle >= 0}
        lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
        self._route_lanes = {int(x) for x in lanes if x >= 0}
        # the route's lanes that its lane before runs on into (a successor link: where two lanes join; not
        # where the route changes lanes), and where each starts
        runs_on = [
            k
            for k in range(1, len(lanes))
            if lanes[k] >= 0
            and lanes[k - 1] >= 0
            and c.lane_ids[lanes[k]] in c.road_map.lanes[c.lane_ids[lanes[k - 1]]].successors
        ]
        self._joined_lanes, self._joined_at = lanes[runs_on], starts[runs_on]
        # the route's lane changes: (where its line starts moving across, over how many metres, how far)
        self._changes = []
        for k in np.flatnonzero((starts[:-1] == starts[1:]) & (lanes[1:] >= 0) & (lanes[:-1] >= 0)):
            here, there = (c.road_map.lanes[c.lane_ids[lanes[x]]] for x in (k, k + 1))
            heading = here.heading[0]
            side = float(np.dot(there.centerline[0] - here.centerline[0], [-np.sin(heading), np.cos(heading)]))
            self._changes.append((int(k), float(starts[k]), here.length, side))

    def _line_moves(self, s_from: float, s_to: float) -> float:
        """Metres the route's line moves across (left positive) from arc length ``s_from`` to ``s_to``
        where the route changes lanes: a vehicle keeping to its lane there is that much further right of
        the line at ``s_to`` than at ``s_from``."""
        return sum(
            side * float(smoothstep((s_to - first) / length) - smoothstep((s_from - first) / length))
            for _, first, length, side in self._changes
            if first < s_to and s_from < first + length
        )

    def _lane_line(self, s: float | np.ndarray) -> np.ndarray:
        """Where the lane we keep to lies across the route's line (left +) at route arc lengths ``s``: on
        the line, but along a long lane change, whose line moves across over the whole lane (189 m at the
        median on the Leaderboard 2.0 routes, over a kilometre on some), our own lane's centre while the
        change is held off and the new lane's once we have moved across, in ``_ramp``: straddling two lanes
        for hundreds of metres leaves an emergency vehicle no lane to pass in, and a car beside no room."""
        s = np.asarray(s, dtype=float)
        if self._merge_hold is not None:
            return _in_own_lane(0.0, *self._merge_hold, s)
        if self._moved is None:
            return np.zeros_like(s)
        first, length, side = self._moved
        return side * (1.0 - smoothstep((s - first) / length))

    def act(self, observation: dict[str, Any] | None = None) -> AgentOutput:
        return self.plan(self.world)

    # --- perception --------------------------------------------------------------------------------------
    def _seen(self, world) -> list[Seen]:
        st, c, a = world.state, world.compiled, world.compiled.actors
        idx = np.flatnonzero(st.active)
        idx = idx[idx > 0]
        if not len(idx):
            return []
        near = np.hypot(st.x[idx] - st.x[0], st.y[idx] - st.y[0]) < SIGHT_M
        idx = idx[near]
        lo = max(st.route_seg - int(BEHIND_M), 0)
        hi = min(st.route_seg + int(SIGHT_M) + 20, len(c.route_xy) - 1)
        pts, ss = c.route_xy[lo : hi + 1], c.route_s[lo : hi + 1]
        out = []
        for j in idx:
            s, lat, k = geo.project(pts, ss, np.array([st.x[j], st.y[j]]))
            if abs(lat) > 15.0 or (k == 0 and s <= ss[0]) or s >= ss[-1] - 0.01:
                continue
            seg_h = math.atan2(pts[k + 1, 1] - pts[k, 1], pts[k + 1, 0] - pts[k, 0])
            v_along = float(st.speed[j] * math.cos(st.yaw[j] - seg_h))
            v_lat = float(st.speed[j] * math.sin(st.yaw[j] - seg_h))
            static = a.kind[j] == STATIC or a.behaviour[j] == Behaviour.STATIC
            # its footprint along and across our route (a car standing across the road is wide)
            cos_rel, sin_rel = abs(math.cos(st.yaw[j] - seg_h)), abs(math.sin(st.yaw[j] - seg_h))
            along = cos_rel * a.length[j] + sin_rel * a.width[j]
            across = sin_rel * a.length[j] + cos_rel * a.width[j]
            pulls_out = a.behaviour[j] == Behaviour.LANE_CHANGE and st.mode[j] == Mode.WAITING
            out.append(
                Seen(
                    int(j),
                    a.ids[j],
                    int(a.kind[j]),
                    float(s),
                    float(lat),
                    v_along,
                    v_lat,
                    float(st.speed[j]),
                    float(along),
                    float(across),
                    bool(static),
                    bool(pulls_out),
                )
            )
        return out

    @staticmethod
    def _lane_width(world) -> float:
        c = world.compiled
        lane_idx, _ = c.paths.lane_at(np.array([c.route_path]), np.array([world.state.route_s]))
        return float(c.road_map.lanes[c.lane_ids[lane_idx[0]]].width)

    def _neighbours(self, world) -> dict[str, str | None]:
        """Lanes beside the ego's current route lane: same-direction left / right, and oncoming."""
        c = world.compiled
        lane_idx, _ = c.paths.lane_at(np.array([c.route_path]), np.array([world.state.route_s]))
        lane = c.road_map.lanes[c.lane_ids[lane_idx[0]]]
        return {"left": lane.left, "right": lane.right, "opposite": lane.opposite, "junction": lane.junction}

    @staticmethod
    def _side_of(world, lane_id: str) -> float:
        """Where a lane beside lies, as the signed offset of its centre from the route's (left +). The
        map's left / right / opposite links follow OpenDRIVE's lane order, and the CARLA towns, in
        CARLA's frame, are mirrored (their oncoming lanes lie on the right): the geometry decides."""
        st, c = world.state, world.compiled
        lane = c.road_map.lanes[lane_id]
        s_on, _, _ = geo.project(lane.centerline, lane.s, np.array([st.x[0], st.y[0]]))
        k = min(max(st.route_seg, 0), len(c.route_xy) - 2)
        h = math.atan2(*(c.route_xy[k + 1] - c.route_xy[k])[::-1])
        centre = lane.pose_at(min(max(s_on, 0.0), lane.length))[0] - c.route_xy[k]
        return float(-math.sin(h) * centre[0] + math.cos(h) * centre[1])

    def _lanes_beside(self, world, nb: dict[str, str | None], width: float) -> list[float]:
        """Offsets (left +) of the lanes our way right beside the ego, measured: the map's left / right
        links of the route's lane and theirs, kept where they lie a lane's width from the ego (where a
        route changes lanes, its line runs between two, and a link of its lane may be two lanes off)."""
        ego = float(world.state.lateral)
        offsets = (self._side_of(world, x) for x in self._lanes_near(world, nb))
        return [b for b in offsets if 0.6 * width < abs(b - ego) < 1.5 * width]

    @staticmethod
    def _lanes_near(world, nb: dict[str, str | None]) -> list[str]:
        """The lanes beside the route's and the lanes beside those (the map's left / right links)."""
        lanes = world.compiled.road_map.lanes
        near = {x for x in (nb["left"], nb["right"]) if x is not None}
        near |= {y for x in list(near) for y in (lanes[x].left, lanes[x].right) if y is not None}
        return sorted(near)

    def _centre_near(self, world, nb: dict[str, str | None], offset: float, width: float) -> float:
        """The offset of the centre of the lane beside that lies within half a lane of ``offset``, or
        ``offset`` where none does: the lane we pass in, whose centre moves where the route's line moves
        across (a route changing lanes runs between two)."""
        centres = [self._side_of(world, x) for x in self._lanes_near(world, nb)]
        return min((b for b in centres if abs(b - offset) < 0.5 * width), key=lambda b: abs(b - offset), default=offset)

    def _lane_goes_on_beside(self, world, nb: dict[str, str | None], width: float) -> bool:
        """Whether the lane beside the route's that we are out in runs on beside the route's path through
        the junction ahead (a highway's lanes through the junction of an on-ramp), so that we can stay in it."""
        c, st = world.compiled, world.state
        lanes = c.road_map.lanes
        near = self._lanes_near(world, nb)
        ours = min(near, key=lambda x: abs(self._side_of(world, x) - st.lateral), default=None)
        k = self._next_junction_lane(world)
        if ours is None or k is None:
            return False
        route_lane = lanes[c.lane_ids[c.paths.lanes[c.route_path, k]]]
        frontier = [ours]
        for _ in range(3):  # along its successors to the junction
            frontier = [y for x in frontier for y in lanes[x].successors]
            inside = [lanes[x] for x in frontier if lanes[x].junction == route_lane.junction]
            if inside:
                break
        else:
            return False
        for lane in inside:
            samples = lane.centerline[np.linspace(0, len(lane.centerline) - 1, 6).astype(int)]
            apart = [abs(geo.project(route_lane.centerline, route_lane.s, p)[1]) for p in samples]
            if all(0.6 * width < d < 1.5 * width for d in apart):
                return True
        return False

    # --- decisions -----------------------------------------------------------------------------------------
    def plan(self, world) -> AgentOutput:
        st, c = world.state, world.compiled
        ego_len, ego_w = float(c.actors.length[0]), float(c.actors.width[0])
        s_ego, v = float(st.route_s), float(st.speed[0])
        seen = self._seen(world)
        width = self._lane_width(world)
        reasons: list[str] = []
        self._lateral_decision(world, seen, s_ego, v, width, ego_len, ego_w, reasons)

        to_blocker, back_at = math.inf, math.inf
        if self.maneuver is not None and not self.maneuver.startswith("make_way"):
            # reach the side offset by the blocker's rear, however close it is
            b = next((o for o in seen if o.id == self.blocker), None)
            if b is not None:
                to_blocker = b.s - s_ego - (ego_len + b.length) / 2
            if self.maneuver.startswith("nudge"):  # and back into lane once our rear is past its far end
                back_at = self.pass_end - s_ego + ego_len / 2 + 0.5
        elif self.maneuver is None and abs(st.lateral) > 0.5:  # moving back in: before an oncoming car stopped for us
            to_blocker = self._room_to_pull_back(seen, s_ego, st.lateral, ego_len, ego_w)
            to_blocker = min(to_blocker, self._to_junction(world))  # and before a junction (its paths start in lane)
        lateral_ahead = partial(self._offset_profile, s_ego, st.lateral, v=v, limit=to_blocker, back_at=back_at)
        change_gap, change_reason = self._lane_change_point(world, seen, s_ego, v)
        if self._merge_hold is not None and self.maneuver is None:  # kept in our lane as the route's line moves
            lateral_ahead = partial(_in_own_lane, s_ego, *self._merge_hold)  # (a pass keeps to its lane beside)

        # longitudinal constraints (gaps are bumper to bumper along the route)
        corridor = ego_w / 2 + self._margin(width, ego_w)
        lead_gap, lead_v, lead = math.inf, 0.0, None
        clip_gap = math.inf  # stop short of the car we go around while we would still clip it
        crossing = self._crossing_junction(world)
        for o in seen:
            if o.kind == PEDESTRIAN or o.s <= s_ego:
                continue
            if o.v_along < -1.0 and crossing is not None and _junction_of(world, o.index) == crossing:
                continue  # coming across the junction we have set off into: judged clear of us there
            gap = o.s - s_ego - (ego_len + o.length) / 2
            if gap < 0.0 and o.v_along > v + PULL_AWAY:
                continue  # beside us and pulling away (a flow passing the end of our merge lane): a leader once past
            if gap < -0.5 and o.s < s_ego + ego_len / 2:  # alongside: braking cannot help, driving on does,
                if o.s < s_ego or abs(o.lat - st.lateral) > (ego_w + o.width) / 2 + 0.3:
                    continue  # unless it is a nose ahead and all but touching us (a lane that merges into ours)
            gap = max(gap, 0.0)  # (a car across our bumper, its centre ahead of it: we stay where we are)
            if o.id == self.approach:
                continue  # (the pass starts nearer; this decision is made again at every step)
            if self.maneuver and o.id == self.blocker:
                # the car we are going around: while, on our present heading, we would still clip it,
                # a point to be able to stop at (we pull out as we go, so not a lead to keep a gap to)
                # (our front reaches its rear at ``heading_to``; swinging away from it, that is what counts)
                heading_to = st.lateral + max(gap + ego_len / 2, 0.0) * math.sin(st.heading_error)
                if abs(o.lat - heading_to) < (ego_w + o.width) / 2 + 0.2:
                    clip_gap = gap
                continue
            # in the way if the path we plan (the body follows it: at each metre ahead it lies at the
            # planned offset) comes within the corridor of the actor's lateral where it stands; a slower
            # car, where we would catch it up (in the lane a route changes into, the line moves across
            # towards it meanwhile: MergerIntoSlowTraffic's flow)
            lat, r = o.lat, o.s - s_ego + np.linspace(-o.length / 2, o.length / 2, 5)
            if not o.static and 0.5 < o.v_along < v - 0.5:
                ahead = o.v_along * min(gap / (v - o.v_along), CATCH_UP_S)
                lat, r = o.lat - self._line_moves(o.s, o.s + ahead), r + ahead
            planned = lateral_ahead(np.maximum(r, 0.0))
            if np.min(np.abs(lat - planned)) >= corridor + o.width / 2 and not self._cuts_in(
                o, float(planned[2]), s_ego, v, corridor
            ):
                continue
            if o.static:
                gap -= 2.0  # stop back from a parked car: room to pull out around it
            if gap < lead_gap:
                lead_gap, lead_v, lead = gap, max(o.v_along, 0.0), o
        for o in self._merging_in_first(world, seen, s_ego, v):
            gap = max(o.s - s_ego - (ego_len + o.length) / 2, 0.0)  # (beside us: 0, brake and let it by)
            if gap < lead_gap:
                lead_gap, lead_v, lead = gap, max(o.v_along, 0.0), o
        ped_gap, ped = math.inf, None
        for o in seen:
            if o.kind != PEDESTRIAN or o.s < s_ego - 1.0:
                continue
            moving_in = (o.lat - self.offset) * o.v_lat < -0.2 * abs(o.lat - self.offset)  # towards my path
            near = abs(o.lat - self.offset) < corridor + (3.5 if moving_in else 0.8)
            if near:
                gap = o.s - s_ego - ego_len / 2 - 2.0
                if gap < ped_gap:
                    ped_gap, ped = gap, o
        stop_gap, stop_reason = self._stop_line(world)
        yield_gap, yield_reason = self._yield_point(world, seen, s_ego, v)
        if change_gap < yield_gap:
            yield_gap, yield_reason = change_gap, change_reason
        caution = self._caution(world, seen, s_ego)

        cap = route_speed_cap(world)
        # still out in the lane beside as a junction comes (its paths start in our lane) and traffic in ours
        # keeps us from moving back: wait before the junction to be back in lane behind it
        out_of_lane = self.maneuver is not None and self.maneuver.startswith("overtake") and abs(st.lateral) > 1.0
        held_out = out_of_lane and not self._own_lane_clear(seen, s_ego, v, ego_len, corridor)
        if held_out and self._lane_goes_on_beside(world, self._neighbours(world), width):
            held_out = False  # (the lane we are out in runs on beside ours through the junction: stay in it)
        if held_out:
            wait_at = self._to_junction(world) - self._ramp(0.0) - 1.0  # (room to move back in before it)
            if wait_at < yield_gap:
                yield_gap, yield_reason = max(wait_at, 0.0), "back_in_lane:"
        stops = [g for g in (ped_gap, stop_gap, yield_gap, clip_gap) if math.isfinite(g)]
        speed_cap = self.caution_speed if caution is not None else math.inf
        if self._creeping:
            speed_cap = min(speed_cap, CREEP_SPEED)
        speed_cap = min(speed_cap, self._merge_speed)
        if self.maneuver is not None and self.maneuver.startswith("make_way"):
            ev = next((o for o in seen if o.id == self.blocker and o.s < s_ego), None)
            if ev is not None:  # out of its way and slower than it, so that it goes by in the time it has
                speed_cap = min(speed_cap, max(ev.v_along - MAKE_WAY_SLOWER, MAKE_WAY_MIN_SPEED))
        passing = self.maneuver is not None and self.maneuver.startswith("nudge")
        ss, vs = speed_profile(
            c.route_s,
            cap,
            s_ego,
            v,
            (lead_gap, lead_v),
            stops,
            self.T,
            self.s0,
            speed_cap,
            max_decel=7.0,
            max_accel=PASS_ACCEL if passing else 1.5,
        )
        pts, hs = geo.interpolate(c.route_xy, c.route_s, ss)
        lat = lateral_ahead(ss - s_ego)
        normals = np.stack([-np.sin(hs), np.cos(hs)], 1)
        pts = pts + lat[:, None] * normals
        if len(lat) > 1:  # heading follows the lateral motion too
            hs = hs + np.arctan2(np.gradient(lat), np.maximum(np.gradient(ss), 1e-3))
        traj = to_ego_frame(pts, hs, float(st.x[0]), float(st.y[0]), float(st.yaw[0]))

        reasoning = self._reasoning(
            reasons, vs, v, lead, lead_gap, ped, ped_gap, stop_reason, stop_gap, yield_reason, yield_gap, caution
        )
        extras = {
            "offset": self.offset,
            "maneuver": self.maneuver,
            "lead_gap": lead_gap,
            "stop_gap": stop_gap,
            "yield_gap": yield_gap,
            "pedestrian_gap": ped_gap,
        }
        return AgentOutput(traj, reasoning, extras)

    def _merging_in_first(self, world, seen, s_ego: float, v: float) -> list[Seen]:
        """Vehicles on a lane that runs on into one of our route's lanes ahead (a junction's connectors
        that join, an on-ramp's; not where the route changes lanes, which the lane change's rules merge),
        heading our way: each is a leader to let in ahead, so that we fall in behind it: one ahead of us
        that moves (we do not race it to where the lanes join; one standing may be giving way to us:
        route 60, and Leaderboard 1.0's route 38, stood 180 s behind a car that stood for them), one
        beside or behind us if it would come alongside within ``MERGE_HORIZON_S`` (closing in along the
        route and across it) and is not behind us and slower. Where lanes join at a shallow angle they
        overlap well before the map's joining point, and a driver following its own lane sees us on its
        path only once our body is on it, too late to brake (route 24's EnterActorFlow, whose flow came
        alongside the ego as the lanes closed up)."""
        c, st = world.compiled, world.state
        ego_len, ego_w = float(c.actors.length[0]), float(c.actors.width[0])
        front = s_ego + ego_len / 2
        near = (self._joined_at > front) & (self._joined_at < front + MERGE_LOOK_M)
        ahead = {int(x) for x in self._joined_lanes[near]}
        if not ahead:
            return []
        t = np.linspace(0.0, MERGE_HORIZON_S, 9)
        out = []
        for o in seen:
            if o.kind == PEDESTRIAN or o.static or o.v_along < MERGE_HEADING * o.speed or abs(o.lat) > MERGE_BESIDE_M:
                continue
            if o.speed < MERGE_MIN_SPEED and o.s > s_ego:
                continue  # (standing short of where the lanes join: held, by the junction's rules, for us too;
                # on our path it is a leader like any other)
            if o.s - o.length / 2 <= s_ego + ego_len / 2:  # beside or behind us: if it comes alongside
                if v < MERGE_MIN_SPEED:
                    continue  # (standing, braking cannot let it by: the junction's rules hold us or let us go)
                if o.s <= s_ego and o.speed < v + 1.0:
                    continue  # (behind us and no faster: it falls in behind, braking for us once we are on its path)
                along = o.s - s_ego + (o.v_along - v) * t  # its centre from ours, as it closes in
                across = abs(o.lat - st.lateral) - np.maximum(-np.sign(o.lat - st.lateral) * o.v_lat, 0.0) * t
                beside = (np.abs(along) < (ego_len + o.length) / 2 + 1.0) & (across < (ego_w + o.width) / 2 + 0.5)
                if not beside.any():
                    continue
            p, s_o = int(st.path_id[o.index]), float(st.s[o.index])
            theirs = c.paths.lanes[p]
            k = kernels.lane_slot(c.paths.lanes, c.paths.lane_start, p, s_o)
            if theirs[k] < 0 or int(theirs[k]) in self._route_lanes:
                continue  # on our route already: a leader or a follower like any other
            if any(int(x) in ahead for x in theirs[k + 1 :] if x >= 0):
                out.append(replace(o, merging=True))
        return out

    @staticmethod
    def _cuts_in(o: Seen, planned: float, s_ego: float, v: float, corridor: float) -> bool:
        """Whether a vehicle beside our path ahead moves across into it by the time we get there (a cut-in,
        a car pulling out of a parking space: slow lateral movers one lane over, not crossing traffic)."""
        if o.static or o.v_along < -0.5 or abs(o.lat - planned) > corridor + 4.0:
            return False
        if not 0.3 < abs(o.v_lat) < 4.0 or abs(o.v_lat) < CUT_IN_MIN_SLOPE * abs(o.v_along):
            return False  # (a car on a curve or drifting in its lane beside us moves across slowly, if at all)
        then = o.lat + o.v_lat * min(max(o.s - s_ego, 0.0) / max(v, 2.0), CUT_IN_HORIZON_S)
        crosses = (o.lat - planned) * (then - planned) < 0.0
        return crosses or abs(then - planned) < corridor + o.width / 2

    @staticmethod
    def _room_to_pull_back(seen, s_ego: float, lateral: float, ego_len: float, ego_w: float) -> float:
        """Metres to the nearest vehicle standing or coming at us where we are now, beside our lane."""
        return min(
            (
                o.s - s_ego - (ego_len + o.length) / 2
                for o in seen
                if o.kind != PEDESTRIAN
                and o.s > s_ego
                and o.v_along < 0.5
                and abs(o.lat - lateral) < (ego_w + o.width) / 2 + 0.5
            ),
            default=math.inf,
        )

    @staticmethod
    def _ramp(v: float) -> float:
        """Metres over which the expert moves across: about 2.5 s, and no less than a tight low-speed swerve."""
        return max(MIN_RAMP_M, RAMP_S * v)

    def _offset_profile(
        self,
        s_ego: float,
        lateral_now: float,
        dist: np.ndarray,
        v: float,
        limit: float = math.inf,
        back_at: float = math.inf,
    ) -> np.ndarray:
        """The planned lateral offset ``dist`` metres ahead: a smooth (cosine) move from the current
        offset to the target (a manoeuvre's offset, else our lane's: ``_lane_line``, which moves across the
        line along a long lane change: the move is laid out about it, not started level) over ``_ramp``, never
        over more than ``limit`` metres (the gap to the car being passed), and from ``back_at`` on (a
        nudge's far end) the same move back into lane."""
        ramp = min(self._ramp(v), max(limit - 0.5, 2.5))
        u = np.clip(dist / ramp, 0.0, 1.0)
        if self.maneuver is not None:
            target = drift = self.offset
        else:  # our lane, which moves across the line along a long lane change: the move rides on it
            target, drift = self._lane_line(s_ego + np.asarray(dist)), self._lane_line(s_ego)
        w = 0.5 - 0.5 * np.cos(np.pi * u)
        out = lateral_now + (target - lateral_now) * w + (target - drift) * (1.0 - w)
        if math.isfinite(back_at):
            back = np.clip((dist - max(back_at, 0.0)) / self._ramp(max(v, RAMP_MIN_SPEED)), 0.0, 1.0)
            out = out * (0.5 + 0.5 * np.cos(np.pi * back))
        return out

    @staticmethod
    def _margin(lane_width: float, ego_w: float) -> float:
        """Lateral clearance counted as "in my way": 0.5 m, less on lanes too narrow for it (Town12's
        2.5 m lanes, where oncoming cars pass 0.45 m from the ego)."""
        return min(0.5, max(0.15, (lane_width - ego_w) / 2))

    def _lateral_decision(self, world, seen, s_ego, v, width, ego_len, ego_w, reasons) -> None:
        st = world.state
        self.approach = None
        nb = self._neighbours(world)
        corridor = ego_w / 2 + self._margin(width, ego_w)
        in_lane = [
            o
            for o in seen
            if o.kind != PEDESTRIAN and o.s > s_ego and abs(o.lat - self._lane_line(o.s)) < corridor + o.width / 2
        ]
        blocker = min(in_lane, key=lambda o: o.s, default=None)
        desired = world.ego_speed_limit()
        # our lane's centre (off the route's line along a long lane change), and where we were last decision
        home, since = float(self._lane_line(s_ego)), self._last_s
        self._last_s = s_ego
        if self.maneuver is not None:
            # the lane we are out in moves across the route's line as ours does (along a long lane change)
            self.offset += home - float(self._lane_line(since))
            if not self.maneuver.startswith("nudge"):  # in a lane beside: keep to its centre as it moves in
                centre = self._centre_near(world, nb, self.offset, width)  # (not away: a lane that splits off)
                self.offset = centre if abs(centre - home) < abs(self.offset - home) else self.offset
            b = next((o for o in seen if o.id == self.blocker), None)
            own_clear = self._own_lane_clear(seen, s_ego, v, ego_len, corridor)
            if self.maneuver.startswith("make_way"):  # back once the emergency vehicle is by (or gone)
                if (b is None or b.s - b.length / 2 > s_ego + ego_len / 2 + 5.0) and own_clear:
                    reasons.append("The emergency vehicle has passed; return to my lane.")
                    self._end_maneuver()
                return
            far_end = max(self.pass_end, -math.inf if b is None else b.s + b.length / 2)
            passed = far_end < s_ego - ego_len / 2 - 0.5  # our rear is past its (or the whole obstacle's) front
            if self.maneuver.startswith("overtake") and own_clear and self._to_junction(world) < self._ramp(v) + 10.0:
                reasons.append("A junction ahead; return to my lane before it.")  # (its paths start there)
                self._end_maneuver()
            elif self.maneuver.startswith("overtake") and self._back_in(world, seen, s_ego, v, corridor):
                reasons.append("Held beside my lane at a junction; the next car in it can stop for me: move back in.")
                self._end_maneuver()
            elif passed and own_clear:
                reasons.append(
                    f"Passed the {'parked car' if b is None or b.static else 'slow vehicle'}; return to my lane."
                )
                self._end_maneuver()
            elif self.maneuver.startswith("nudge") and abs(st.lateral) < 0.3:
                # not committed yet (a car half out in the oncoming lane must go on: standing there, it
                # would be in the oncoming traffic's way): abort and wait behind if the gap has closed by
                # more than the margin it was taken with (a gap judged again at every step would flicker)
                # (out in that lane as the decision counted it: as our front nears the obstacle)
                b = blocker or b
                out_at = -math.inf if b is None else b.s - b.length / 2
                if not self._oncoming_clear(
                    world, seen, s_ego, v, ego_len, ego_w, width, b, self.offset, margin=-2.0, out_at=out_at
                ):
                    self._end_maneuver()
            elif self.maneuver.startswith("overtake") and abs(st.lateral) < 0.5:
                # not begun yet (decided at a red light, say): wait again if a car has come up beside
                ahead = 30.0 if b is None else b.s - s_ego + 30.0
                if not self._lane_free(seen, s_ego, v, ego_len, width, self.offset, ahead):
                    self._end_maneuver()
            return
        if nb["junction"] is not None or self._front_in_junction(world):
            return
        if self._make_way(world, seen, s_ego, width, corridor, nb, home, reasons) or blocker is None:
            return
        gap = blocker.s - s_ego - (ego_len + blocker.length) / 2
        # (not one crossing our lane, a bicycle at a junction say: it is in the way only for now)
        crossing = abs(blocker.v_lat) > 1.0 or blocker.v_along < -0.5
        slow = blocker.static or (blocker.v_along < min(0.5 * desired, 6.0) and not crossing)
        if not slow or gap > (APPROACH_M if blocker.static else 45.0):
            return
        # a free lane our way beside: on the left, or on the side the obstacle leaves free (an accident
        # pushed to the left of a highway's left lane is passed on the right)
        besides = self._lanes_beside(world, nb, width)
        besides.sort(key=lambda side: ((side - home) * (blocker.lat - home) > 0.25, side < home))
        beside = next(
            (
                b
                for b in besides
                if abs(b - home) > 1.0 and self._lane_free(seen, s_ego, v, ego_len, width, b, gap + 30.0)
            ),
            None,
        )
        if beside is not None:
            room = self._obstacle_end(seen, blocker) - s_ego + ego_len + self._ramp(max(v, RAMP_MIN_SPEED)) + 10.0
            if gap > 45.0 or self._to_junction(world) < room:
                return  # (not yet; or a queue at a junction, or no room to be back in lane before it)
            side = "left" if beside > home else "right"
            self.maneuver, self.blocker, self.offset = f"overtake_{side}", blocker.id, beside
            reasons.append(
                f"{'Parked car' if blocker.static else 'Slow vehicle'} ahead at {gap:.0f} m in my lane; "
                f"the {side} lane is free, so change lanes to the {side} to pass it."
            )
        elif nb["opposite"] is not None and blocker.static:
            sign = self._sign_of(world, nb["opposite"])
            offset = self._nudge_offset(seen, blocker, sign, ego_w, width)
            clear = self._oncoming_clear(
                world, seen, s_ego, v, ego_len, ego_w, width, blocker, offset, out_at=blocker.s - blocker.length / 2
            )
            if not clear or self._overtaken(world, seen, s_ego, v, ego_len, width, nb["opposite"]):
                return
            side = "left" if sign > 0 else "right"
            if gap <= self._ramp(v) + 6.0:  # swing out now, not tens of metres early in the oncoming lane
                self.maneuver, self.blocker, self.offset = f"nudge_{side}", blocker.id, offset
                self.pass_end = self._obstacle_end(seen, blocker)
                reasons.append(
                    f"Parked car blocks my lane at {gap:.0f} m; the oncoming lane is clear, so nudge {side} around it."
                )
            elif gap - 3.0 > v * 0.5 + v * v / (2.0 * APPROACH_DECEL):  # (and we could still stop behind it)
                self.approach = blocker.id  # keep going: the pass starts nearer, at speed
                reasons.append(
                    f"Parked car blocks my lane {gap:.0f} m ahead; the oncoming lane will be clear, so keep going "
                    f"and pass it on the {side}."
                )

    def _make_way(self, world, seen, s_ego, width, corridor, nb, home, reasons) -> bool:
        """An emergency vehicle coming up behind us in our lane: move over to a same-direction lane beside
        that is open now (``_lane_open``: not the wider berth an overtake keeps) and let it by (the
        Leaderboard's YieldToEmergencyVehicle), early enough that it is past within its 10 s from 50 m
        behind (15 m/s faster, it comes from 120 m behind in 8 s)."""
        v = float(world.state.speed[0])
        ev = next(
            (
                o
                for o in seen
                if o.index in self._emergency_rows
                and s_ego - max(EMERGENCY_LOOK_BACK_M, EMERGENCY_LOOK_BACK_S * (o.v_along - v)) < o.s < s_ego
                and abs(o.lat - self._lane_line(o.s)) < corridor + o.width / 2
            ),
            None,
        )
        if ev is None:
            return False
        ego_len = float(world.compiled.actors.length[0])
        for beside in sorted(self._lanes_beside(world, nb, width), key=lambda side: side < home):
            if abs(beside - home) > 1.0 and self._lane_open(seen, s_ego, v, ego_len, width, beside, 30.0):
                side = "left" if beside > home else "right"
                self.maneuver, self.blocker, self.offset = f"make_way_{side}", ev.id, beside
                reasons.append(
                    f"An emergency vehicle is coming up behind me; the {side} lane is free, so change lanes to "
                    f"the {side} to let it pass."
                )
                return True
        return False

    def _sign_of(self, world, lane_id: str) -> float:
        """+1 if lane ``lane_id`` lies on our left, -1 on our right."""
        return 1.0 if self._side_of(world, lane_id) >= 0 else -1.0

    def _overtaken(self, world, seen, s_ego, v, ego_len, width, lane_id: str) -> bool:
        """Whether a vehicle coming up from behind on the side of ``lane_id`` (a car overtaking us, or one
        in a lane the map calls opposite that runs our way) would meet us as we pull out there."""
        sign = self._sign_of(world, lane_id)
        return any(
            o.kind != PEDESTRIAN and 0.5 < sign * o.lat < width + 1.5 and _comes_up_behind(o, s_ego, v, ego_len)
            for o in seen
        )

    def _own_lane_clear(self, seen, s_ego: float, v: float, ego_len: float, corridor: float) -> bool:
        """Whether our own lane (``_lane_line``) is free to move back into from beside it: nothing in it from
        4 m behind our centre to 25 m ahead, nor coming up behind us."""
        return not any(
            abs(o.lat - self._lane_line(o.s)) < corridor + o.width / 2
            and (s_ego - 4 < o.s < s_ego + 25 or _comes_up_behind(o, s_ego, v, ego_len))
            for o in seen
            if o.kind != PEDESTRIAN
        )

    def _back_in(self, world, seen, s_ego: float, v: float, corridor: float) -> bool:
        """Standing out in the lane beside ours at a junction whose paths start in ours, held there by
        traffic in our lane (a slow flow we passed, which never lets anyone in by rule): whether we can move
        back in behind the car that has just gone by, the next one being far enough back to brake for us at
        ``YIELD_DECEL`` once we are on its path (as the world's drivers and scenario_runner's flows do)."""
        if v > 0.5 or abs(world.state.lateral) < 1.0 or self._to_junction(world) > self._ramp(0.0) + 3.0:
            return False
        ego_len, ego_w = float(world.compiled.actors.length[0]), float(world.compiled.actors.width[0])
        lateral = abs(world.state.lateral)
        for o in seen:
            if o.kind == PEDESTRIAN or abs(o.lat) >= corridor + o.width / 2:
                continue
            if o.s > s_ego and o.s - o.length / 2 < s_ego + ego_len / 2 + 1.0:
                return False  # beside us still, or not a car length on
            # it drives on until our body reaches its path (it sees us there, as the world's drivers do),
            # some way into our move across from a standstill (a cosine over ``_ramp``), then brakes for us
            share = min(max((lateral - (ego_w + o.width) / 2 - 0.3) / lateral, 0.0), 1.0)
            on_its_path = self._ramp(0.0) * math.acos(1.0 - 2.0 * share) / math.pi
            speed = max(o.v_along, 0.0)
            room = _braking_room(speed, _time_to_cover(on_its_path, 0.0, ASSERT_ACCEL)) - on_its_path
            if o.s < s_ego and _behind_gap(o, s_ego, ego_len) < room:
                return False
        return True

    def _end_maneuver(self) -> None:
        self.maneuver, self.blocker, self.offset, self.pass_end = None, None, 0.0, -math.inf

    @staticmethod
    def _obstacle(seen, blocker: Seen) -> list[Seen]:
        """A standing obstacle: the blocker and whatever stands in line with it less than a car length
        beyond (an accident's three cars, a taper of cones and the board behind it)."""
        parts, end = [blocker], blocker.s + blocker.length / 2
        for o in sorted(seen, key=lambda o: o.s):
            if o.static and o.s > blocker.s and o.s - o.length / 2 < end + 6.0 and abs(o.lat - blocker.lat) < 2.5:
                parts.append(o)
                end = max(end, o.s + o.length / 2)
        return parts

    def _obstacle_end(self, seen, blocker: Seen) -> float:
        """Route arc length of the far end of the obstacle ``blocker`` belongs to."""
        return max(o.s + o.length / 2 for o in self._obstacle(seen, blocker))

    @staticmethod
    def _lane_open(seen, s_ego, v, ego_len, width, target, ahead) -> bool:
        """Whether we may move into the lane at lateral ``target`` now, as into the lane a route changes
        to: nobody in it from beside us to ``ahead`` metres ahead, nor behind and about to catch us up
        (``_comes_up_behind``: a car following at our speed some way back is no reason to wait)."""
        return not any(
            o.kind != PEDESTRIAN
            and abs(o.lat - target) < width / 2 + o.width / 2
            and (s_ego < o.s < s_ego + ahead or _comes_up_behind(o, s_ego, v, ego_len))
            for o in seen
        )

    @staticmethod
    def _lane_free(seen, s_ego, v, ego_len, width, target, ahead) -> bool:
        """Whether the lane at lateral ``target`` is free from 15 m behind us (more for a car faster than
        us: one that would catch us up within 3 s, as on a highway) to ``ahead`` metres ahead."""
        return not any(
            o.kind != PEDESTRIAN
            and abs(o.lat - target) < width / 2 + o.width / 2
            and (s_ego - 15.0 - max(o.v_along, 0) * 1.5 < o.s < s_ego + ahead or _comes_up_behind(o, s_ego, v, ego_len))
            for o in seen
        )

    def _oncoming_clear(
        self,
        world,
        seen,
        s_ego,
        v,
        ego_len,
        ego_w,
        width,
        blocker,
        offset: float,
        margin: float = 2.0,
        out_at: float = -math.inf,
    ) -> bool:
        """Whether a pass round ``blocker`` at lateral ``offset`` (through the oncoming lane on its side),
        pulling out as our front nears ``out_at`` (at once by default), ends back in lane, ``margin``
        metres to spare, before the oncoming traffic, braking for us as the world's drivers do, stands in
        our way: one that stops in front of us leaves us beside the obstacle in its lane. The oncoming
        traffic is what we see coming or standing on that side, and each flow's next vehicle
        (``agents.prediction``)."""
        if blocker is None:
            return True
        a = world.compiled.actors
        side = 1.0 if offset >= 0 else -1.0
        oncoming = [
            Oncoming(
                o.s - o.length / 2,
                max(-o.v_along, 0.0),
                max(-o.v_along, float(a.desired_speed[o.index])),
                float(a.max_accel[o.index]),
                float(a.comfort_decel[o.index]),
                float(a.time_headway[o.index]),
                float(a.min_gap[o.index]),
            )
            for o in seen
            if o.kind != PEDESTRIAN
            and not o.static
            and o.v_along < 0.5
            and o.s > s_ego
            and side * o.lat > -1.0
            and abs(o.lat) < 1.75 * width
        ]
        oncoming += next_oncoming_from_flows(world, s_ego, s_ego + SIGHT_M)
        # clear of a car in the middle of the oncoming lane once our offset is back within this share
        corridor = ego_w / 2 + self._margin(width, ego_w)
        share = min(max((width - corridor - ego_w / 2) / max(abs(offset), 0.1), 0.0), 1.0)
        ramp_part = math.acos(2.0 * share - 1.0) / math.pi  # of the cosine move back
        ego = EgoPass(
            s_ego + ego_len / 2,
            v,
            max(min(world.ego_speed_limit(), CROSS_SPEED), v),
            ego_len,
            back=ego_len + 0.5 + margin,
            out_at=out_at - OUT_MARGIN_M,
            out_lead_s=RAMP_S / 2,
            ramp_s=RAMP_S * ramp_part,
            ramp_min_speed=RAMP_MIN_SPEED,
            accel=PASS_ACCEL,
        )
        return pass_completes(ego, self._obstacle_end(seen, blocker), oncoming)

    def _nudge_offset(self, seen, blocker: Seen, sign: float, ego_w: float, width: float) -> float:
        """The lateral offset that clears the obstacle ``blocker`` belongs to on side ``sign``."""
        clear = max(sign * o.lat + o.width / 2 for o in self._obstacle(seen, blocker)) + ego_w / 2 + 0.9
        return sign * min(max(clear, 1.5), width)

    def _crossing_junction(self, world) -> str | None:
        """The map junction whose entry the expert has set off into, while it is not through it."""
        if self._crossing is None:
            return None
        c = world.compiled
        lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
        at = np.flatnonzero((np.abs(starts - self._crossing) < 1e-6) & (lanes >= 0))
        if not len(at):
            return None
        lane = c.road_map.lanes[c.lane_ids[lanes[at[-1]]]]
        through = self._crossing + lane.length < world.state.route_s - c.actors.length[0]
        return None if through else lane.junction

    def _stop_line(self, world) -> tuple[float, str | None]:
        return next_stop_line(world, self._stopped_at)

    def _yield_point(self, world, seen, s_ego, v) -> tuple[float, str | None]:
        """Stop before a junction connector whose path crosses traffic that has priority over us."""
        c = world.compiled
        lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
        front = s_ego + c.actors.length[0] / 2
        self._creeping = False
        cap_ahead = None  # the route's speed cap from us on (metres, m/s): found at the first junction met
        for k, (li, start) in enumerate(zip(lanes, starts)):
            if li < 0 or start - front > 60.0:
                break
            lane = c.road_map.lanes[c.lane_ids[li]]
            if lane.junction is None or start + lane.length < s_ego:
                continue
            rule, hold = self._entry_rule(c, start)
            held_since = self._held[1] if self._held is not None and self._held[0] == start else math.inf
            asserting = world.state.t - held_since >= ASSERT_AFTER_S
            if front > max(start, hold) + 1.0 and not asserting:
                return math.inf, None  # already in the junction (past its line, if that lies inside): commit
            turn = geo.wrap_angle(lane.heading[-1] - lane.heading[0])
            merge = lane.junction == "merge"
            # straight on with the right of way (a green light, a priority road) only a vehicle that keeps
            # no rules (one running its red, taking priority) or that the junction's rules let in all the
            # same (a turn the lights leave free) can cut across
            straight_on = not (abs(turn) > 0.5 or merge or rule in (Rule.STOP, Rule.YIELD, Rule.PRIORITY))
            run = [lane]  # the junction lanes from here to the exit: lanes may merge further in
            for nxt in lanes[k + 1 :]:
                if nxt < 0 or not c.lane_in_junction[nxt]:
                    break
                run.append(c.road_map.lanes[c.lane_ids[nxt]])
            # (at a light, cars standing at theirs are the light's business: only where the junction's
            # own rules decide, a car that stands at its line and goes before us is waited for)
            standing = rule is not None and rule != Rule.SIGNAL
            # once it has set off into this junction it keeps going unless a vehicle would hit it (judged
            # again at every step with the full margin, a gap it took would flicker shut as it moves up)
            margin = COMMITTED_MARGIN_M if self._crossing == start else CROSS_MARGIN_M
            # our queue: the route's lanes from 100 m behind us to the junction (a route that loops crosses
            # lanes it drove long before, and a car on one of those is cross traffic)
            queue = {int(x) for x, end in zip(lanes[:k], starts[1 : k + 1]) if end > front - 100.0}
            if cap_ahead is None:  # (500 m: further than any junction path we judge reaches)
                i0, i1 = np.searchsorted(c.route_s, [s_ego, s_ego + 500.0])
                window = slice(max(int(i0) - 1, 0), int(i1) + 1)
                cap_ahead = c.route_s[window] - s_ego, route_speed_cap(world)[window]
            conflict, creep_to = self._conflict(
                world, run, start - front, v, queue, standing, cap_ahead, margin, asserting, right_of_way=straight_on
            )
            self._crossing = start if conflict is None else None
            if conflict is None:
                return math.inf, None
            if v < 0.5 and held_since == math.inf:
                self._held, self._waved = (start, world.state.t), set()
            turning = "left_turn" if turn > 0.5 else "right_turn" if turn < -0.5 else "crossing"
            why = {Rule.STOP: "stop_sign", Rule.YIELD: "yield_sign"}.get(rule, "merge" if merge else turning)
            # held long by traffic that will not give way, it creeps up to the edge of that traffic's path,
            # where a gap in which the next vehicle can brake for it is soon enough (CARLA's flows brake
            # for what stands in their way; so do the world's)
            self._creeping = asserting
            stop_at = start - front + creep_to if asserting else start - front - 1.0
            return max(stop_at, 0.0), f"{why}:{conflict}"
        return math.inf, None

    def _lane_change_point(self, world, seen, s_ego, v) -> tuple[float, str | None]:
        """Wait for a lane change the route makes while the lane it moves into is taken beside us or a
        vehicle in it would catch up with us during the change (the route's line moves across over the
        lane before the new one; both lanes start where the move does). A short move is decided before
        it starts (before the junction it follows); along a long one (an acceleration lane) we keep to
        our lane, a little slower than the car in the way, up to near its end (``_merge_hold``), and
        move across into the new lane in ``_ramp`` once the gap is there (``_lane_line``)."""
        c = world.compiled
        lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
        front = s_ego + c.actors.length[0] / 2
        ego_w = float(c.actors.width[0])
        self._merge_speed, self._merge_hold = math.inf, None
        for k, first, _, side in self._changes:
            here, there = (c.road_map.lanes[c.lane_ids[lanes[x]]] for x in (k, k + 1))
            commit = _lane_change_commit(here.length, abs(side), here.width / 2 - ego_w / 2)
            long = commit >= MIN_RAMP_M and here.length > HOLD_END_M + 2.0 * MIN_RAMP_M
            start = first + here.length - HOLD_END_M if long else first + commit  # where it waits, at the latest
            if start > front - 4.0 and (self._moved is None or self._moved[0] != first):
                break
        else:
            return math.inf, None
        if (first if long else start) - front > 40.0:
            return math.inf, None
        if not long:  # decided before it starts
            if k > 0 and lanes[k - 1] >= 0 and c.lane_in_junction[lanes[k - 1]]:
                # the change starts where a junction ends: decide before the junction, never inside it
                start = float(starts[k - 1])
                if front > start + 1.0:
                    return math.inf, None
            elif c.lane_in_junction[lanes[k]]:
                return math.inf, None
        # the new lane's centre from the route's line beside us (the line has moved part of the way)
        side_now = side * (1.0 - smoothstep((s_ego - first) / here.length)) if long else side
        ego_len = float(c.actors.length[0])
        held = self._held_change is not None and self._held_change[0] == start
        # held long by a scenario's flow, which never lets anyone in, it goes in front of a flow vehicle
        # that can brake for it once it is in that vehicle's lane (as at a junction)
        asserting = held and world.state.t - self._held_change[1] >= ASSERT_AFTER_S
        flow_rows = {int(r) for f in c.flows for r in f.rows} if asserting else set()
        # the lanes we move across: the new one and any between (a route may move two lanes over along a
        # long change), as a band of lateral offsets measured from our own lane's centre towards the new one
        across, towards = abs(side), math.copysign(1.0, side)
        nearest = across / max(round(across / there.width), 1)  # the centre of the first lane crossed
        band = (nearest - there.width / 2 - 0.5, across + there.width / 2 + 0.5)
        for o in seen:
            if o.kind == PEDESTRIAN or o.static:
                continue
            # in those lanes, or (along a long change, moved across in ``RAMP_S``) coming into them meanwhile: a
            # car turning into the road behind us
            then = o.lat + o.v_lat * RAMP_S if long else o.lat
            ends = sorted(((x - side_now) * towards + across) for x in (o.lat, then))
            if ends[1] < band[0] or ends[0] > band[1]:
                continue
            pulling_away = o.v_along > v + 1.0
            if o.s - o.length / 2 > s_ego + ego_len / 2 + (1.0 if pulling_away else 5.0):
                continue  # ahead of us in that lane: a leader once we are in it
            behind = _behind_gap(o, s_ego, ego_len)
            if (behind > LANE_CHANGE_BEHIND_M and not long) or (behind > 0.0 and o.speed < 0.5):
                # (far back: waiting for a stream would leave us standing, where a long change waits driving on
                # in its lane; standing behind: waits for us)
                continue
            closing = _closing(o, v)
            if o.index in flow_rows and behind > _braking_room(closing, 0.5):
                continue
            # beside us, or closing in within 3 s and 6 m; an emergency vehicle coming up, however far back
            if behind < 6.0 + 3.0 * closing or (o.index in self._emergency_rows and o.s < s_ego):
                if v < 0.5 and not held:
                    self._held_change = (start, world.state.t)
                if long:
                    self._merge_hold = (first, here.length, side)
                    # a little slower than the car in the way: it draws ahead, and we go in behind it at
                    # about its speed (a merge from an acceleration lane, not from a stop)
                    self._merge_speed = max(o.v_along - MERGE_SLOWER, 0.0)
                return max(start - front - 1.0, 0.0), f"lane_change:{o.id}"
        if long and front > first:
            self._moved = (first, here.length, side)  # free: across now, and not called off (in ``_ramp``)
        return math.inf, None

    @staticmethod
    def _front_in_junction(world) -> bool:
        """Whether our front bumper is inside a junction (our centre may still be on the road before it)."""
        c = world.compiled
        front = np.array([world.state.route_s + c.actors.length[0] / 2])
        lane, _ = c.paths.lane_at(np.array([c.route_path]), front)
        return bool(lane[0] >= 0 and c.lane_in_junction[lane[0]])

    @staticmethod
    def _next_junction_lane(world) -> int | None:
        """Slot in the route's lane list of the junction lane the route next enters, ahead of our front."""
        c = world.compiled
        lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
        front = world.state.route_s + c.actors.length[0] / 2
        ahead = np.flatnonzero((lanes >= 0) & c.lane_in_junction[np.maximum(lanes, 0)] & (starts > front))
        return int(ahead[0]) if len(ahead) else None

    @classmethod
    def _to_junction(cls, world) -> float:
        """Metres from our front to where the route next enters a junction (inf: none ahead)."""
        c, k = world.compiled, cls._next_junction_lane(world)
        front = world.state.route_s + c.actors.length[0] / 2
        return math.inf if k is None else float(c.paths.lane_start[c.route_path, k] - front)

    @staticmethod
    def _entry_rule(c, start: float) -> tuple[Rule | None, float]:
        """The rule of the route's junction entry at arc length ``start`` and where its line is (None
        and ``start``: not an entry)."""
        j = c.junctions
        at = np.flatnonzero(np.abs(j.entry_s[c.route_path] - start) < 1e-6)
        if not len(at):
            return None, start
        return Rule(int(j.entry_rule[c.route_path, at[0]])), float(j.entry_hold[c.route_path, at[0]])

    def _conflict(
        self,
        world,
        run,
        dist,
        v,
        queue: set[int],
        standing: bool,
        cap_ahead: tuple[np.ndarray, np.ndarray],
        margin: float = CROSS_MARGIN_M,
        asserting: bool = False,
        right_of_way: bool = False,
    ) -> tuple[str | None, float]:
        """Id of a vehicle that would reach our path through the junction (its lanes ``run``, which start
        ``dist`` metres ahead of our front) while we are on it, if any; vehicles on our own lanes before
        the junction (``queue``) are our queue; with ``standing``, cars standing first at their line that
        go before us count as setting off; ``cap_ahead`` is the route's speed cap (metres from us, m/s),
        which we slow to on the way (``_capped_progress``); ``margin`` metres of the path are kept clear
        ahead of and behind us (bodies, not centres: ``_body_reach``). A vehicle that gets into our lane
        before us is a leader (``_leads_us``), one that would run up behind us as we come out a conflict
        (``_on_our_heels``). With ``asserting``, a vehicle that lets us through (``_gives_way``) is no
        conflict, and the second value is how far along the path to creep while we wait (inf: no limit
        from them). With ``right_of_way`` (straight on at a green light or on a road with priority), a
        vehicle that keeps the lights and not the junction's rules (a flow) stops at its red and is no
        conflict."""
        st, c = world.state, world.compiled
        a = c.actors
        path = np.concatenate([lane.centerline for lane in run])
        along = geo.arc_lengths(path)
        heading = _tangents(path)
        length = float(along[-1])
        # where we will be: from our speed, accelerating at CROSS_ACCEL up to CROSS_SPEED and slowing where
        # the route's cap does (arc length on the junction path, from -dist); a vehicle conflicts if it
        # comes near the stretch of the path we occupy (our length and a margin either side) at the same
        # time, not anywhere on it at any time
        ego_len = float(a.length[0])
        through = max(dist + length + ego_len + 2.0, 0.5)
        covered, times = _capped_progress(v, through + 1.5 * max(v, CROSS_SPEED) + 1.0, *cap_ahead)
        t_clear = float(np.interp(through, covered, times)) + (1.5 if v < 1.0 else 0.5)
        taus = np.arange(0.0, t_clear + 0.01, 0.25)  # (a car at 17 m/s moves 4 m a step: its body's length)
        ours = np.interp(taus, times, covered) - dist
        lo = np.maximum(ours - ego_len - margin, 0.0)
        hi = np.minimum(ours + margin + 2.0, length)
        occupied = (along[None, :] >= lo[:, None]) & (along[None, :] <= hi[:, None]) & (hi >= lo)[:, None]
        sig = None
        first, creep_to, waved = None, math.inf, set()
        if v < 0.5:  # standing (stopped again by a car crossing in front, say): who lets us through is judged anew
            self._waved = set()
        for j in c.idx_path:
            if not st.active[j] or (right_of_way and a.reacts_to_signals[j] and not a.yields_at_junctions[j]):
                continue
            lane_j = _lane_of(world, j)
            if lane_j in queue:
                continue
            if np.hypot(st.x[j] - path[0, 0], st.y[j] - path[0, 1]) > max(90.0, st.speed[j] * t_clear + 30.0):
                continue  # too far to reach our path while we are on it (fast roads reach further)
            to_exit = _to_our_exit(world, j, path[-1])  # (nan: it does not end up in our lane)
            if not math.isnan(to_exit) and _leads_us(world, j, path, along, heading, float(ours[0]), to_exit):
                continue  # it gets into our lane before us: a leader to follow
            if st.speed[j] < 0.5:  # standing: a car first at its junction line that goes before us, counted as
                # setting off now (what else holds it, a car crossing in front of it, may clear at any moment)
                if not standing:
                    continue
                if sig is None:
                    sig = world.signal_states()
                if not self._first_at_junction(c, st, j) or not traffic.sets_off(c, st, j, sig, others=False):
                    continue
                ahead = _distance_covered(taus, 0.0, float(a.max_accel[j]), float(c.lane_speed_limit[lane_j]))
            elif a.yields_at_junctions[j] and not traffic.may_enter_junction(c, st, j):
                continue  # it keeps the junction's rules and they hold it (for us, or for someone else)
            else:
                ahead = st.speed[j] * taus
            pid = np.full(len(taus), st.path_id[j])
            px, py, pyaw = c.paths.pose(pid, st.s[j] + ahead)
            d = np.hypot(px[:, None] - path[None, :, 0], py[:, None] - path[None, :, 1])
            near = d < _body_reach(world, j, pyaw, heading)
            heels = not math.isnan(to_exit) and _on_our_heels(world, j, to_exit, ours - length, ahead, taus, v)
            if not (occupied & near).any() and not heels:
                continue
            if not asserting:  # the first conflict decides: the rest of the traffic need not be looked at
                return a.ids[j], math.inf
            theirs = _TheirPath.of(world, j, path, along, heading, taus, ahead)
            if a.ids[j] in self._waved or self._gives_way(world, j, theirs, v, dist, float(ours[-1])):
                waved.add(a.ids[j])
                continue
            creep_to = min(creep_to, theirs.edge - CREEP_STANDOFF_M)  # (its plan stops ~1 m short of that)
            first = first or a.ids[j]
        # once we set off, those braking for us are counted on until we are through or stop again (a flow's
        # rows are used again by later vehicles: nothing is remembered past a stop)
        self._waved = self._waved | waved if first is None else set()
        return first, creep_to

    @staticmethod
    def _gives_way(world, j: int, theirs: _TheirPath, v: float, dist: float, furthest: float) -> bool:
        """Whether vehicle ``j``, in the way of a junction crossing we assert ourselves at (our front
        ``dist`` metres before our junction path at speed ``v``; ``furthest``: how far along it we get in
        the time we plan for), lets us through: a vehicle of a scenario's flow (they never give way by
        rule) that sees us on its path early enough to stop short of us braking at ``YIELD_DECEL`` (the
        world's traffic brakes for an ego on its path ahead, as scenario_runner's flows do), or one that
        stands and keeps the junction's rules while we are inside it (they hold it for us)."""
        st, c = world.state, world.compiled
        if not any(j in f.rows for f in c.flows):
            return dist < 0.0 and st.speed[j] < 0.5 and bool(c.actors.yields_at_junctions[j])
        if theirs.edge == math.inf:
            return True  # its path passes beside ours, clear of both bodies: it need not brake
        if furthest < theirs.edge:
            return False
        t_seen = _time_to_cover(max(theirs.edge + dist, 0.0), v, ASSERT_ACCEL)
        travelled = float(np.interp(t_seen, theirs.times, theirs.ahead))  # until it sees us
        speed = float(st.speed[j])
        if speed < 0.5:  # standing: it stays if it sees us before it has rolled 2 m, at walking pace
            return travelled < 2.0
        room = theirs.meet - travelled - c.actors.length[j] / 2 - c.actors.width[0] / 2 - 1.0
        return room >= speed * speed / (2.0 * YIELD_DECEL)

    @staticmethod
    def _first_at_junction(c, st, j: int) -> bool:
        """Whether vehicle j stands at the line of the junction it enters next (the first of its queue)."""
        rules, p = c.junctions, st.path_id[j]
        front = st.s[j] + c.actors.length[j] / 2
        k = rules.next_entry(p, front)
        return k >= 0 and max(rules.entry_s[p, k], rules.entry_hold[p, k]) - front < kernels.ARRIVE_M

    def _caution(self, world, seen, s_ego) -> str | None:
        """Slow down next to parked cars that could hide a pedestrian, cars waiting to pull out in front of
        us (StaticCutIn's queue, ParkingCutIn: privileged knowledge, as the rest of the world state), and
        near crossing walkers."""
        reach = max(30.0, 3.0 * float(world.state.speed[0]))  # (from speed: in time to slow down)
        for o in seen:
            if (
                (o.static or o.pulls_out)
                and o.kind != PEDESTRIAN
                and 0 < o.s - s_ego < reach
                and 1.5 < abs(o.lat - self.offset) < 6.0
            ):
                if o.s <= self.pass_end + 1.0:  # what we are passing: the less time in the oncoming lane the better
                    continue
                return "occlusion"
            if o.kind == PEDESTRIAN and 0 < o.s - s_ego < 35.0 and abs(o.lat - self.offset) < 8.0:
                return "pedestrian_near"
        return None

    # --- Chain-of-Causation text ---------------------------------------------------------------------------
    @staticmethod
    def _reasoning(
        reasons, vs, v, lead, lead_gap, ped, ped_gap, stop_reason, stop_gap, yield_reason, yield_gap, caution
    ) -> str:
        parts = list(reasons)
        v_end = vs[min(19, len(vs) - 1)]
        binding = min(
            (g, n) for g, n in ((lead_gap, "lead"), (ped_gap, "ped"), (stop_gap, "stop"), (yield_gap, "yield"))
        )
        if binding[1] == "ped" and math.isfinite(ped_gap) and ped_gap < 40:
            parts.append(
                f"Pedestrian crossing ahead at {max(ped_gap, 0):.0f} m, so slow down and stop to let them cross."
            )
        elif binding[1] == "stop" and math.isfinite(stop_gap) and stop_gap < 60:
            what = {"red": "Red light", "yellow": "Yellow light", "stop_sign": "Stop sign"}[stop_reason]
            parts.append(f"{what} ahead at {max(stop_gap, 0):.0f} m, so decelerate to stop at the stop line.")
        elif binding[1] == "yield" and math.isfinite(yield_gap):
            why, _ = yield_reason.split(":")
            text = {
                "left_turn": "Oncoming traffic crosses my left turn",
                "stop_sign": "Cross traffic has priority after the stop sign",
                "yield_sign": "Cross traffic has priority at the yield sign",
                "crossing": "Cross traffic reaches the junction first",
                "right_turn": "Traffic in the lane I turn into",
                "lane_change": "Traffic in the lane I change into",
                "merge": "Traffic in the lane I merge into",
                "back_in_lane": "Out in the next lane with traffic beside me in my own at a junction",
            }[why]
            then = {
                "lane_change": "wait for a gap",
                "back_in_lane": "wait before the junction to get back into my lane",
            }.get(why, "yield before entering the junction")
            parts.append(f"{text}, so slow down and {then}.")
        elif lead is not None and lead_gap < 40 and lead.merging:
            parts.append("A vehicle whose lane runs into mine gets there first, so slow down and let it in ahead.")
        elif lead is not None and lead_gap < 40 and lead.static:
            parts.append(
                f"Parked car blocks my lane {max(lead_gap, 0):.0f} m ahead and I cannot pass yet, so slow "
                "down and stop behind it."
            )
        elif lead is not None and lead_gap < 40:
            if v_end < v - 1.0:
                parts.append(
                    f"Lead vehicle {lead_gap:.0f} m ahead at {lead.v_along:.0f} m/s, so slow down to keep a safe gap."
                )
            else:
                parts.append(f"Lead vehicle {lead_gap:.0f} m ahead, so keep a safe following distance.")
        elif caution == "occlusion":
            parts.append("Parked cars beside my lane could hide a pedestrian, so slow down.")
        elif v_end > v + 1.0:
            parts.append("The road ahead is clear, so accelerate to the speed limit.")
        elif v_end < v - 1.0:
            parts.append("A curve or lower speed limit ahead, so decelerate.")
        else:
            parts.append("The road ahead is clear, so keep the current speed in my lane.")
        return " ".join(parts)
