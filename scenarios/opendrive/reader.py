"""Read an OpenDRIVE file (plain or gzip) into :mod:`scenarios.opendrive.records`.

The XML is streamed road by road (a 10 x 10 km town is ~70 MB of XML), DTDs and entities are refused
(OpenDRIVE never needs them, and they are how XML bombs work), and every malformed value is a
:class:`MapImportError` naming the file, the element and the reason. Defects that still leave a
faithful map (an unknown speed unit, a lane without width) are warnings in ``OpenDrive.warnings``.
"""

from __future__ import annotations

import gzip
import io
import itertools
import math
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

from scenarios.opendrive.records import (
    Connection,
    Geometry,
    Junction,
    LaneRecord,
    LaneSection,
    Link,
    MapImportError,
    ObjectRecord,
    OpenDrive,
    Poly3,
    Road,
    RoadMark,
    SignalRecord,
)

GEOMETRY_KINDS = ("line", "arc", "spiral", "poly3", "paramPoly3")
SPEED_UNITS = {"m/s": 1.0, "km/h": 1 / 3.6, "mph": 0.44704}
MAX_BYTES = 512 * 2**20  # uncompressed; Town13 is ~90 MB


def read_text(path: str | Path) -> str:
    """The XML text of ``path`` (``.gz`` is decompressed), bounded in size."""
    path = Path(path)
    try:
        raw = path.read_bytes() if path.suffix != ".gz" else _gunzip(path)
    except OSError as e:
        raise MapImportError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_BYTES:
        raise MapImportError(f"{path}: {len(raw) / 2**20:.0f} MB is larger than the {MAX_BYTES // 2**20} MB limit")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MapImportError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _gunzip(path: Path) -> bytes:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(MAX_BYTES + 1)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise MapImportError(f"{path}: not a readable gzip file ({e})") from None


class _Where:
    """The element being read, for error messages: 'road 12, lane section 1 (s=30), lane -2'."""

    def __init__(self, path: str) -> None:
        self.path, self.parts = path, []

    def __str__(self) -> str:
        return f"{self.path}: " + (", ".join(self.parts) + ": " if self.parts else "")

    def error(self, reason: str) -> MapImportError:
        return MapImportError(f"{self}{reason}")


def _num(el: ET.Element, attr: str, where: _Where, default: float | None = None) -> float:
    raw = el.get(attr)
    if raw is None:
        if default is None:
            raise where.error(f"<{el.tag}> has no {attr}")
        return default
    try:
        value = float(raw)
    except ValueError:
        raise where.error(f"<{el.tag}> {attr}={raw[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise where.error(f"<{el.tag}> {attr}={raw[:40]!r} is not finite")
    return value


def _poly(el: ET.Element, where: _Where, s0: float = 0.0, s_attr: str = "s") -> Poly3:
    return Poly3(
        s0 + _num(el, s_attr, where, 0.0),
        _num(el, "a", where, 0.0),
        _num(el, "b", where, 0.0),
        _num(el, "c", where, 0.0),
        _num(el, "d", where, 0.0),
    )


def _speed(el: ET.Element, where: _Where, warnings: list[str]) -> float | None:
    raw = el.get("max")
    if raw is None or raw.strip().lower() in ("no limit", "undefined", ""):
        return None
    unit = el.get("unit", "m/s")
    if unit not in SPEED_UNITS:
        warnings.append(f"{where}speed unit {unit!r} unknown: read as m/s")
    return _num(el, "max", where) * SPEED_UNITS.get(unit, 1.0)


def _link(el: ET.Element | None, where: _Where) -> Link | None:
    if el is None:
        return None
    kind, ident = el.get("elementType"), el.get("elementId")
    if kind not in ("road", "junction") or ident is None:
        raise where.error(f"<{el.tag}> needs elementType road|junction and elementId, got {kind!r}, {ident!r}")
    contact = el.get("contactPoint")
    if kind == "road" and contact not in ("start", "end"):
        raise where.error(f"<{el.tag}> to road {ident}: contactPoint must be start or end, got {contact!r}")
    return Link(kind, ident, contact)


def _geometry(el: ET.Element, where: _Where) -> Geometry:
    kinds = [c for c in el if c.tag in GEOMETRY_KINDS]
    if len(kinds) != 1:
        other = [c.tag for c in el]
        raise where.error(f"<geometry> at s={el.get('s')} needs one of {GEOMETRY_KINDS}, got {other}")
    shape = kinds[0]
    params: dict[str, float | str] = {}
    for key, value in shape.attrib.items():
        if key == "pRange":
            if value not in ("arcLength", "normalized"):
                raise where.error(f"<paramPoly3> pRange={value!r}: arcLength or normalized")
            params[key] = value
        else:
            params[key] = _num(shape, key, where)
    length = _num(el, "length", where)
    if length < 0:
        raise where.error(f"<geometry> at s={el.get('s')}: negative length {length}")
    return Geometry(
        _num(el, "s", where),
        _num(el, "x", where),
        _num(el, "y", where),
        _num(el, "hdg", where, 0.0),
        length,
        shape.tag,
        params,
    )


def _lane(el: ET.Element, section_s: float, where: _Where, warnings: list[str]) -> LaneRecord:
    raw_id = el.get("id")
    try:
        lane_id = int(raw_id)
    except (TypeError, ValueError):
        raise where.error(f"<lane> id={raw_id!r} is not an integer") from None
    where.parts.append(f"lane {lane_id}")
    lane = LaneRecord(lane_id, el.get("type", "none"), el.get("level", "false") in ("true", "1"))
    link = el.find("link")
    if link is not None:
        for tag in ("predecessor", "successor"):
            target = link.find(tag)
            if target is not None:
                try:
                    setattr(lane, tag, int(target.get("id", "")))
                except ValueError:
                    raise where.error(f"<{tag}> id={target.get('id')!r} is not a lane id") from None
    for child in el:
        if child.tag == "width":
            lane.widths.append(_poly(child, where, section_s, "sOffset"))
        elif child.tag == "border":
            lane.borders.append(_poly(child, where, section_s, "sOffset"))
        elif child.tag == "roadMark":
            mark_type = child.get("type", "none")
            lane.road_marks.append(
                RoadMark(section_s + _num(child, "sOffset", where, 0.0), mark_type, child.get("laneChange"))
            )
        elif child.tag == "speed":
            value = _speed(child, where, warnings)
            if value is not None:
                lane.speeds.append((section_s + _num(child, "sOffset", where, 0.0), value))
    for records in (lane.widths, lane.borders, lane.road_marks, lane.speeds):
        records.sort(key=lambda r: r[0] if isinstance(r, tuple) else r.s)
    if lane_id != 0 and not lane.widths and not lane.borders:
        warnings.append(f"{where}no <width> or <border>: width 0")
    where.parts.pop()
    return lane


def _sections(lanes_el: ET.Element, length: float, where: _Where, warnings: list[str]) -> list[LaneSection]:
    sections = []
    for el in lanes_el.findall("laneSection"):
        s = _num(el, "s", where, 0.0)
        where.parts.append(f"lane section {len(sections)} (s={s:g})")
        lanes: dict[int, LaneRecord] = {}
        for side in ("left", "center", "right"):
            side_el = el.find(side)
            for lane_el in side_el.findall("lane") if side_el is not None else []:
                lane = _lane(lane_el, s, where, warnings)
                if (side == "left" and lane.id <= 0) or (side == "right" and lane.id >= 0):
                    raise where.error(f"lane {lane.id} is under <{side}>")
                if lane.id in lanes:
                    raise where.error(f"lane {lane.id} appears twice")
                lanes[lane.id] = lane
        sections.append(LaneSection(s, length, lanes, el.get("singleSide", "false") == "true"))
        where.parts.pop()
    if not sections:
        raise where.error("no <laneSection>")
    sections.sort(key=lambda sec: sec.s)
    for a, b in itertools.pairwise(sections):
        a.end = b.s
    return sections


def _signals(el: ET.Element | None, road: str, where: _Where) -> list[SignalRecord]:
    out: list[SignalRecord] = []
    for sig in el if el is not None else []:
        if sig.tag not in ("signal", "signalReference"):
            continue
        ident = sig.get("id")
        if ident is None:
            raise where.error(f"<{sig.tag}> without id")
        validity = [(int(_num(v, "fromLane", where)), int(_num(v, "toLane", where))) for v in sig.findall("validity")]
        common = dict(road=road, s=_num(sig, "s", where), t=_num(sig, "t", where, 0.0), validity=validity)
        orientation = sig.get("orientation", "none")
        if sig.tag == "signal":
            value = sig.get("value")
            out.append(
                SignalRecord(
                    ident,
                    orientation=orientation,
                    dynamic=sig.get("dynamic", "no") == "yes",
                    type=sig.get("type", "-1"),
                    subtype=sig.get("subtype", "-1"),
                    country=sig.get("country", ""),
                    value=_num(sig, "value", where) if value not in (None, "", "-1") else None,
                    name=sig.get("name", ""),
                    z_offset=_num(sig, "zOffset", where, 0.0),
                    **common,
                )
            )
        else:
            out.append(
                SignalRecord(
                    ident,
                    orientation=orientation,
                    dynamic=False,
                    type="",
                    subtype="",
                    country="",
                    value=None,
                    name="",
                    reference_of=ident,
                    **common,
                )
            )
    return out


def _objects(el: ET.Element | None, road: str, where: _Where) -> list[ObjectRecord]:
    out = []
    for obj in el.findall("object") if el is not None else []:
        corners, on_road = [], False
        for outline in obj.iter("outline"):
            for c in outline:
                if c.tag == "cornerLocal":
                    corners.append((_num(c, "u", where), _num(c, "v", where)))
                elif c.tag == "cornerRoad":
                    corners.append((_num(c, "s", where), _num(c, "t", where)))
                    on_road = True
        out.append(
            ObjectRecord(
                obj.get("id", ""),
                road,
                obj.get("type", "none"),
                _num(obj, "s", where),
                _num(obj, "t", where, 0.0),
                _num(obj, "hdg", where, 0.0),
                _num(obj, "length", where, 0.0),
                _num(obj, "width", where, 0.0),
                tuple(corners),
                on_road,
            )
        )
    return out


def _road(el: ET.Element, where: _Where, warnings: list[str]) -> Road:
    ident = el.get("id")
    if ident is None:
        raise where.error("<road> without id")
    where.parts.append(f"road {ident}")
    length = _num(el, "length", where)
    if length <= 0:
        raise where.error(f"length {length} is not positive")
    link = el.find("link")
    plan = el.find("planView")
    if plan is None or not len(plan):
        raise where.error("no <planView> geometry")
    geometries = sorted((_geometry(g, where) for g in plan.findall("geometry")), key=lambda g: g.s)
    elevation = el.find("elevationProfile")
    lanes_el = el.find("lanes")
    if lanes_el is None:
        raise where.error("no <lanes>")
    speed = []
    for type_el in el.findall("type"):
        speed_el = type_el.find("speed")
        if speed_el is not None:
            value = _speed(speed_el, where, warnings)
            if value is not None:
                speed.append((_num(type_el, "s", where, 0.0), value))
    junction = el.get("junction", "-1")
    road = Road(
        id=ident,
        name=el.get("name", ""),
        length=length,
        junction=None if junction == "-1" else junction,
        predecessor=_link(link.find("predecessor") if link is not None else None, where),
        successor=_link(link.find("successor") if link is not None else None, where),
        geometries=geometries,
        elevations=sorted(
            (_poly(e, where) for e in (elevation.findall("elevation") if elevation is not None else [])),
            key=lambda p: p.s,
        ),
        lane_offsets=sorted((_poly(o, where) for o in lanes_el.findall("laneOffset")), key=lambda p: p.s),
        sections=_sections(lanes_el, length, where, warnings),
        speed=sorted(speed),
        signals=_signals(el.find("signals"), ident, where),
        objects=_objects(el.find("objects"), ident, where),
    )
    where.parts.pop()
    return road


def _junction(el: ET.Element, where: _Where) -> Junction:
    ident = el.get("id", "")
    where.parts.append(f"junction {ident}")
    connections = []
    for c in el.findall("connection"):
        incoming, connecting = c.get("incomingRoad"), c.get("connectingRoad")
        if incoming is None or connecting is None:
            raise where.error(f"connection {c.get('id')} needs incomingRoad and connectingRoad")
        links = tuple((int(_num(x, "from", where)), int(_num(x, "to", where))) for x in c.findall("laneLink"))
        connections.append(Connection(c.get("id", ""), incoming, connecting, c.get("contactPoint", "start"), links))
    where.parts.pop()
    return Junction(ident, el.get("name", ""), connections)


def read_opendrive(path: str | Path, text: str | None = None) -> OpenDrive:
    """Parse ``path`` (or ``text``, naming it ``path`` in messages)."""
    path = str(path)
    text = read_text(path) if text is None else text
    head = text[:4096]
    if "<!DOCTYPE" in head or "<!ENTITY" in text[:65536]:
        raise MapImportError(f"{path}: a DTD or entity declaration (OpenDRIVE has none; refused as an XML bomb)")
    where, warnings = _Where(path), []
    roads: dict[str, Road] = {}
    junctions: dict[str, Junction] = {}
    controllers: dict[str, list[str]] = {}
    version = (1, 4)
    depth = 0
    try:
        for event, el in ET.iterparse(io.StringIO(text), events=("start", "end")):
            if event == "start":
                depth += 1
                if depth > 64:
                    raise where.error("XML nested deeper than 64 levels")
                continue
            depth -= 1
            if el.tag == "header":
                version = (int(_num(el, "revMajor", where, 1)), int(_num(el, "revMinor", where, 4)))
            elif el.tag == "road" and depth == 1:
                road = _road(el, where, warnings)
                if road.id in roads:
                    raise where.error(f"road {road.id} defined twice")
                roads[road.id] = road
                el.clear()
            elif el.tag == "junction" and depth == 1:
                junction = _junction(el, where)
                junctions[junction.id] = junction
                el.clear()
            elif el.tag == "controller" and depth == 1:
                controllers[el.get("id", "")] = [c.get("signalId", "") for c in el.findall("control")]
                el.clear()
    except ET.ParseError as e:
        raise MapImportError(f"{path}: not well-formed XML ({e})") from None
    if not roads:
        raise MapImportError(f"{path}: no <road> (not an OpenDRIVE file?)")
    if version[0] != 1 or not 4 <= version[1] <= 8:
        warnings.append(f"{path}: OpenDRIVE {version[0]}.{version[1]}: read as 1.4-1.8")
    return OpenDrive(path, version, roads, junctions, controllers, warnings)
