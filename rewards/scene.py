"""Scene facts at a step, as structured data a reasoning text can be checked against.

``scene_facts(world)`` reads the embedded world (duck-typed: ``state``, ``c``, ``ego_record()``,
``signal_states()``), so rewards never import the environment layer. Facts: the lead vehicle and
its gap, the signal or stop sign ahead, pedestrians in or near the path, a blocked lane, a vehicle
cutting in, oncoming traffic, and the curvature of the route ahead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

SIGNAL_NAMES = {0: "green", 1: "yellow", 2: "red"}
VEHICLE, PEDESTRIAN, CYCLIST, STATIC = 1, 2, 3, 4  # envs.world.Kind values


@dataclass
class SceneFacts:
    speed: float = 0.0
    speed_limit: float = 0.0
    lead_vehicle: dict[str, Any] | None = None  # {"id", "gap", "speed", "stopped"}
    signal_ahead: dict[str, Any] | None = None  # {"state", "distance"}
    stop_sign_ahead: float | None = None  # metres to the stop line
    pedestrians: list[dict[str, Any]] = field(default_factory=list)  # {"id", "distance", "in_path"}
    blocked_lane: dict[str, Any] | None = None  # stopped or parked object in the ego lane ahead
    cut_in: dict[str, Any] | None = None  # vehicle moving into the ego lane ahead
    oncoming: int = 0  # vehicles ahead in the oncoming direction within 60 m
    curvature_ahead: float = 0.0  # signed max curvature over the next 50 m (1/m, left positive)
    junction_ahead: float | None = None  # metres to the next junction on the route

    @property
    def causes(self) -> set[str]:
        """The cause tags present in the scene (the vocabulary critics check claims against)."""
        out = set()
        if self.lead_vehicle is not None:
            out.add("lead_vehicle")
            if self.lead_vehicle["stopped"]:
                out.add("stopped_vehicle")
        if self.signal_ahead is not None:
            out.add(f"{self.signal_ahead['state']}_light")
            out.add("traffic_light")
        if self.stop_sign_ahead is not None:
            out.add("stop_sign")
        if any(p["in_path"] or p["distance"] < 25.0 for p in self.pedestrians):
            out.add("pedestrian")
        if self.blocked_lane is not None:
            out.add("blocked_lane")
        if self.cut_in is not None:
            out.add("cut_in")
        if self.oncoming:
            out.add("oncoming_traffic")
        if abs(self.curvature_ahead) > 0.01:
            out.add("curve")
        if self.junction_ahead is not None:
            out.add("junction")
        if self.speed_limit > 0 and self.speed > self.speed_limit + 0.5:
            out.add("speeding")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"causes": sorted(self.causes)}


def scene_facts(world: Any, horizon: float = 50.0) -> SceneFacts:
    st, c = world.state, world.compiled
    a = c.actors
    ego = world.ego_record()
    facts = SceneFacts(speed=ego.speed, speed_limit=ego.speed_limit)
    x0, y0, yaw0 = float(st.x[0]), float(st.y[0]), float(st.yaw[0])
    cy, sy = math.cos(yaw0), math.sin(yaw0)
    half_w = a.width[0] / 2
    for j in np.flatnonzero(st.active):
        if j == 0:
            continue
        dx, dy = st.x[j] - x0, st.y[j] - y0
        lon, lat = cy * dx + sy * dy, -sy * dx + cy * dy
        if lon < -2.0 or lon > 60.0 or abs(lat) > 15.0:
            continue
        rel_yaw = (st.yaw[j] - yaw0 + math.pi) % (2 * math.pi) - math.pi
        in_path = abs(lat) < half_w + a.width[j] / 2 + 0.3
        gap = max(lon - (a.length[0] + a.length[j]) / 2, 0.0)
        ident = a.ids[j]
        if a.kind[j] == PEDESTRIAN:
            facts.pedestrians.append(
                {
                    "id": ident,
                    "distance": round(float(math.hypot(dx, dy)), 1),
                    "in_path": bool(in_path or (abs(lat) < 4.0 and st.speed[j] > 0.3)),
                }
            )
            continue
        if lon <= 0:
            continue
        if abs(rel_yaw) > 2.5:
            facts.oncoming += 1
            continue
        stopped = bool(st.speed[j] < 0.5)
        if in_path and (facts.lead_vehicle is None or gap < facts.lead_vehicle["gap"]):
            facts.lead_vehicle = {
                "id": ident,
                "gap": round(float(gap), 1),
                "speed": round(float(st.speed[j]), 1),
                "stopped": stopped,
            }
        if in_path and (a.kind[j] == STATIC or (stopped and st.mode[j] != 0) or a.behaviour[j] == 4) and gap < 40:
            facts.blocked_lane = {"id": ident, "gap": round(float(gap), 1)}
        moving_in = abs(lat) < 4.5 and not in_path and lat * math.sin(rel_yaw) < 0 and abs(rel_yaw) > 0.05
        if moving_in and gap < 30 and facts.cut_in is None:
            facts.cut_in = {"id": ident, "gap": round(float(gap), 1), "side": "left" if lat > 0 else "right"}
    # signals and stop signs on the route
    front = st.route_s + a.length[0] / 2
    states = world.signal_states() if c.route_stops else None
    for line, sg in c.route_stops:
        dist = line - front
        if dist < -0.5 or dist > horizon:
            continue
        if sg >= 0 and facts.signal_ahead is None:
            facts.signal_ahead = {"state": SIGNAL_NAMES[int(states[sg])], "distance": round(float(dist), 1)}
        elif sg < 0 and facts.stop_sign_ahead is None:
            facts.stop_sign_ahead = round(float(dist), 1)
    # curvature and junctions ahead along the route
    s = st.route_s + np.arange(0.0, horizon, 2.0)
    h = np.unwrap(np.interp(s, c.route_s, np.unwrap(np.asarray(c.route_heading))))
    k = np.gradient(h, 2.0)
    facts.curvature_ahead = round(float(k[np.argmax(np.abs(k))]), 4)
    lanes, starts = c.paths.lanes[c.route_path], c.paths.lane_start[c.route_path]
    for lane_idx, start in zip(lanes, starts):
        if lane_idx < 0 or start > st.route_s + horizon:
            break
        if c.lane_in_junction[lane_idx] and start + c.road_map.lanes[c.lane_ids[lane_idx]].length > st.route_s:
            facts.junction_ahead = round(max(float(start - st.route_s), 0.0), 1)
            break
    return facts
