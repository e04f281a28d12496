"""Tiled rasters: the same cells as one dense fill, memory in proportion to the content, O(1) lookups."""

import cv2
import numpy as np

from envs.world.raster import BLOCK, TILE, rasterise, tiled_value
from scenarios.geometry import items_by_block


def _random_quads(rng, n, extent):
    centres = rng.integers(20, extent - 20, (n, 2)).astype(float)  # inside: the dense fill clips at its edge
    offsets = np.array([[-3, -2], [4, -3], [3, 3], [-2, 4]], float)
    return centres[:, None] + offsets * rng.uniform(0.5, 2.0, (n, 1, 1))


def _paint_quads(quads):
    def paint(canvas, block_origin, items):
        for i in items:
            cv2.fillConvexPoly(canvas["value"], np.round(quads[i] - block_origin).astype(np.int32), int(i % 7) + 1)

    return paint


def test_tiled_raster_equals_a_dense_fill_across_blocks():
    rng = np.random.default_rng(0)
    extent = 2 * TILE * BLOCK + 300  # three blocks a side, cell = 1 m (integer coordinates: exact)
    quads = _random_quads(rng, 400, extent)
    boxes = np.concatenate([quads.min(1), quads.max(1)], 1)
    raster = rasterise(
        (0.0, 0.0, float(extent), float(extent)), 1.0, {"value": (np.uint8, 0)}, boxes, _paint_quads(quads)
    )
    dense = np.zeros(raster.shape, np.uint8)
    for i, q in enumerate(quads):
        cv2.fillConvexPoly(dense, np.round(q).astype(np.int32), int(i % 7) + 1)
    np.testing.assert_array_equal(raster.dense("value"), dense)  # block edges never show
    # lookups, in Python and in compiled kernels, read the same cells
    for x, y in rng.uniform(-50, extent + 50, (500, 2)):
        row, col = int(y + 0.5), int(x + 0.5)
        inside = 0 <= row < dense.shape[0] and 0 <= col < dense.shape[1]
        expected = dense[row, col] if inside else 0
        assert raster.lookup("value", x, y) == expected
        assert tiled_value(raster.index, raster.layers["value"], 0.0, 0.0, 1.0, x, y, 0) == expected


def test_memory_follows_the_content_not_the_extent():
    """A 20 km straight road at 0.1 m in a 20 x 2 km area: 4 GB dense, ~1% of that tiled, the tiles
    inside the road stored once."""
    road = np.array([[0.0, -10.0], [20_000.0, -10.0], [20_000.0, 10.0], [0.0, 10.0]])

    def paint(canvas, block_origin, items):
        cv2.fillConvexPoly(canvas["road"], np.round((road - block_origin) / 0.1).astype(np.int32), 1)

    box = np.array([[0, -10, 20_000, 10]])
    raster = rasterise((0.0, -1000.0, 20_000.0, 1000.0), 0.1, {"road": (np.uint8, 0)}, box, paint)
    assert raster.nbytes < 0.01 * raster.shape[0] * raster.shape[1]
    assert len(raster.layers["road"]) < 0.8 * (raster.index >= 0).sum()  # uniform tiles are stored once
    assert raster.lookup("road", 12_345.6, 0.0) == 1 and raster.lookup("road", 12_345.6, 15.0) == 0


def test_items_by_block_lists_every_square_a_box_meets():
    rng = np.random.default_rng(1)
    lo = rng.uniform(0, 900, (300, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0, 250, (300, 2))], 1)
    got = {key: set(items.tolist()) for key, items in items_by_block(boxes, np.zeros(2), 100.0)}
    expected: dict = {}
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        for r in range(int(y0 // 100), int(y1 // 100) + 1):
            for c in range(int(x0 // 100), int(x1 // 100) + 1):
                expected.setdefault((r, c), set()).add(i)
    assert got == expected
