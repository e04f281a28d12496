"""Coordinates between LoopDrive's world frame and CARLA's.

LoopDrive is right-handed: x east, y north, yaw counter-clockwise from +x, in radians. CARLA (Unreal)
is left-handed: x forward, y right, z up, yaw in degrees, clockwise seen from above. The same map
point is (x, -y); a heading is -degrees(yaw). Velocities flip like positions. Every function takes
arrays (any leading shape), so a whole actor table converts in one call.
"""

from __future__ import annotations

import numpy as np


def to_carla_xy(xy: np.ndarray) -> np.ndarray:
    xy = np.asarray(xy, float)
    return np.stack([xy[..., 0], -xy[..., 1]], -1)


def from_carla_xy(xy: np.ndarray) -> np.ndarray:
    return to_carla_xy(xy)  # the flip is its own inverse


def to_carla_yaw_deg(yaw: np.ndarray | float) -> np.ndarray:
    """Our yaw (rad, CCW) -> CARLA's (deg, CW), wrapped to (-180, 180]."""
    deg = -np.degrees(np.asarray(yaw, float))
    return 180.0 - np.mod(180.0 - deg, 360.0)


def from_carla_yaw_deg(yaw_deg: np.ndarray | float) -> np.ndarray:
    """CARLA's yaw (deg, CW) -> ours (rad, CCW), wrapped to (-pi, pi]."""
    rad = -np.radians(np.asarray(yaw_deg, float))
    return np.pi - np.mod(np.pi - rad, 2 * np.pi)


def to_carla_pose(x: float, y: float, yaw: float) -> tuple[float, float, float]:
    """(x, y, yaw) -> CARLA's (x, y, yaw_deg), for ``carla.Transform``."""
    return float(x), float(-y), float(to_carla_yaw_deg(yaw))


def from_carla_pose(x: float, y: float, yaw_deg: float) -> tuple[float, float, float]:
    return float(x), float(-y), float(from_carla_yaw_deg(yaw_deg))


def world_to_ego(xy: np.ndarray, ego_x: float, ego_y: float, ego_yaw: float) -> np.ndarray:
    """World points [..., 2] into the ego frame (x forward, y left), as the agents' plans are."""
    c, s = np.cos(ego_yaw), np.sin(ego_yaw)
    d = np.asarray(xy, float) - [ego_x, ego_y]
    return np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], -1)


def camera_mount(cam) -> dict[str, float]:
    """A rig camera's mount on the ego in CARLA's terms: ``carla.Transform(carla.Location(x, y, z),
    carla.Rotation(pitch, yaw, 0))`` and its ``fov``. Ours: y left, yaw left positive, pitch down
    positive; CARLA: y right, yaw right positive, pitch up positive."""
    return {
        "x": float(cam.x),
        "y": -float(cam.y),
        "z": float(cam.z),
        "pitch": -float(cam.pitch_deg),
        "yaw": -float(cam.yaw_deg),
        "fov": float(cam.fov_deg),
        "width": int(cam.width),
        "height": int(cam.height),
    }
