"""OpenDRIVE (1.4-1.8) road networks, the CARLA towns included, as maps of the embedded world.

- :func:`import_opendrive` (:mod:`.convert`): a file -> :class:`scenarios.maps.RoadMap` and an import report;
- :func:`read_opendrive` (:mod:`.reader`): the file as typed records (:mod:`.records`);
- :mod:`.reference_line`, :mod:`.lanes`: the geometry, in closed form per piece.
"""

from scenarios.opendrive.convert import ImportReport, import_opendrive
from scenarios.opendrive.reader import read_opendrive
from scenarios.opendrive.records import MapImportError

__all__ = ["ImportReport", "MapImportError", "import_opendrive", "read_opendrive"]
