"""The road-network model: lanes, junctions, signals, stop lines, crosswalks and drivable area.

The model follows OpenDRIVE's vocabulary so an importer can fill it later: every lane is a
centreline with a width and a speed limit, linked to its successors / predecessors and to its
same-direction neighbours; junction connectors are ordinary lanes tagged with a junction id;
signals control incoming lanes through stop lines. Geometry derived from the lanes (lane polygons,
drivable area) is shapely, built once when the map is constructed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import shapely
from shapely.geometry import LineString, Polygon

from scenarios import geometry as geo

DRIVABLE_MARGIN = 0.05  # metres the drivable lanes are grown by, closing the seams between them
RUNS_OUT_WIDTH = 0.5  # metres: a lane no wider than this at its end, with no successor, runs out there
Marking = Literal["solid", "dashed", "double_solid", "none"]

# OpenDRIVE lane types a vehicle may drive on (the drivable area); the others (sidewalk, biking,
# median, border, restricted, curb, ...) are lanes of the map but not of the drivable area
DRIVABLE_KINDS = frozenset(
    {
        "driving",
        "entry",
        "exit",
        "onRamp",
        "offRamp",
        "connectingRamp",
        "bidirectional",
        "parking",
        "stop",
        "shoulder",
        "slipLane",
        "walking_and_driving",
    }
)


@dataclass
class Lane:
    id: str
    centerline: np.ndarray
    width: float = 3.5
    speed_limit: float = 13.9
    successors: list[str] = field(default_factory=list)
    predecessors: list[str] = field(default_factory=list)
    left: str | None = None  # same-direction neighbour on the left
    right: str | None = None  # same-direction neighbour on the right
    opposite: str | None = None  # oncoming lane across the left marking
    junction: str | None = None
    left_marking: Marking = "solid"
    right_marking: Marking = "solid"
    kind: str = "driving"  # the OpenDRIVE lane type (see DRIVABLE_KINDS)
    widths: np.ndarray | None = None  # [N] width at each centreline point, where it varies; ``width`` = its max
    z: np.ndarray | None = None  # [N] height of each centreline point (None: flat, z = 0)

    def __post_init__(self) -> None:
        self.centerline = np.asarray(self.centerline, dtype=float)
        if self.centerline.ndim != 2 or self.centerline.shape[0] < 2 or self.centerline.shape[1] != 2:
            raise ValueError(f"lane {self.id!r}: centerline must be [N>=2, 2], got {self.centerline.shape}")
        if not np.isfinite(self.centerline).all():
            raise ValueError(f"lane {self.id!r}: centerline has non-finite coordinates")
        for name in ("widths", "z"):
            values = getattr(self, name)
            if values is not None:
                values = np.asarray(values, dtype=float)
                if values.shape != (len(self.centerline),) or not np.isfinite(values).all():
                    raise ValueError(f"lane {self.id!r}: {name} must be {len(self.centerline)} finite values")
                setattr(self, name, values)
        if self.widths is not None:
            if self.widths.min() < 0 or self.widths.max() > 20.0:
                raise ValueError(f"lane {self.id!r}: widths must be in [0, 20] m")
            self.width = float(self.widths.max())
        if not (np.isfinite(self.width) and 0.1 <= self.width <= 20.0):
            raise ValueError(f"lane {self.id!r}: width {self.width} is not in [0.1, 20] m")
        if not (np.isfinite(self.speed_limit) and 0 < self.speed_limit <= 100.0):
            raise ValueError(f"lane {self.id!r}: speed_limit {self.speed_limit} is not in (0, 100] m/s")

    @cached_property
    def s(self) -> np.ndarray:
        return geo.arc_lengths(self.centerline)

    @property
    def length(self) -> float:
        return float(self.s[-1])

    @cached_property
    def heading(self) -> np.ndarray:
        return geo.headings(self.centerline)

    @property
    def half_widths(self) -> np.ndarray | float:
        """Half the width at each centreline point (a number where the width is constant)."""
        return self.width / 2 if self.widths is None else (self.widths / 2)[:, None]

    @property
    def drivable(self) -> bool:
        return self.kind in DRIVABLE_KINDS

    @property
    def runs_out(self) -> bool:
        """Whether the lane narrows to nothing at its end with no lane after it (a highway's acceleration
        lane, a lane dropped before a junction): traffic on it must move into the lane beside."""
        end_width = self.width if self.widths is None else self.widths[-1]
        return not self.successors and end_width <= RUNS_OUT_WIDTH

    @cached_property
    def polygon(self) -> Polygon:
        left, right = self.edge("left"), self.edge("right")
        return shapely.make_valid(Polygon(np.concatenate([left, right[::-1]])))

    @cached_property
    def normals(self) -> np.ndarray:
        """Unit normals to the left of travel at each centreline point (``geo.left_normals``)."""
        return geo.left_normals(self.centerline)

    def edge(self, side: Literal["left", "right"]) -> np.ndarray:
        half = self.half_widths if side == "left" else -self.half_widths
        return self.centerline + half * self.normals

    def pose_at(self, s: float) -> tuple[np.ndarray, float]:
        xy, h = geo.interpolate(self.centerline, self.s, s)
        return xy, float(h)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "centerline": np.round(self.centerline, 4).tolist(),
            "width": self.width,
            "speed_limit": self.speed_limit,
            "successors": self.successors,
            "predecessors": self.predecessors,
            "left": self.left,
            "right": self.right,
            "opposite": self.opposite,
            "junction": self.junction,
            "left_marking": self.left_marking,
            "right_marking": self.right_marking,
        } | {  # written only where used, so procedural maps' files stay as they were
            k: v
            for k, v in (
                ("kind", None if self.kind == "driving" else self.kind),
                ("widths", None if self.widths is None else np.round(self.widths, 4).tolist()),
                ("z", None if self.z is None else np.round(self.z, 4).tolist()),
            )
            if v is not None
        }


@dataclass
class Signal:
    """A traffic light: where its head is drawn and which incoming lanes it controls."""

    id: str
    position: tuple[float, float]
    facing: float  # yaw the light faces (towards approaching traffic)
    lanes: list[str]
    height: float = 5.0


@dataclass
class StopLine:
    """A line across ``lane`` at arc length ``s``: a traffic light's (``signal`` names it), a stop sign's,
    or with ``give_way`` a yield sign's (stop only for crossing traffic; never an infraction)."""

    id: str
    lane: str
    s: float
    signal: str | None = None
    give_way: bool = False

    @property
    def stop_sign(self) -> bool:
        return self.signal is None and not self.give_way


def _with_height(lane: Lane) -> np.ndarray:
    """[N, 3] centreline points with their heights (0 where the lane is flat)."""
    return np.column_stack([lane.centerline, lane.z if lane.z is not None else np.zeros(len(lane.centerline))])


def smoothstep(t: float | np.ndarray) -> float | np.ndarray:
    """A lane change's blend from one lane's centre into the next: 0 to 1 over ``t`` in [0, 1], flat
    at both ends (clipped outside)."""
    t = np.clip(t, 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _blend(piece: np.ndarray, t: np.ndarray, into: Lane) -> np.ndarray:
    """Points moving from ``piece`` (at fractions ``t`` of its length) onto ``into`` at the same fractions."""
    other = _with_height(into)
    at = t * into.length
    there = np.column_stack([np.interp(at, into.s, other[:, j]) for j in range(3)])
    w = smoothstep(t)[:, None]
    return (1.0 - w) * piece + w * there


@dataclass
class Crosswalk:
    id: str
    polygon: np.ndarray  # [4, 2]

    def __post_init__(self) -> None:
        self.polygon = np.asarray(self.polygon, dtype=float)


@dataclass
class RoadMap:
    lanes: dict[str, Lane]
    signals: dict[str, Signal] = field(default_factory=dict)
    stop_lines: list[StopLine] = field(default_factory=list)
    crosswalks: list[Crosswalk] = field(default_factory=list)
    sidewalks: list[np.ndarray] = field(default_factory=list)  # polygons drawn as raised kerbs
    extra_drivable: list[np.ndarray] = field(default_factory=list)  # e.g. junction boxes, shoulders

    def __post_init__(self) -> None:
        problems = self.check()
        if problems:
            raise ValueError("invalid road map: " + "; ".join(problems))

    def check(self) -> list[str]:
        """Referential integrity: every link names an existing lane, every stop line fits its lane."""
        out = []
        for lane in self.lanes.values():
            for attr in ("successors", "predecessors"):
                out += [
                    f"lane {lane.id!r}.{attr}: unknown lane {x!r}" for x in getattr(lane, attr) if x not in self.lanes
                ]
            for attr in ("left", "right", "opposite"):
                ref = getattr(lane, attr)
                if ref is not None and ref not in self.lanes:
                    out.append(f"lane {lane.id!r}.{attr}: unknown lane {ref!r}")
        for sl in self.stop_lines:
            if sl.lane not in self.lanes:
                out.append(f"stop line {sl.id!r}: unknown lane {sl.lane!r}")
            elif not 0 <= sl.s <= self.lanes[sl.lane].length + 1e-6:
                out.append(f"stop line {sl.id!r}: s={sl.s:.1f} outside lane {sl.lane!r}")
            if sl.signal is not None and sl.signal not in self.signals:
                out.append(f"stop line {sl.id!r}: unknown signal {sl.signal!r}")
            if sl.signal is not None and sl.give_way:
                out.append(f"stop line {sl.id!r}: a yield line governed by signal {sl.signal!r}")
        return out

    @cached_property
    def drivable_parts(self) -> list[Polygon]:
        """The polygons whose union, grown by ``DRIVABLE_MARGIN``, is the drivable area (the drivable
        lanes and the extra polygons): rasters paint these, as a town's union takes half a minute."""
        parts = [lane.polygon for lane in self.lanes.values() if lane.drivable]
        return parts + [Polygon(p) for p in self.extra_drivable]

    @cached_property
    def drivable_area(self):
        return shapely.union_all(self.drivable_parts).buffer(DRIVABLE_MARGIN)

    @cached_property
    def bounds(self) -> tuple[float, float, float, float]:
        """(min x, min y, max x, max y) of the drivable area."""
        if not self.drivable_parts:
            return tuple(self.drivable_area.bounds)
        box = shapely.bounds(self.drivable_parts)
        x0, y0 = box[:, :2].min(0) - DRIVABLE_MARGIN
        x1, y1 = box[:, 2:].max(0) + DRIVABLE_MARGIN
        return float(x0), float(y0), float(x1), float(y1)

    def bounds_of_lanes(self) -> tuple[float, float, float, float]:
        """(min x, min y, max x, max y) of every lane centreline (cheap: no polygon union)."""
        points = np.concatenate([lane.centerline for lane in self.lanes.values()])
        return (*points.min(0).tolist(), *points.max(0).tolist())

    def height_range(self) -> tuple[float, float]:
        """Lowest and highest lane-centre height (0, 0 on a flat map)."""
        heights = [lane.z for lane in self.lanes.values() if lane.z is not None]
        if not heights:
            return 0.0, 0.0
        z = np.concatenate(heights)
        return float(z.min()), float(z.max())

    def lanes_beside(self, a: str) -> dict[str, int]:
        """The same-direction lanes beside ``a`` (neighbours, their neighbours, ...) and how many lane
        changes away each is."""
        out, todo = {}, [(a, 0)]
        while todo:
            lane_id, k = todo.pop()
            lane = self.lanes[lane_id]
            for n in (lane.left, lane.right):
                if n is not None and n != a and n not in out:
                    out[n] = k + 1
                    todo.append((n, k + 1))
        return out

    def merges_into(self, lane_id: str) -> str | None:
        """The lane that traffic on a lane that runs out (``Lane.runs_out``) changes into along it: its
        right neighbour, else its left, where that one is of its kind and goes on (as CARLA's traffic
        manager links a dead end); None for a lane that does not run out, or has nowhere to go."""
        lane = self.lanes[lane_id]
        if not lane.runs_out:
            return None
        for n in (lane.right, lane.left):
            if n is not None and self.lanes[n].kind == lane.kind and self.lanes[n].successors:
                return n
        return None

    def is_lane_change(self, a: str, b: str) -> bool:
        """Whether ``b`` lies beside ``a`` (same direction): a route may change into it along ``a``."""
        return b in self.lanes_beside(a)

    def lane_sequence(self, lane_ids: list[str]) -> tuple[np.ndarray, np.ndarray | None, list[float]]:
        """The centreline of consecutive lanes (a route, an actor's path) as (x, y) points, their heights
        (None where every lane is flat) and where each lane starts along it. A lane followed by its
        neighbour is a lane change: the line blends from the one centre into the other along the
        lane (a smoothstep over its length), and both lanes start where the blend does."""
        pieces, owners = [], []  # owners: how many lanes each piece stands for (2 for a lane change)
        flat = all(self.lanes[i].z is None for i in lane_ids)
        k = 0
        while k < len(lane_ids):
            lane = self.lanes[lane_ids[k]]
            piece = _with_height(lane)
            if k + 1 < len(lane_ids) and self.is_lane_change(lane_ids[k], lane_ids[k + 1]):
                pieces.append(_blend(piece, lane.s / max(lane.length, 1e-9), self.lanes[lane_ids[k + 1]]))
                owners.append(2)
                k += 2
            else:
                pieces.append(piece)
                owners.append(1)
                k += 1
        line = geo.chain(*pieces)
        # where each piece begins on the joined line (a joint shared with the previous piece is dropped;
        # a gap the lane links leave, as some CARLA towns have, is a segment of the line)
        first, count = [], 0
        for j, piece in enumerate(pieces):
            shared = j > 0 and np.allclose(piece[0, :2], pieces[j - 1][-1, :2], atol=1e-6)
            first.append(count - 1 if shared else count)
            count += len(piece) - (1 if shared else 0)
        s_line = geo.arc_lengths(line[:, :2])
        starts = [float(s_line[i]) for i, n in zip(first, owners) for _ in range(n)]
        return line[:, :2].copy(), None if flat else line[:, 2].copy(), starts

    def lane_sequence_polyline(self, lane_ids: list[str]) -> np.ndarray:
        """Concatenated centreline of consecutive lanes (see :meth:`lane_sequence`)."""
        return self.lane_sequence(lane_ids)[0]

    def lane_sequence_heights(self, lane_ids: list[str]) -> np.ndarray | None:
        """Heights at the points of ``lane_sequence_polyline`` (None where every lane is flat)."""
        return self.lane_sequence(lane_ids)[1]

    def follow(self, start: str, min_length: float, choose: int = 0) -> list[str]:
        """Lane ids from ``start`` along successors until ``min_length`` metres are covered."""
        ids, total = [start], self.lanes[start].length
        while total < min_length:
            succ = self.lanes[ids[-1]].successors
            if not succ:
                break
            ids.append(succ[min(choose, len(succ) - 1)])
            total += self.lanes[ids[-1]].length
        return ids

    def stop_line_geometry(self, sl: StopLine) -> LineString:
        lane = self.lanes[sl.lane]
        xy, h = lane.pose_at(sl.s)
        n = np.array([-np.sin(h), np.cos(h)]) * lane.width / 2
        return LineString([xy - n, xy + n])

    # --- serialisation: a map file is plain JSON -------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "lanes": [lane.to_dict() for lane in self.lanes.values()],
            "signals": [
                {"id": s.id, "position": list(s.position), "facing": s.facing, "lanes": s.lanes, "height": s.height}
                for s in self.signals.values()
            ],
            "stop_lines": [asdict(s) for s in self.stop_lines],
            "crosswalks": [{"id": c.id, "polygon": c.polygon.tolist()} for c in self.crosswalks],
            "sidewalks": [np.asarray(p).tolist() for p in self.sidewalks],
            "extra_drivable": [np.asarray(p).tolist() for p in self.extra_drivable],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoadMap:
        lanes = {x["id"]: Lane(**x) for x in d["lanes"]}
        signals = {}
        for x in d.get("signals", []):
            signals[x["id"]] = Signal(
                id=x["id"],
                position=tuple(x["position"]),
                facing=x["facing"],
                lanes=x["lanes"],
                height=x.get("height", 5.0),
            )
        return cls(
            lanes=lanes,
            signals=signals,
            stop_lines=[StopLine(**x) for x in d.get("stop_lines", [])],
            crosswalks=[Crosswalk(**x) for x in d.get("crosswalks", [])],
            sidewalks=[np.asarray(p, float) for p in d.get("sidewalks", [])],
            extra_drivable=[np.asarray(p, float) for p in d.get("extra_drivable", [])],
        )
