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


def traffic_accel(
    c: CompiledScenario,
    st: WorldState,
    rows: np.ndarray,
    sig_state: np.ndarray,
    query: bool = False,
    members: np.ndarray | None = None,
) -> np.ndarray:
    """IDM acceleration for every path-following actor in ``rows``, among the lane-bound ``members``
    (all of them by default); a ``query`` (a planner asking what the traffic will do) leaves the
    world's arrival records as they are."""
    if not query:
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
        c.idx_lane_members if members is None else members,
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
        right_of_way(c, st, scratch=query),
    )


def right_of_way(c: CompiledScenario, st: WorldState, scratch: bool = False) -> kernels.RightOfWay:
    """What the junction kernel reads; with ``scratch`` the arrival records are copies (a query that
    must not change the world)."""
    stopped_at, stopped_t = (st.stopped_at.copy(), st.stopped_t.copy()) if scratch else (st.stopped_at, st.stopped_t)
    j = c.junctions
    return kernels.RightOfWay(
        c.actors.yields_at_junctions,
        j.entry_s,
        j.entry_hold,
        j.entry_end,
        j.entry_run,
        j.entry_rule,
        j.entry_turns,
        j.conflict_ptr,
        j.conflict_idx,
        stopped_at,
        stopped_t,
        c.route_path,
        float(st.route_s),
        float(st.t),
    )


def sets_off(c: CompiledScenario, st: WorldState, i: int, sig_state: np.ndarray, others: bool = True) -> bool:
    """Whether actor ``i``, standing, will move off now: nothing it must wait for (a leader, a red
    light, the junction's right of way, the ego as it stands now). Without ``others``, as if the other
    vehicles were not there: whether it goes before the ego once they have cleared its way."""
    rows = np.array([i])
    return bool(traffic_accel(c, st, rows, sig_state, query=True, members=None if others else rows)[0] > 0.3)


def may_enter_junction(c: CompiledScenario, st: WorldState, i: int) -> bool:
    """Whether actor ``i``, which gives way at junctions, may enter its next one now by the junction
    rules (nobody it must wait for, the ego included as it stands now)."""
    a = c.actors
    gap = kernels.junction_gap(
        i,
        right_of_way(c, st, scratch=True),
        st.path_id,
        st.s,
        st.speed,
        st.active,
        st.x,
        st.y,
        st.z,
        a.length,
        c.idx_lane_members,
        a.min_gap[i] + 1.0,
    )
    return not np.isfinite(gap)
