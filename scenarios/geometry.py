"""Polyline geometry shared by maps, families and the world.

Everything works on ``[N, 2]`` float arrays in metres, x east / y north, yaw counter-clockwise.
These are the few primitives a road network needs: arc length, headings, offsets, projection,
and the curve pieces (straights, arcs, Bezier connectors) that procedural families chain together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

SAMPLE_STEP = 1.0  # metres between centreline samples


def arc_lengths(points: np.ndarray) -> np.ndarray:
    """Cumulative distance along a polyline, starting at 0."""
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    return np.concatenate([[0.0], np.cumsum(seg)])


def headings(points: np.ndarray) -> np.ndarray:
    """Heading (rad) at every vertex: forward difference, the last vertex repeats its segment's."""
    d = np.diff(points, axis=0)
    h = np.arctan2(d[:, 1], d[:, 0])
    return np.concatenate([h, h[-1:]])


def wrap_angle(a: np.ndarray | float) -> np.ndarray | float:
    """Wrap to [-pi, pi)."""
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def left_normals(points: np.ndarray) -> np.ndarray:
    """Unit normals pointing left of travel, averaged at interior vertices so offsets stay smooth."""
    d = np.diff(points, axis=0)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    t = np.concatenate([d[:1], d[:-1] + d[1:], d[-1:]])
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    return np.stack([-t[:, 1], t[:, 0]], axis=1)


def offset(points: np.ndarray, distance: float) -> np.ndarray:
    """Shift a polyline sideways by ``distance`` (positive = left)."""
    return points + distance * left_normals(points)


def resample(points: np.ndarray, step: float = SAMPLE_STEP) -> np.ndarray:
    """Resample at (nearly) uniform arc-length spacing, keeping both end points."""
    s = arc_lengths(points)
    n = max(2, int(np.ceil(s[-1] / step)) + 1)
    t = np.linspace(0.0, s[-1], n)
    return np.stack([np.interp(t, s, points[:, 0]), np.interp(t, s, points[:, 1])], axis=1)


def straight(start: np.ndarray, heading: float, length: float, step: float = SAMPLE_STEP) -> np.ndarray:
    n = max(2, int(np.ceil(length / step)) + 1)
    t = np.linspace(0.0, length, n)[:, None]
    return np.asarray(start, float) + t * np.array([np.cos(heading), np.sin(heading)])


def arc(start: np.ndarray, heading: float, radius: float, angle: float, step: float = SAMPLE_STEP) -> np.ndarray:
    """Circular arc of ``radius`` turning by ``angle`` (positive = left)."""
    length = abs(angle) * radius
    n = max(2, int(np.ceil(length / step)) + 1)
    side = np.sign(angle) or 1.0
    centre = np.asarray(start, float) + side * radius * np.array([-np.sin(heading), np.cos(heading)])
    phi0 = heading - side * np.pi / 2
    phi = phi0 + np.linspace(0.0, angle, n)
    return centre + radius * np.stack([np.cos(phi), np.sin(phi)], axis=1)


def chain(*pieces: np.ndarray) -> np.ndarray:
    """Join pieces whose end and start coincide in x, y, dropping the duplicated joints (extra
    columns, a height, ride along)."""
    out = [pieces[0]]
    for p in pieces[1:]:
        out.append(p[1:] if np.allclose(p[0, :2], out[-1][-1, :2], atol=1e-6) else p)
    return np.concatenate(out)


def end_pose(points: np.ndarray) -> tuple[np.ndarray, float]:
    d = points[-1] - points[-2]
    return points[-1].copy(), float(np.arctan2(d[1], d[0]))


def bezier(p0: np.ndarray, h0: float, p1: np.ndarray, h1: float, step: float = SAMPLE_STEP) -> np.ndarray:
    """Cubic Bezier from pose (p0, h0) to pose (p1, h1): the classic junction connector shape."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    k = 0.4 * np.linalg.norm(p1 - p0)
    c0 = p0 + k * np.array([np.cos(h0), np.sin(h0)])
    c1 = p1 - k * np.array([np.cos(h1), np.sin(h1)])
    t = np.linspace(0.0, 1.0, 200)[:, None]
    curve = (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * c0 + 3 * (1 - t) * t**2 * c1 + t**3 * p1
    return resample(curve, step)


def project(points: np.ndarray, s: np.ndarray, xy: np.ndarray) -> tuple[float, float, int]:
    """Arc length, signed lateral offset (left positive) and segment index of ``xy`` on a polyline."""
    ax, ay = points[:-1, 0], points[:-1, 1]
    abx, aby = points[1:, 0] - ax, points[1:, 1] - ay
    px, py = xy[0] - ax, xy[1] - ay
    denom = np.maximum(abx * abx + aby * aby, 1e-12)
    t = np.minimum(np.maximum((px * abx + py * aby) / denom, 0.0), 1.0)
    ex, ey = px - t * abx, py - t * aby
    i = int((ex * ex + ey * ey).argmin())
    cross = abx[i] * py[i] - aby[i] * px[i]
    lateral = math.hypot(ex[i], ey[i]) * (1.0 if cross >= 0 else -1.0)
    return float(s[i] + t[i] * math.sqrt(denom[i])), lateral, i


def interpolate(points: np.ndarray, s: np.ndarray, at: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Positions and headings at arc lengths ``at`` (clamped to the polyline)."""
    at = np.clip(np.asarray(at, float), 0.0, s[-1])
    i = np.clip(np.searchsorted(s, at, side="right") - 1, 0, len(s) - 2)
    seg = points[i + 1] - points[i]
    seg_len = np.maximum(s[i + 1] - s[i], 1e-9)
    frac = ((at - s[i]) / seg_len)[..., None]
    return points[i] + frac * seg, np.arctan2(seg[..., 1], seg[..., 0])


def box_corners(x, y, yaw, length, width) -> np.ndarray:
    """Corners ``[..., 4, 2]`` of oriented boxes (front-left, front-right, rear-right, rear-left)."""
    x, y, yaw = np.asarray(x, float), np.asarray(y, float), np.asarray(yaw, float)
    c, s = np.cos(yaw), np.sin(yaw)
    hl, hw = np.asarray(length) / 2, np.asarray(width) / 2
    local = np.stack(
        [np.stack([hl, hw], -1), np.stack([hl, -hw], -1), np.stack([-hl, -hw], -1), np.stack([-hl, hw], -1)], -2
    ) * np.ones(np.broadcast(x, hl).shape + (1, 1))
    rx = local[..., 0] * c[..., None] - local[..., 1] * s[..., None]
    ry = local[..., 0] * s[..., None] + local[..., 1] * c[..., None]
    return np.stack([rx + x[..., None], ry + y[..., None]], -1)


def items_by_block(item_bounds: np.ndarray, origin: np.ndarray, span: float) -> Iterator[tuple[tuple, np.ndarray]]:
    """A spatial index of boxes on a grid of ``span``-metre squares from ``origin``: yields (row, col)
    and the indices of the boxes that meet it, for every square that has any."""
    b = np.asarray(item_bounds, float).reshape(-1, 4)
    if not len(b):
        return
    c0, r0, c1, r1 = np.floor((b - np.tile(origin, 2)) / span).astype(np.int64).T
    c0, r0 = np.maximum(c0, 0), np.maximum(r0, 0)
    c1, r1 = np.maximum(c1, c0), np.maximum(r1, r0)
    rows, cols = r1 - r0 + 1, c1 - c0 + 1
    count = rows * cols
    item = np.repeat(np.arange(len(b)), count)
    k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)  # k-th square of each box
    row = np.repeat(r0, count) + k // np.repeat(cols, count)
    col = np.repeat(c0, count) + k % np.repeat(cols, count)
    order = np.lexsort((item, col, row))
    row, col, item = row[order], col[order], item[order]
    starts = np.flatnonzero(np.r_[True, (row[1:] != row[:-1]) | (col[1:] != col[:-1])])
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(item)]):
        yield (int(row[lo]), int(col[lo])), item[lo:hi]
