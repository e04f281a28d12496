"""The figures of the evaluation report and of the comparison page as inline SVG strings (matplotlib's
object API: no pyplot global state)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

COLORS = {
    "score": "#2b6cb0",
    "success": "#38a169",
    "bad": "#c53030",
    "lane": "#d9d9d9",
    "ego": "#2b6cb0",
    "route": "#718096",
}


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog: the SVG is inlined in HTML


def score_by_group(groups: Mapping[str, Mapping[str, Any]], title: str) -> str:
    """Driving score and success rate per group (family, rig...)."""
    names = list(groups)
    fig = Figure(figsize=(max(5.0, 0.55 * len(names) + 2), 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(names))
    ax.bar(x - 0.2, [groups[n]["leaderboard"] for n in names], 0.4, label="driving score", color=COLORS["score"])
    ax.bar(x + 0.2, [groups[n]["success"] for n in names], 0.4, label="success %", color=COLORS["success"])
    ax.set_xticks(x, names, rotation=35, ha="right", fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def infraction_breakdown(infractions: Mapping[str, int], distance_km: float) -> str:
    fig = Figure(figsize=(5.0, 0.35 * max(len(infractions), 1) + 1.2))
    ax = fig.add_subplot()
    if infractions:
        names = sorted(infractions, key=infractions.get)
        ax.barh(names, [infractions[n] for n in names], color=COLORS["bad"])
        ax.tick_params(labelsize=8)
    else:
        ax.text(0.5, 0.5, "no infractions", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_title(f"infractions over {distance_km:.2f} km", fontsize=10)
    ax.set_xlabel("count", fontsize=8)
    return _svg(fig)


def bev_trajectory(
    lanes: Sequence[np.ndarray],
    trace: Sequence[Sequence[float]],
    title: str,
    markers: Sequence[tuple[float, float, str]] = (),
    planned: np.ndarray | None = None,
) -> str:
    """Top view of one episode: lane polygons, the planned route (dashed, where given), the ego's
    path (start o, end x) and infraction markers."""
    fig = Figure(figsize=(3.4, 3.4))
    ax = fig.add_subplot()
    xy = np.asarray(trace, float).reshape(-1, 2)
    if planned is not None:
        planned = np.asarray(planned, float).reshape(-1, 2)
        ax.plot(planned[:, 0], planned[:, 1], color=COLORS["route"], lw=1.0, ls="--")
        xy_view = np.vstack([xy, planned])  # the view holds the whole route: where it stopped short shows
    else:
        xy_view = xy
    lo, hi = (
        (xy_view.min(0) - 200.0, xy_view.max(0) + 200.0) if len(xy_view) else (np.full(2, -np.inf), np.full(2, np.inf))
    )
    # only the lanes in view, as one collection; many (a town) become one embedded image in the SVG
    shown = [poly for poly in lanes if (poly.max(0) >= lo).all() and (poly.min(0) <= hi).all()]
    if shown:
        ax.add_collection(
            PolyCollection(shown, facecolors=COLORS["lane"], edgecolors="none", rasterized=len(shown) > 300)
        )
    if len(xy):
        ax.plot(xy[:, 0], xy[:, 1], color=COLORS["ego"], lw=1.6)
        ax.plot(*xy[0], "o", color=COLORS["ego"], ms=4)
        ax.plot(*xy[-1], "x", color=COLORS["ego"], ms=6)
    if len(xy_view):
        centre = (xy_view.min(0) + xy_view.max(0)) / 2
        half = float((xy_view.max(0) - xy_view.min(0)).max()) / 2 + 25.0  # a square view keeps the aspect equal
        ax.set_xlim(centre[0] - half, centre[0] + half)
        ax.set_ylim(centre[1] - half, centre[1] + half)
    for mx, my, label in markers:
        ax.plot(mx, my, "*", color=COLORS["bad"], ms=10)
        ax.annotate(label, (mx, my), fontsize=6, color=COLORS["bad"], xytext=(3, 3), textcoords="offset points")
    ax.set_aspect("equal", adjustable="box")
    ax.set_title(title, fontsize=8)
    ax.tick_params(labelsize=6)
    return _svg(fig)


def ratio_bars(ax, x: np.ndarray, ratios: Sequence[Mapping[str, Any]], width: float, **bar: Any) -> None:
    """Bars of curvature ratios (``{"ratio", "ci95"}`` each; empty or None where nothing was measured)
    at ``x`` with their 95% intervals, and the lines at 1 (follows the road) and 0 (straight ahead)."""
    mean = np.array([np.nan if g.get("ratio") is None else g["ratio"] for g in ratios], float)
    ci = np.array([g.get("ci95") or [np.nan, np.nan] for g in ratios], dtype=float).reshape(-1, 2)
    err = np.abs(np.nan_to_num(np.stack([mean - ci[:, 0], ci[:, 1] - mean])))
    ax.bar(x, mean, width, yerr=err, capsize=3, **bar)
    ax.axhline(1.0, color="#4a5568", lw=0.8, ls="--")
    ax.axhline(0.0, color="#4a5568", lw=0.6)


def _planned(ratios: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The planned ratio of ``kind`` ("all", "curves", "turns") in one rig's ``curvature_ratio``."""
    return (ratios.get(kind) or {}).get("planned") or {}


def rig_ablation(by_rig: Mapping[str, Mapping[str, Any]], ratios: Mapping[str, Mapping[str, Any]]) -> str:
    """Per rig on curve and turn scenarios: the planned curvature ratio on curves and at junction turns
    with its 95% interval (1 = follows the road, 0 = straight ahead), route completion and lateral error."""
    rigs = list(by_rig)
    fig = Figure(figsize=(max(8.0, 2.4 * len(rigs) + 3), 3.0))
    ax0, ax, ax2 = fig.subplots(1, 3, gridspec_kw={"wspace": 0.45, "width_ratios": [1.6, 1, 1]})
    x = np.arange(len(rigs))
    for k, (kind, color) in enumerate((("curves", COLORS["score"]), ("turns", COLORS["success"]))):
        got = [_planned(ratios.get(r, {}), kind) for r in rigs]
        ratio_bars(ax0, x + (k - 0.5) * 0.38, got, 0.38, color=color, label=f"on {kind}")
    ax0.set_xticks(x, rigs)
    ax0.set_title("curvature ratio planned (1 follows the road, 0 straight)", fontsize=9)
    ax0.legend(fontsize=7, loc="upper right")
    ax.bar(rigs, [by_rig[r]["route_completion"] for r in rigs], color=COLORS["score"])
    ax.set_ylim(0, 105)
    ax.set_title("route completion %", fontsize=9)
    ax2.bar(rigs, [by_rig[r]["lateral_error_m"] for r in rigs], color=COLORS["bad"])
    ax2.set_title("mean |lateral error| (m)", fontsize=9)
    for a in (ax0, ax, ax2):
        a.tick_params(labelsize=7, axis="x", rotation=30)
    return _svg(fig)


def ratios_by_run(ratios: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Planned curvature ratio per rig on curves and at junction turns, one bar per run, with 95%
    intervals; ``ratios[run][rig]`` is that run's ``curvature_ratio[rig]``."""
    runs = list(ratios)
    rigs = list(dict.fromkeys(rig for by_rig in ratios.values() for rig in by_rig))
    fig = Figure(figsize=(max(8.0, 0.5 * len(rigs) * len(runs) + 4), 3.2))
    width = 0.8 / len(runs)
    for ax, kind, title in zip(
        fig.subplots(1, 2, sharey=True), ("curves", "turns"), ("on curves", "at junction turns")
    ):
        for k, run in enumerate(runs):
            got = [_planned(ratios[run].get(rig, {}), kind) for rig in rigs]
            ratio_bars(ax, np.arange(len(rigs)) + (k - (len(runs) - 1) / 2) * width, got, width, label=run)
        ax.set_xticks(np.arange(len(rigs)), rigs)
        ax.tick_params(labelsize=8)
        ax.set_title(f"curvature ratio planned {title} (1 follows the road)", fontsize=9)
    ax.legend(fontsize=7)
    return _svg(fig)
