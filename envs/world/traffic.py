"""Traffic behaviour: IDM car following on lane paths, reacting to leaders, the ego, walkers and signals.

Pure functions over the compiled scenario and the current state, vectorised over all actors.
Leaders are found two ways: vehicles on lanes by lane matching (is actor j on a lane of actor i's
path, and where?), and the ego / walkers geometrically against samples of each actor's path ahead,
because they are not tied to lanes.
"""

from __future__ import annotations

import numpy as np

from envs.world.compile import RED, YELLOW, Compiled
from envs.world.state import WorldState

LOOKAHEAD = np.arange(0.0, 42.0, 2.0)  # path samples ahead of the front bumper, metres
MAX_DECEL = 9.0


def idm(v, v0, gap, v_lead, a_max, b, T, s0):
    """Intelligent Driver Model acceleration (Treiber et al. 2000), vectorised; ``gap`` may be inf."""
    dv = v - v_lead
    s_star = s0 + np.maximum(0.0, v * T + v * dv / (2.0 * np.sqrt(a_max * b)))
    free = 1.0 - (v / np.maximum(v0, 0.1)) ** 4
    return a_max * (free - (s_star / np.maximum(gap, 0.1)) ** 2)


def _lane_leaders(c: Compiled, st: WorldState, rows: np.ndarray):
    """Gap to, and speed of, the nearest actor ahead on the same lane path for each actor in ``rows``."""
    members = c.idx_lane_members
    members = members[st.active[members]]
    if len(members) == 0:
        inf = np.full(len(rows), np.inf)
        return inf, np.zeros(len(rows))
    lane_j, s_j = c.paths.lane_at(st.path_id[members], st.s[members])
    lanes_i = c.paths.lanes[st.path_id[rows]]  # [R, K]
    starts_i = c.paths.lane_start[st.path_id[rows]]  # [R, K]
    match = lanes_i[:, :, None] == lane_j[None, None, :]  # [R, K, M]
    pos = np.where(match, starts_i[:, :, None] + s_j[None, None, :], np.inf).min(1)  # [R, M]
    half = (c.actors.length[rows][:, None] + c.actors.length[members][None, :]) / 2
    gap = pos - st.s[rows][:, None] - half
    in_lane = np.abs(st.d[members]) < (c.actors.width[members] / 2 + 1.0)
    ahead = (pos > st.s[rows][:, None]) & in_lane[None, :] & (rows[:, None] != members[None, :])
    gap = np.where(ahead, gap, np.inf)
    k = gap.argmin(1)
    best = gap[np.arange(len(rows)), k]
    return best, np.where(np.isfinite(best), st.speed[members][k], 0.0)


def _geometric_leaders(c: Compiled, st: WorldState, rows: np.ndarray):
    """The ego and walkers near each actor's path ahead (they do not live on lanes)."""
    best_all = np.full(len(rows), np.inf)
    v_all = np.zeros(len(rows))
    obs = c.idx_obstacles[st.active[c.idx_obstacles]]
    # only actors within reach of some obstacle need the path samples
    near = (np.abs(st.x[rows][:, None] - st.x[obs][None, :]) < 50.0) & (
        np.abs(st.y[rows][:, None] - st.y[obs][None, :]) < 50.0
    )
    sel = np.flatnonzero(near.any(1))
    if not len(sel):
        return best_all, v_all
    full_rows, rows = rows, rows[sel]
    front = st.s[rows] + c.actors.length[rows] / 2
    q = (front[:, None] + LOOKAHEAD[None, :]).ravel()
    pid = np.repeat(st.path_id[rows], len(LOOKAHEAD))
    px, py, ph = c.paths.pose(pid, q)
    px = px.reshape(len(rows), -1)
    py = py.reshape(len(rows), -1)
    dx = st.x[obs][None, :, None] - px[:, None, :]  # [R, O, L]
    dy = st.y[obs][None, :, None] - py[:, None, :]
    dist = np.hypot(dx, dy)
    k = dist.argmin(2)  # nearest sample per (row, obstacle)
    dmin = np.take_along_axis(dist, k[..., None], 2)[..., 0]
    reach = (c.actors.width[rows][:, None] + c.actors.width[obs][None, :]) / 2 + 1.0
    gap = LOOKAHEAD[k] - c.actors.length[obs][None, :] / 2
    hit = dmin < reach
    # projected speed of the obstacle along the follower's heading
    h = ph.reshape(len(rows), -1)[np.arange(len(rows))[:, None], k]
    v_along = st.speed[obs][None, :] * np.cos(st.yaw[obs][None, :] - h)
    gap = np.where(hit, gap, np.inf)
    j = gap.argmin(1)
    r = np.arange(len(rows))
    best_all[sel] = gap[r, j]
    v_all[sel] = np.where(np.isfinite(gap[r, j]), np.maximum(v_along[r, j], 0.0), 0.0)
    del full_rows
    return best_all, v_all


def _signal_stops(c: Compiled, st: WorldState, rows: np.ndarray, sig_state: np.ndarray):
    """Gap to the first stop line ahead whose light is red (or yellow with room to stop)."""
    stop_s = c.path_stop_s[st.path_id[rows]]  # [R, K]
    stop_sig = c.path_stop_sig[st.path_id[rows]]
    if not len(sig_state):
        return np.full(len(rows), np.inf)
    state = np.where(stop_sig >= 0, sig_state[np.maximum(stop_sig, 0)], -1)
    front = (st.s[rows] + c.actors.length[rows] / 2)[:, None]
    gap = stop_s - front
    v = st.speed[rows][:, None]
    can_stop = v * v / (2.0 * np.maximum(gap, 0.1)) < 4.0
    halt = (state == RED) | ((state == YELLOW) & can_stop)
    valid = halt & (gap > -0.5) & c.actors.reacts_to_signals[rows][:, None]
    return np.where(valid, gap, np.inf).min(1)


def traffic_accel(c: Compiled, st: WorldState, rows: np.ndarray, sig_state: np.ndarray) -> np.ndarray:
    """IDM acceleration for every path-following actor in ``rows``: the tightest constraint wins."""
    a = c.actors
    lane_idx, _ = c.paths.lane_at(st.path_id[rows], st.s[rows])
    v0 = np.where(a.follows_speed_limit[rows], c.lane_speed_limit[lane_idx], a.desired_speed[rows])
    v = st.speed[rows]
    args = (a.max_accel[rows], a.comfort_decel[rows], a.time_headway[rows], a.min_gap[rows])
    g1, v1 = _lane_leaders(c, st, rows)
    g2, v2 = _geometric_leaders(c, st, rows)
    g3 = _signal_stops(c, st, rows, sig_state)
    acc = np.minimum.reduce(
        [
            idm(v, v0, g1, v1, *args),
            idm(v, v0, g2, v2, *args),
            idm(v, v0, g3, 0.0, *args),
        ]
    )
    return np.clip(acc, -MAX_DECEL, a.max_accel[rows])
