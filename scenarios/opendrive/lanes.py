"""Lane geometry of a road: borders, centres, widths and heights at any ``s``, from the records.

Lanes stack outwards from the lane-offset line: left lanes (positive ids) towards +t, right lanes
(negative ids) towards -t, each ``width(s)`` wide (or reaching its ``border(s)``). A point (s, t)
is the reference-line point moved t along its left normal; its height is the elevation profile's.
"""

from __future__ import annotations

import numpy as np

from scenarios.opendrive.records import LaneSection, Road, eval_piecewise
from scenarios.opendrive.reference_line import ReferenceLine

HEADING_STEP = 0.01  # m, for the lane centre's heading by central difference


class RoadGeometry:
    """Evaluates one road's lanes; ``where`` names the road in errors."""

    def __init__(self, road: Road, where: str) -> None:
        self.road = road
        self.line = ReferenceLine(road.geometries, where)

    def borders(self, section: LaneSection, lane_id: int, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inner t, outer t) of ``lane_id`` at ``s`` (inner = nearer the centre lane)."""
        t = eval_piecewise(self.road.lane_offsets, s)
        inner = t
        step = 1 if lane_id > 0 else -1
        for i in range(step, lane_id + step, step):
            lane = section.lanes.get(i)
            if lane is None:
                continue  # a gap in the ids: an absent lane has no width
            if lane.borders:
                outer = t + step * eval_piecewise(lane.borders, s)
            else:
                outer = inner + step * np.maximum(eval_piecewise(lane.widths, s), 0.0)
            if i == lane_id:
                return inner, outer
            inner = outer
        return inner, inner

    def point(self, s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, y, z) of road coordinates (s, t)."""
        x, y, h = self.line.evaluate(s)
        z = eval_piecewise(self.road.elevations, s)
        return x - t * np.sin(h), y + t * np.cos(h), z

    def centre_rate(self, section: LaneSection, lane_id: int, s: np.ndarray) -> np.ndarray:
        """d t / d s of the lane's centre, from the records' derivatives at ``s`` (exact, and blind to a
        record that starts just after ``s``, where a finite difference would see a jump)."""
        offset = eval_piecewise(self.road.lane_offsets, s, derivative=True)
        inner = offset
        step = 1 if lane_id > 0 else -1
        for i in range(step, lane_id + step, step):  # as borders(), on the derivatives
            lane = section.lanes.get(i)
            if lane is None:
                continue
            if lane.borders:
                outer = offset + step * eval_piecewise(lane.borders, s, derivative=True)
            else:
                outer = inner + step * eval_piecewise(lane.widths, s, derivative=True)
            if i == lane_id:
                return 0.5 * (inner + outer)
            inner = outer
        return inner

    def centre(self, section: LaneSection, lane_id: int, s: np.ndarray):
        """Centre (x, y, z), heading along +s, and width of ``lane_id`` at ``s``."""
        inner, outer = self.borders(section, lane_id, s)
        t = 0.5 * (inner + outer)
        x, y, z = self.point(s, t)
        # the centre's tangent: (1 - kappa t) along the reference line plus dt/ds across it
        lo, hi = s - HEADING_STEP, s + HEADING_STEP
        _, _, h = self.line.evaluate(s)
        kappa = np.angle(np.exp(1j * (self.line.evaluate(hi)[2] - self.line.evaluate(lo)[2]))) / (hi - lo)
        heading = h + np.arctan2(self.centre_rate(section, lane_id, s), 1.0 - kappa * t)
        return x, y, z, heading, np.abs(outer - inner)
