"""How the traffic around the expert will move, predicted with the world's own driver model.

The world's drivers follow IDM and brake for a car coming at them in their lane, for the speed they
close at, as soon as they see it (``kernels.HEAD_ON_RANGE``), stopping ``kernels.HEAD_ON_STANDOFF``
further back than behind a car they follow; actor flows let a new vehicle in at their source whenever
the newest one is its gap down the path. The expert asks these functions before it commits to a move
whose outcome depends on them: a pass through the oncoming lane is only worth starting if it ends
back in lane before the oncoming traffic, braking for it, stands in its way (one that stops in front
of it leaves it beside the obstacle in the oncoming lane for good).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from envs.world import kernels
from envs.world.traffic import idm
from scenarios import geometry as geo

SIM_DT = 0.25  # s: step of the joint rollout of the expert and the oncoming traffic
SIM_HORIZON_S = 30.0  # a pass that is not back in lane by then is not worth starting
PHANTOM_HALF_LENGTH = 2.4  # m: half a car, for a vehicle that has not entered yet


class Oncoming(NamedTuple):
    """A vehicle coming at us along the route: its front's route arc length, its speed towards us and
    its IDM parameters (a phantom from a flow's source has its flow's speed and a standard driver)."""

    front: float
    speed: float
    desired: float
    accel: float = 2.0
    decel: float = 3.5
    headway: float = 1.2
    min_gap: float = 2.0


class EgoPass(NamedTuple):
    """How the expert drives a pass: from ``front`` (route arc length) and ``speed``, accelerating at
    ``accel`` up to ``top``. It is out in the oncoming lane (seen by, and in the way of, the traffic
    there) once its front is past ``out_at`` less ``out_lead_s`` seconds at its speed (the swing out is
    a ramp that starts earlier the faster it goes); it is back in lane (clear of a car in the oncoming
    lane) once its front is ``back`` metres past the obstacle's far end plus the share of the move back
    that takes: a ramp of ``ramp_s`` seconds at its speed (at least ``ramp_min_speed``)."""

    front: float
    speed: float
    top: float
    length: float
    back: float
    out_at: float = -math.inf
    out_lead_s: float = 0.0
    ramp_s: float = 0.0
    ramp_min_speed: float = 0.0
    accel: float = 1.5  # m/s^2: counted on from standstill (the planner asks 1.5; measured about 2 on LB2 passes)

    def back_at(self, end: float, v: float) -> float:
        """Route arc length its front must reach, past an obstacle ending at ``end``, at speed ``v``."""
        return end + self.back + self.ramp_s * max(v, self.ramp_min_speed)


def pass_completes(ego: EgoPass, end: float, oncoming: list[Oncoming], room: float = 1.0) -> bool:
    """Whether our front gets back in lane past an obstacle whose far end is at route arc length
    ``end`` before the oncoming traffic, braking for us as the world's drivers do, is within ``room``
    metres of it. Both sides are rolled out together: until we pull out, the oncoming cars drive on
    and those that have passed us are gone (one beside us as we pull out is in the way); from then on
    each brakes against our front, closing at our speed (seen within HEAD_ON_RANGE, standing
    HEAD_ON_STANDOFF back), and we drive on, since only a car that reaches us before we are back would
    make us stop beside the obstacle."""
    front, v = ego.front, ego.speed
    cars = [[o.front, o.speed, o] for o in oncoming if o.front > front - ego.length]
    out = False
    for _ in range(int(SIM_HORIZON_S / SIM_DT)):
        if front >= ego.back_at(end, v):
            return True
        if not out and front >= ego.out_at - ego.out_lead_s * v:
            out = True
            cars = [c for c in cars if c[0] > front - ego.length - 1.0]  # (the others are behind us)
        if out and any(c[0] - front < room for c in cars):
            return False
        v_new = min(v + ego.accel * SIM_DT, max(ego.top, v))
        front += 0.5 * (v + v_new) * SIM_DT
        v = v_new
        for car in cars:
            g, u, o = car
            gap = g - front
            seen = max(gap - kernels.HEAD_ON_STANDOFF, 0.0) if out and gap <= kernels.HEAD_ON_RANGE else math.inf
            a = idm(u, o.desired, seen, -v, o.accel, o.decel, o.headway, o.min_gap)
            u_new = max(u + min(max(a, -9.0), o.accel) * SIM_DT, 0.0)
            car[0], car[1] = g - 0.5 * (u + u_new) * SIM_DT, u_new
    return False


def next_oncoming_from_flows(world, lo: float, hi: float) -> list[Oncoming]:
    """The next vehicle of each live actor flow that enters between route arc lengths ``lo`` and ``hi``
    running against the route, as if it had entered already: a flow lets its next vehicle in when the
    newest is its gap (already drawn) down the path, so it is that gap behind the newest one (or at the
    source, if none is on the path). Privileged: the world's flow state."""
    st, c = world.state, world.compiled
    window = slice(*np.searchsorted(c.route_s, [lo, hi + 1.0]))
    pts, ss = c.route_xy[window], c.route_s[window]
    if len(pts) < 2:
        return []
    out = []
    for k, flow in enumerate(c.flows):
        if st.flow_gone[k] or not flow.appear_at <= st.progress < flow.leave_at:
            continue
        last = int(st.flow_last[k])
        behind = st.flow_gap[k] - (st.s[last] - flow.s) if last >= 0 and st.active[last] else 0.0
        x, y, yaw = (float(q[0]) for q in c.paths.pose(np.array([flow.path]), np.array([flow.s])))
        s_src, lat, seg = geo.project(pts, ss, np.array([x, y]))
        if abs(lat) > 8.0 or not lo < s_src < hi:
            continue
        heading = math.atan2(*(pts[seg + 1] - pts[seg])[::-1])
        if math.cos(yaw - heading) > -0.5:
            continue  # (it runs our way)
        out.append(Oncoming(s_src + max(behind, 0.0) - PHANTOM_HALF_LENGTH, flow.speed, flow.speed))
    return out
