"""Several evaluation runs side by side: ``loopdrive compare --out DIR LABEL=RUN ...``.

Made for experiments that try several ways to train the same policy (the camera-rig experiment's
text-only post-training, trajectory-head SFT and closed-loop RL): per run and per camera rig, the
curvature ratio (:mod:`evaluation.steering`) on curves and turns with its interval, the Driving Score,
success and route completion; a plot of the ratios; and one curve's video per run and rig where the
runs recorded videos. Writes ``compare.json``, ``compare.md`` (a table for the docs) and
``compare.html``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from evaluation import plots
from evaluation.report import TEMPLATES, ratio_text


class CompareInputError(ValueError):
    """A run that cannot be compared: the message names it and why."""


class RigRow(NamedTuple):
    """One run under one rig."""

    run: str
    rig: str
    episodes: int
    driving_score: float
    success: float
    route_completion: float
    ratio: dict[str, Any]  # curvature_ratio[rig]: {"all" | "curves" | "turns": {"planned", "driven", ...}}
    video: str | None  # one curve episode's video, relative to the comparison's folder


def read_runs(runs: list[tuple[str, Path]], out: Path) -> list[RigRow]:
    """The rows of every (run, rig), in the order given; a folder without a summary is an error."""
    rows = []
    for label, folder in runs:
        file = folder / "summary.json"
        if not file.is_file():
            raise CompareInputError(f"{label}={folder}: no summary.json (is it a `loopdrive eval` run folder?)")
        summary = json.loads(file.read_text())
        ratios = summary.get("curvature_ratio") or {}
        for rig, group in summary["by_rig"].items():
            rows.append(
                RigRow(
                    label,
                    rig,
                    group["n"],
                    group["leaderboard"],
                    group["success"],
                    group["route_completion"],
                    ratios.get(rig, {}),
                    _curve_video(folder, rig, out),
                )
            )
    return rows


def _curve_video(folder: Path, rig: str, out: Path) -> str | None:
    """The first curve episode's video of ``rig`` (by name), as a path relative to ``out``."""
    videos = sorted((folder / "videos").glob(f"curve-*__{rig}.mp4"))
    return os.path.relpath(videos[0], out) if videos else None


def ratio_plot(rows: list[RigRow]) -> str:
    """Planned curvature ratio per rig on curves and at turns, one bar per run, with 95% intervals."""
    ratios: dict[str, dict[str, Any]] = {}
    for r in rows:
        ratios.setdefault(r.run, {})[r.rig] = r.ratio
    return plots.ratios_by_run(ratios)


def to_markdown(rows: list[RigRow]) -> str:
    head = (
        "| run | rig | episodes | curvature ratio planned (95% CI) | driven | on curves | at turns "
        "| Driving Score | success % | route completion % |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r.run} | {r.rig} | {r.episodes} | {ratio_text(r.ratio.get('all'), 'planned')} "
        f"| {ratio_text(r.ratio.get('all'), 'driven')} | {ratio_text(r.ratio.get('curves'), 'planned')} "
        f"| {ratio_text(r.ratio.get('turns'), 'planned')} | {r.driving_score:.1f} | {r.success:.1f} "
        f"| {r.route_completion:.1f} |\n"
        for r in rows
    )
    return head + body


def write_comparison(runs: list[tuple[str, Path]], out: str | Path) -> Path:
    """``compare.json`` / ``.md`` / ``.html`` in ``out``; returns the HTML page's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_runs(runs, out)
    (out / "compare.json").write_text(
        json.dumps(
            {"runs": {label: str(folder) for label, folder in runs}, "rows": [r._asdict() for r in rows]}, indent=1
        )
    )
    (out / "compare.md").write_text(to_markdown(rows))
    page = TEMPLATES.get_template("compare.html").render(rows=rows, plot=ratio_plot(rows), ratio=ratio_text, runs=runs)
    path = out / "compare.html"
    path.write_text(page, encoding="utf-8")
    return path
