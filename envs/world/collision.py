"""The front / rear / lateral classification of a collision, as AlpaSim reports it (the overlap
test itself is ``kernels.ego_contacts``)."""

from __future__ import annotations

import math


def classify_contact(ego_x, ego_y, ego_yaw, ego_len, ego_wid, ox, oy) -> str:
    """Where the other box's centre lies around the ego: ``front``, ``rear`` or ``lateral``."""
    dx, dy = ox - ego_x, oy - ego_y
    c, s = math.cos(ego_yaw), math.sin(ego_yaw)
    lon, lat = c * dx + s * dy, -s * dx + c * dy
    # the sector boundaries pass through the ego's corners
    if lon > 0 and abs(lat) <= lon * (ego_wid / ego_len):
        return "front"
    if lon < 0 and abs(lat) <= -lon * (ego_wid / ego_len):
        return "rear"
    return "lateral"
