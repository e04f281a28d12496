"""Oriented-box collision tests and the front / rear / lateral classification AlpaSim reports."""

from __future__ import annotations

import math

import numpy as np


def obb_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Separating-axis test for two convex quads ``[4, 2]``."""
    for poly in (a, b):
        for k in range(2):
            edge = poly[k + 1] - poly[k]
            axis = np.array([-edge[1], edge[0]])
            pa, pb = a @ axis, b @ axis
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


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
