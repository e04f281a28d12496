"""The ``carla`` client as the oracle of an import: what CARLA itself makes of the same file.

``carla.Map(name, xodr_text)`` builds CARLA's map with no server. :func:`compare_with_carla` samples every
driving lane of the import at regular ``s``, asks CARLA for the waypoint at the same (road, lane, s),
and compares the lane-centre position, width and heading (in CARLA's frame: y and yaw flipped), then
the lane graph (CARLA's topology edges against the import's successors).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from scenarios.opendrive.convert import build_road_map, lane_key
from scenarios.opendrive.lanes import RoadGeometry
from scenarios.opendrive.reader import read_opendrive, read_text

SAMPLE_EVERY = 2.0  # m along each lane


def _stats(errors: list[float]) -> dict[str, float]:
    a = np.asarray(errors, float)
    if not len(a):
        return {"median": float("nan"), "max": float("nan"), "p99": float("nan")}
    return {"median": float(np.median(a)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def compare_with_carla(path: str | Path, sample_every: float = SAMPLE_EVERY) -> dict[str, Any]:
    """Errors of the import against ``carla.Map`` on ``path``'s driving lanes (metres and degrees)."""
    import carla  # the PyPI client; no server needed

    text = read_text(path)
    t0 = time.perf_counter()
    odr = read_opendrive(path, text)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    cmap = carla.Map(Path(path).name.split(".")[0], text)
    t_carla = time.perf_counter() - t0
    pos, width, heading, missing_waypoints = [], [], [], 0
    ours: set[tuple[str, str]] = set()
    driving: set[str] = set()
    for road in odr.roads.values():
        g = RoadGeometry(road, f"{path}: road {road.id}")
        for k, section in enumerate(road.sections):
            for lane_id, lane in section.lanes.items():
                if lane_id == 0 or lane.type != "driving" or section.end - section.s < 0.05:
                    continue
                driving.add(lane_key(road.id, k, lane_id))
                n = max(2, int((section.end - section.s) / sample_every))
                found = [
                    cmap.get_waypoint_xodr(int(road.id), lane_id, float(at))
                    for at in np.linspace(section.s + 0.01, section.end - 0.01, n)
                ]
                missing_waypoints += sum(wp is None for wp in found)
                found = [wp for wp in found if wp is not None]
                if not found:
                    continue
                # compare at CARLA's own s: it keeps s (and positions) in float32, so a sample on a record's
                # border may round to the record before it
                x, y, _, h, w = g.centre(section, lane_id, np.array([wp.s for wp in found], dtype=float))
                for i, wp in enumerate(found):
                    loc = wp.transform.location
                    pos.append(math.hypot(loc.x - x[i], loc.y + y[i]))
                    width.append(abs(wp.lane_width - w[i]))
                    ours_yaw = -(h[i] + (math.pi if lane_id > 0 else 0.0))
                    d = math.radians(wp.transform.rotation.yaw) - ours_yaw
                    heading.append(abs(math.degrees(math.atan2(math.sin(d), math.cos(d)))))
    road_map, _ = build_road_map(odr, "carla")
    for key in driving:
        if key in road_map.lanes:
            ours |= {(key, n) for n in road_map.lanes[key].successors}
    theirs, dead_ends = set(), set()
    for a, b in cmap.get_topology():
        edge = (lane_key(str(a.road_id), a.section_id, a.lane_id), lane_key(str(b.road_id), b.section_id, b.lane_id))
        if edge[0] == edge[1]:  # CARLA's way of listing a lane that leads nowhere (its start to its end)
            dead_ends.add(edge[0])
        else:
            theirs.add(edge)
    ours_dead = driving - {a for a, _ in ours}

    def unlinked(key: str) -> bool:
        """The file gives this lane no link onwards inside its road (CARLA may still guess one)."""
        road_id, k, lane_id = key.rsplit("_", 2)
        road, k, lane_id = odr.roads[road_id], int(k), int(lane_id)
        lane = road.sections[k].lanes[lane_id]
        inside = k < len(road.sections) - 1 if lane_id < 0 else k > 0
        return inside and (lane.successor if lane_id < 0 else lane.predecessor) is None

    return {
        "file": str(path),
        "driving_lanes": len(driving),
        "samples": len(pos),
        "samples_carla_could_not_place": missing_waypoints,
        "position_error_m": _stats(pos),
        "width_error_m": _stats(width),
        "heading_error_deg": _stats(heading),
        "topology": {
            "edges_ours": len(ours),
            "edges_carla": len(theirs),
            "only_ours": sorted(ours - theirs)[:20],
            "only_carla": sorted(theirs - ours)[:20],
            "n_only_ours": len(ours - theirs),
            "n_only_carla": len(theirs - ours),
            "n_only_carla_unlinked_in_file": sum(unlinked(a) for a, _ in theirs - ours),
            "dead_ends_carla": len(dead_ends),
            "n_dead_ends_only_carla": len(dead_ends - ours_dead),  # lanes CARLA ends where the import goes on
        },
        "read_s": round(t_read, 3),
        "carla_build_s": round(t_carla, 3),
    }
