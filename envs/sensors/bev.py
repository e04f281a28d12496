"""Privileged bird's-eye-view raster, ego-centred and ego-aligned (forward is up).

The ground comes from the same top-down texture the cameras use (one affine warp); the route,
the stop lines within view coloured by their signal, actors (by class) and the ego are drawn on top.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from envs.sensors.camera import map_geometry
from envs.world import GREEN, RED, YELLOW, Kind, World
from scenarios import geometry as geo

ROUTE_COLOUR = (60, 120, 255)
EGO_COLOUR = (255, 255, 255)
KIND_COLOURS = {
    Kind.VEHICLE: (40, 200, 255),
    Kind.CYCLIST: (40, 200, 255),
    Kind.PEDESTRIAN: (255, 80, 200),
    Kind.STATIC: (255, 150, 0),
}
SIGNAL_COLOURS = {RED: (255, 30, 30), YELLOW: (255, 210, 0), GREEN: (40, 220, 80)}


class BEVRenderer:
    def __init__(self, size: int = 128, resolution: float = 0.4, ego_row: float = 0.7) -> None:
        self.size, self.res, self.ego_row = size, resolution, ego_row
        self._stop_xy: tuple[object, np.ndarray] | None = None  # (map, stop-line points), per map

    def _world_from_pixel(self, world: World) -> np.ndarray:
        st = world.state
        ex, ey, yaw = float(st.x[0]), float(st.y[0]), float(st.yaw[0])
        c, s = math.cos(yaw), math.sin(yaw)
        r, cu, cv = self.res, self.size / 2, self.size * self.ego_row
        # pixel (u, v) -> ego (x = (cv - v) r, y = (cu - u) r) -> world
        ego_from_px = np.array([[0, -r, cv * r], [-r, 0, cu * r], [0, 0, 1]])
        world_from_ego = np.array([[c, -s, ex], [s, c, ey], [0, 0, 1]])
        return world_from_ego @ ego_from_px

    def to_pixels(self, world: World, xy: np.ndarray) -> np.ndarray:
        px_from_world = np.linalg.inv(self._world_from_pixel(world))
        p = np.asarray(xy, float) @ px_from_world[:2, :2].T + px_from_world[:2, 2]
        return p

    def _stop_lines_near(self, world: World) -> list:
        """The map's stop lines within the view (a distance test over their points: no Python loop)."""
        road_map = world.compiled.road_map
        if self._stop_xy is None or self._stop_xy[0] is not road_map:
            xy = [road_map.lanes[sl.lane].pose_at(sl.s)[0] for sl in road_map.stop_lines]
            self._stop_xy = (road_map, np.array(xy, float).reshape(-1, 2))
        reach = self.size * self.res * 1.5
        d = self._stop_xy[1] - [float(world.state.x[0]), float(world.state.y[0])]
        near = np.flatnonzero((np.abs(d) < reach).all(1))
        return [road_map.stop_lines[i] for i in near]

    def render(self, world: World) -> np.ndarray:
        st = world.state
        ground = map_geometry(world.compiled.road_map).ground.around(float(st.x[0]), float(st.y[0]))
        tex_from_px = np.linalg.inv(ground.world_from_texture) @ self._world_from_pixel(world)
        img = cv2.warpAffine(
            ground.texture,
            tex_from_px[:2],
            (self.size, self.size),
            flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
            borderMode=cv2.BORDER_REPLICATE,
        )
        shift = 4
        scale = float(1 << shift)

        def poly(pts):
            return np.round(self.to_pixels(world, pts) * scale).astype(np.int32)

        c = world.compiled
        route = c.route_xy[max(world.state.route_seg - 5, 0) :]
        cv2.polylines(img, [poly(route)], False, ROUTE_COLOUR, max(1, int(1.2 / self.res)), cv2.LINE_AA, shift)
        sig = world.signal_states()
        for sl in self._stop_lines_near(world):
            if sl.signal is None:
                colour = SIGNAL_COLOURS[RED]
            else:
                colour = SIGNAL_COLOURS[int(sig[c.signal_ids.index(sl.signal)])]
            line = np.asarray(c.road_map.stop_line_geometry(sl).coords)
            cv2.polylines(img, [poly(line)], False, colour, max(1, int(0.6 / self.res)), cv2.LINE_AA, shift)
        b = world.boxes()
        corners = geo.box_corners(b["x"], b["y"], b["yaw"], b["length"], b["width"])
        for k in range(len(b["x"])):
            kind = Kind(b["kind"][k])
            colour = EGO_COLOUR if kind == Kind.EGO else KIND_COLOURS[kind]
            cv2.fillConvexPoly(img, poly(corners[k]), colour, cv2.LINE_AA, shift)
        return img
