"""CPU camera renderer (OpenCV + numpy) for any pinhole rig.

The road is pre-cut once per map into small ground quads by layer (asphalt, kerbs, markings, stop
lines, zebra stripes). Per frame and camera: quads near the camera are moved into the camera frame
in one matrix product, quads straddling the near plane are clipped, and each layer is filled with
one ``cv2.fillPoly`` call. Actors and traffic-light heads are shaded 3D boxes drawn far to near
(painter's algorithm) with back faces culled. Sky and ground come from a per-camera template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from envs.sensors.rig import Camera
from envs.world import GREEN, RED, YELLOW, Kind, World
from scenarios import geometry as geo
from scenarios.maps import RoadMap

NEAR = 0.2
FAR = 90.0
SKY_TOP, SKY_HORIZON = np.array([110, 160, 225]), np.array([200, 220, 240])
GRASS = np.array([92, 120, 70])
LAYER_COLOURS = {  # RGB, drawn in this order
    "asphalt": (70, 70, 74),
    "kerb": (150, 150, 145),
    "white": (235, 235, 235),
    "yellow": (230, 190, 40),
}
VEHICLE_PALETTE = np.array(
    [
        [200, 40, 40],
        [40, 90, 190],
        [230, 230, 230],
        [30, 30, 30],
        [200, 160, 40],
        [60, 140, 80],
        [120, 120, 130],
        [150, 60, 150],
        [220, 120, 40],
        [90, 170, 200],
    ]
)
PEDESTRIAN_COLOUR = np.array([230, 100, 160])
STATIC_COLOUR = np.array([240, 140, 0])
LIGHT_ON = {RED: (255, 30, 30), YELLOW: (255, 200, 0), GREEN: (40, 255, 90)}
LIGHT_OFF = (45, 45, 45)
_FACES = ((0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7), (4, 5, 6, 7))  # front, right, rear, left, top
SUN = np.array([0.35, 0.25, 0.9]) / np.linalg.norm([0.35, 0.25, 0.9])


# --- map geometry, cut once per map --------------------------------------------------------------------
def _strip_quads(left: np.ndarray, right: np.ndarray, step: int = 1) -> np.ndarray:
    idx = np.arange(0, len(left), step)
    if idx[-1] != len(left) - 1:
        idx = np.append(idx, len(left) - 1)
    lft, rgt = left[idx], right[idx]
    return np.stack([lft[:-1], lft[1:], rgt[1:], rgt[:-1]], 1)


def _line_quads(line: np.ndarray, width: float, dashed: bool, dash: float = 3.0, gap: float = 6.0) -> np.ndarray:
    line = geo.resample(line, 1.0)
    s = geo.arc_lengths(line)
    left, right = geo.offset(line, width / 2), geo.offset(line, -width / 2)
    quads = _strip_quads(left, right)
    if dashed:
        mid = 0.5 * (s[:-1] + s[1:])
        quads = quads[(mid % (dash + gap)) < dash]
    return quads


@dataclass
class MapGeometry:
    layers: dict[str, np.ndarray]  # name -> quads [Q, 4, 3] (z included)
    texture: np.ndarray  # top-down RGB image of the ground (asphalt, kerbs, markings)
    world_from_texture: np.ndarray  # 3x3: texel (col, row, 1) -> world (x, y, 1)


def build_map_geometry(road_map: RoadMap) -> MapGeometry:
    asphalt, kerb, white, yellow = [], [], [], []
    for lane in road_map.lanes.values():
        asphalt.append(_strip_quads(lane.edge("left"), lane.edge("right"), step=3))
        if lane.junction is not None:
            continue
        if lane.right_marking != "none":
            white.append(_line_quads(lane.edge("right"), 0.15, lane.right_marking == "dashed"))
        lm = lane.left_marking
        if lane.left is None and lm != "none":
            if lm == "double_solid":
                if lane.opposite is None or lane.id < lane.opposite:
                    for off in (0.12, -0.12):
                        yellow.append(_line_quads(geo.offset(lane.edge("left"), off), 0.12, False))
            else:
                white.append(_line_quads(lane.edge("left"), 0.15, lm == "dashed"))
    for poly in road_map.extra_drivable:
        p = np.asarray(poly)
        asphalt.append(p[None, :4] if len(p) == 4 else _fan(p))
    for walk in road_map.sidewalks:
        n = len(walk) // 2
        kerb.append(_strip_quads(walk[:n], walk[n:][::-1], step=3))
    for sl in road_map.stop_lines:
        lane = road_map.lanes[sl.lane]
        xy, h = lane.pose_at(sl.s)
        d, nrm = np.array([math.cos(h), math.sin(h)]), np.array([-math.sin(h), math.cos(h)]) * lane.width / 2
        a, b = xy - 0.2 * d, xy + 0.2 * d
        white.append(np.array([[a - nrm, b - nrm, b + nrm, a + nrm]]))
    for cw in road_map.crosswalks:
        p = cw.polygon  # [a - n hr, b - n hr, b + n hl, a + n hl]
        across = p[3] - p[0]
        length = np.linalg.norm(across)
        u = across / max(length, 1e-6)
        for k in np.arange(0.3, length - 0.3, 1.0):
            a0, b0 = p[0] + u * k, p[1] + u * k
            white.append(np.array([[a0, b0, b0 + u * 0.5, a0 + u * 0.5]]))
    layers = {}
    for name, parts, z in (
        ("asphalt", asphalt, 0.0),
        ("kerb", kerb, 0.12),
        ("white", white, 0.01),
        ("yellow", yellow, 0.01),
    ):
        q = np.concatenate(parts) if parts else np.zeros((0, 4, 2))
        layers[name] = np.concatenate([q, np.full(q.shape[:2] + (1,), z)], 2)
    texture, world_from_texture = _paint_texture(road_map, layers)
    return MapGeometry(layers, texture, world_from_texture)


def _paint_texture(road_map: RoadMap, layers: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Paint the ground layers into one top-down image (0.1 m texels, capped at 4096 px a side)."""
    x0, y0, x1, y1 = road_map.bounds
    x0, y0, x1, y1 = x0 - 10, y0 - 10, x1 + 10, y1 + 10
    res = max(0.1, (x1 - x0) / 4096, (y1 - y0) / 4096)
    w, h = int(np.ceil((x1 - x0) / res)), int(np.ceil((y1 - y0) / res))
    tex = np.empty((h, w, 3), np.uint8)
    tex[:] = GRASS.astype(np.uint8)
    world_from_texture = np.array([[res, 0, x0], [0, res, y0], [0, 0, 1]])
    for name, colour in LAYER_COLOURS.items():
        q = layers[name][..., :2]
        if len(q):
            px = np.round((q - [x0, y0]) / res * 4).astype(np.int32)
            cv2.fillPoly(tex, list(px), colour, cv2.LINE_AA, shift=2)
    return tex, world_from_texture


def _fan(poly: np.ndarray) -> np.ndarray:
    """Triangle fan of a convex polygon as degenerate quads."""
    return np.stack([np.stack([poly[0], poly[i], poly[i + 1], poly[i + 1]]) for i in range(1, len(poly) - 1)])


_GEOMETRY: dict[int, tuple[RoadMap, MapGeometry]] = {}


def map_geometry(road_map: RoadMap) -> MapGeometry:
    hit = _GEOMETRY.get(id(road_map))
    if hit is None or hit[0] is not road_map:
        if len(_GEOMETRY) > 16:
            _GEOMETRY.pop(next(iter(_GEOMETRY)))
        hit = _GEOMETRY[id(road_map)] = (road_map, build_map_geometry(road_map))
    return hit[1]


# --- clipping and projection ------------------------------------------------------------------------------------
def clip_quads_near(pc: np.ndarray) -> np.ndarray:
    """Clip quads ``[Q, 4, 3]`` (camera frame) against z >= NEAR, vectorised Sutherland-Hodgman.

    Each clipped polygon has at most 5 vertices; the output is padded to 8 with repeated vertices
    (harmless for a polygon fill), so all quads go through the same array ops.
    """
    a = pc
    b = np.roll(pc, -1, axis=1)
    ina, inb = a[..., 2] >= NEAR, b[..., 2] >= NEAR
    t = ((NEAR - a[..., 2]) / np.where(b[..., 2] != a[..., 2], b[..., 2] - a[..., 2], 1.0))[..., None]
    cross = a + t * (b - a)
    cand = np.stack([a, cross], 2).reshape(len(pc), 8, 3)  # per edge: start vertex, crossing
    valid = np.stack([ina, ina != inb], 2).reshape(len(pc), 8)
    # cyclic forward fill of invalid slots with the previous valid vertex
    idx = np.where(valid, np.arange(8), -1)
    idx = np.maximum.accumulate(np.concatenate([idx, np.where(valid, np.arange(8, 16), -1)], 1), axis=1)[:, 8:] % 8
    return np.take_along_axis(cand, idx[..., None], 1)


class CameraRenderer:
    """Renders every camera of a rig for the current world state."""

    def __init__(self, cameras: tuple[Camera, ...]) -> None:
        self.cameras = cameras
        self.K = [c.intrinsics() for c in cameras]
        self.R_ce = [c.rotation_from_ego() for c in cameras]
        self.t_e = [np.array([c.x, c.y, c.z]) for c in cameras]
        self.templates = [self._sky_and_ground(c, R) for c, R in zip(cameras, self.R_ce)]
        # first image row whose ray points below the horizon (plus a margin for far-ground aliasing)
        self.horizon_rows = [self._horizon_row(c, R) for c, R in zip(cameras, self.R_ce)]

    @staticmethod
    def _horizon_row(cam: Camera, R: np.ndarray) -> int:
        rows = np.arange(cam.height)
        dirs = np.stack([np.zeros(cam.height), (rows - cam.height / 2) / cam.fx, np.ones(cam.height)], 1) @ R
        elev = dirs[:, 2] / np.linalg.norm(dirs, axis=1)
        below = np.flatnonzero(elev < -0.02)  # ~ ground within 80 m of a 1.6 m high camera
        return int(below[0]) if len(below) else cam.height

    @staticmethod
    def _sky_and_ground(cam: Camera, R: np.ndarray) -> np.ndarray:
        """Sky gradient above the horizon and grass below, for a level ego."""
        h, w = cam.height, cam.width
        fy, cy = cam.fx, h / 2
        rows = np.arange(h)
        ray_down = (rows - cy) / fy  # camera y / z for each row
        # elevation of each row's ray in the ego frame (pitch included through R)
        dirs = np.stack([np.zeros(h), ray_down, np.ones(h)], 1) @ R  # ego-frame directions
        elev = dirs[:, 2] / np.linalg.norm(dirs, axis=1)
        sky_t = np.clip(elev / 0.5, 0, 1)[:, None]
        sky = SKY_HORIZON * (1 - sky_t) + SKY_TOP * sky_t
        grass_shade = np.clip(0.75 + 0.6 * (-elev), 0.75, 1.1)[:, None] * GRASS
        col = np.where((elev > 0)[:, None], sky, grass_shade)
        return np.repeat(col[:, None, :], w, axis=1).clip(0, 255).astype(np.uint8)

    def render(self, world: World, out: np.ndarray | None = None) -> np.ndarray:
        """Images ``[n_cams, H, W, 3]`` uint8 for the current world state."""
        n = len(self.cameras)
        h, w = self.cameras[0].height, self.cameras[0].width
        if out is None:
            out = np.empty((n, h, w, 3), np.uint8)
        st = world.state
        ex, ey, eyaw = float(st.x[0]), float(st.y[0]), float(st.yaw[0])
        c, s = math.cos(eyaw), math.sin(eyaw)
        R_ew = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])  # world -> ego rotation
        geom = map_geometry(world.c.road_map)
        boxes = self._actor_boxes(world)
        lights = self._light_boxes(world)
        for k in range(n):
            img = out[k]
            np.copyto(img, self.templates[k])
            R = self.R_ce[k] @ R_ew  # world -> camera
            cam_world = np.array([ex, ey, 0.0]) + R_ew.T @ self.t_e[k]
            self._draw_ground(img, k, R, cam_world, geom)
            self._draw_boxes(img, k, R, cam_world, boxes + lights)
        return out

    # --- ground layers -------------------------------------------------------------------------------------------
    def _draw_ground(self, img, k, R, cam_world, geom: MapGeometry) -> None:
        """Warp the top-down ground texture into the image through the ground-plane homography."""
        cam = self.cameras[k]
        horizon = self.horizon_rows[k]
        if horizon >= cam.height:
            return
        # ground point (x, y, 0) -> pixel: K [r1 r2 -R c]; then compose with texel -> world
        K = self.K[k]
        H = K @ np.column_stack([R[:, 0], R[:, 1], -R @ cam_world])
        H = H @ geom.world_from_texture
        shift = np.array([[1, 0, 0], [0, 1, -horizon], [0, 0, 1]])  # draw only rows below the horizon
        band = img[horizon:]
        cv2.warpPerspective(
            geom.texture,
            shift @ H,
            (cam.width, cam.height - horizon),
            dst=band,
            flags=cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_TRANSPARENT,
        )

    # --- boxes -----------------------------------------------------------------------------------------------------
    @staticmethod
    def _actor_boxes(world: World) -> list[tuple]:
        st, a = world.state, world.c.actors
        out = []
        for i in np.flatnonzero(st.active):
            if i == 0:
                continue
            kind = a.kind[i]
            if kind == Kind.PEDESTRIAN:
                colour = PEDESTRIAN_COLOUR
            elif kind == Kind.STATIC:
                colour = STATIC_COLOUR
            else:
                colour = VEHICLE_PALETTE[i % len(VEHICLE_PALETTE)]
            out.append(
                (
                    float(st.x[i]),
                    float(st.y[i]),
                    0.0,
                    float(st.yaw[i]),
                    float(a.length[i]),
                    float(a.width[i]),
                    float(a.height[i]),
                    colour,
                    None,
                )
            )
            if kind in (Kind.VEHICLE, Kind.CYCLIST) and a.height[i] < 2.5:  # cabin / glass
                out.append(
                    (
                        float(st.x[i] - 0.1 * a.length[i] * math.cos(st.yaw[i])),
                        float(st.y[i] - 0.1 * a.length[i] * math.sin(st.yaw[i])),
                        float(a.height[i]) * 0.55,
                        float(st.yaw[i]),
                        float(a.length[i]) * 0.5,
                        float(a.width[i]) * 0.85,
                        float(a.height[i]) * 0.5,
                        np.array([60, 75, 95]),
                        None,
                    )
                )
        return out

    @staticmethod
    def _light_boxes(world: World) -> list[tuple]:
        rm = world.c.road_map
        if not rm.signals:
            return []
        states = world.signal_states()
        out = []
        for k, sid in enumerate(world.c.signal_ids):
            sig = rm.signals[sid]
            x, y = sig.position
            out.append((x, y, 0.0, sig.facing, 0.25, 0.25, sig.height, np.array([90, 90, 90]), None))
            out.append((x, y, sig.height - 0.2, sig.facing, 0.35, 0.45, 1.2, np.array([25, 25, 25]), int(states[k])))
        for sl in rm.stop_lines:
            if sl.signal is None:  # stop sign: red plate on a post at the kerb
                lane = rm.lanes[sl.lane]
                xy, h = lane.pose_at(sl.s)
                p = xy + np.array([math.sin(h), -math.cos(h)]) * (lane.width / 2 + 1.0)
                out.append((p[0], p[1], 0.0, h + math.pi, 0.1, 0.1, 2.0, np.array([120, 120, 120]), None))
                out.append((p[0], p[1], 2.0, h + math.pi, 0.08, 0.8, 0.8, np.array([200, 20, 20]), None))
        return out

    def _draw_boxes(self, img, k, R, cam_world, boxes) -> None:
        if not boxes:
            return
        cam = self.cameras[k]
        arr = np.array([b[:7] for b in boxes])  # x, y, z0, yaw, l, w, h
        d = arr[:, :2] - cam_world[:2]
        dist = np.hypot(d[:, 0], d[:, 1])
        keep = (dist < FAR) & (d @ R[2, :2] > -8.0)
        order = np.flatnonzero(keep)[np.argsort(-dist[keep])]
        if not len(order):
            return
        sel = arr[order]
        B = len(sel)
        cyaw, syaw = np.cos(sel[:, 3]), np.sin(sel[:, 3])
        corners2d = geo.box_corners(sel[:, 0], sel[:, 1], sel[:, 3], sel[:, 4], sel[:, 5])  # [B, 4, 2]
        z0 = np.broadcast_to(sel[:, 2:3, None], (B, 4, 1))
        z1 = np.broadcast_to((sel[:, 2] + sel[:, 6])[:, None, None], (B, 4, 1))
        verts = np.concatenate([np.concatenate([corners2d, z0], 2), np.concatenate([corners2d, z1], 2)], 1)
        pc = (verts - cam_world) @ R.T  # [B, 8, 3]
        fx, cx, cy = cam.fx, cam.width / 2, cam.height / 2
        z = np.maximum(pc[..., 2], 1e-3)
        uv = np.stack([fx * pc[..., 0] / z + cx, fx * pc[..., 1] / z + cy], -1)
        faces = np.array(_FACES)  # [5, 4]
        # outward normals and centres of the five drawn faces, for culling and shading
        zero, one = np.zeros(B), np.ones(B)
        normals = np.stack(
            [
                np.stack([cyaw, syaw, zero], 1),
                np.stack([syaw, -cyaw, zero], 1),
                np.stack([-cyaw, -syaw, zero], 1),
                np.stack([-syaw, cyaw, zero], 1),
                np.stack([zero, zero, one], 1),
            ],
            1,
        )  # [B, 5, 3]
        centres = verts[:, faces].mean(2)  # [B, 5, 3]
        visible = np.einsum("bfk,bfk->bf", normals, centres - cam_world) < 0
        visible &= (pc[:, faces, 2] >= NEAR).all(2)
        shade = 0.55 + 0.45 * np.maximum(0.0, normals @ SUN)
        on_screen = ~((uv[..., 0] < 0).all(1) | (uv[..., 0] > cam.width).all(1) | (uv[..., 1] < 0).all(1))
        visible &= on_screen[:, None]
        pts = np.round(uv[:, faces] * 4).astype(np.int64)  # [B, 5, 4, 2]
        visible &= np.abs(pts).max((2, 3)) < 4 * 8 * cam.width
        pts = pts.astype(np.int32)
        for b, f in zip(*np.nonzero(visible)):
            entry = boxes[order[b]]
            colour = entry[7] * shade[b, f]
            cv2.fillConvexPoly(
                img,
                np.ascontiguousarray(pts[b, f]),
                (float(colour[0]), float(colour[1]), float(colour[2])),
                cv2.LINE_8,
                2,
            )
            if entry[8] is not None and f == 0:
                self._draw_lamps(img, uv[b, faces[0]], entry[8])

    @staticmethod
    def _draw_lamps(img, face_uv: np.ndarray, state: int) -> None:
        """Three lamps (red, yellow, green from the top) on the front face of a signal head."""
        top = 0.5 * (face_uv[2] + face_uv[3])
        bottom = 0.5 * (face_uv[0] + face_uv[1])
        width = np.linalg.norm(face_uv[1] - face_uv[0])
        r = max(1, int(width * 0.3))
        for slot, st in enumerate((RED, YELLOW, GREEN)):
            p = top + (bottom - top) * (slot + 0.5) / 3
            colour = LIGHT_ON[st] if st == state else LIGHT_OFF
            cv2.circle(img, (int(p[0]), int(p[1])), r, colour, -1, cv2.LINE_AA)
