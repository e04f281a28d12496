"""Resizing stacks of camera frames (the VLA's input size, the world model's, the env's)."""

from __future__ import annotations

import cv2
import numpy as np


def resize_frames(frames: np.ndarray, size: tuple[int, int], interpolation: int = cv2.INTER_AREA) -> np.ndarray:
    """Resize uint8 frames ``[..., H, W, 3]`` to ``size`` (H, W); INTER_AREA (the VLA's filter) by default."""
    h, w = size
    if frames.shape[-3:-1] == (h, w):
        return frames.copy()
    flat = frames.reshape(-1, *frames.shape[-3:])
    out = np.stack([cv2.resize(f, (w, h), interpolation=interpolation) for f in flat])
    return out.reshape(*frames.shape[:-3], h, w, 3)
