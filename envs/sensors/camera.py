"""CPU camera renderer (OpenCV + numpy) for any pinhole rig.

The ground layers (asphalt, kerbs, markings, stop lines, zebra stripes) are painted into a top-down
texture (``ground.GroundTexture``: whole for a small map, tiles around the ego for a town). Per frame
and camera the ground is one ``cv2.warpPerspective`` of that texture through the ground-plane
homography; actors, signal heads and stop signs are shaded 3D
boxes projected by a numba kernel and drawn far to near (painter's algorithm) with back faces
culled. Sky and horizon come from a per-camera template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from envs.sensors.boxes import FACES, REAR, SUN, project_boxes
from envs.sensors.ground import GroundTexture, GroundView
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
GLASS_COLOUR = np.array([60, 75, 95])
LIGHT_ON = {RED: (255, 30, 30), YELLOW: (255, 200, 0), GREEN: (40, 255, 90)}
LIGHT_OFF = (45, 45, 45)
BRAKE_ON, BRAKE_OFF = (255, 60, 40), (110, 22, 22)  # a car's tail lamps, lit when it brakes (World.brake_lights)
# where the two tail lamps sit on a car's rear face, as fractions of its width (each edge's) and height
TAIL_LAMP_WIDTH, TAIL_LAMP_ROWS = 0.22, (0.3, 0.5)


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
    props: np.ndarray  # static boxes [P, 7]: signal poles and heads, stop signs
    prop_colours: np.ndarray  # [P, 3]
    prop_signal: np.ndarray  # [P] index of the signal a head shows, -1 for other props
    ground: GroundTexture  # top-down RGB texture of the ground (asphalt, kerbs, markings)


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
    props, prop_colours, prop_signal = _props(road_map)
    paint = [(layers[name][..., :2], colour) for name, colour in LAYER_COLOURS.items()]
    ground = GroundTexture(road_map.bounds, paint, tuple(GRASS.tolist()), props[:, :2])
    return MapGeometry(layers, props, prop_colours, prop_signal, ground)


def _props(road_map: RoadMap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signal poles and heads (far side of the junction) and stop-sign posts with their plates."""
    boxes, colours, signal = [], [], []
    for k, sig in enumerate(road_map.signals.values()):
        x, y = sig.position
        boxes += [
            (x, y, 0.0, sig.facing, 0.25, 0.25, sig.height),
            (x, y, sig.height - 0.2, sig.facing, 0.35, 0.45, 1.2),
        ]
        colours += [(90, 90, 90), (25, 25, 25)]
        signal += [-1, k]
    for sl in road_map.stop_lines:
        if sl.signal is None:  # stop sign (red) or yield sign (white): a plate on a post at the kerb
            lane = road_map.lanes[sl.lane]
            xy, h = lane.pose_at(sl.s)
            p = xy + np.array([math.sin(h), -math.cos(h)]) * (lane.width / 2 + 1.0)
            boxes += [(p[0], p[1], 0.0, h + math.pi, 0.1, 0.1, 2.0), (p[0], p[1], 2.0, h + math.pi, 0.08, 0.8, 0.8)]
            colours += [(120, 120, 120), (235, 235, 235) if sl.give_way else (200, 20, 20)]
            signal += [-1, -1]
    return (np.array(boxes, float).reshape(-1, 7), np.array(colours, float).reshape(-1, 3), np.array(signal, np.int64))


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


def _tail_lamp_weights() -> np.ndarray:
    """``[8, 4]``: each tail-lamp corner (two quads of four) as a bilinear mix of a rear face's corners."""
    v0, v1 = TAIL_LAMP_ROWS
    rows = []
    for u0, u1 in ((0.0, TAIL_LAMP_WIDTH), (1.0 - TAIL_LAMP_WIDTH, 1.0)):
        for u, v in ((u0, v0), (u1, v0), (u1, v1), (u0, v1)):
            rows.append([(1 - v) * (1 - u), (1 - v) * u, v * u, v * (1 - u)])
    return np.array(rows)


TAIL_LAMP_WEIGHTS = _tail_lamp_weights()


def tail_lamp_quads(rear_uv: np.ndarray) -> np.ndarray:
    """The two tail lamps of each rear face ``[R, 4, 2]`` (its corners in px: bottom, one side then the
    other, then top, the other side then the first) as polygons ``[R, 2, 4, 2]`` in 1/4 px: the quads
    between fractions of the face's width at its outer edges and of its height (``TAIL_LAMP_*``)."""
    corners = np.einsum("kc,rcd->rkd", TAIL_LAMP_WEIGHTS, rear_uv)
    return np.round(corners * 4).astype(np.int32).reshape(len(rear_uv), 2, 4, 2)


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
        geom = map_geometry(world.compiled.road_map)
        ground = geom.ground.around(ex, ey)
        boxes = self._boxes(world, geom, ground.props)
        for k in range(n):
            img = out[k]
            np.copyto(img, self.templates[k])
            R = self.R_ce[k] @ R_ew  # world -> camera
            cam_world = np.array([ex, ey, 0.0]) + R_ew.T @ self.t_e[k]
            self._draw_ground(img, k, R, cam_world, ground)
            self._draw_boxes(img, k, R, cam_world, *boxes)
        return out

    # --- ground layers -------------------------------------------------------------------------------------------
    def _draw_ground(self, img, k, R, cam_world, ground: GroundView) -> None:
        """Warp the top-down ground texture into the image through the ground-plane homography."""
        cam = self.cameras[k]
        horizon = self.horizon_rows[k]
        if horizon >= cam.height:
            return
        # ground point (x, y, 0) -> pixel: K [r1 r2 -R c]; then compose with texel -> world
        K = self.K[k]
        H = K @ np.column_stack([R[:, 0], R[:, 1], -R @ cam_world])
        H = H @ ground.world_from_texture
        shift = np.array([[1, 0, 0], [0, 1, -horizon], [0, 0, 1]])  # draw only rows below the horizon
        band = img[horizon:]
        cv2.warpPerspective(
            ground.texture,
            shift @ H,
            (cam.width, cam.height - horizon),
            dst=band,
            flags=cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_TRANSPARENT,
        )

    # --- boxes -----------------------------------------------------------------------------------------------------
    @staticmethod
    def _boxes(
        world: World, geom: MapGeometry, near: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All boxes to draw: (x, y, z0, yaw, length, width, height) [B, 7], RGB [B, 3], lamp state [B],
        tail lamps [B].

        Actors (with a glass cabin on cars), then the map's props ``near`` the ego (signal poles and
        heads, stop signs); a signal head carries its light's current state, everything else -1. A
        vehicle's body carries its tail lamps (1 lit: it brakes, 0 unlit), everything else -1.
        """
        st, a = world.state, world.compiled.actors
        idx = np.flatnonzero(st.active)
        idx = idx[idx > 0]
        kind = a.kind[idx]
        body = np.stack(
            [st.x[idx], st.y[idx], np.zeros(len(idx)), st.yaw[idx], a.length[idx], a.width[idx], a.height[idx]], 1
        )
        colour = VEHICLE_PALETTE[idx % len(VEHICLE_PALETTE)].astype(float)
        colour[kind == Kind.PEDESTRIAN] = PEDESTRIAN_COLOUR
        colour[kind == Kind.STATIC] = STATIC_COLOUR
        car = ((kind == Kind.VEHICLE) | (kind == Kind.CYCLIST)) & (body[:, 6] < 2.5)
        cb = body[car]
        back = 0.1 * cb[:, 4]
        cabin = np.stack(
            [
                cb[:, 0] - back * np.cos(cb[:, 3]),
                cb[:, 1] - back * np.sin(cb[:, 3]),
                0.55 * cb[:, 6],
                cb[:, 3],
                0.5 * cb[:, 4],
                0.85 * cb[:, 5],
                0.5 * cb[:, 6],
            ],
            1,
        )
        props, prop_signal = geom.props[near], geom.prop_signal[near]
        lamps = np.full(len(body) + len(cabin) + len(props), -1, np.int64)
        if len(props):
            states = world.signal_states()
            head = prop_signal >= 0
            lamps[len(body) + len(cabin) :][head] = states[prop_signal[head]]
        tail = np.full(len(lamps), -1, np.int64)
        tail[: len(body)] = np.where(kind == Kind.VEHICLE, world.brake_lights()[idx].astype(np.int64), -1)
        boxes = np.concatenate([body, cabin, props])
        colours = np.concatenate([colour, np.broadcast_to(GLASS_COLOUR, (len(cabin), 3)), geom.prop_colours[near]])
        return boxes, colours, lamps, tail

    def _draw_boxes(self, img, k, R, cam_world, arr, colours, lamps, tail) -> None:
        if not len(arr):
            return
        cam = self.cameras[k]
        box, face, pts, shade, uv = project_boxes(
            arr, R, cam_world, cam.fx, cam.width / 2, cam.height / 2, cam.width, cam.height, NEAR, FAR, FACES, SUN
        )
        rgb = (colours[box] * shade[:, None]).tolist()
        rear = np.flatnonzero((face == REAR) & (tail[box] >= 0))
        lamp_quads = tail_lamp_quads(uv[rear]) if len(rear) else None
        lamps_of = dict(zip(rear.tolist(), range(len(rear))))
        for q in range(len(box)):
            cv2.fillConvexPoly(img, pts[q], rgb[q], cv2.LINE_8, 2)
            if face[q] == 0 and lamps[box[q]] >= 0:
                self._draw_lamps(img, uv[q], int(lamps[box[q]]))
            elif q in lamps_of:  # drawn over their face, before anything nearer
                colour = BRAKE_ON if tail[box[q]] else BRAKE_OFF
                for quad in lamp_quads[lamps_of[q]]:
                    cv2.fillConvexPoly(img, quad, colour, cv2.LINE_AA, 2)

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
