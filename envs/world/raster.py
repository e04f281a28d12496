"""Rasters of whole towns, stored as tiles: only tiles with content are kept, uniform ones shared.

A 10 km town at 0.1 m is 10^10 cells, of which its roads cover a few per cent, so a dense array
cannot hold it. A ``TiledRaster`` keeps an index of ``TILE x TILE`` cell tiles (-1 = every cell is
the background) and a stack of the tiles that have content; a tile whose cells all hold one value
(a road's interior) is stored once and shared. Rasters are painted block by block (a block is a
square of whole tiles) with OpenCV's polygon fills, so painting a town never needs more than one
block of memory beyond the tiles kept. Lookups are O(1): one index read and one tile read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from scenarios.geometry import items_by_block

TILE = 64  # cells a side of a stored tile
BLOCK = 32  # tiles a side of a painted block (2,048 cells)
MARGIN = 32  # cells painted beyond each side of a block


@dataclass
class TiledRaster:
    """Layers of one grid (cell ``(row, col)`` is centred on ``origin + (col, row) * res``)."""

    origin: np.ndarray  # world (x, y) of cell (0, 0)
    res: float  # metres per cell
    shape: tuple[int, int]  # (rows, cols) of the whole grid
    index: np.ndarray  # [tile rows, tile cols] int32: the tile of each position, -1 = background
    layers: dict[str, np.ndarray]  # name -> [n tiles, TILE, TILE]
    background: dict[str, float]

    def cell(self, x: float, y: float) -> tuple[int, int]:
        return int((y - self.origin[1]) / self.res + 0.5), int((x - self.origin[0]) / self.res + 0.5)

    def lookup(self, layer: str, x: float, y: float) -> float:
        """The value of ``layer`` at a world point (the background outside the grid)."""
        row, col = self.cell(x, y)
        if 0 <= row < self.shape[0] and 0 <= col < self.shape[1]:
            k = self.index[row // TILE, col // TILE]
            if k >= 0:
                return self.layers[layer][k, row % TILE, col % TILE].item()
        return self.background[layer]

    def dense(self, layer: str) -> np.ndarray:
        """The whole layer as one array (for small maps and tests)."""
        rows, cols = self.index.shape
        out = np.full((rows * TILE, cols * TILE), self.background[layer], self.layers[layer].dtype)
        for r, c in zip(*np.nonzero(self.index >= 0)):
            out[r * TILE : (r + 1) * TILE, c * TILE : (c + 1) * TILE] = self.layers[layer][self.index[r, c]]
        return out[: self.shape[0], : self.shape[1]]

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + sum(t.nbytes for t in self.layers.values())


Painter = Callable[[dict[str, np.ndarray], np.ndarray, np.ndarray], None]


def rasterise(
    bounds: tuple[float, float, float, float],
    res: float,
    layers: dict[str, tuple[type, float]],
    item_bounds: np.ndarray,
    paint: Painter,
) -> TiledRaster:
    """Paint a tiled raster over ``bounds`` (x0, y0, x1, y1; cell (0, 0) at (x0, y0)).

    ``layers`` maps a name to (dtype, background). ``item_bounds`` [N, 4] are the world boxes of the
    things to paint; ``paint(canvases, canvas_origin, items)`` draws the items whose box meets the block
    into its canvases (one per layer, pixel (0, 0) at ``canvas_origin``). The canvases overlap the
    neighbouring blocks by ``MARGIN`` cells, so OpenCV's clipping at a canvas edge never shows.
    """
    x0, y0, x1, y1 = bounds
    origin = np.array([x0, y0], float)
    shape = (int(np.ceil((y1 - y0) / res)) + 1, int(np.ceil((x1 - x0) / res)) + 1)
    n_tiles = (-(-shape[0] // TILE), -(-shape[1] // TILE))
    index = np.full(n_tiles, -1, np.int32)
    kept: dict[str, list[np.ndarray]] = {name: [] for name in layers}
    first = next(iter(layers))
    uniform: dict[tuple, int] = {}
    span = TILE * BLOCK * res
    item_bounds = np.asarray(item_bounds, float).reshape(-1, 4)
    for (br, bc), items in items_by_block(item_bounds, origin, span):
        block_origin = origin + np.array([bc, br]) * span
        side = TILE * BLOCK + 2 * MARGIN
        padded = {name: np.full((side, side), bg, dtype) for name, (dtype, bg) in layers.items()}
        paint(padded, block_origin - MARGIN * res, items)
        canvases = {name: c[MARGIN:-MARGIN, MARGIN:-MARGIN] for name, c in padded.items()}
        under = _tiles_under(item_bounds[items], block_origin, res)
        content, flat = np.zeros_like(under), under.copy()
        for name, (dtype, bg) in layers.items():
            words = canvases[name].view(np.uint64)  # census 8 bytes at a time
            bg_word = np.full(8 // np.dtype(dtype).itemsize, bg, dtype).view(np.uint64)[0]
            has, same = _tile_census(words, under, bg_word, words.shape[1] // BLOCK)
            content |= has
            flat &= same
        for tr, tc in zip(*np.nonzero(content)):
            gr, gc = br * BLOCK + tr, bc * BLOCK + tc
            if gr >= n_tiles[0] or gc >= n_tiles[1]:
                continue
            cells = {name: c[tr * TILE : (tr + 1) * TILE, tc * TILE : (tc + 1) * TILE] for name, c in canvases.items()}
            uniform_cells = flat[tr, tc] and all((c == c[0, 0]).all() for c in cells.values())
            key = tuple(c[0, 0].item() for c in cells.values()) if uniform_cells else None
            if key is not None and key in uniform:
                index[gr, gc] = uniform[key]
                continue
            index[gr, gc] = len(kept[first])
            if key is not None:
                uniform[key] = index[gr, gc]
            for name, c in cells.items():
                kept[name].append(c.copy())
    stacked = {
        name: np.stack(kept[name]) if kept[name] else np.zeros((0, TILE, TILE), dtype)
        for name, (dtype, _) in layers.items()
    }
    return TiledRaster(origin, res, shape, index, stacked, {name: bg for name, (_, bg) in layers.items()})


def _tiles_under(boxes: np.ndarray, block_origin: np.ndarray, res: float) -> np.ndarray:
    """(row, col) of the block's tiles that the boxes overlap: the only ones that can hold content."""
    cells = (boxes - np.tile(block_origin, 2)) / res + np.array([-1.0, -1.0, 1.0, 1.0])  # a cell of margin
    c0, r0, c1, r1 = np.clip(np.floor(cells / TILE), 0, BLOCK - 1).astype(int).T
    under = np.zeros((BLOCK, BLOCK), bool)
    for a, b, c, d in zip(r0.tolist(), r1.tolist(), c0.tolist(), c1.tolist()):
        under[a : b + 1, c : d + 1] = True
    return under


@njit(cache=True)
def _tile_census(words, under, background, tile_words):
    """Per tile of a block (only those ``under`` an item), from the canvas seen as 64-bit words: has a
    word off the background, and are all its words equal (equal cells are checked after)."""
    content = np.zeros(under.shape, np.bool_)
    flat = np.zeros(under.shape, np.bool_)
    for tr in range(under.shape[0]):
        for tc in range(under.shape[1]):
            if not under[tr, tc]:
                continue
            first = words[tr * TILE, tc * tile_words]
            has, same = first != background, True
            for r in range(tr * TILE, (tr + 1) * TILE):
                for w in range(tc * tile_words, (tc + 1) * tile_words):
                    v = words[r, w]
                    if v != first:
                        same = False
                    if v != background:
                        has = True
                if has and not same:
                    break
            content[tr, tc], flat[tr, tc] = has, same
    return content, flat


@njit(cache=True)
def tiled_value(index, tiles, ox, oy, res, x, y, background):
    """``TiledRaster.lookup`` for compiled kernels (one layer's tiles)."""
    row = int((y - oy) / res + 0.5)
    col = int((x - ox) / res + 0.5)
    if row < 0 or col < 0:
        return background
    tr, tc = row // TILE, col // TILE
    if tr >= index.shape[0] or tc >= index.shape[1]:
        return background
    k = index[tr, tc]
    if k < 0:
        return background
    return tiles[k, row % TILE, col % TILE]
