"""Numba kernel: project shaded 3D boxes into a pinhole camera, far to near, back faces culled.

Returns the visible faces in painter's order as fixed-point (2 fractional bits) polygons ready for
``cv2.fillConvexPoly``, with each face's box index and shading factor.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# corners: 0-3 bottom (front-left, front-right, rear-right, rear-left), 4-7 the same on top
FACES = np.array([[0, 1, 5, 4], [1, 2, 6, 5], [2, 3, 7, 6], [3, 0, 4, 7], [4, 5, 6, 7]])  # front right rear left top
REAR = 2  # the rear face's index in FACES
SUN = np.array([0.35, 0.25, 0.9]) / np.linalg.norm([0.35, 0.25, 0.9])


@njit(cache=True)
def project_boxes(boxes, R, cam, fx, cx, cy, width, height, near, far, faces, sun):
    """boxes [B, 7] = (x, y, z0, yaw, length, width, height) -> visible faces, far to near.

    Returns (box index [F], face index [F], polygons [F, 4, 2] int32 in 1/4 px, shade [F],
    front-face corners in px [F, 4, 2] for drawing signal lamps).
    """
    B = boxes.shape[0]
    dist = np.empty(B)
    for b in range(B):
        dx, dy = boxes[b, 0] - cam[0], boxes[b, 1] - cam[1]
        dist[b] = math.sqrt(dx * dx + dy * dy)
        if dist[b] > far or dx * R[2, 0] + dy * R[2, 1] < -8.0:
            dist[b] = -1.0
    order = np.argsort(-dist)
    out_box = np.empty(5 * B, np.int64)
    out_face = np.empty(5 * B, np.int64)
    out_pts = np.empty((5 * B, 4, 2), np.int32)
    out_shade = np.empty(5 * B)
    out_uv = np.empty((5 * B, 4, 2))
    verts = np.empty((8, 3))
    pc = np.empty((8, 3))
    uv = np.empty((8, 2))
    normals = np.empty((5, 3))
    F = 0
    for b in order:
        if dist[b] < 0:
            continue
        x, y, z0, yaw, ln, wd, ht = boxes[b]
        c, s = math.cos(yaw), math.sin(yaw)
        hl, hw = 0.5 * ln, 0.5 * wd
        for j, (sl, sw) in enumerate(((1.0, 1.0), (1.0, -1.0), (-1.0, -1.0), (-1.0, 1.0))):
            px = x + c * hl * sl - s * hw * sw
            py = y + s * hl * sl + c * hw * sw
            verts[j, 0], verts[j, 1], verts[j, 2] = px, py, z0
            verts[j + 4, 0], verts[j + 4, 1], verts[j + 4, 2] = px, py, z0 + ht
        left = right = above = True
        for j in range(8):
            for r in range(3):
                pc[j, r] = (
                    R[r, 0] * (verts[j, 0] - cam[0])
                    + R[r, 1] * (verts[j, 1] - cam[1])
                    + R[r, 2] * (verts[j, 2] - cam[2])
                )
            z = max(pc[j, 2], 1e-3)
            uv[j, 0] = fx * pc[j, 0] / z + cx
            uv[j, 1] = fx * pc[j, 1] / z + cy
            left &= uv[j, 0] < 0
            right &= uv[j, 0] > width
            above &= uv[j, 1] < 0
        if left or right or above:
            continue
        normals[0, 0], normals[0, 1], normals[0, 2] = c, s, 0.0
        normals[1, 0], normals[1, 1], normals[1, 2] = s, -c, 0.0
        normals[2, 0], normals[2, 1], normals[2, 2] = -c, -s, 0.0
        normals[3, 0], normals[3, 1], normals[3, 2] = -s, c, 0.0
        normals[4, 0], normals[4, 1], normals[4, 2] = 0.0, 0.0, 1.0
        for f in range(5):
            ok = True
            mx, my, mz = 0.0, 0.0, 0.0
            for q in range(4):
                j = faces[f, q]
                ok &= pc[j, 2] >= near
                ok &= abs(uv[j, 0]) < 8 * width and abs(uv[j, 1]) < 8 * width
                mx += 0.25 * verts[j, 0]
                my += 0.25 * verts[j, 1]
                mz += 0.25 * verts[j, 2]
            if not ok:
                continue
            facing = normals[f, 0] * (mx - cam[0]) + normals[f, 1] * (my - cam[1]) + normals[f, 2] * (mz - cam[2])
            if facing >= 0:  # facing away
                continue
            lit = normals[f, 0] * sun[0] + normals[f, 1] * sun[1] + normals[f, 2] * sun[2]
            out_box[F], out_face[F] = b, f
            out_shade[F] = 0.55 + 0.45 * max(0.0, lit)
            for q in range(4):
                j = faces[f, q]
                out_pts[F, q, 0] = int(round(uv[j, 0] * 4))
                out_pts[F, q, 1] = int(round(uv[j, 1] * 4))
                out_uv[F, q, 0], out_uv[F, q, 1] = uv[j, 0], uv[j, 1]
            F += 1
    return out_box[:F], out_face[:F], out_pts[:F], out_shade[:F], out_uv[:F]
