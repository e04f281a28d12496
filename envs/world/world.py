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
import shapely

from envs.world import traffic
from envs.world.collision import classify_contact, obb_overlap
from envs.world.compile import RED, Compiled, compile_scenario
from envs.world.lanegrid import JUNCTION, NONE
from envs.world.state import Behaviour, Kind, Mode, WorldState
from scenarios import geometry as geo
from scenarios.schema import Scenario

# plain ints: comparing int8 arrays with IntEnum members is several times slower
_BRAKING, _HOLDING, _ACTIVE, _DONE, _WAITING = (
    int(m) for m in (Mode.BRAKING, Mode.HOLDING, Mode.ACTIVE, Mode.DONE, Mode.WAITING)
)

DT = 0.1
WHEELBASE = 2.85
# AlpaSim's controller limits (REFERENCE.md section 2)
ACCEL_LIMITS = (-8.0, 6.0)
MAX_STEER = math.radians(45.0)
MAX_STEER_RATE = 1.2  # rad/s at the road wheels
MAX_SPEED = 35.0
ROUTE_DEVIATION = 12.0  # metres from the route centreline that end the route (as CARLA's deviation)
_KIND_NAMES = {Kind.VEHICLE: "vehicle", Kind.PEDESTRIAN: "pedestrian", Kind.CYCLIST: "vehicle", Kind.STATIC: "static"}


class World:
    def __init__(self, scenario: Scenario, seed: int = 0, compiled: Compiled | None = None) -> None:
        self.c = compiled if compiled is not None else compile_scenario(scenario)
        self.scenario = scenario
        self.log: list[dict[str, Any]] = []
        a = self.c.actors
        self._reach = (np.hypot(a.length, a.width) + math.hypot(a.length[0], a.width[0])) / 2
        self._has_trigger = np.isfinite(a.trigger_time) | (a.trigger_distance > 0)
        self.reset(seed)

    # --- lifecycle ----------------------------------------------------------------------------------------
    def reset(self, seed: int = 0) -> None:
        c, init = self.c, self.c.init
        n = c.actors.n
        self.state = WorldState(
            t=0.0,
            step=0,
            x=init["x"].copy(),
            y=init["y"].copy(),
            yaw=init["yaw"].copy(),
            speed=init["speed"].copy(),
            accel=np.zeros(n),
            active=np.ones(n, bool),
            path_id=init["path_id"].copy(),
            s=init["s"].copy(),
            d=init["d"].copy(),
            mode=np.zeros(n, np.int8),
            mode_t=np.zeros(n),
            lc_d0=np.zeros(n),
            route_s=c.route_start,
            progress=c.route_start,
            in_contact=np.zeros(n, bool),
            stop_min_speed=np.full(len(c.route_stop_s), np.inf),
            stop_done=np.zeros(len(c.route_stop_s), bool),
            rng=np.random.default_rng(seed),
        )
        self.log = []
        self._update_route(full=True)
        self.state.offroad = self._ego_offroad()

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to branch: state (with RNG) and the event log so far."""
        return {"state": self.state.copy(), "log_len": len(self.log), "log": [dict(e) for e in self.log]}

    def restore(self, snap: dict[str, Any]) -> None:
        self.state = snap["state"].copy()
        self.log = [dict(e) for e in snap["log"]]

    # --- queries --------------------------------------------------------------------------------------------
    @property
    def t(self) -> float:
        return self.state.t

    @property
    def route_progress(self) -> float:
        """Metres of route covered since the start (monotone)."""
        return self.state.progress - self.c.route_start

    @property
    def route_completion(self) -> float:
        return float(np.clip(self.route_progress / max(self.c.goal_distance, 1e-6), 0.0, 1.0))

    def signal_states(self) -> np.ndarray:
        return self.c.signal_states(self.state.t)

    def ego_speed_limit(self) -> float:
        lane, _ = self.c.paths.lane_at(np.array([self.c.route_path]), np.array([self.state.route_s]))
        return float(self.c.lane_speed_limit[lane[0]])

    def boxes(self) -> dict[str, np.ndarray]:
        """Active actors as boxes (ego first): x, y, yaw, length, width, height, kind, index."""
        st, a = self.state, self.c.actors
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
    def step(self, accel: float, steer: float) -> list[dict[str, Any]]:
        """Advance DT seconds with the ego's (accel m/s^2, front-wheel steer rad); returns new events."""
        if not (math.isfinite(accel) and math.isfinite(steer)):
            raise ValueError(f"ego control must be finite, got accel={accel}, steer={steer}")
        st, c = self.state, self.c
        sig = c.signal_states(st.t)
        rows = c.idx_path[st.active[c.idx_path]]
        acc = traffic.traffic_accel(c, st, rows, sig) if len(rows) else np.zeros(0)
        self._fire_triggers()
        self._move_ego(accel, steer)
        if len(rows):
            self._move_path_actors(rows, acc)
        self._move_walkers()
        self._move_replays(st.t + DT)
        st.t = round(st.t + DT, 10)
        st.step += 1
        return self._events(sig)

    def _move_ego(self, accel: float, steer: float) -> None:
        st = self.state
        target = min(max(steer, -MAX_STEER), MAX_STEER)
        rate = MAX_STEER_RATE * DT
        st.steer += min(max(target - st.steer, -rate), rate)
        a = min(max(accel, ACCEL_LIMITS[0]), ACCEL_LIMITS[1])
        v0 = float(st.speed[0])
        v1 = min(max(v0 + a * DT, 0.0), MAX_SPEED)
        vm = 0.5 * (v0 + v1)
        beta = math.atan(0.5 * math.tan(st.steer))
        yaw = float(st.yaw[0])
        st.x[0] += vm * math.cos(yaw + beta) * DT
        st.y[0] += vm * math.sin(yaw + beta) * DT
        st.yaw_rate = vm / (WHEELBASE / 2) * math.sin(beta)
        st.yaw[0] = (yaw + st.yaw_rate * DT + math.pi) % (2 * math.pi) - math.pi
        st.accel[0] = (v1 - v0) / DT
        st.speed[0] = v1
        st.distance += vm * DT

    def _fire_triggers(self) -> None:
        st, a = self.state, self.c.actors
        waiting = (st.mode == _WAITING) & st.active & self._has_trigger
        if not waiting.any():
            return
        dist = np.hypot(st.x - st.x[0], st.y - st.y[0])
        fire = waiting & ((st.t >= a.trigger_time) | (dist < a.trigger_distance))
        for i in np.flatnonzero(fire):
            beh = a.behaviour[i]
            if beh == Behaviour.HARD_BRAKE:
                st.mode[i], st.mode_t[i] = Mode.BRAKING, st.t
            elif beh == Behaviour.WALK:
                st.mode[i], st.mode_t[i] = Mode.ACTIVE, st.t
            elif beh == Behaviour.LANE_CHANGE:
                target = int(a.lc_target_path[i])
                s_new, d_new = self.c.paths.project(target, np.array([st.x[i], st.y[i]]))
                st.path_id[i], st.s[i], st.d[i], st.lc_d0[i] = target, s_new, d_new, d_new
                st.mode[i], st.mode_t[i] = Mode.ACTIVE, st.t
            self.log.append({"type": "trigger", "t": st.t, "actor": a.ids[i]})

    def _move_path_actors(self, rows: np.ndarray, acc: np.ndarray) -> None:
        st, a, c = self.state, self.c.actors, self.c
        mode = st.mode[rows]
        braking = mode == _BRAKING
        holding = mode == _HOLDING
        acc = np.where(braking, -a.brake_decel[rows], acc)
        acc = np.where(holding, 0.0, acc)
        v_old = st.speed[rows]
        v_new = np.maximum(v_old + acc * DT, 0.0)
        v_new = np.where(holding, 0.0, v_new)
        # behaviour phase changes
        stopped = braking & (v_new <= 0.0)
        st.mode[rows[stopped]], st.mode_t[rows[stopped]] = _HOLDING, st.t
        released = holding & (st.t - st.mode_t[rows] >= a.brake_hold[rows])
        st.mode[rows[released]] = _DONE
        # lateral offset of lane changes: smooth decay to the target lane
        lc = mode == _ACTIVE
        d_old = st.d[rows]
        if lc.any():
            tau = np.clip((st.t + DT - st.mode_t[rows]) / a.lc_duration[rows], 0.0, 1.0)
            smooth = tau * tau * (3.0 - 2.0 * tau)
            st.d[rows] = np.where(lc, st.lc_d0[rows] * (1.0 - smooth), d_old)
            finished = lc & (tau >= 1.0)
            st.mode[rows[finished]] = _DONE
        st.s[rows] += 0.5 * (v_old + v_new) * DT
        st.speed[rows] = v_new
        st.accel[rows] = (v_new - v_old) / DT
        x, y, h = c.paths.pose(st.path_id[rows], st.s[rows], st.d[rows])
        dd = (st.d[rows] - d_old) / DT
        st.x[rows], st.y[rows] = x, y
        st.yaw[rows] = h + np.arctan2(dd, np.maximum(v_new, 1.0))
        ended = st.s[rows] >= c.paths.length[st.path_id[rows]] - 0.5
        if ended.any():  # leaves the map at the end of its path
            gone = rows[ended]
            st.active[gone] = False
            st.x[gone], st.y[gone], st.speed[gone] = 1e6, 1e6, 0.0

    def _move_walkers(self) -> None:
        st, c = self.state, self.c
        rows = c.idx_walk
        if not len(rows):
            return
        walking = st.mode[rows] == _ACTIVE
        v = np.where(walking, c.actors.walk_speed[rows], 0.0)
        st.s[rows] = np.minimum(st.s[rows] + v * DT, c.paths.length[st.path_id[rows]])
        done = walking & (st.s[rows] >= c.paths.length[st.path_id[rows]])
        st.mode[rows[done]] = _DONE
        st.speed[rows] = np.where(done, 0.0, v)
        x, y, h = c.paths.pose(st.path_id[rows], st.s[rows])
        st.x[rows], st.y[rows], st.yaw[rows] = x, y, h

    def _move_replays(self, t: float) -> None:
        st = self.state
        for i, track in self.c.actors.replay_tracks.items():
            ts = track[:, 0]
            st.x[i], st.y[i] = np.interp(t, ts, track[:, 1]), np.interp(t, ts, track[:, 2])
            st.yaw[i] = np.interp(t, ts, np.unwrap(track[:, 3]))
            k = min(max(int(np.searchsorted(ts, t)), 1), len(ts) - 1)
            seg = track[k, 1:3] - track[k - 1, 1:3]
            st.speed[i] = float(np.hypot(*seg) / max(ts[k] - ts[k - 1], 1e-6))
            st.active[i] = ts[0] <= t <= ts[-1]

    # --- ego bookkeeping and events ---------------------------------------------------------------------
    def _update_route(self, full: bool = False) -> None:
        """Project the ego on its route, searching a window around the last match (all of it if asked)."""
        st, c = self.state, self.c
        xy = np.array([st.x[0], st.y[0]])
        lo = 0 if full else max(st.route_seg - 2, 0)
        hi = len(c.route_xy) - 1 if full else min(st.route_seg + 10, len(c.route_xy) - 1)
        s, lat, k = geo.project(c.route_xy[lo : hi + 1], c.route_s[lo : hi + 1], xy)
        if not full and lo + k + 1 >= hi and hi < len(c.route_xy) - 1:  # ran off the window: search all
            lo = 0
            s, lat, k = geo.project(c.route_xy, c.route_s, xy)
        st.route_seg, st.route_s, st.lateral = lo + k, s, lat
        seg = c.route_xy[st.route_seg + 1] - c.route_xy[st.route_seg]
        st.heading_error = float(geo.wrap_angle(st.yaw[0] - math.atan2(seg[1], seg[0])))
        st.progress = max(st.progress, s)

    def _ego_corners(self) -> np.ndarray:
        st, a = self.state, self.c.actors
        x, y, yaw = float(st.x[0]), float(st.y[0]), float(st.yaw[0])
        c, s = math.cos(yaw), math.sin(yaw)
        hl, hw = a.length[0] / 2, a.width[0] / 2
        return np.array(
            [
                [x + c * hl - s * hw, y + s * hl + c * hw],
                [x + c * hl + s * hw, y + s * hl - c * hw],
                [x - c * hl + s * hw, y - s * hl - c * hw],
                [x - c * hl - s * hw, y - s * hl + c * hw],
            ]
        )

    def _ego_offroad(self) -> bool:
        corners = self._ego_corners()
        return not bool(shapely.contains_xy(self.c.drivable, corners[:, 0], corners[:, 1]).all())

    def _events(self, sig: np.ndarray) -> list[dict[str, Any]]:
        st, c, a = self.state, self.c, self.c.actors
        t = st.t
        events: list[dict[str, Any]] = []
        prev_front = st.route_s + a.length[0] / 2
        prev_progress = st.progress
        self._update_route()
        front = st.route_s + a.length[0] / 2

        # collisions: broad phase on centre distance, then separating axes
        dx, dy = st.x - st.x[0], st.y - st.y[0]
        reach = self._reach
        near = (dx * dx + dy * dy < reach * reach) & st.active
        near[0] = False
        contact = np.zeros_like(st.in_contact)
        if near.any():
            ego_box = self._ego_corners()
            for j in np.flatnonzero(near):
                other = geo.box_corners(st.x[j], st.y[j], st.yaw[j], a.length[j], a.width[j])
                if obb_overlap(ego_box, other):
                    contact[j] = True
                    if not st.in_contact[j]:
                        where = classify_contact(st.x[0], st.y[0], st.yaw[0], a.length[0], a.width[0], st.x[j], st.y[j])
                        at_fault = where in ("front", "lateral") and st.speed[0] > 0.5
                        events.append(
                            {
                                "type": "collision",
                                "t": t,
                                "actor": a.ids[j],
                                "actor_kind": _KIND_NAMES[Kind(a.kind[j])],
                                "where": where,
                                "at_fault": bool(at_fault),
                                "ego_speed": float(st.speed[0]),
                                "actor_speed": float(st.speed[j]),
                            }
                        )
        st.in_contact = contact

        offroad = self._ego_offroad()
        if offroad and not st.offroad:
            events.append({"type": "offroad", "t": t, "lateral": float(st.lateral)})
        st.offroad = offroad

        # stop lines on the route: red lights and stop signs
        if len(c.route_stop_s):
            near_line = (front > c.route_stop_s - 8.0) & (front <= c.route_stop_s + 0.5)
            st.stop_done |= near_line & (st.speed[0] < 0.3)
            crossed = (prev_front < c.route_stop_s) & (front >= c.route_stop_s)
            for k in np.flatnonzero(crossed):
                sg = int(c.route_stop_sig[k])
                if sg >= 0 and sig[sg] == RED:
                    events.append({"type": "red_light", "t": t, "signal": c.signal_ids[sg]})
                elif sg < 0 and not st.stop_done[k]:
                    events.append({"type": "stop_sign", "t": t})

        # lanes: wrong-way driving and leaving the route's lanes
        lane, lane_heading = c.grid.lookup(float(st.x[0]), float(st.y[0]))
        moved = st.progress - prev_progress
        if lane >= 0:
            wrong = abs(geo.wrap_angle(st.yaw[0] - lane_heading)) > 2.0 and st.speed[0] > 0.5
            off_route = not c.corridor[lane]
        else:
            wrong = False
            off_route = lane == NONE or (lane == JUNCTION and abs(st.lateral) > 4.0)
        if wrong and not st.wrong_way:
            events.append({"type": "wrong_way", "t": t, "lane": c.lane_ids[lane]})
        st.wrong_way, st.off_route_lanes = wrong, off_route
        st.distance_outside_route_lanes += moved if off_route else 0.0
        st.distance_wrong_way += moved if wrong else 0.0

        if abs(st.lateral) > ROUTE_DEVIATION and not any(e["type"] == "route_deviation" for e in self.log):
            events.append({"type": "route_deviation", "t": t, "lateral": float(st.lateral)})
        if self.route_progress >= c.goal_distance and not any(e["type"] == "route_complete" for e in self.log):
            events.append({"type": "route_complete", "t": t})
        st.time_stopped = st.time_stopped + DT if st.speed[0] < 0.1 else 0.0
        self.log.extend(events)
        return events

    def stats(self) -> dict[str, float]:
        st = self.state
        return {
            "time": st.t,
            "distance": st.distance,
            "route_progress": self.route_progress,
            "route_length": self.c.goal_distance,
            "route_completion": self.route_completion,
            "distance_outside_route_lanes": st.distance_outside_route_lanes,
            "distance_wrong_way": st.distance_wrong_way,
        }
