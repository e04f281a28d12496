"""An OpenDRIVE file as a :class:`scenarios.maps.RoadMap`.

Every lane of every lane section becomes a map lane ``"{road}_{section}_{lane}"`` whose centreline
runs in its driving direction (right lanes along s, left lanes against it: right-hand traffic),
sampled about every metre with its width, height and type. Successors follow the lane links inside a
road, the road links at its ends and the junctions' connections. Traffic lights, stop and yield signs
(and the signal references that repeat them) become signals and stop lines on the lanes they govern;
crosswalk objects become crosswalks. ``frame="carla"`` flips y as CARLA does (CARLA x, y = x, -y of the
file; yaw = -heading), the frame of the Leaderboard's route files.

What cannot be imported faithfully is an error (:class:`MapImportError`); what can be imported with a
defect (a link to a missing road, an unknown signal type) is imported and counted in the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from scenarios.maps import Crosswalk, Lane, Marking, RoadMap, Signal, StopLine
from scenarios.opendrive.lanes import RoadGeometry
from scenarios.opendrive.reader import read_opendrive
from scenarios.opendrive.records import LaneRecord, LaneSection, MapImportError, OpenDrive, Road

Frame = Literal["carla", "opendrive"]
STEP = 1.0  # m between centreline samples
SECTION_END_EPS = 1e-6  # m: the last sample of a section, just before the next one starts
TRAFFIC_LIGHT, STOP_SIGN, YIELD_SIGN = "1000001", "206", "205"
DEFAULT_SPEED = 13.9  # m/s where the file gives none
MARKINGS: dict[str, Marking] = {
    "solid": "solid",
    "broken": "dashed",
    "broken broken": "dashed",
    "solid solid": "double_solid",
    "solid broken": "double_solid",
    "broken solid": "double_solid",
    "none": "none",
}


@dataclass
class ImportReport:
    """What the import made of a file: counts and the warnings of defects it imported anyway."""

    roads: int = 0
    junctions: int = 0
    lanes_by_type: dict[str, int] = field(default_factory=dict)
    traffic_lights: int = 0
    stop_signs: int = 0
    yield_signs: int = 0
    crosswalks: int = 0
    warnings: list[str] = field(default_factory=list)


def lane_key(road: str, section: int, lane: int) -> str:
    return f"{road}_{section}_{lane}"


def _samples(a: float, b: float) -> np.ndarray:
    """Arc lengths from ``a`` to just before ``b``: a record (a lane offset) that starts at ``b`` belongs
    to the next section, and at ``b`` itself it would already be in force (Town06 shifts its lanes
    2.4 m there)."""
    n = max(2, int(math.ceil((b - a) / STEP)) + 1)
    s = np.linspace(a, b, n)
    s[-1] = b - SECTION_END_EPS
    return s


def _marking(lane: LaneRecord, s: float) -> Marking:
    marks = [m for m in lane.road_marks if m.s <= s + 1e-9]
    mark = marks[-1] if marks else None
    return MARKINGS.get(mark.type, "solid") if mark is not None else "none"


def _speed(road: Road, lane: LaneRecord, s: float) -> float:
    for records in (lane.speeds, road.speed):
        current = [v for at, v in records if at <= s + 1e-9]
        if current:
            return float(min(max(current[-1], 0.5), 100.0))
    return DEFAULT_SPEED


class _Builder:
    def __init__(self, odr: OpenDrive, frame: Frame) -> None:
        self.odr, self.flip = odr, frame == "carla"
        self.report = ImportReport(roads=len(odr.roads), junctions=len(odr.junctions), warnings=list(odr.warnings))
        self.lanes: dict[str, Lane] = {}
        self.geometry: dict[str, RoadGeometry] = {}
        self.kept: set[str] = set()

    def xy(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.stack([x, -y if self.flip else y], -1)

    def build(self) -> RoadMap:
        for road in self.odr.roads.values():
            self.geometry[road.id] = RoadGeometry(road, f"{self.odr.path}: road {road.id}")
            for k, section in enumerate(road.sections):
                for lane_id, lane in section.lanes.items():
                    if lane_id != 0:
                        self._lane(road, k, section, lane)
        self._link()
        signals, stop_lines = self._signals()
        crosswalks = self._crosswalks()
        return RoadMap(
            lanes=self.lanes,
            signals=signals,
            stop_lines=stop_lines,
            crosswalks=crosswalks,
            sidewalks=sidewalk_polygons(self.lanes),
        )

    def _lane(self, road: Road, k: int, section: LaneSection, lane: LaneRecord) -> None:
        if section.end - section.s < 1e-3:
            return
        s = _samples(section.s, section.end)
        x, y, z, _, width = self.geometry[road.id].centre(section, lane.id, s)
        if width.max() < 0.1:  # a lane that only exists as a zero-width placeholder
            return
        along = lane.id < 0  # right lanes drive along s
        order = slice(None) if along else slice(None, None, -1)
        key = lane_key(road.id, k, lane.id)
        self.report.lanes_by_type[lane.type] = self.report.lanes_by_type.get(lane.type, 0) + 1
        inner_lane = section.lanes.get(lane.id - 1 if lane.id > 0 else lane.id + 1)
        inner = _marking(inner_lane, section.s) if inner_lane is not None else "none"
        outer = _marking(lane, section.s)
        self.lanes[key] = Lane(
            id=key,
            centerline=self.xy(x, y)[order],
            widths=np.clip(width, 0.0, 20.0)[order],
            z=z[order],
            speed_limit=_speed(road, lane, section.s),
            junction=road.junction,
            kind=lane.type,
            left_marking=inner,  # travelling in its direction, the inner border is on the left
            right_marking=outer,
        )

    # --- topology ------------------------------------------------------------------------------------------------
    def _next_lanes(self, road: Road, k: int, lane: LaneRecord) -> list[str]:
        """The lanes a vehicle on (road, section k, lane) enters when it leaves it."""
        forward = lane.id < 0
        target = lane.successor if forward else lane.predecessor
        last = len(road.sections) - 1
        if (forward and k < last) or (not forward and k > 0):
            j = k + 1 if forward else k - 1
            return [lane_key(road.id, j, target)] if target is not None else []
        link = road.successor if forward else road.predecessor
        if link is None:
            return []
        if link.element_type == "road":
            other = self.odr.roads.get(link.element_id)
            if other is None:
                self.report.warnings.append(f"{self.odr.path}: road {road.id}: link to missing road {link.element_id}")
                return []
            if target is None:
                return []
            j = 0 if link.contact_point == "start" else len(other.sections) - 1
            return [lane_key(other.id, j, target)]
        junction = self.odr.junctions.get(link.element_id)
        if junction is None:
            self.report.warnings.append(f"{self.odr.path}: road {road.id}: link to missing junction {link.element_id}")
            return []
        out = []
        for c in junction.connections:
            if c.incoming != road.id:
                continue
            other = self.odr.roads.get(c.connecting)
            if other is None:
                self.report.warnings.append(
                    f"{self.odr.path}: junction {junction.id}: connection {c.id} to missing road {c.connecting}"
                )
                continue
            j = 0 if c.contact_point == "start" else len(other.sections) - 1
            out += [lane_key(other.id, j, to) for frm, to in c.lane_links if frm == lane.id]
        return out

    def _link(self) -> None:
        for road in self.odr.roads.values():
            for k, section in enumerate(road.sections):
                for lane in section.lanes.values():
                    key = lane_key(road.id, k, lane.id)
                    if key not in self.lanes:
                        continue
                    nxt = [n for n in self._next_lanes(road, k, lane) if n in self.lanes]
                    self.lanes[key].successors = sorted(set(nxt))
        for lane in self.lanes.values():
            for n in lane.successors:
                self.lanes[n].predecessors.append(lane.id)
        for road in self.odr.roads.values():  # same-direction neighbours and the oncoming lane
            for k, section in enumerate(road.sections):
                for lane_id in section.lanes:
                    key = lane_key(road.id, k, lane_id)
                    if key not in self.lanes:
                        continue
                    lane = self.lanes[key]
                    inner, outer = (lane_id + 1, lane_id - 1) if lane_id < 0 else (lane_id - 1, lane_id + 1)
                    for attr, other in (("left", inner), ("right", outer)):
                        ref = lane_key(road.id, k, other)
                        if other != 0 and ref in self.lanes and self.lanes[ref].kind == lane.kind:
                            setattr(lane, attr, ref)
                    if abs(lane_id) == 1:
                        ref = lane_key(road.id, k, -lane_id)
                        lane.opposite = ref if ref in self.lanes else None

    # --- signals, stop lines, crosswalks ----------------------------------------------------------------------
    def _signals(self) -> tuple[dict[str, Signal], list[StopLine]]:
        """Traffic lights are drawn where their signal stands and govern the lanes their signal references
        (or their own validity) name; stop signs put a stop line on the lanes they govern."""
        roads = self.odr.roads.values()
        originals = {sig.id: sig for road in roads for sig in road.signals if sig.reference_of is None}
        signals: dict[str, Signal] = {}
        stop_lines: list[StopLine] = []
        for road in roads:
            for sig in road.signals:
                base = originals.get(sig.reference_of or sig.id)
                if base is None:
                    self.report.warnings.append(f"{self.odr.path}: road {road.id}: reference {sig.id} to no signal")
                    continue
                kind = self._kind(road, base, counted=sig.reference_of is None)
                if kind is None:
                    continue
                if kind == TRAFFIC_LIGHT and base.id not in signals:
                    signals[base.id] = self._light(base)
                for lane, at in self._governed(road, sig):
                    if kind == TRAFFIC_LIGHT and lane not in signals[base.id].lanes:
                        signals[base.id].lanes.append(lane)
                    light = base.id if kind == TRAFFIC_LIGHT else None
                    stop_lines.append(StopLine(f"{sig.id}@{lane}", lane, at, light, give_way=kind == YIELD_SIGN))
        return signals, stop_lines

    def _kind(self, road: Road, base, counted: bool) -> str | None:
        """TRAFFIC_LIGHT, STOP_SIGN, YIELD_SIGN, or None for a sign that controls no right of way."""
        kind = base.type
        if kind not in (TRAFFIC_LIGHT, STOP_SIGN, YIELD_SIGN):
            if not base.dynamic:
                return None  # speed limits, information signs
            if counted:
                self.report.warnings.append(
                    f"{self.odr.path}: road {road.id}: dynamic signal {base.id} of type {kind!r}: a traffic light"
                )
            kind = TRAFFIC_LIGHT
        if counted:
            if kind == TRAFFIC_LIGHT:
                self.report.traffic_lights += 1
            elif kind == STOP_SIGN:
                self.report.stop_signs += 1
            else:
                self.report.yield_signs += 1
        return kind

    def _light(self, base) -> Signal:
        g = self.geometry[base.road]
        x, y, _ = g.point(np.array([base.s]), np.array([base.t]))
        heading = float(g.line.evaluate(base.s)[2][0]) + (math.pi if base.orientation == "-" else 0.0)
        facing = heading + math.pi  # towards the traffic it governs
        pos = self.xy(x, y)[0]
        return Signal(base.id, (float(pos[0]), float(pos[1])), -facing if self.flip else facing, [])

    def _governed(self, road: Road, sig) -> list[tuple[str, float]]:
        """(lane, arc length along it) of the driving lanes a signal or reference at road s governs: the
        lanes of its validity, or without one those driving in its orientation ("+": along s)."""
        k = max(0, int(np.searchsorted([sec.s for sec in road.sections], sig.s, side="right")) - 1)
        section = road.sections[k]
        if sig.validity:
            ids = [i for i in section.lanes if i != 0 and any(min(a, b) <= i <= max(a, b) for a, b in sig.validity)]
        elif sig.orientation == "-":
            ids = section.left_ids
        elif sig.orientation == "+":
            ids = section.right_ids
        else:
            ids = section.right_ids + section.left_ids
        out = []
        for lane_id in ids:
            key = lane_key(road.id, k, lane_id)
            lane = self.lanes.get(key)
            if lane is None or lane.kind != "driving":
                continue
            along = sig.s - section.s if lane_id < 0 else section.end - sig.s
            out.append((key, float(np.clip(along, 0.0, lane.length))))
        return out

    def _crosswalks(self) -> list[Crosswalk]:
        out = []
        for road in self.odr.roads.values():
            g = self.geometry[road.id]
            for obj in road.objects:
                if obj.type != "crosswalk" or len(obj.outline) < 3:
                    continue
                corners = np.asarray(obj.outline, float)
                if obj.outline_is_road:
                    x, y, _ = g.point(corners[:, 0], corners[:, 1])
                else:
                    x0, y0, _ = g.point(np.array([obj.s]), np.array([obj.t]))
                    h = g.line.evaluate(obj.s)[2][0] + obj.hdg
                    c, s = math.cos(h), math.sin(h)
                    x = x0[0] + c * corners[:, 0] - s * corners[:, 1]
                    y = y0[0] + s * corners[:, 0] + c * corners[:, 1]
                out.append(Crosswalk(f"{road.id}_{obj.id}", self.xy(np.asarray(x), np.asarray(y))))
                self.report.crosswalks += 1
        return out


def sidewalk_polygons(lanes: dict[str, Lane]) -> list[np.ndarray]:
    """The outlines of the sidewalk lanes (drawn as raised kerbs, as the procedural maps' sidewalks are)."""
    out = []
    for lane in lanes.values():
        if lane.kind == "sidewalk" and lane.polygon.geom_type == "Polygon" and not lane.polygon.is_empty:
            out.append(np.asarray(lane.polygon.exterior.coords))
    return out


def build_road_map(odr: OpenDrive, frame: Frame = "carla") -> tuple[RoadMap, ImportReport]:
    """The road map of parsed records, and the import's report."""
    builder = _Builder(odr, frame)
    try:
        road_map = builder.build()
    except ValueError as e:
        if isinstance(e, MapImportError):
            raise
        raise MapImportError(f"{odr.path}: {e}") from None
    return road_map, builder.report


def import_opendrive(path: str, frame: Frame = "carla", text: str | None = None) -> tuple[RoadMap, ImportReport]:
    """The road map of an OpenDRIVE file and the import's report."""
    return build_road_map(read_opendrive(path, text), frame)
