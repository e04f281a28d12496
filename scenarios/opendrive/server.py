"""A running CARLA server's map as an OpenDRIVE file (``world.get_map().to_opendrive()``).

The file is written once and then imports like any other (cached by its content), so a town that
only lives inside a server (a custom map, a packaged build without its ``OpenDrive/`` folder) becomes
a scenario map of the embedded world.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType

from scenarios.opendrive.cache import cache_dir


def fetch_server_map(
    host: str = "localhost",
    port: int = 2000,
    town: str | None = None,
    out: str | Path | None = None,
    timeout_s: float = 60.0,
    carla: ModuleType | None = None,
) -> Path:
    """Write the server's current map (or ``town``, loaded first if another is up) to
    ``out/<Town>.xodr`` (default: the map cache's ``server/`` folder) and return the path."""
    if carla is None:
        try:
            import carla
        except ImportError:
            raise RuntimeError("reading a map from a CARLA server needs the client: pip install '.[carla]'") from None
    client = carla.Client(host, port)
    client.set_timeout(timeout_s)
    world = client.get_world()
    current = world.get_map()
    if town is not None and _short_name(current.name) != town:
        world = client.load_world(town)
        current = world.get_map()
    text = current.to_opendrive()
    if not text or "<OpenDRIVE" not in text[:2000]:
        raise ValueError(f"CARLA server {host}:{port}: map {current.name!r} gave no OpenDRIVE text")
    folder = Path(out) if out is not None else cache_dir() / "server"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_short_name(current.name)}.xodr"
    with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".part", delete=False, encoding="utf-8") as f:
        f.write(text)
    os.replace(f.name, path)  # atomic: a reader never sees half a map
    return path


def _short_name(name: str) -> str:
    """``Carla/Maps/Town12/Town12`` -> ``Town12``."""
    return name.rstrip("/").split("/")[-1]
