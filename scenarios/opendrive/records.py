"""OpenDRIVE (1.4-1.8) as typed records: what the file says, before any geometry is evaluated.

Names follow the standard (ASAM OpenDRIVE): roads with a plan view of geometries, an elevation
profile, lane offsets and lane sections; lanes with cubic widths or borders, road marks and speeds;
junctions with connections and lane links; signals, signal references and controllers; objects.
Every ``s`` is the road's reference-line arc length; polynomials are ``a + b ds + c ds^2 + d ds^3``
with ``ds`` measured from their own start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class MapImportError(ValueError):
    """A file that cannot be imported: names the file, the element (road / section / lane id) and why."""


@dataclass(frozen=True)
class Poly3:
    s: float  # where it starts (absolute road s, or a lane section's sOffset made absolute)
    a: float
    b: float = 0.0
    c: float = 0.0
    d: float = 0.0


def eval_piecewise(polys: list[Poly3], s: np.ndarray, derivative: bool = False) -> np.ndarray:
    """The value (or ds-derivative) at ``s`` of the record in force: the last one starting at or before it."""
    s = np.asarray(s, dtype=float)
    if not polys:
        return np.zeros_like(s)
    starts = np.array([p.s for p in polys])
    k = np.clip(np.searchsorted(starts, s, side="right") - 1, 0, len(polys) - 1)
    coef = np.array([[p.a, p.b, p.c, p.d] for p in polys])[k]
    ds = s - starts[k]
    if derivative:
        return coef[..., 1] + 2 * coef[..., 2] * ds + 3 * coef[..., 3] * ds * ds
    return coef[..., 0] + ds * (coef[..., 1] + ds * (coef[..., 2] + ds * coef[..., 3]))


@dataclass(frozen=True)
class Geometry:
    """One plan-view piece: ``kind`` is line, arc, spiral, poly3 or paramPoly3, ``params`` its attributes."""

    s: float
    x: float
    y: float
    hdg: float
    length: float
    kind: str
    params: dict[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True)
class RoadMark:
    s: float  # absolute road s
    type: str  # solid, broken, solid solid, solid broken, broken solid, broken broken, botts dots, curb, none, ...
    lane_change: str | None  # increase, decrease, both, none (None: derived from the type)


@dataclass
class LaneRecord:
    id: int
    type: str  # driving, parking, shoulder, sidewalk, biking, median, border, restricted, ...
    level: bool = False
    widths: list[Poly3] = field(default_factory=list)  # s absolute
    borders: list[Poly3] = field(default_factory=list)  # instead of widths: the outer border's t
    road_marks: list[RoadMark] = field(default_factory=list)
    speeds: list[tuple[float, float]] = field(default_factory=list)  # (absolute s, m/s)
    predecessor: int | None = None
    successor: int | None = None


@dataclass
class LaneSection:
    s: float
    end: float  # where the next section (or the road) starts
    lanes: dict[int, LaneRecord]  # by id; 0 is the centre lane (no width)
    single_side: bool = False

    @property
    def left_ids(self) -> list[int]:
        return sorted(i for i in self.lanes if i > 0)

    @property
    def right_ids(self) -> list[int]:
        return sorted((i for i in self.lanes if i < 0), reverse=True)


@dataclass(frozen=True)
class Link:
    element_type: str  # road or junction
    element_id: str
    contact_point: str | None  # start or end (roads only)


@dataclass
class SignalRecord:
    id: str
    road: str
    s: float
    t: float
    orientation: str  # "+" (valid for traffic driving along s), "-" (against s) or "none"
    dynamic: bool
    type: str
    subtype: str
    country: str
    value: float | None
    name: str
    z_offset: float = 0.0
    validity: list[tuple[int, int]] = field(default_factory=list)  # (fromLane, toLane)
    reference_of: str | None = None  # a signalReference: the id of the signal it repeats


@dataclass(frozen=True)
class ObjectRecord:
    id: str
    road: str
    type: str  # crosswalk, parkingSpace, ...
    s: float
    t: float
    hdg: float
    length: float
    width: float
    outline: tuple[tuple[float, float], ...] = ()  # cornerLocal (u, v) in the object's frame, or cornerRoad (s, t)
    outline_is_road: bool = False


@dataclass
class Road:
    id: str
    name: str
    length: float
    junction: str | None  # the junction this road connects through, None for an ordinary road
    predecessor: Link | None
    successor: Link | None
    geometries: list[Geometry]
    elevations: list[Poly3]
    lane_offsets: list[Poly3]
    sections: list[LaneSection]
    speed: list[tuple[float, float]]  # road-type speed records: (s, m/s)
    signals: list[SignalRecord] = field(default_factory=list)
    objects: list[ObjectRecord] = field(default_factory=list)

    def section_at(self, s: float) -> LaneSection:
        k = max(0, int(np.searchsorted([sec.s for sec in self.sections], s, side="right")) - 1)
        return self.sections[k]


@dataclass(frozen=True)
class Connection:
    id: str
    incoming: str
    connecting: str
    contact_point: str  # start or end of the connecting road
    lane_links: tuple[tuple[int, int], ...]  # (from lane of incoming, to lane of connecting)


@dataclass
class Junction:
    id: str
    name: str
    connections: list[Connection]


@dataclass
class OpenDrive:
    """A whole file: roads, junctions, controllers (signal id groups) and the import's warnings."""

    path: str
    version: tuple[int, int]
    roads: dict[str, Road]
    junctions: dict[str, Junction]
    controllers: dict[str, list[str]]
    warnings: list[str] = field(default_factory=list)
