"""Episode recording to mp4 (OpenCV's bundled FFmpeg, MPEG-4 Part 2), and the pieces of a video frame."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np


class VideoRecorder:
    """Append RGB frames; the file is complete once ``close()`` returns (or the context exits)."""

    def __init__(self, path: str | Path, fps: float = 10.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fps = fps
        self._writer: cv2.VideoWriter | None = None
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        if self._writer is None:
            self._size = (w - w % 2, h - h % 2)
            self._writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, self._size)
            if not self._writer.isOpened():
                raise RuntimeError(f"cannot open a video writer for {self.path}")
        frame = frame[: self._size[1], : self._size[0]]
        self._writer.write(cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2BGR))
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def __enter__(self) -> VideoRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def camera_grid(tiles: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Camera images ``[N, H, W, 3]`` in a grid two wide, each labelled with its name."""
    n, h, w, _ = tiles.shape
    cols = min(n, 2) if n > 1 else 1
    rows = int(math.ceil(n / cols))
    grid = np.zeros((rows * h, cols * w, 3), np.uint8)
    for i in range(n):
        r, c = divmod(i, cols)
        grid[r * h : (r + 1) * h, c * w : (c + 1) * w] = tiles[i]
        cv2.putText(
            grid, names[i], (c * w + 4, r * h + 12), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (255, 255, 255), 1, cv2.LINE_AA
        )
    return grid


def status_bar(width: int, status: str, caption: str | None = None) -> np.ndarray:
    """A dark strip with the status line and, below it, the agent's reasoning."""
    bar = np.full((34, width, 3), 20, np.uint8)
    cv2.putText(bar, status, (6, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1, cv2.LINE_AA)
    if caption:
        cv2.putText(bar, caption[:140], (6, 28), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (255, 220, 120), 1, cv2.LINE_AA)
    return bar
