"""The embedded world: one scenario stepped at 10 Hz, with an event log.

``World.step(accel, steer)`` advances every actor by ``DT``: traffic accelerations are computed
from the state at the start of the step (synchronous update), then the ego's kinematic bicycle,
traffic, walkers and replays move, then events are detected on the new state. The world never
sees an agent or a reward: the controller turns plans into (accel, steer) above it, rewards read
its transitions from outside.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs.episode_rules import MinSpeedBook, RouteBook, StopLine, collision_event, is_wrong_way, pass_stop_lines
from envs.world import kernels, traffic
from envs.world.compile import ONCOMING_BEYOND, SPAWN_SPACING, CompiledScenario, compile_scenario
from envs.world.lanegrid import JUNCTION, NONE
from envs.world.state import ACTIVE, BRAKING, DONE, RED, WAITING, Behaviour, Kind, Mode, Motion, WorldState
from rewards.events import Event, EventKind
from rewards.transition import EgoState
from scenarios.schema import Scenario

DT = 0.1
WHEELBASE = 2.85
# AlpaSim's controller limits (REFERENCE.md section 2)
ACCEL_LIMITS = (-8.0, 6.0)
MAX_STEER = math.radians(45.0)
MAX_STEER_RATE = 1.2  # rad/s at the road wheels
MAX_SPEED = 35.0
BACKGROUND_EVERY = 10  # steps between background-traffic spawn / despawn passes (1 s)
BRAKE_LIGHT_DECEL = 0.5  # m/s^2: a car slowing faster than rolling and engine drag alone has its brakes on
EMERGENCY_NEAR_M = 50.0  # an emergency vehicle's time (its window's duration_s) starts this close to the ego
_KIND_NAMES = {Kind.VEHICLE: "vehicle", Kind.PEDESTRIAN: "pedestrian", Kind.CYCLIST: "vehicle", Kind.STATIC: "static"}


class World:
    def __init__(self, scenario: Scenario, seed: int = 0, compiled: CompiledScenario | None = None) -> None:
        self.compiled = compiled if compiled is not None else compile_scenario(scenario)
        self.scenario = scenario
        self.log: list[Event] = []
        a = self.compiled.actors
        self._has_trigger = np.isfinite(a.trigger_time) | (a.trigger_distance > 0)
        walking_pools = [pool.rows for pool in self.compiled.background if pool.walking]
        self._background_walkers = np.concatenate(walking_pools) if walking_pools else np.zeros(0, int)
        driving_pools = [pool.rows for pool in self.compiled.background if not pool.walking]
        self._background_vehicles = np.concatenate(driving_pools) if driving_pools else np.zeros(0, int)
        self._hold_at = np.array([h.at for h in self.compiled.signal_holds])
        self.reset(seed)

    # --- lifecycle ----------------------------------------------------------------------------------------
    def reset(self, seed: int = 0) -> None:
        c, init = self.compiled, self.compiled.init
        n = c.actors.n
        self.state = WorldState(
            t=0.0,
            step=0,
            x=init["x"].copy(),
            y=init["y"].copy(),
            yaw=init["yaw"].copy(),
            speed=init["speed"].copy(),
            accel=np.zeros(n),
            active=init["active"].copy(),
            path_id=init["path_id"].copy(),
            s=init["s"].copy(),
            d=init["d"].copy(),
            mode=np.zeros(n, np.int8),
            mode_t=np.zeros(n),
            lc_d0=np.zeros(n),
            z=np.zeros(n),
            stopped_at=np.full(n, -np.inf),
            stopped_t=np.zeros(n),
            route_s=c.route_start,
            progress=c.route_start,
            in_contact=np.zeros(n, bool),
            stop_done=np.zeros(len(c.route_stop_s), bool),
            route=RouteBook.for_route(c.goal_distance, c.leaderboard_rules),
            rng=np.random.default_rng(seed),
            pending_triggers=int(self._has_trigger[1:].sum()),
            flow_last=np.full(len(c.flows), -1),
            flow_gap=np.zeros(len(c.flows)),
            window_t0=np.full(len(c.windows), np.nan),
            window_over=np.zeros(len(c.windows), bool),
            gone=np.zeros(n, bool),
            flow_gone=np.zeros(len(c.flows), bool),
            min_speed=MinSpeedBook(c.goal_distance) if c.leaderboard_rules else None,
            hold_t0=np.full(len(c.signal_holds), np.nan),
        )
        self.state.x[c.appear_order] = self.state.y[c.appear_order] = 1e6  # (placed when they appear)
        self.log = []
        if c.background:
            self._manage_background(start=True)
        if c.levels:
            self._update_heights()
        self.state.offroad, _ = self._update_route(full=True)

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to branch: state (with RNG) and the event log so far (events are immutable)."""
        return {"state": self.state.copy(), "log": list(self.log)}

    def restore(self, snap: dict[str, Any]) -> None:
        self.state = snap["state"].copy()
        self.log = list(snap["log"])

    def movable(self, actor_id: str) -> bool:
        """Whether :meth:`move_along` can move this actor: a lane-following or a static one, now placed."""
        c, st = self.compiled, self.state
        if actor_id not in c.actors.ids:
            return False
        row = c.actors.index(actor_id)
        motion = c.actors.motion[row]
        return bool(motion == Motion.STATIC or (motion == Motion.PATH and st.path_id[row] >= 0))

    def move_along(self, actor_id: str, metres: float) -> None:
        """Move an actor ``metres`` forward now (negative: back), keeping its speed and manoeuvre: a
        lane-following one along its lane (at its lateral offset), a static one along its heading. For a
        branch off a snapshot with the car ahead nearer (``collect``'s ``closer_lead``); the ego, walkers
        and replays are refused."""
        if not self.movable(actor_id):
            raise ValueError(f"scenario {self.scenario.id!r}: actor {actor_id!r} is not a lane-following or static one")
        c, st = self.compiled, self.state
        row = c.actors.index(actor_id)
        if c.actors.motion[row] == Motion.STATIC:
            st.x[row] += metres * math.cos(st.yaw[row])
            st.y[row] += metres * math.sin(st.yaw[row])
            return
        rows, path = np.array([row]), st.path_id[row : row + 1]
        st.s[row] = float(np.clip(st.s[row] + metres, 0.0, c.paths.length[path[0]]))
        st.x[rows], st.y[rows], st.yaw[rows] = c.paths.pose(path, st.s[rows], st.d[rows])
        if c.levels:
            st.z[rows] = c.paths.height(path, st.s[rows])

    def shift_ego(self, lateral_m: float, heading_rad: float) -> bool:
        """Move the ego ``lateral_m`` to its left now (negative: right) and turn it ``heading_rad``
        (counter-clockwise), keeping its speed, and project it on its route again. For a branch off a
        snapshot with the ego off its lane's centre (``collect``'s ``offset_ego``: recovery data, as in
        DART). Returns whether the moved ego is clear: on the road and touching nothing."""
        st, c = self.state, self.compiled
        yaw = float(st.yaw[0])
        st.x[0] -= lateral_m * math.sin(yaw)
        st.y[0] += lateral_m * math.cos(yaw)
        st.yaw[0] = yaw + heading_rad
        if c.levels:
            self._update_heights()
        offroad, contact = self._update_route()
        st.offroad = offroad
        return not offroad and not contact.any()

    # --- queries --------------------------------------------------------------------------------------------
    @property
    def t(self) -> float:
        return self.state.t

    @property
    def route_progress(self) -> float:
        """Metres of route covered since the start (monotone)."""
        return self.state.progress - self.compiled.route_start

    @property
    def route_completion(self) -> float:
        return min(max(self.route_progress / max(self.compiled.goal_distance, 1e-6), 0.0), 1.0)

    def ego_record(self) -> EgoState:
        """The ego's state as reward terms and metrics see it (see ``rewards.EgoState``)."""
        st = self.state
        ttc, gap = kernels.ego_threat(self.actor_boxes(), 0.3)
        pose = (float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0]))
        motion = (float(st.accel[0]), st.yaw_rate, st.steer)
        route = (self.route_progress, self.route_completion, st.lateral, st.heading_error, st.speed_limit)
        flags = (st.offroad, st.route.wrong_way, st.route.off_route_lanes)
        return EgoState(st.t, *pose, *motion, *route, *flags, ttc, gap, self.stop_ahead())

    def stop_ahead(self) -> float:
        """Metres from the front bumper to the next stop line the ego must stop at: a red light, or a
        stop sign it has not stopped at yet (inf if none)."""
        st, c = self.state, self.compiled
        if not c.route_stops:
            return math.inf
        front = st.route_s + c.actors.length[0] / 2
        sig = None
        for k, (line, sg) in enumerate(c.route_stops):
            if line - front < -0.5:
                continue
            if sg < 0:
                if not st.stop_done[k]:
                    return line - front
                continue
            if sig is None:
                sig = self.signal_states()
            if sig[sg] == RED:
                return line - front
        return math.inf

    def signal_states(self) -> np.ndarray:
        """Every signal's state now: its program's, unless a signal hold the ego has set off runs it."""
        st, c = self.state, self.compiled
        states = c.signal_states(st.t)
        if not len(c.signal_holds):
            return states
        live = [k for k, h in enumerate(c.signal_holds) if st.hold_t0[k] <= st.t and st.progress < h.until]
        if live:
            states = states.copy()
            for k in live:
                elapsed = st.t - st.hold_t0[k]
                for sg, ends, held in c.signal_holds[k].signals:
                    phase = int(np.searchsorted(ends, elapsed, side="right"))
                    if phase < len(held):
                        states[sg] = held[phase]
        return states

    def ego_speed_limit(self) -> float:
        return self.state.speed_limit

    def brake_lights(self) -> np.ndarray:
        """Which actors' brake lights are lit [N] bool: the lane-following cars that slow down, or stand in
        traffic (a driver holds the brake in a queue or at a red light). A parked car, a walker, a cyclist
        and a replayed track (no acceleration is integrated for it) show none; nor does the ego."""
        st, a = self.state, self.compiled.actors
        driving = (a.kind == int(Kind.VEHICLE)) & (a.motion == int(Motion.PATH)) & st.active
        driving &= ~(a.parked & (st.mode == WAITING))
        return driving & ((st.accel < -BRAKE_LIGHT_DECEL) | (st.speed < 0.1))

    def actor_boxes(self) -> kernels.Boxes:
        """Every actor's box and motion (inactive ones too), as the compiled kernels read them."""
        st, a = self.state, self.compiled.actors
        return kernels.Boxes(st.x, st.y, st.yaw, st.speed, st.active, a.length, a.width, st.z)

    def boxes(self) -> dict[str, np.ndarray]:
        """Active actors as boxes (ego first): x, y, yaw, length, width, height, kind, index."""
        st, a = self.state, self.compiled.actors
        m = st.active
        return {
            "x": st.x[m],
            "y": st.y[m],
            "yaw": st.yaw[m],
            "length": a.length[m],
            "width": a.width[m],
            "height": a.height[m],
            "kind": a.kind[m],
            "index": np.flatnonzero(m),
        }

    # --- stepping -------------------------------------------------------------------------------------------
    def step(self, accel: float, steer: float) -> list[Event]:
        """Advance DT seconds with the ego's (accel m/s^2, front-wheel steer rad); returns new events."""
        if not (math.isfinite(accel) and math.isfinite(steer)):
            raise ValueError(f"ego control must be finite, got accel={accel}, steer={steer}")
        st, c = self.state, self.compiled
        if len(c.signal_holds):
            due = np.isnan(st.hold_t0) & (self._hold_at <= st.progress)
            st.hold_t0[due] = st.t
        sig = self.signal_states()
        if st.appeared < len(c.appear_s) or st.left < len(c.leave_s):
            self._appear_and_leave()
        if c.flows:
            self._run_flows()
        if st.brakes_done < len(c.front_brakes):
            self._front_brakes()
        self._fire_triggers()
        if len(c.idx_timed):
            self._remove_timed()
        rows = c.idx_path[st.active[c.idx_path]]
        if len(rows):  # accelerations from the state at the start of the step, for everyone
            acc = traffic.traffic_accel(c, st, rows, sig)
        self._move_ego(accel, steer)
        if len(rows):
            self._move_path_actors(rows, acc)
        self._move_walkers()
        self._move_replays(st.t + DT)
        if c.background and st.step % BACKGROUND_EVERY == 0:
            self._manage_background()
        if c.levels:
            self._update_heights()
        st.t = round(st.t + DT, 10)
        st.step += 1
        return self._events(sig)

    def _move_ego(self, accel: float, steer: float) -> None:
        st = self.state
        st.steer, st.yaw_rate, moved = kernels.ego_bicycle(
            st.x,
            st.y,
            st.yaw,
            st.speed,
            st.accel,
            st.steer,
            accel,
            steer,
            DT,
            ACCEL_LIMITS[0],
            ACCEL_LIMITS[1],
            MAX_STEER,
            MAX_STEER_RATE,
            MAX_SPEED,
            WHEELBASE,
        )
        st.distance += moved

    def _appear_and_leave(self) -> None:
        """Scenario actors tied to the ego's route progress: each appears where it was placed when the
        ego reaches its ``appear_at``, and leaves at its ``leave_at``."""
        st, c, init = self.state, self.compiled, self.compiled.init
        while st.appeared < len(c.appear_s) and c.appear_s[st.appeared] <= st.progress:
            i = int(c.appear_order[st.appeared])
            if st.gone[i]:  # (its scenario timed out before it appeared)
                st.appeared += 1
                continue
            for key in ("x", "y", "yaw", "speed", "s", "d", "path_id"):
                getattr(st, key)[i] = init[key][i]
            st.mode[i], st.accel[i], st.active[i], st.in_contact[i] = 0, 0.0, True, False
            st.appeared += 1
        while st.left < len(c.leave_s) and c.leave_s[st.left] <= st.progress:
            i = int(c.leave_order[st.left])
            st.active[i], st.x[i], st.y[i], st.speed[i] = False, 1e6, 1e6, 0.0
            st.left += 1

    def _run_flows(self) -> None:
        """Actor flows: while the ego is in a flow's stretch of route, a vehicle enters at the source
        whenever the newest one is its gap down the path; vehicles past the sink (or all of them, once the
        ego has left the stretch) leave."""
        st = self.state
        for k, flow in enumerate(self.compiled.flows):
            rows = flow.rows
            live = flow.appear_at <= st.progress < flow.leave_at and not st.flow_gone[k]
            on = st.active[rows]
            if on.any():
                out = rows[on & (st.s[rows] >= flow.end_s)] if live else rows[on]
                st.active[out], st.x[out], st.y[out], st.speed[out] = False, 1e6, 1e6, 0.0
            if not live:
                continue
            last = int(st.flow_last[k])
            if last >= 0 and st.active[last] and st.s[last] - flow.s < st.flow_gap[k]:
                continue
            free = rows[~st.active[rows]]
            if not len(free):
                continue
            r = int(free[0])
            pose = self.compiled.paths.pose(np.array([flow.path]), np.array([flow.s]), np.array([flow.lateral]))
            a = self.compiled.actors
            if math.hypot(pose[0][0] - st.x[0], pose[1][0] - st.y[0]) < (a.length[0] + a.length[r]) / 2 + 1.0:
                continue  # the ego stands on the source: a spawn there would fail (CARLA's does); next step
            st.path_id[r], st.s[r], st.d[r], st.speed[r], st.accel[r] = flow.path, flow.s, flow.lateral, flow.speed, 0.0
            st.mode[r], st.active[r], st.in_contact[r], st.stopped_at[r] = 0, True, False, -np.inf
            st.x[r], st.y[r], st.yaw[r] = pose[0][0], pose[1][0], pose[2][0]
            st.flow_last[k], st.flow_gap[k] = r, st.rng.uniform(*flow.gap)

    def _front_brakes(self) -> None:
        """Front-brake events due: the lane followers ahead of the ego on its route brake to a stop."""
        st, c = self.state, self.compiled
        while st.brakes_done < len(c.front_brakes) and c.front_brakes[st.brakes_done][0] <= st.progress:
            ahead = c.front_brakes[st.brakes_done][1]
            cruising = (st.mode[c.idx_path] == WAITING) | (st.mode[c.idx_path] == DONE)
            rows = c.idx_path[st.active[c.idx_path] & cruising]
            near = rows[np.hypot(st.x[rows] - st.x[0], st.y[rows] - st.y[0]) < ahead + 10.0]
            for i in near:
                s_on, d_on = c.paths.project(c.route_path, np.array([st.x[i], st.y[i]]))
                if 0.0 < s_on - st.route_s <= ahead and abs(d_on) < 1.5:
                    st.mode[i], st.mode_t[i] = BRAKING, st.t
            st.brakes_done += 1

    def _remove_timed(self) -> None:
        """Static actors whose time is up since their trigger fired leave the road."""
        st, c = self.state, self.compiled
        rows = c.idx_timed
        due = rows[(st.mode[rows] == ACTIVE) & (st.t - st.mode_t[rows] >= c.actors.brake_hold[rows])]
        st.active[due], st.x[due], st.y[due], st.mode[due] = False, 1e6, 1e6, DONE

    def _fire_triggers(self) -> None:
        st, a = self.state, self.compiled.actors
        if not st.pending_triggers:
            return
        due = kernels.due_triggers(
            st.mode, st.active, self._has_trigger, a.trigger_time, a.trigger_distance, st.x, st.y, st.t
        )
        for i in due:
            beh = a.behaviour[i]
            if beh == Behaviour.HARD_BRAKE:
                st.mode[i], st.mode_t[i] = Mode.BRAKING, st.t
            elif beh in (Behaviour.WALK, Behaviour.STATIC):
                st.mode[i], st.mode_t[i] = Mode.ACTIVE, st.t
            elif beh == Behaviour.LANE_CHANGE:
                target = int(a.lc_target_path[i])
                s_new, d_new = self.compiled.paths.project(target, np.array([st.x[i], st.y[i]]))
                st.path_id[i], st.s[i], st.d[i], st.lc_d0[i] = target, s_new, d_new, d_new
                st.mode[i], st.mode_t[i] = Mode.ACTIVE, st.t
            st.pending_triggers -= 1
            self.log.append(Event(EventKind.TRIGGER, st.t, actor=a.ids[i]))

    def _move_path_actors(self, rows: np.ndarray, acc: np.ndarray) -> None:
        st, a, p = self.state, self.compiled.actors, self.compiled.paths
        kernels.advance_path_actors(
            rows,
            acc,
            st.t,
            DT,
            st.mode,
            st.mode_t,
            st.speed,
            st.accel,
            st.s,
            st.d,
            st.lc_d0,
            a.brake_decel,
            a.brake_hold,
            a.lc_duration,
            a.parked,
            st.active,
            st.path_id,
            st.x,
            st.y,
            st.yaw,
            p.xy,
            p.s,
            p.heading,
            p.n_points,
        )

    def _manage_background(self, start: bool = False) -> None:
        """Keep each background pool at its density (actors per 100 m of its lanes within the radius of
        the ego): despawn those beyond the radius, spawn the shortfall at free spawn points (the outer
        half of the radius once driving, so they appear at a distance; anywhere at the start), drawn
        with the world's RNG."""
        st, c = self.state, self.compiled
        radius = c.background_radius
        ex, ey = float(st.x[0]), float(st.y[0])
        for pool in c.background:
            rows = pool.rows
            dist = np.hypot(st.x[rows] - ex, st.y[rows] - ey)
            gone = st.active[rows] & (dist > radius + 20.0)
            if pool.walking:  # a walker at the end of its way has left the road (onto the kerb)
                gone |= st.active[rows] & (st.mode[rows] == DONE)
            if gone.any():
                out = rows[gone]
                st.active[out], st.x[out], st.y[out], st.speed[out] = False, 1e6, 1e6, 0.0
            d = np.hypot(pool.xy[:, 0] - ex, pool.xy[:, 1] - ey)
            around = d < radius
            wanted = min(len(rows), int(round(pool.density / 100.0 * around.sum() * SPAWN_SPACING)))
            have = int((st.active[rows] & (dist < radius)).sum())
            free = rows[~st.active[rows]]
            n = min(wanted - have, len(free))
            if n > 0:
                options = np.flatnonzero(around & (d > (15.0 if start else 0.5 * radius)))
                self._spawn(pool, free[:n], options[st.rng.permutation(len(options))])
        if c.clear_background:
            self._clear_background()

    def _clear_background(self) -> None:
        """Background vehicles leave the stretches that live ``ClearBackground`` zones keep clear: the
        route's lane ahead of the ego, for some the lanes beside it running the other way, and the lanes
        a zone names."""
        st, c = self.state, self.compiled
        live = [z for z in c.clear_background if z.appear_at <= st.progress < z.leave_at]
        if not live:
            return
        rows = self._background_vehicles[st.active[self._background_vehicles]]
        lanes = frozenset().union(*(z.lanes for z in live))
        if lanes:  # named lanes (a junction, a flow's entry), wherever the vehicle is
            p_lanes, p_start = c.paths.lanes, c.paths.lane_start
            on = np.array(
                [
                    p_lanes[st.path_id[i], kernels.lane_slot(p_lanes, p_start, st.path_id[i], st.s[i])] in lanes
                    for i in rows
                ],
                bool,
            )
            gone = rows[on]
            st.active[gone], st.x[gone], st.y[gone], st.speed[gone] = False, 1e6, 1e6, 0.0
            rows = rows[~on]
        reach = max(z.ahead_to + (ONCOMING_BEYOND if z.oncoming else 0.0) for z in live) - st.route_s + 20.0
        rows = rows[np.hypot(st.x[rows] - st.x[0], st.y[rows] - st.y[0]) < reach]
        for i in rows:
            s_on, d_on = c.paths.project(c.route_path, np.array([st.x[i], st.y[i]]))
            route_yaw = c.paths.pose(np.array([c.route_path]), np.array([s_on]))[2][0]
            along = math.cos(st.yaw[i] - route_yaw)
            for z in live:
                ahead = along > 0.5 and abs(d_on) < 1.5 and st.route_s < s_on <= z.ahead_to
                oncoming = z.oncoming and along < -0.5 and st.route_s - 10.0 < s_on <= z.ahead_to + ONCOMING_BEYOND
                if ahead or (oncoming and abs(d_on) < 8.0):
                    st.active[i], st.x[i], st.y[i], st.speed[i] = False, 1e6, 1e6, 0.0
                    break

    def _spawn(self, pool, rows: np.ndarray, options: np.ndarray) -> None:
        """Place ``rows`` at the first of ``options`` (spawn points) with nobody within 12 m (a vehicle)
        or 2 m (a pedestrian)."""
        st = self.state
        clear = 2.0 if pool.walking else 12.0
        busy = np.column_stack([st.x[st.active], st.y[st.active]])
        placed = []
        for k in options:
            if len(placed) == len(rows):
                break
            if len(busy) and np.min(np.hypot(busy[:, 0] - pool.xy[k, 0], busy[:, 1] - pool.xy[k, 1])) < clear:
                continue
            r = rows[len(placed)]
            st.path_id[r], st.s[r], st.d[r], st.speed[r], st.accel[r] = pool.path[k], pool.s[k], 0.0, pool.speed[k], 0.0
            st.mode[r], st.active[r], st.in_contact[r] = (ACTIVE if pool.walking else 0), True, False
            st.stopped_at[r] = -np.inf
            placed.append(r)
            busy = np.vstack([busy, pool.xy[k]])
        if placed:
            now = np.array(placed)
            st.x[now], st.y[now], st.yaw[now] = self.compiled.paths.pose(st.path_id[now], st.s[now], st.d[now])

    def _update_heights(self) -> None:
        """Heights from the paths: lane-placed actors at their arc length, the ego at its route
        projection (of the last step: within a step's climb)."""
        st, c = self.state, self.compiled
        on_paths = np.flatnonzero(st.path_id >= 0)
        on_paths = on_paths[on_paths > 0]
        if len(on_paths):
            st.z[on_paths] = c.paths.height(st.path_id[on_paths], st.s[on_paths])
        st.z[0] = c.paths.height(np.array([c.route_path]), np.array([st.route_s]))[0]

    def _move_walkers(self) -> None:
        st, c = self.state, self.compiled
        rows = c.idx_walk
        if not len(rows):
            return
        walking = st.mode[rows] == ACTIVE
        v = np.where(walking, c.actors.walk_speed[rows], 0.0)
        if c.background:
            v[self._blocked_walkers(rows, walking)] = 0.0
        st.s[rows] = np.minimum(st.s[rows] + v * DT, c.paths.length[st.path_id[rows]])
        done = walking & (st.s[rows] >= c.paths.length[st.path_id[rows]])
        st.mode[rows[done]] = DONE
        st.speed[rows] = np.where(done, 0.0, v)
        p = c.paths
        kernels.path_pose(p.xy, p.s, p.heading, p.n_points, st.path_id, st.s, st.d, st.x, st.y, st.yaw, rows)

    def _blocked_walkers(self, rows: np.ndarray, walking: np.ndarray) -> np.ndarray:
        """Mask over ``rows``: background walkers whose next metre is taken by a vehicle (the ego
        included) wait instead of walking into it."""
        st, c = self.state, self.compiled
        out = np.zeros(len(rows), bool)
        mine = walking & np.isin(rows, self._background_walkers)
        vehicles = np.flatnonzero(
            st.active & (c.actors.kind != int(Kind.PEDESTRIAN)) & (c.actors.kind != int(Kind.STATIC))
        )
        if not mine.any() or not len(vehicles):
            return out
        w = rows[mine]
        ahead = np.column_stack([st.x[w] + np.cos(st.yaw[w]), st.y[w] + np.sin(st.yaw[w])])
        dx = ahead[:, None, 0] - st.x[vehicles][None]
        dy = ahead[:, None, 1] - st.y[vehicles][None]
        cos, sin = np.cos(st.yaw[vehicles]), np.sin(st.yaw[vehicles])
        along, across = dx * cos + dy * sin, -dx * sin + dy * cos
        inside = (np.abs(along) < c.actors.length[vehicles] / 2 + 0.5) & (
            np.abs(across) < c.actors.width[vehicles] / 2 + 0.5
        )
        out[np.flatnonzero(mine)] = inside.any(1)
        return out

    def _move_replays(self, t: float) -> None:
        st = self.state
        for i, track in self.compiled.actors.replay_tracks.items():
            ts = track[:, 0]
            st.x[i], st.y[i] = np.interp(t, ts, track[:, 1]), np.interp(t, ts, track[:, 2])
            st.yaw[i] = np.interp(t, ts, np.unwrap(track[:, 3]))
            k = min(max(int(np.searchsorted(ts, t)), 1), len(ts) - 1)
            seg = track[k, 1:3] - track[k - 1, 1:3]
            st.speed[i] = float(np.hypot(*seg) / max(ts[k] - ts[k - 1], 1e-6))
            st.active[i] = ts[0] <= t <= ts[-1]

    # --- ego bookkeeping and events ---------------------------------------------------------------------
    def _update_route(self, full: bool = False) -> tuple[bool, np.ndarray]:
        """Project the ego on its route (a window around the last match, all of it if asked); returns
        the off-road flag and the contact mask, which the same compiled call computes."""
        st, c, g = self.state, self.compiled, self.compiled.drivable.raster
        boxes, inside = self.actor_boxes(), g.layers["inside"]
        s, lat, k, offroad, contact = kernels.ego_checks(
            c.route_xy, c.route_s, st.route_seg, full, boxes, g.index, inside, g.origin[0], g.origin[1], g.res
        )
        if c.stacked is not None and c.stacked.near(float(st.x[0]), float(st.y[0])):  # by a bridge: per level
            corners = self._ego_corners()
            flat = np.array([g.lookup("inside", x, y) for x, y in corners], bool)
            on_level = c.stacked.drivable(corners, float(st.z[0]), flat)
            offroad = offroad if on_level is None else not on_level
        st.route_seg, st.route_s, st.lateral = k, s, lat
        st.speed_limit = c.route_speed_limit[k]
        st.heading_error = (float(st.yaw[0]) - c.route_heading[k] + math.pi) % (2 * math.pi) - math.pi
        if s > st.progress:
            st.progress = s
        return offroad, contact

    def _ego_corners(self) -> np.ndarray:
        st, a = self.state, self.compiled.actors
        x, y, yaw = float(st.x[0]), float(st.y[0]), float(st.yaw[0])
        along = np.array([math.cos(yaw), math.sin(yaw)]) * a.length[0] / 2
        across = np.array([-math.sin(yaw), math.cos(yaw)]) * a.width[0] / 2
        return np.array([x, y]) + np.array([along + across, along - across, -along - across, -along + across])

    def _events(self, sig: np.ndarray) -> list[Event]:
        st, c, a = self.state, self.compiled, self.compiled.actors
        t = st.t
        events: list[Event] = []
        prev_front = st.route_s + a.length[0] / 2
        prev_progress = st.progress
        offroad, contact = self._update_route()
        front = st.route_s + a.length[0] / 2
        ego = (float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0]))

        # collisions (oriented boxes, separating axes): one event when a contact begins
        if contact.any() or st.in_contact.any():
            for j in np.flatnonzero(contact & ~st.in_contact):
                kind = _KIND_NAMES[Kind(a.kind[j])]
                xy = (float(st.x[j]), float(st.y[j]))
                events.append(collision_event(t, ego, (a.length[0], a.width[0]), a.ids[j], kind, xy, st.speed[j]))
            st.in_contact = contact

        if offroad and not st.offroad:
            events.append(Event(EventKind.OFFROAD, t, lateral=float(st.lateral)))
        st.offroad = offroad

        # stop lines on the route: red lights and stop signs
        lines = [
            StopLine(k, line, c.signal_ids[sg] if sg >= 0 else None, sg >= 0 and sig[sg] == RED)
            for k, (line, sg) in enumerate(c.route_stops)
        ]
        events += pass_stop_lines(t, prev_front, front, ego[3], lines, st.stop_done)

        # lanes: wrong-way driving and leaving the route's lanes
        lane, lane_heading = c.grid.lookup(ego[0], ego[1], float(st.z[0]) if c.levels else None)
        if lane >= 0:
            wrong = is_wrong_way(ego[2], lane_heading, ego[3])
            off_route = not c.corridor[lane]
        else:
            wrong = False
            off_route = lane == NONE or (lane == JUNCTION and abs(st.lateral) > 4.0)
        lane_id = c.lane_ids[lane] if lane >= 0 else None
        events += st.route.update(
            t, DT, st.progress - prev_progress, self.route_progress, st.lateral, ego[3], wrong, off_route, lane_id
        )
        if len(c.windows):
            events += self._scenario_windows(t)
        if st.min_speed is not None:
            events += self._min_speed(t, ego[3], events)
        self.log.extend(events)
        return events

    def _scenario_windows(self, t: float) -> list[Event]:
        """Route files: each scenario element begins when the ego reaches its trigger; one not over
        within its time-out is a scenario-timeout infraction and its actors leave; one that lasts a set
        time (the emergency vehicle's, counted from when the vehicle first comes within EMERGENCY_NEAR_M
        of the ego, as scenario_runner's InTriggerDistanceToVehicle and Idle do) ends then, and judges
        whether the ego let the vehicle by."""
        st, c = self.state, self.compiled
        while st.windows_begun < len(c.windows) and c.windows[st.windows_begun].start <= st.progress:
            # (an emergency vehicle's time starts once it is near the ego, below)
            st.window_t0[st.windows_begun] = t if c.windows[st.windows_begun].emergency_vehicle < 0 else np.inf
            st.windows_open.append(st.windows_begun)
            st.windows_begun += 1
        events: list[Event] = []
        for k in list(st.windows_open):
            w = c.windows[k]
            e = w.emergency_vehicle
            if e >= 0 and st.window_t0[k] == np.inf and st.active[e]:
                if math.hypot(st.x[e] - st.x[0], st.y[e] - st.y[0]) < EMERGENCY_NEAR_M:
                    st.window_t0[k] = t
            elapsed = t - st.window_t0[k]
            if st.progress < w.end and elapsed < min(w.timeout_s, w.duration_s) - 1e-9:
                continue
            st.windows_open.remove(k)
            st.window_over[k] = True
            if st.progress >= w.end:
                continue
            if w.timeout_s < w.duration_s:
                events.append(Event(EventKind.SCENARIO_TIMEOUT, t, scenario=w.name))
            if e >= 0 and st.active[e]:  # the ego still ahead of it along its heading: not let by
                if math.cos(st.yaw[e]) * (st.x[0] - st.x[e]) + math.sin(st.yaw[e]) * (st.y[0] - st.y[e]) > 0:
                    events.append(Event(EventKind.YIELD_EMERGENCY_VEHICLE, t, scenario=w.name))
            rows = np.concatenate([w.rows, [e]]).astype(int) if e >= 0 else w.rows
            st.gone[rows] = True
            st.active[rows], st.x[rows], st.y[rows], st.speed[rows] = False, 1e6, 1e6, 0.0
            st.flow_gone[w.flows] = True
        return events

    def _min_speed(self, t: float, ego_speed: float, events: list[Event]) -> list[Event]:
        """Route files: the Leaderboard's minimum-speed test against the background traffic's mean speed."""
        st, book = self.state, self.state.min_speed
        rows = self._background_vehicles[st.active[self._background_vehicles]]
        traffic = float(st.speed[rows].sum()) / len(rows) if len(rows) else None
        out = book.update(t, self.route_progress, ego_speed, traffic)
        if any(e.kind in (EventKind.AGENT_BLOCKED, EventKind.ROUTE_DEVIATION) for e in events):
            out += book.close(t, self.route_progress)
        return out

    def stats(self) -> dict[str, float]:
        return self.state.route.summary(self.state.t, self.state.distance, self.route_progress, self.route_completion)
