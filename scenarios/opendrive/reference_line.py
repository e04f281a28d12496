"""A road's reference line: position and heading at any ``s``, in closed form per geometry type.

- line: straight along ``hdg``;
- arc: constant curvature;
- spiral (Euler clothoid): curvature linear in s, positions from Fresnel integrals (``scipy.special.fresnel``);
- poly3: v(u) = a + b u + c u^2 + d u^3 in the piece's local frame, ``s`` the arc length along it;
- paramPoly3: u(p), v(p) cubic in p, with p = s (``arcLength``) or s / length (``normalized``).

Everything is vectorised over an array of ``s``; the polynomial pieces map ``s`` to their parameter
through a dense arc-length table.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import fresnel

from scenarios.opendrive.records import Geometry, MapImportError

TABLE_POINTS = 512  # arc-length table of a polynomial piece (u or p sampled uniformly)


def _line(g: Geometry, ds: np.ndarray):
    return g.x + ds * math.cos(g.hdg), g.y + ds * math.sin(g.hdg), np.full_like(ds, g.hdg)


def _arc(g: Geometry, ds: np.ndarray, k: float):
    if abs(k) < 1e-12:
        return _line(g, ds)
    h = g.hdg + k * ds
    return g.x + (np.sin(h) - math.sin(g.hdg)) / k, g.y - (np.cos(h) - math.cos(g.hdg)) / k, h


def _spiral(g: Geometry, ds: np.ndarray):
    k0, k1 = float(g.params.get("curvStart", 0.0)), float(g.params.get("curvEnd", 0.0))
    c = (k1 - k0) / g.length if g.length > 0 else 0.0
    if abs(c) < 1e-12:
        return _arc(g, ds, k0)
    # heading h0 + k0 u + c u^2 / 2 = phi0 + sign(c) pi t^2 / 2 with t = (u + k0 / c) sqrt(|c| / pi)
    scale = math.sqrt(math.pi / abs(c))
    sign = 1.0 if c > 0 else -1.0
    phi0 = g.hdg - k0 * k0 / (2 * c)
    t0 = (k0 / c) / scale
    t = (ds + k0 / c) / scale
    S, C = fresnel(t)
    S0, C0 = fresnel(t0)
    dC, dS = C - C0, sign * (S - S0)
    x = g.x + scale * (math.cos(phi0) * dC - math.sin(phi0) * dS)
    y = g.y + scale * (math.sin(phi0) * dC + math.cos(phi0) * dS)
    return x, y, g.hdg + k0 * ds + c * ds * ds / 2


def _local_cubics(g: Geometry) -> tuple[np.ndarray, np.ndarray, float]:
    """Coefficients of u(p) and v(p), and the parameter range, of a poly3 (u = p) or paramPoly3 piece."""
    p = g.params
    if g.kind == "poly3":
        v = np.array([p.get("a", 0.0), p.get("b", 0.0), p.get("c", 0.0), p.get("d", 0.0)], float)
        return np.array([0.0, 1.0, 0.0, 0.0]), v, float("nan")
    u = np.array([p.get("aU", 0.0), p.get("bU", 0.0), p.get("cU", 0.0), p.get("dU", 0.0)], float)
    v = np.array([p.get("aV", 0.0), p.get("bV", 0.0), p.get("cV", 0.0), p.get("dV", 0.0)], float)
    return u, v, 1.0 if p.get("pRange", "normalized") == "normalized" else g.length


def _cubic(coef: np.ndarray, p: np.ndarray) -> np.ndarray:
    return coef[0] + p * (coef[1] + p * (coef[2] + p * coef[3]))


def _dcubic(coef: np.ndarray, p: np.ndarray) -> np.ndarray:
    return coef[1] + p * (2 * coef[2] + p * 3 * coef[3])


def _polynomial(g: Geometry, ds: np.ndarray):
    u_c, v_c, p_max = _local_cubics(g)
    if g.kind == "poly3":  # the parameter is u; find the u whose arc length is the piece's length
        p_max = g.length
        for _ in range(3):  # a few passes: the table's length converges on the piece's
            p = np.linspace(0.0, p_max, TABLE_POINTS)
            length = _arc_table(u_c, v_c, p)[-1]
            p_max *= g.length / length if length > 0 else 1.0
    p = np.linspace(0.0, p_max, TABLE_POINTS)
    s_table = _arc_table(u_c, v_c, p)
    if g.kind == "paramPoly3":
        # CARLA and esmini take p proportional to s for paramPoly3; keep that (the oracle agrees)
        at = ds / g.length * p_max if g.length > 0 else np.zeros_like(ds)
    else:
        at = np.interp(ds, s_table * (g.length / s_table[-1] if s_table[-1] > 0 else 1.0), p)
    u, v = _cubic(u_c, at), _cubic(v_c, at)
    du, dv = _dcubic(u_c, at), _dcubic(v_c, at)
    c, s = math.cos(g.hdg), math.sin(g.hdg)
    return g.x + c * u - s * v, g.y + s * u + c * v, g.hdg + np.arctan2(dv, du)


def _arc_table(u_c: np.ndarray, v_c: np.ndarray, p: np.ndarray) -> np.ndarray:
    speed = np.hypot(_dcubic(u_c, p), _dcubic(v_c, p))
    return np.concatenate([[0.0], np.cumsum(0.5 * (speed[1:] + speed[:-1]) * np.diff(p))])


class ReferenceLine:
    """The plan view of one road."""

    def __init__(self, geometries: list[Geometry], where: str) -> None:
        if not geometries:
            raise MapImportError(f"{where}: no geometry")
        self.geometries = geometries
        self.starts = np.array([g.s for g in geometries])
        for g in geometries:
            if g.kind == "arc" and "curvature" not in g.params:
                raise MapImportError(f"{where}: <arc> at s={g.s:g} has no curvature")

    def evaluate(self, s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, y, heading) at ``s`` (clamped to the pieces: a piece continues past its end)."""
        s = np.atleast_1d(np.asarray(s, dtype=float))
        k = np.clip(np.searchsorted(self.starts, s, side="right") - 1, 0, len(self.geometries) - 1)
        x, y, h = np.empty_like(s), np.empty_like(s), np.empty_like(s)
        for i in np.unique(k):
            g, sel = self.geometries[i], k == i
            ds = np.clip(s[sel] - g.s, 0.0, None)
            if g.kind == "line":
                out = _line(g, ds)
            elif g.kind == "arc":
                out = _arc(g, ds, float(g.params["curvature"]))
            elif g.kind == "spiral":
                out = _spiral(g, ds)
            else:
                out = _polynomial(g, ds)
            x[sel], y[sel], h[sel] = out
        return x, y, h
