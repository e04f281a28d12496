"""Right of way at junctions, as arrays for the traffic kernel.

Each path's junction entries (where it enters a junction lane) carry a rule: ``PRIORITY`` (no sign),
``YIELD`` (a yield sign), ``STOP`` (a stop sign: stop first) or ``SIGNAL`` (a traffic light decides;
under its green a turning movement still gives way to the straight ones it crosses or joins).

Two junction lanes *conflict* when their centrelines come closer than a car's width somewhere other
than a shared start: crossing and merging movements. A movement is the run of junction lanes from
its entry to the exit, so two that share a later lane (lanes merging inside a junction) conflict too.

Background vehicles (``yields_at_junctions``) enter only when no conflicting vehicle is inside the
junction and none with better right of way arrives first: minor approaches give way to priority
ones within ``GIVE_WAY_S``, equals go in order of arrival, as CARLA's Traffic Manager orders
vehicles at junctions without lights.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from scipy.spatial import cKDTree

from envs.world.paths import PathTable
from scenarios import geometry as geo
from scenarios.maps import RoadMap


class Rule(IntEnum):
    PRIORITY = 0
    YIELD = 1
    STOP = 2
    SIGNAL = 3


CONFLICT_M = 2.5  # centrelines closer than this conflict (two cars' half widths and a margin)
SHARED_START_M = 6.0  # lanes leaving the same point are one queue until they part this far along
SIGN_REACH_M = 25.0  # a sign's line this far before the junction governs the entry
SIGN_INSIDE_M = 5.0  # towns put some lines just inside the junction lane: those govern its entry too
HOLD_BEFORE_M = 1.5  # where to wait on an entry without a line
TURN_RAD = 0.5  # a movement turning more than this gives way to the straight ones under the same green


@dataclass(frozen=True)
class JunctionRules:
    """Per path, its junction entries in order ([P, E], inf / -1 padded), and the conflict table."""

    entry_s: np.ndarray  # arc length on the path where the junction lane starts
    entry_hold: np.ndarray  # arc length of the front bumper where a vehicle waits (the sign's line)
    entry_end: np.ndarray  # arc length on the path where its run of junction lanes ends
    entry_run: np.ndarray  # [P, E, R] the junction lanes driven from the entry on (-1 padded)
    entry_rule: np.ndarray  # Rule
    entry_turns: np.ndarray  # [P, E] bool: the movement turns (it gives way under a green light too)
    conflict_ptr: np.ndarray  # [n_lanes + 1] CSR offsets into conflict_idx
    conflict_idx: np.ndarray  # lane indices that conflict with each lane

    def next_entry(self, path: int, front: float) -> int:
        """The first entry of ``path`` whose line a front bumper at ``front`` has not passed (some lines
        lie inside the junction lane), -1 if none: ``kernels.junction_gap``'s choice, for Python callers."""
        ahead = np.flatnonzero(np.maximum(self.entry_s[path], self.entry_hold[path]) > front - 0.5)
        return int(ahead[0]) if len(ahead) else -1


def junction_rules(road_map: RoadMap, lane_index: dict[str, int], paths: PathTable) -> JunctionRules:
    lane_ids = list(lane_index)
    in_junction = np.array([road_map.lanes[k].junction is not None for k in lane_ids])
    lines: dict[int, list] = {}
    for sl in road_map.stop_lines:
        lines.setdefault(lane_index[sl.lane], []).append(sl)
    entries: list[list[tuple[float, float, int, int]]] = []
    for p in range(len(paths.length)):
        lanes, starts = paths.lanes[p], paths.lane_start[p]
        found = []
        for k in range(1, len(lanes)):
            li, prev = int(lanes[k]), int(lanes[k - 1])
            if li < 0 or prev < 0:
                break
            if not in_junction[li] or in_junction[prev]:
                continue
            entry = float(starts[k])
            rule, hold = Rule.PRIORITY, entry - HOLD_BEFORE_M
            governing = [(float(starts[k - 1]) + sl.s, sl) for sl in lines.get(prev, ())]
            governing += [(entry + sl.s, sl) for sl in lines.get(li, ()) if sl.s < SIGN_INSIDE_M]
            for at, sl in governing:
                if entry - at > SIGN_REACH_M:
                    continue
                rule = Rule.SIGNAL if sl.signal is not None else Rule.YIELD if sl.give_way else Rule.STOP
                hold = at
                break
            run = [li]
            for nxt in lanes[k + 1 :].tolist():
                if nxt < 0 or not in_junction[nxt]:
                    break
                run.append(int(nxt))
            end = float(starts[k + len(run)]) if k + len(run) < len(lanes) and lanes[k + len(run)] >= 0 else np.inf
            first, last = road_map.lanes[lane_ids[run[0]]], road_map.lanes[lane_ids[run[-1]]]
            turns = abs(geo.wrap_angle(float(last.heading[-1] - first.heading[0]))) > TURN_RAD
            found.append((entry, hold, end, int(rule), run, turns))
        entries.append(found)
    E = max([len(x) for x in entries] + [1])
    P = len(entries)
    entry_s, entry_hold = np.full((P, E), np.inf), np.full((P, E), np.inf)
    entry_end, entry_rule = np.full((P, E), np.inf), np.full((P, E), -1, np.int64)
    R = max([len(row[4]) for found in entries for row in found] + [1])
    entry_run, entry_turns = np.full((P, E, R), -1, np.int64), np.zeros((P, E), bool)
    for p, found in enumerate(entries):
        for k, (s, hold, end, rule, run, turns) in enumerate(found):
            entry_s[p, k], entry_hold[p, k], entry_end[p, k], entry_rule[p, k] = s, hold, end, rule
            entry_run[p, k, : len(run)], entry_turns[p, k] = run, turns
    ptr, idx = conflicts(road_map, lane_index)
    return JunctionRules(entry_s, entry_hold, entry_end, entry_run, entry_rule, entry_turns, ptr, idx)


_CONFLICTS: dict[int, tuple[RoadMap, np.ndarray, np.ndarray]] = {}


def conflicts(road_map: RoadMap, lane_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """CSR table of the junction lanes each lane conflicts with (cached per map object)."""
    hit = _CONFLICTS.get(id(road_map))
    if hit is not None and hit[0] is road_map:
        return hit[1], hit[2]
    pts, lane_of, s_of = [], [], []
    for lane_id, li in lane_index.items():
        lane = road_map.lanes[lane_id]
        if lane.junction is None:
            continue
        s = np.append(np.arange(0.0, lane.length, 1.0), lane.length)
        pts.append(
            np.column_stack([np.interp(s, lane.s, lane.centerline[:, 0]), np.interp(s, lane.s, lane.centerline[:, 1])])
        )
        lane_of.append(np.full(len(s), li))
        s_of.append(s)
    n = len(lane_index)
    pairs: set[tuple[int, int]] = set()
    if pts:
        xy, owner, along = np.concatenate(pts), np.concatenate(lane_of), np.concatenate(s_of)
        junction = np.array([road_map.lanes[k].junction or "" for k in lane_index], dtype=object)
        close = cKDTree(xy).query_pairs(CONFLICT_M, output_type="ndarray")
        a, b = owner[close[:, 0]], owner[close[:, 1]]
        keep = (a != b) & (junction[a] == junction[b])
        parted = np.maximum(along[close[:, 0]], along[close[:, 1]]) > SHARED_START_M
        shared_start = _shared_starts(road_map, lane_index, a[keep], b[keep])
        keep[keep] &= ~shared_start | parted[keep]
        pairs = {(int(x), int(y)) for x, y in zip(a[keep], b[keep])}
        pairs |= {(y, x) for x, y in pairs}
    counts = np.zeros(n + 1, np.int64)
    ordered = sorted(pairs)
    for x, _ in ordered:
        counts[x + 1] += 1
    ptr = np.cumsum(counts)
    idx = np.array([y for _, y in ordered], np.int64)
    if len(_CONFLICTS) > 16:
        _CONFLICTS.pop(next(iter(_CONFLICTS)))
    _CONFLICTS[id(road_map)] = (road_map, ptr, idx)
    return ptr, idx


def _shared_starts(road_map: RoadMap, lane_index: dict[str, int], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether lanes a[k] and b[k] start at the same point (one queue before they part)."""
    ids = list(lane_index)
    first = np.array([road_map.lanes[k].centerline[0] for k in ids])
    return np.hypot(*(first[a] - first[b]).T) < 1.0
