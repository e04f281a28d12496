"""Traffic behaviour: IDM car following on lane paths, reacting to leaders, the ego, walkers and signals.

Leaders are found two ways: vehicles on lanes by lane matching (is actor j on a lane of actor i's
path, and how far ahead?), and the ego / walkers geometrically, by projecting them onto each
actor's path ahead, because they are not tied to lanes. The loops live in ``kernels.traffic_accel``.
"""

from __future__ import annotations

import numpy as np

from envs.world import kernels
from envs.world.compile import CompiledScenario
from envs.world.state import WorldState

idm = kernels.idm


def mark_ego_arrival(c: CompiledScenario, st: WorldState) -> None:
    """Record when the ego arrives at its next junction (row 0 of ``stopped_at`` / ``stopped_t``), so
    traffic that gives way in order of arrival keeps the ego's turn while it waits."""
    j, front = c.junctions, st.route_s + c.actors.length[0] / 2
    k = j.next_entry(c.route_path, front)
    if k < 0:
        return
    hold = j.entry_hold[c.route_path, k]
    if hold - front < kernels.ARRIVE_M and st.stopped_at[0] != hold:
        st.stopped_at[0], st.stopped_t[0] = hold, st.t


def traffic_accel(c: CompiledScenario, st: WorldState, rows: np.ndarray, sig_state: np.ndarray) -> np.ndarray:
    """IDM acceleration for every path-following actor in ``rows``."""
    mark_ego_arrival(c, st)
    a, p = c.actors, c.paths
    sig = sig_state if len(sig_state) else np.zeros(1, np.int8)
    return kernels.traffic_accel(
        rows,
        st.x,
        st.y,
        st.yaw,
        st.speed,
        st.active,
        st.path_id,
        st.s,
        st.d,
        st.z,
        a.length,
        a.width,
        a.desired_speed,
        a.follows_speed_limit,
        a.time_headway,
        a.min_gap,
        a.max_accel,
        a.comfort_decel,
        a.reacts_to_signals,
        c.idx_lane_members,
        c.idx_obstacles,
        p.lanes,
        p.lane_start,
        p.xy,
        p.s,
        p.heading,
        p.n_points,
        c.lane_speed_limit,
        c.path_stop_s,
        c.path_stop_sig,
        sig,
        kernels.RightOfWay(
            a.yields_at_junctions,
            c.junctions.entry_s,
            c.junctions.entry_hold,
            c.junctions.entry_end,
            c.junctions.entry_run,
            c.junctions.entry_rule,
            c.junctions.entry_turns,
            c.junctions.conflict_ptr,
            c.junctions.conflict_idx,
            st.stopped_at,
            st.stopped_t,
            c.route_path,
            float(st.route_s),
            float(st.t),
        ),
    )
