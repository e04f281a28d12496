"""Imported maps cached by the file's content: a town imports once, later loads read arrays.

The cache key is the SHA-256 of the file's bytes, the frame and :data:`IMPORTER_VERSION` (bumped when
the import changes). An entry is two files written atomically: ``KEY.npz`` (every lane's points,
widths and heights, concatenated; no pickle) and ``KEY.json`` (ids, links, attributes, signals, stop
lines, crosswalks and the import report). A damaged entry is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from scenarios.maps import Crosswalk, Lane, RoadMap, Signal, StopLine
from scenarios.opendrive.convert import Frame, ImportReport, import_opendrive, sidewalk_polygons
from scenarios.opendrive.reader import read_text

IMPORTER_VERSION = 4
LANE_FIELDS = (
    "speed_limit",
    "successors",
    "predecessors",
    "left",
    "right",
    "opposite",
    "junction",
    "left_marking",
    "right_marking",
    "kind",
)


def cache_dir() -> Path:
    """``$LOOPDRIVE_CACHE/maps`` (default ``~/.cache/loopdrive/maps``)."""
    return Path(os.environ.get("LOOPDRIVE_CACHE", Path.home() / ".cache" / "loopdrive")) / "maps"


def cache_key(data: bytes, frame: Frame) -> str:
    return f"{hashlib.sha256(data).hexdigest()[:32]}-{frame}-v{IMPORTER_VERSION}"


def _save(road_map: RoadMap, report: ImportReport, base: Path) -> None:
    lanes = list(road_map.lanes.values())
    counts = np.array([len(lane.centerline) for lane in lanes], np.int64)
    pairs = list(zip(lanes, counts))
    arrays = {
        "counts": counts,
        "points": np.concatenate([lane.centerline for lane in lanes]).astype(np.float64),
        "widths": np.concatenate(
            [lane.widths if lane.widths is not None else np.full(n, lane.width) for lane, n in pairs]
        ),
        "z": np.concatenate([lane.z if lane.z is not None else np.zeros(n) for lane, n in pairs]),
    }
    meta = {
        "lanes": [{"id": lane.id} | {f: getattr(lane, f) for f in LANE_FIELDS} for lane in lanes],
        "signals": [asdict(s) for s in road_map.signals.values()],
        "stop_lines": [asdict(s) for s in road_map.stop_lines],
        "crosswalks": [{"id": c.id, "polygon": c.polygon.tolist()} for c in road_map.crosswalks],
        "report": asdict(report),
    }
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = base.with_name(base.name + f".{os.getpid()}.tmp")
    with open(tmp.with_suffix(".npz"), "wb") as f:
        np.savez(f, **arrays)
    tmp.with_suffix(".json").write_text(json.dumps(meta))
    os.replace(tmp.with_suffix(".npz"), base.with_suffix(".npz"))  # the arrays first: json marks it complete
    os.replace(tmp.with_suffix(".json"), base.with_suffix(".json"))


def _load(base: Path) -> tuple[RoadMap, ImportReport] | None:
    try:
        meta = json.loads(base.with_suffix(".json").read_text())
        with np.load(base.with_suffix(".npz"), allow_pickle=False) as data:
            counts, points, widths, z = data["counts"], data["points"], data["widths"], data["z"]
    except (OSError, ValueError, KeyError):
        return None
    ends = np.cumsum(counts)
    lanes = {}
    for info, end, n in zip(meta["lanes"], ends, counts):
        sl = slice(end - n, end)
        lanes[info["id"]] = Lane(centerline=points[sl], widths=widths[sl], z=z[sl], **info)
    road_map = RoadMap(
        lanes=lanes,
        signals={s["id"]: Signal(**(s | {"position": tuple(s["position"])})) for s in meta["signals"]},
        stop_lines=[StopLine(**s) for s in meta["stop_lines"]],
        crosswalks=[Crosswalk(**c) for c in meta["crosswalks"]],
        sidewalks=sidewalk_polygons(lanes),
    )
    return road_map, ImportReport(**meta["report"])


def find_town(town: str, folders: list[str | Path]) -> Path:
    """``town``'s OpenDRIVE file in ``folders`` (a CARLA install's ``.../Maps/OpenDrive/``, or any folder;
    searched recursively): ``Town12.xodr`` or ``Town12.xodr.gz``. A town in none is a ``FileNotFoundError``
    naming where it looked."""
    for folder in folders:
        folder = Path(folder)
        for name in (f"{town}.xodr", f"{town}.xodr.gz"):
            if (folder / name).is_file():
                return folder / name
            found = sorted(folder.rglob(name)) if folder.is_dir() else []
            if found:
                return found[0]
    raise FileNotFoundError(f"no {town}.xodr(.gz) in {[str(f) for f in folders]}")


_LOADED: dict[tuple, tuple[RoadMap, ImportReport]] = {}  # this process's maps, shared as procedural maps are


def load_map(
    path: str | Path, frame: Frame = "carla", use_cache: bool = True, memo: bool = True
) -> tuple[RoadMap, ImportReport, bool]:
    """The road map of an OpenDRIVE file, its import report, and whether it came from a cache: this
    process's (``memo``; the map is then the same object, to be treated as read-only) or the disk's."""
    try:
        st = Path(path).stat()
        key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size, frame)
    except OSError:
        key = None
    if memo and use_cache and key in _LOADED:
        return (*_LOADED[key], True)
    road_map, report, cached = _load_or_import(path, frame, use_cache)
    if use_cache and key is not None:
        _LOADED[key] = (road_map, report)
    return road_map, report, cached


def _load_or_import(path: str | Path, frame: Frame, use_cache: bool) -> tuple[RoadMap, ImportReport, bool]:
    text = read_text(path)
    base = cache_dir() / cache_key(text.encode(), frame)
    if use_cache:
        cached = _load(base)
        if cached is not None:
            return (*cached, True)
    road_map, report = import_opendrive(str(path), frame, text)
    if use_cache:
        try:
            _save(road_map, report, base)
        except OSError:  # a read-only or full cache never stops an import
            pass
    return road_map, report, False
