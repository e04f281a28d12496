"""Episode recording to mp4 (OpenCV's bundled FFmpeg, MPEG-4 Part 2)."""

from __future__ import annotations

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
