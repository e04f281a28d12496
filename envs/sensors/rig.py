"""Camera rigs: pinhole cameras placed relative to the ego (x forward, y left, z up).

Intrinsics follow from the horizontal field of view and the image size; extrinsics are a mount
position and a yaw / pitch relative to the rig. Rigs are plain data, selectable by name or given
as a list of dicts in a config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Camera:
    name: str
    fov_deg: float  # horizontal field of view
    yaw_deg: float = 0.0  # left positive
    pitch_deg: float = 0.0  # down positive
    x: float = 1.5
    y: float = 0.0
    z: float = 1.6
    height: int = 128
    width: int = 256

    @property
    def fx(self) -> float:
        return (self.width / 2) / math.tan(math.radians(self.fov_deg) / 2)

    def intrinsics(self) -> np.ndarray:
        f = self.fx
        return np.array([[f, 0, self.width / 2], [0, f, self.height / 2], [0, 0, 1]])

    def rotation_from_ego(self) -> np.ndarray:
        """Rows: camera right, down, forward axes expressed in the ego frame (OpenCV convention)."""
        yaw, pitch = math.radians(self.yaw_deg), math.radians(self.pitch_deg)
        fwd = np.array([math.cos(yaw) * math.cos(pitch), math.sin(yaw) * math.cos(pitch), -math.sin(pitch)])
        right = np.array([math.sin(yaw), -math.cos(yaw), 0.0])
        down = np.cross(fwd, right)
        return np.stack([right, down, fwd])


ALPAMAYO4 = (
    Camera("cross_left_120fov", 120.0, yaw_deg=70.0, x=1.9, y=0.9, z=1.55),
    Camera("front_wide_120fov", 120.0, x=1.9, z=1.55),
    Camera("cross_right_120fov", 120.0, yaw_deg=-70.0, x=1.9, y=-0.9, z=1.55),
    Camera("front_tele_30fov", 30.0, x=1.9, z=1.55),
)

# The tele camera's centre at twice its pixels per degree: a digital zoom (the same pose, half the tangent of
# the half-angle), as a fifth image. At 56x112 the tele camera gives a car 14 m ahead about one of the VLM's
# merged tokens, too few to read how its gap changes between decisions (docs/experiments/rl.md, stop 80).
TELE_ZOOM_2X = Camera(
    "front_tele_zoom_2x",
    math.degrees(2 * math.atan(math.tan(math.radians(ALPAMAYO4[3].fov_deg) / 2) / 2)),
    x=1.9,
    z=1.55,
)

RIGS: dict[str, tuple[Camera, ...]] = {
    "alpamayo4": ALPAMAYO4,
    "alpamayo4_zoom": ALPAMAYO4 + (TELE_ZOOM_2X,),
    "front_only": (Camera("front_wide_120fov", 120.0, x=1.9, z=1.55),),
    "front_tele": (Camera("front_tele_30fov", 30.0, x=1.9, z=1.55),),
    "surround6": ALPAMAYO4[:3]
    + (
        Camera("rear_left_70fov", 70.0, yaw_deg=145.0, x=0.0, y=0.9, z=1.55),
        Camera("rear_tele_30fov", 30.0, yaw_deg=180.0, x=-2.2, z=1.55),
        Camera("rear_right_70fov", 70.0, yaw_deg=-145.0, x=0.0, y=-0.9, z=1.55),
    ),
}


def make_rig(
    rig: str | list[dict[str, Any]] | tuple[Camera, ...], height: int = 128, width: int = 256
) -> tuple[Camera, ...]:
    """A rig by name (``alpamayo4``, ``front_only``, ...) or from a list of camera dicts, at H x W."""
    if isinstance(rig, str):
        if rig not in RIGS:
            raise ValueError(f"unknown camera rig {rig!r}; known rigs: {sorted(RIGS)} (or pass a list of cameras)")
        cams = RIGS[rig]
    elif isinstance(rig, tuple) and all(isinstance(c, Camera) for c in rig):
        cams = rig
    else:
        try:
            cams = tuple(c if isinstance(c, Camera) else Camera(**c) for c in rig)
        except TypeError as e:
            raise ValueError(f"bad camera in rig: {e}") from None
    if not cams:
        raise ValueError("a camera rig needs at least one camera")
    if height < 16 or width < 16:
        raise ValueError(f"camera resolution {height}x{width} is too small (min 16x16)")
    return tuple(replace(c, height=height, width=width) for c in cams)
