"""The top-down ground texture the cameras and the BEV sample, at any map size.

A map that fits in ``WINDOW`` texels at 0.1 m (410 m a side: every procedural map, the small towns) is
painted once, whole. A larger one (a 10 km town would be 10^10 texels) is cut into ``TILE``-texel
tiles painted on demand from the quads that touch them and kept in a small LRU cache; the renderers
sample a window of 3 x 3 tiles around the ego, composed again only when the ego enters another tile,
so the per-step cost and the memory do not grow with the map.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from scenarios.geometry import items_by_block

RES = 0.1  # metres per texel
WINDOW = 4096  # texels a side of the largest texture painted whole
TILE = 1024  # texels a side of a tile of a large map (102.4 m: the window keeps >= 102 m around the ego)
_TILES: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()  # (texture, row, col): 3 MB each
_VIEWS: OrderedDict[tuple[int, int, int], GroundView] = OrderedDict()  # (texture, row, col): 28 MB each
CACHED_TILES, CACHED_VIEWS = 32, 4  # per process, over every map
_serial = itertools.count()


@dataclass(frozen=True)
class GroundView:
    """The ground texture around a point, and which of the map's props lie on it."""

    texture: np.ndarray  # [H, W, 3] uint8
    world_from_texture: np.ndarray  # 3x3: texel (col, row, 1) -> world (x, y, 1)
    props: np.ndarray  # indices of the props on this texture


class GroundTexture:
    def __init__(
        self,
        bounds: tuple[float, float, float, float],
        layers: list[tuple[np.ndarray, tuple[int, int, int]]],
        background: tuple[int, int, int],
        prop_xy: np.ndarray,
    ) -> None:
        """``layers``: (quads [Q, 4, 2], RGB) in drawing order; ``prop_xy`` [P, 2] positions of the props."""
        x0, y0, x1, y1 = bounds
        self.origin = np.array([x0 - 10.0, y0 - 10.0])
        self.extent = np.array([x1 - x0 + 20.0, y1 - y0 + 20.0])
        self.background = background
        self.quads = np.concatenate([q for q, _ in layers]) if layers else np.zeros((0, 4, 2))
        self.colours = [c for _, c in layers]
        self.layer_of = np.repeat(np.arange(len(layers)), [len(q) for q, _ in layers])
        self.prop_xy = np.asarray(prop_xy, float).reshape(-1, 2)
        self._serial = next(_serial)  # cache key (an id() can be reused after the object is gone)
        if (self.extent / RES).max() <= WINDOW:
            texture = self._paint(self.origin, np.ceil(self.extent / RES).astype(int), np.arange(len(self.quads)))
            self._whole = GroundView(texture, _world_from_texture(self.origin), np.arange(len(self.prop_xy)))
            return
        self._whole = None
        span = TILE * RES
        boxes = np.concatenate([self.quads.min(1), self.quads.max(1)], 1)
        self._quads_in = dict(items_by_block(boxes, self.origin, span))
        prop_boxes = np.concatenate([self.prop_xy, self.prop_xy], 1)
        self._props_in = dict(items_by_block(prop_boxes, self.origin, span))

    @property
    def tiled(self) -> bool:
        return self._whole is None

    def around(self, x: float, y: float) -> GroundView:
        """The texture to sample for a camera or BEV at (x, y)."""
        if self._whole is not None:
            return self._whole
        span = TILE * RES
        key = (self._serial, int((y - self.origin[1]) // span), int((x - self.origin[0]) // span))
        return _cached(_VIEWS, CACHED_VIEWS, key, lambda: self._compose(key[1], key[2]))

    def _compose(self, row: int, col: int) -> GroundView:
        texture = np.empty((3 * TILE, 3 * TILE, 3), np.uint8)
        props = []
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                r, c = row + dr, col + dc
                texture[(dr + 1) * TILE : (dr + 2) * TILE, (dc + 1) * TILE : (dc + 2) * TILE] = self._tile(r, c)
                props.append(self._props_in.get((r, c), np.zeros(0, np.int64)))
        corner = self.origin + np.array([col - 1, row - 1]) * TILE * RES
        return GroundView(texture, _world_from_texture(corner), np.unique(np.concatenate(props)).astype(np.int64))

    def _tile(self, row: int, col: int) -> np.ndarray:
        def paint() -> np.ndarray:
            corner = self.origin + np.array([col, row]) * TILE * RES
            return self._paint(corner, np.array([TILE, TILE]), self._quads_in.get((row, col), np.zeros(0, np.int64)))

        return _cached(_TILES, CACHED_TILES, (self._serial, row, col), paint)

    def _paint(self, corner: np.ndarray, size: np.ndarray, quads: np.ndarray) -> np.ndarray:
        """Paint the given quads (layer by layer, in order) on a background texture from ``corner``."""
        texture = np.empty((int(size[1]), int(size[0]), 3), np.uint8)
        texture[:] = self.background
        quads = np.sort(quads)  # layers are contiguous, so index order is drawing order
        px = np.round((self.quads[quads] - corner) / RES * 4).astype(np.int32)
        colours = [self.colours[k] for k in self.layer_of[quads].tolist()]
        for quad, colour in zip(px, colours):  # one call per quad: a multi-polygon fill XORs overlaps
            cv2.fillConvexPoly(texture, quad, colour, cv2.LINE_AA, shift=2)
        return texture


def _cached(cache: OrderedDict, size: int, key: tuple, make: Callable[[], object]):
    """Least-recently-used lookup in one of the module's caches."""
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = make()
        if len(cache) > size:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return hit


def _world_from_texture(corner: np.ndarray) -> np.ndarray:
    return np.array([[RES, 0, corner[0]], [0, RES, corner[1]], [0, 0, 1]])
