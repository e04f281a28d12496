"""Numba kernels for the per-step hot loops of the world.

Each kernel is a plain loop over actors, compiled once (and cached on disk) by numba: a world
step with 60 actors costs tens of microseconds instead of the ~1 ms that a hundred small numpy
calls cost. The layout mirrors ``PathTable`` (padded per-path rows) and ``WorldState`` (arrays).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from envs.world.raster import tiled_value
from envs.world.state import ACTIVE, BRAKING, DONE, HOLDING, RED, WAITING, YELLOW


class Boxes(NamedTuple):
    """Every actor's oriented box and motion, row 0 the ego: what the contact, threat and neighbour
    kernels read (a tuple of arrays, which numba takes as one argument)."""

    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed: np.ndarray
    active: np.ndarray
    length: np.ndarray
    width: np.ndarray
    z: np.ndarray  # height of each actor on its lane (0 on a flat map)


class RightOfWay(NamedTuple):
    """What the traffic kernel needs for junctions without lights (see ``envs.world.junctions``)."""

    yields: np.ndarray  # [n] bool: the actor gives way at junctions without lights
    entry_s: np.ndarray  # [P, E]
    entry_hold: np.ndarray  # [P, E]
    entry_end: np.ndarray  # [P, E]
    entry_run: np.ndarray  # [P, E, R]
    entry_rule: np.ndarray  # [P, E]
    entry_turns: np.ndarray  # [P, E]
    conflict_ptr: np.ndarray
    conflict_idx: np.ndarray
    stopped_at: np.ndarray  # [n] mutable: the hold point (path arc length) each actor has stopped at
    stopped_t: np.ndarray  # [n] mutable: when
    ego_path: int
    ego_s: float
    t: float


GEOMETRIC_RANGE = 45.0  # metres of path ahead searched for the ego / walkers
OBSTACLE_MARGIN = 0.3  # metres of clearance to the ego / a walker beside the path (2.5 m lanes leave 0.45)
HEAD_ON_STANDOFF = 8.0  # extra metres a vehicle stops short of one facing it in its lane (room to pull back in)
HEAD_ON_RANGE = 100.0  # metres of path ahead searched for an ego coming the other way (seen from afar)
SIGNAL_DECEL = 4.0  # m/s^2: stop for yellow only if this is enough
LEVEL_GAP = 3.0  # metres of height apart: actors on a bridge and under it never meet
PRIORITY, GIVE_WAY, STOP, SIGNAL = 0, 1, 2, 3  # junction entry rules (junctions.Rule)
GIVE_WAY_S = 5.0  # a minor approach waits for priority traffic arriving within this many seconds
ARRIVE_M = 8.0  # metres before its line at which a vehicle has arrived at a junction (its turn is kept)
EGO_TURN_S = 3.0  # an ego standing this long at the junction it arrived at gives up its turn
COMMITTED_DECEL = 3.0  # m/s^2: a vehicle that would need more to stop before the junction goes on
ENTRY_RANGE = 40.0  # metres before its junction entry at which a vehicle starts to give way


@njit(cache=True)
def find_segment(ps, n, s):
    """Index k of the segment [ps[k], ps[k+1]) of a row holding arc length s (binary search)."""
    lo, hi = 0, n - 2
    if s <= ps[0]:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ps[mid] <= s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True)
def path_pose(p_xy, p_s, p_h, p_n, path_ids, s, d, out_x, out_y, out_h, rows):
    """Pose at arc length s (+ lateral offset d) on each actor's path, written into out_*[rows]."""
    for r in range(len(rows)):
        i = rows[r]
        p = path_ids[i]
        n = p_n[p]
        si = min(max(s[i], 0.0), p_s[p, n - 1])
        k = find_segment(p_s[p], n, si)
        seg = max(p_s[p, k + 1] - p_s[p, k], 1e-9)
        f = (si - p_s[p, k]) / seg
        h = p_h[p, k]
        out_x[i] = p_xy[p, k, 0] + f * (p_xy[p, k + 1, 0] - p_xy[p, k, 0]) - math.sin(h) * d[i]
        out_y[i] = p_xy[p, k, 1] + f * (p_xy[p, k + 1, 1] - p_xy[p, k, 1]) + math.cos(h) * d[i]
        out_h[i] = h


@njit(cache=True)
def path_height(p_z, p_s, p_n, path_ids, s, out):
    """Height at arc length s on each listed path (linear between points)."""
    for i in range(len(path_ids)):
        p = path_ids[i]
        n = p_n[p]
        si = min(max(s[i], 0.0), p_s[p, n - 1])
        k = find_segment(p_s[p], n, si)
        seg = max(p_s[p, k + 1] - p_s[p, k], 1e-9)
        out[i] = p_z[p, k] + (si - p_s[p, k]) / seg * (p_z[p, k + 1] - p_z[p, k])


@njit(cache=True)
def idm(v, v0, gap, v_lead, a_max, b, T, s0):
    """Intelligent Driver Model acceleration (Treiber et al. 2000); ``gap`` may be inf."""
    dv = v - v_lead
    s_star = s0 + max(0.0, v * T + v * dv / (2.0 * math.sqrt(a_max * b)))
    free = 1.0 - (v / max(v0, 0.1)) ** 4
    if gap == np.inf:
        return a_max * free
    return a_max * (free - (s_star / max(gap, 0.1)) ** 2)


@njit(cache=True)
def lane_slot(p_lanes, p_lane_start, p, s):
    """Position k in path p's lane list of the lane holding arc length s."""
    k = 0
    K = p_lanes.shape[1]
    while k + 1 < K and p_lanes[p, k + 1] >= 0 and p_lane_start[p, k + 1] <= s:
        k += 1
    return k


@njit(cache=True)
def _next_entry(row_s, row_end, rear):
    """The first junction entry of a path row whose junction lanes an actor with its rear at ``rear``
    has not left (-1 if none)."""
    for k in range(len(row_s)):
        if row_s[k] == np.inf:
            return -1
        if row_end[k] > rear:
            return k
    return -1


@njit(cache=True)
def _conflicting(rw, lane, other):
    for q in range(rw.conflict_ptr[lane], rw.conflict_ptr[lane + 1]):
        if rw.conflict_idx[q] == other:
            return True
    return False


@njit(cache=True)
def _movements_conflict(rw, run_a, run_b):
    """Whether two runs of junction lanes cross or merge (one queue when they start on one lane)."""
    if run_a[0] == run_b[0]:
        return False
    for a in run_a:
        if a < 0:
            break
        for b in run_b:
            if b < 0:
                break
            if a == b or _conflicting(rw, a, b):
                return True
    return False


@njit(cache=True)
def _arrival(dist, v):
    return dist / max(v, 0.5)


@njit(cache=True)
def _rank(rule, turns):
    """1 for movements that give way (a yield sign; a turn under a green light), 0 for the others."""
    return 1 if rule == GIVE_WAY or (rule == SIGNAL and turns) else 0


@njit(cache=True)
def junction_gap(i, rw, path_id, s, speed, active, x, y, z, length, members, settle):
    """Gap from actor i's front bumper to where it must wait before its next junction (inf: it may
    go). It stops at a stop sign first (within ``settle`` m of the line), then waits while a vehicle is
    inside the junction on a lane crossing its own, or one with better right of way comes first: a
    movement that gives way waits for the others arriving within ``GIVE_WAY_S``; equals go in order of
    arrival (arrived: within ``ARRIVE_M`` of the line, or stopped at a stop sign); nobody waits for one
    that gives way unless it can no longer stop (see ``envs.world.junctions``)."""
    p = path_id[i]
    front = s[i] + 0.5 * length[i]
    k = -1
    for q in range(rw.entry_s.shape[1]):
        if rw.entry_s[p, q] == np.inf:
            break
        if max(rw.entry_s[p, q], rw.entry_hold[p, q]) > front - 0.5:  # some lines lie inside the junction
            k = q
            break
    if k < 0:
        return np.inf
    rule, hold = rw.entry_rule[p, k], rw.entry_hold[p, k]
    gap = hold - front
    if (rule == SIGNAL and not rw.entry_turns[p, k]) or gap > ENTRY_RANGE or gap < -1.0:
        return np.inf  # a green light protects a straight movement (a red one stops it in step 3)
    vi = speed[i]
    arrived = rw.stopped_at[i] == hold
    if rule == STOP and not arrived:
        if vi < 0.5 and gap < settle:
            rw.stopped_at[i], rw.stopped_t[i], arrived = hold, rw.t, True
        else:
            return max(gap, 0.0)
    elif rule != STOP and not arrived and gap < ARRIVE_M:
        rw.stopped_at[i], rw.stopped_t[i], arrived = hold, rw.t, True
    if rule != STOP and vi * vi / (2.0 * max(gap, 0.1)) > 1.5 * SIGNAL_DECEL:
        return np.inf  # too late to stop before the junction: commit
    run = rw.entry_run[p, k]
    rank_i = _rank(rule, rw.entry_turns[p, k])
    t_i = _arrival(rw.entry_s[p, k] - front, vi)
    for q in range(len(members) + 1):
        j = 0 if q == len(members) else members[q]
        if j == i or not active[j] or abs(z[j] - z[i]) > LEVEL_GAP:
            continue
        if abs(x[j] - x[i]) > 100.0 or abs(y[j] - y[i]) > 100.0:
            continue
        pj, sj = (rw.ego_path, rw.ego_s) if j == 0 else (path_id[j], s[j])
        if pj < 0:
            continue
        kj = _next_entry(rw.entry_s[pj], rw.entry_end[pj], sj - 0.5 * length[j])
        if kj < 0:
            continue
        if not _movements_conflict(rw, run, rw.entry_run[pj, kj]):
            continue
        dist_j = rw.entry_s[pj, kj] - (sj + 0.5 * length[j])
        if dist_j <= 0.0:
            return max(gap, 0.0)  # it is inside the junction on a crossing lane
        if dist_j > 60.0:
            continue
        vj = speed[j]
        if vj < 0.5 and rw.entry_rule[pj, kj] == SIGNAL:
            continue  # standing at a light: the light (or its own turn) holds it, not us
        committed = vj > 2.0 and vj * vj / (2.0 * dist_j) > COMMITTED_DECEL  # it could not stop any more
        rank_j = _rank(rw.entry_rule[pj, kj], rw.entry_turns[pj, kj])
        if rank_i > rank_j:
            if vj > 0.5 and _arrival(dist_j, vj) < GIVE_WAY_S:
                return max(gap, 0.0)
        elif rank_i < rank_j:
            if committed:
                return max(gap, 0.0)
        else:  # equals: in order of arrival
            arrived_j = rw.stopped_at[j] == rw.entry_hold[pj, kj]
            if j == 0 and vj < 0.5 and rw.t - rw.stopped_t[0] > EGO_TURN_S:
                arrived_j = False  # an ego standing at its line lets the others go
            if arrived_j and arrived:
                if rw.stopped_t[j] < rw.stopped_t[i] or (rw.stopped_t[j] == rw.stopped_t[i] and j < i):
                    return max(gap, 0.0)
            elif arrived_j or committed:
                return max(gap, 0.0)
            elif not arrived:
                t_j = _arrival(dist_j, vj)
                if t_j < t_i or (t_j == t_i and j < i):
                    return max(gap, 0.0)
    return np.inf


@njit(cache=True)
def traffic_accel(
    rows,
    x,
    y,
    yaw,
    speed,
    active,
    path_id,
    s,
    d,
    z,
    length,
    width,
    desired,
    follows_limit,
    T,
    s0,
    a_max,
    b,
    reacts,
    members,
    obstacles,
    p_lanes,
    p_lane_start,
    p_xy,
    p_s,
    p_h,
    p_n,
    lane_limit,
    stop_s,
    stop_sig,
    sig_state,
    rw,
):
    """IDM acceleration of every path-following actor in ``rows``: the tightest constraint wins.

    Constraints: the nearest actor ahead on a lane of the actor's path (lane matching over members
    sorted by lane and arc length), the ego and walkers projected onto the path ahead (geometric),
    the first red / yellow stop line, and for actors that give way, junctions without lights
    (``junction_gap``).
    """
    out = np.empty(len(rows))
    n_lanes = len(lane_limit)
    n_m = len(members)
    # members bucketed by lane, ascending arc length within the lane
    m_lane = np.empty(n_m, np.int64)
    m_s = np.empty(n_m)
    key = np.empty(n_m)
    for q in range(n_m):
        m = members[q]
        k = lane_slot(p_lanes, p_lane_start, path_id[m], s[m])
        m_lane[q] = p_lanes[path_id[m], k]
        m_s[q] = s[m] - p_lane_start[path_id[m], k]
        key[q] = m_lane[q] * 1.0e5 + m_s[q]
    order = np.argsort(key)
    lane_first = np.full(n_lanes + 1, 0, np.int64)
    for q in range(n_m):
        lane_first[m_lane[q] + 1] += 1
    for lane in range(n_lanes):
        lane_first[lane + 1] += lane_first[lane]
    K = p_lanes.shape[1]
    for r in range(len(rows)):
        i = rows[r]
        p = path_id[i]
        si, vi = s[i], speed[i]
        ki = lane_slot(p_lanes, p_lane_start, p, si)
        li = p_lanes[p, ki]
        v0 = lane_limit[li] if follows_limit[i] else desired[i]
        ai, bi, Ti, s0i = a_max[i], b[i], T[i], s0[i]
        acc = idm(vi, v0, np.inf, 0.0, ai, bi, Ti, s0i)
        # 1. lane matching: walk my path's lanes from the current one, first member ahead wins
        best, v_best = np.inf, 0.0
        for k in range(ki, K):
            lane = p_lanes[p, k]
            if lane < 0 or p_lane_start[p, k] - si > 150.0:
                break
            for q in range(lane_first[lane], lane_first[lane + 1]):
                m = members[order[q]]
                pos = p_lane_start[p, k] + m_s[order[q]]
                if pos <= si or m == i or not active[m] or abs(d[m]) >= width[m] / 2 + 1.0:
                    continue
                best, v_best = pos - si - 0.5 * (length[i] + length[m]), speed[m]
                break
            if best < np.inf:
                break
        if best < np.inf:
            acc = min(acc, idm(vi, v0, best, v_best, ai, bi, Ti, s0i))
        # 2. geometric: ego and walkers near the path ahead
        front = si + 0.5 * length[i]
        n = p_n[p]
        k0 = find_segment(p_s[p], n, front)
        best, v_best = np.inf, 0.0
        for q in range(len(obstacles)):
            o = obstacles[q]
            sight = HEAD_ON_RANGE if math.cos(yaw[o] - yaw[i]) < -0.5 else GEOMETRIC_RANGE
            if not active[o] or abs(x[o] - x[i]) > sight + 5.0 or abs(y[o] - y[i]) > sight + 5.0:
                continue
            if abs(z[o] - z[i]) > LEVEL_GAP:
                continue
            # a vehicle's body as its bounding box: a capsule (its centre and two points (length - width)
            # / 2 to the front and back, each reaching half its width) and the box's four corners, which
            # the capsule leaves out (a walker: its centre), so a car nosing into the path, or a path
            # passing a standing car's corner, is seen as the box would be, not only once the centre is
            spine = max(0.5 * (length[o] - width[o]), 0.0)
            points = 1 if spine < 0.25 else 7
            cy, sy = math.cos(yaw[o]), math.sin(yaw[o])
            body_reach = 0.5 * (width[i] + width[o]) + OBSTACLE_MARGIN  # a capsule point's
            corner_reach = 0.5 * width[i] + OBSTACLE_MARGIN  # a corner's (on the body itself)
            for e in range(points):
                if e < 3:
                    off, side, reach = (0.0 if e == 0 else (spine if e == 1 else -spine)), 0.0, body_reach
                else:  # a corner
                    off = 0.5 * length[o] * (1.0 if e < 5 else -1.0)
                    side = 0.5 * width[o] * (1.0 if e % 2 == 1 else -1.0)
                    reach = corner_reach
                ox, oy = x[o] + off * cy - side * sy, y[o] + off * sy + side * cy
                dmin, s_hit, h_hit = np.inf, 0.0, 0.0
                k = k0
                while k < n - 1 and p_s[p, k] < front + sight:
                    ax, ay = p_xy[p, k, 0], p_xy[p, k, 1]
                    bx, by = p_xy[p, k + 1, 0] - ax, p_xy[p, k + 1, 1] - ay
                    L2 = bx * bx + by * by
                    t = 0.0 if L2 < 1e-12 else min(max(((ox - ax) * bx + (oy - ay) * by) / L2, 0.0), 1.0)
                    ex, ey = ox - ax - t * bx, oy - ay - t * by
                    dist = math.sqrt(ex * ex + ey * ey)
                    if dist < dmin:
                        dmin, s_hit, h_hit = dist, p_s[p, k] + t * math.sqrt(L2), p_h[p, k]
                    k += 1
                if dmin < reach and s_hit > front - 0.3:
                    # (the centre's gap counts half the length, as the body lies along the path when
                    # following; an end point's counts the capsule's radius; a corner is on the body)
                    gap = max(s_hit - front - (0.5 * length[o] if e == 0 else (0.5 * width[o] if e < 3 else 0.0)), 0.0)
                    facing = math.cos(yaw[o] - h_hit)
                    along = speed[o] * facing
                    if facing < -0.5:  # coming at us in our lane (an overtaker): stop well back, braking
                        gap = max(gap - HEAD_ON_STANDOFF, 0.0)  # for the speed we close at (a lead at -along)
                    else:
                        along = max(along, 0.0)
                    if gap < best:
                        best, v_best = gap, along
        if best < np.inf:
            acc = min(acc, idm(vi, v0, best, v_best, ai, bi, Ti, s0i))
        # 3. signals: first stop line ahead whose light says stop
        if reacts[i]:
            for k in range(stop_s.shape[1]):
                line = stop_s[p, k]
                if line == np.inf:
                    break
                sg = stop_sig[p, k]
                gap = line - front
                if sg < 0 or gap < -0.5:
                    continue
                state = sig_state[sg]
                if state == RED or (state == YELLOW and vi * vi / (2.0 * max(gap, 0.1)) < SIGNAL_DECEL):
                    acc = min(acc, idm(vi, v0, gap, 0.0, ai, bi, Ti, s0i))
                    break
        # 4. junctions without lights: stop signs, yield signs, crossing traffic
        if rw.yields[i]:
            gap = junction_gap(i, rw, path_id, s, speed, active, x, y, z, length, members, s0i + 1.0)
            if gap < np.inf:
                acc = min(acc, idm(vi, v0, gap, 0.0, ai, bi, Ti, s0i))
        out[r] = min(max(acc, -9.0), ai)
    return out


@njit(cache=True)
def project_window(xy, ss, px, py, lo, hi):
    """Arc length, signed lateral offset (left +) and segment of (px, py) on xy[lo..hi]."""
    best, s_best, lat_best, k_best = np.inf, 0.0, 0.0, lo
    for k in range(lo, hi):
        ax, ay = xy[k, 0], xy[k, 1]
        bx, by = xy[k + 1, 0] - ax, xy[k + 1, 1] - ay
        L2 = bx * bx + by * by
        t = 0.0 if L2 < 1e-12 else min(max(((px - ax) * bx + (py - ay) * by) / L2, 0.0), 1.0)
        ex, ey = px - ax - t * bx, py - ay - t * by
        d2 = ex * ex + ey * ey
        if d2 < best:
            cross = bx * (py - ay) - by * (px - ax)
            best, s_best, k_best = d2, ss[k] + t * math.sqrt(L2), k
            lat_best = math.sqrt(d2) if cross >= 0 else -math.sqrt(d2)
    return s_best, lat_best, k_best


@njit(cache=True)
def _corners(x, y, yaw, length, width, out):
    c, s = math.cos(yaw), math.sin(yaw)
    hl, hw = 0.5 * length, 0.5 * width
    out[0, 0], out[0, 1] = x + c * hl - s * hw, y + s * hl + c * hw
    out[1, 0], out[1, 1] = x + c * hl + s * hw, y + s * hl - c * hw
    out[2, 0], out[2, 1] = x - c * hl + s * hw, y - s * hl - c * hw
    out[3, 0], out[3, 1] = x - c * hl - s * hw, y - s * hl + c * hw


@njit(cache=True)
def _separated(a, b):
    for poly in (a, b):
        for k in range(2):
            ax, ay = -(poly[k + 1, 1] - poly[k, 1]), poly[k + 1, 0] - poly[k, 0]
            amin, amax, bmin, bmax = np.inf, -np.inf, np.inf, -np.inf
            for j in range(4):
                pa = a[j, 0] * ax + a[j, 1] * ay
                pb = b[j, 0] * ax + b[j, 1] * ay
                amin, amax = min(amin, pa), max(amax, pa)
                bmin, bmax = min(bmin, pb), max(bmax, pb)
            if amax < bmin or bmax < amin:
                return True
    return False


@njit(cache=True)
def ego_contacts(b):
    """Boolean mask of actors whose oriented box overlaps the ego's (row 0); separating axes."""
    x, y, yaw, length, width, active, z = b.x, b.y, b.yaw, b.length, b.width, b.active, b.z
    n = len(x)
    out = np.zeros(n, np.bool_)
    ego = np.empty((4, 2))
    other = np.empty((4, 2))
    _corners(x[0], y[0], yaw[0], length[0], width[0], ego)
    r0 = 0.5 * math.sqrt(length[0] ** 2 + width[0] ** 2)
    for j in range(1, n):
        if not active[j] or abs(z[j] - z[0]) > LEVEL_GAP:
            continue
        reach = r0 + 0.5 * math.sqrt(length[j] ** 2 + width[j] ** 2)
        dx, dy = x[j] - x[0], y[j] - y[0]
        if dx * dx + dy * dy >= reach * reach:
            continue
        _corners(x[j], y[j], yaw[j], length[j], width[j], other)
        out[j] = not _separated(ego, other)
    return out


@njit(cache=True)
def advance_path_actors(
    rows,
    acc,
    t,
    dt,
    mode,
    mode_t,
    speed,
    accel,
    s,
    d,
    lc_d0,
    brake_decel,
    brake_hold,
    lc_duration,
    parked,
    active,
    path_id,
    x,
    y,
    yaw,
    p_xy,
    p_s,
    p_h,
    p_n,
):
    """Integrate speed, arc length and lane-change offset of path actors, advance behaviour phases,
    and place them on their paths. An actor reaching the end of its path leaves the map.

    Hard braking: BRAKING at ``brake_decel`` until stopped, HOLDING for ``brake_hold`` s, then DONE
    (plain IDM). Lane change: ACTIVE while the lateral offset decays smoothly to 0, then DONE; a
    ``parked`` actor stands still while WAITING for its trigger.
    """
    yaw_offset = np.zeros(len(rows))
    for r in range(len(rows)):
        i = rows[r]
        m = mode[i]
        a = -brake_decel[i] if m == BRAKING else acc[r]
        v_old = speed[i]
        v_new = 0.0 if m == HOLDING or (m == WAITING and parked[i]) else max(v_old + a * dt, 0.0)
        if m == BRAKING and v_new <= 0.0:
            mode[i], mode_t[i] = HOLDING, t
        elif m == HOLDING and t - mode_t[i] >= brake_hold[i]:
            mode[i] = DONE
        if m == ACTIVE:
            tau = min(max((t + dt - mode_t[i]) / lc_duration[i], 0.0), 1.0)
            d_new = lc_d0[i] * (1.0 - tau * tau * (3.0 - 2.0 * tau))
            yaw_offset[r] = math.atan2((d_new - d[i]) / dt, max(v_new, 1.0))
            d[i] = d_new
            if tau >= 1.0:
                mode[i] = DONE
        s[i] += 0.5 * (v_old + v_new) * dt
        speed[i] = v_new
        accel[i] = (v_new - v_old) / dt
    path_pose(p_xy, p_s, p_h, p_n, path_id, s, d, x, y, yaw, rows)
    for r in range(len(rows)):
        i = rows[r]
        yaw[i] += yaw_offset[r]  # a lane change turns the car towards its target lane
        if s[i] >= p_s[path_id[i], p_n[path_id[i]] - 1] - 0.5:
            active[i] = False
            x[i], y[i], speed[i] = 1e6, 1e6, 0.0


@njit(cache=True)
def route_points_ego(xy, ss, s0, spacing, n, ex, ey, eyaw):
    """``n`` points along a polyline every ``spacing`` m after arc length ``s0``, in the ego frame."""
    out = np.empty((n, 2), np.float32)
    c, sn = math.cos(eyaw), math.sin(eyaw)
    m = xy.shape[0]
    k = find_segment(ss, m, s0)
    for q in range(n):
        sq = min(s0 + spacing * (q + 1), ss[m - 1])
        while k < m - 2 and ss[k + 1] <= sq:
            k += 1
        f = (sq - ss[k]) / max(ss[k + 1] - ss[k], 1e-9)
        px = xy[k, 0] + f * (xy[k + 1, 0] - xy[k, 0]) - ex
        py = xy[k, 1] + f * (xy[k + 1, 1] - xy[k, 1]) - ey
        out[q, 0] = c * px + sn * py
        out[q, 1] = -sn * px + c * py
    return out


@njit(cache=True)
def neighbour_features(b, n_max, max_range, out):
    """Features of the ``n_max`` nearest active actors on the ego's level (ego frame, scaled) into ``out``."""
    x, y, yaw, speed, active, length, width = b.x, b.y, b.yaw, b.speed, b.active, b.length, b.width
    n = len(x)
    c, s = math.cos(yaw[0]), math.sin(yaw[0])
    dist = np.full(n, np.inf)
    for j in range(1, n):
        if active[j] and abs(b.z[j] - b.z[0]) <= LEVEL_GAP:
            dist[j] = math.hypot(x[j] - x[0], y[j] - y[0])
    order = np.argsort(dist)
    q = 0
    for j in order:
        if q >= n_max or dist[j] >= max_range:
            break
        dx, dy = x[j] - x[0], y[j] - y[0]
        dyaw = yaw[j] - yaw[0]
        base = 8 * q
        out[base + 0] = (c * dx + s * dy) / 50.0
        out[base + 1] = (-s * dx + c * dy) / 50.0
        out[base + 2] = (speed[j] * math.cos(dyaw) - speed[0]) / 10.0
        out[base + 3] = speed[j] * math.sin(dyaw) / 10.0
        out[base + 4] = math.cos(dyaw)
        out[base + 5] = math.sin(dyaw)
        out[base + 6] = length[j] / 5.0
        out[base + 7] = width[j] / 2.0
        q += 1


@njit(cache=True)
def box_inside(index, tiles, ox, oy, res, x, y, yaw, length, width):
    """True if all four corners of the box lie on a tiled mask (``TiledRaster`` arrays; origin ox, oy)."""
    c, s = math.cos(yaw), math.sin(yaw)
    hl, hw = 0.5 * length, 0.5 * width
    for sl, sw in ((1.0, 1.0), (1.0, -1.0), (-1.0, -1.0), (-1.0, 1.0)):
        px = x + c * hl * sl - s * hw * sw
        py = y + s * hl * sl + c * hw * sw
        if tiled_value(index, tiles, ox, oy, res, px, py, 0) == 0:
            return False
    return True


@njit(cache=True)
def due_triggers(mode, active, has_trigger, trigger_time, trigger_distance, x, y, t):
    """Indices of waiting actors whose trigger fires now (time reached, or the ego close enough)."""
    out = []
    for i in range(1, len(x)):
        if mode[i] != WAITING or not active[i] or not has_trigger[i]:
            continue
        if t >= trigger_time[i] or math.hypot(x[i] - x[0], y[i] - y[0]) < trigger_distance[i]:
            out.append(i)
    return out


@njit(cache=True)
def state_features(out, offset, b, route_xy, route_s, route_s0, n_route, spacing, n_neigh, max_range):
    """Route points (every other of ``n_route``, scaled) and neighbour features, written from ``offset``."""
    pts = route_points_ego(route_xy, route_s, route_s0, spacing, n_route, b.x[0], b.y[0], b.yaw[0])
    k = offset
    for q in range(1, n_route, 2):
        out[k] = pts[q, 0] / 50.0
        out[k + 1] = pts[q, 1] / 50.0
        k += 2
    neighbour_features(b, n_neigh, max_range, out[k : k + 8 * n_neigh])


@njit(cache=True)
def ego_bicycle(
    x, y, yaw, speed, accel, steer, accel_cmd, steer_cmd, dt, a_min, a_max, max_steer, max_rate, max_speed, wheelbase
):
    """Kinematic bicycle (centre-of-mass reference) with actuator limits; updates row 0 in place.

    Returns the new wheel angle, yaw rate and distance travelled.
    """
    target = min(max(steer_cmd, -max_steer), max_steer)
    rate = max_rate * dt
    steer = steer + min(max(target - steer, -rate), rate)
    a = min(max(accel_cmd, a_min), a_max)
    v0 = speed[0]
    v1 = min(max(v0 + a * dt, 0.0), max_speed)
    vm = 0.5 * (v0 + v1)
    beta = math.atan(0.5 * math.tan(steer))
    h = yaw[0]
    x[0] += vm * math.cos(h + beta) * dt
    y[0] += vm * math.sin(h + beta) * dt
    yaw_rate = vm / (0.5 * wheelbase) * math.sin(beta)
    yaw[0] = (h + yaw_rate * dt + math.pi) % (2 * math.pi) - math.pi
    accel[0] = (v1 - v0) / dt
    speed[0] = v1
    return steer, yaw_rate, vm * dt


@njit(cache=True)
def ego_checks(route_xy, route_s, seg, full, b, index, tiles, ox, oy, res):
    """Per-step ego bookkeeping in one call: route projection (a window around the last segment,
    or all of it), the off-road test of the ego's box and the mask of actors it touches."""
    last = route_xy.shape[0] - 1
    lo = 0 if full else max(seg - 2, 0)
    hi = last if full else min(seg + 10, last)
    s, lat, k = project_window(route_xy, route_s, b.x[0], b.y[0], lo, hi)
    if not full and k + 1 >= hi and hi < last:  # ran off the window: search all
        s, lat, k = project_window(route_xy, route_s, b.x[0], b.y[0], 0, last)
    inside = box_inside(index, tiles, ox, oy, res, b.x[0], b.y[0], b.yaw[0], b.length[0], b.width[0])
    return s, lat, k, not inside, ego_contacts(b)


@njit(cache=True)
def ego_threat(b, margin):
    """Time to collision (s) and bumper gap (m) to the nearest actor in the ego's straight corridor.

    Constant-velocity projection along the ego's heading; inf when nothing is ahead or closing.
    """
    x, y, yaw, speed, active, length, width = b.x, b.y, b.yaw, b.speed, b.active, b.length, b.width
    c, s = math.cos(yaw[0]), math.sin(yaw[0])
    best_gap, best_ttc = np.inf, np.inf
    for j in range(1, len(x)):
        if not active[j] or abs(b.z[j] - b.z[0]) > LEVEL_GAP:
            continue
        dx, dy = x[j] - x[0], y[j] - y[0]
        lon, lat = c * dx + s * dy, -s * dx + c * dy
        if lon <= 0.0 or lon > 80.0 or abs(lat) > 0.5 * (width[0] + width[j]) + margin:
            continue
        gap = max(lon - 0.5 * (length[0] + length[j]), 0.0)
        if gap < best_gap:
            best_gap = gap
        closing = speed[0] - speed[j] * math.cos(yaw[j] - yaw[0])
        if closing > 0.01 and gap / closing < best_ttc:
            best_ttc = gap / closing
    return best_ttc, best_gap
