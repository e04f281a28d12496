"""``report.html``: one self-contained page per run (inline SVG figures, inline data and script).

Headline scores with confidence intervals, score by family, the infraction breakdown, how the
episodes ended (per family: route complete, collision, stalled, ...), top views of
the worst episodes (every route of a route file, each on its town with the planned route), the
camera-rig ablation, failures, and a sortable table of every episode that
links its video. The table is built by the page's script from the embedded JSON, so a browser test
that sees the rows knows the script ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from evaluation import plots
from evaluation.summary import CURVE_AND_TURN_TAGS, ending_of, scored
from rewards.ending import STALL_PROGRESS_M, STALL_WINDOW_S
from scenarios.routes import RouteBankSpec

WORST_EPISODES = 6
ROUTE_FIGURES = 100  # a route file's report draws every route (worst first), up to this many
TRACE_DT = 0.5  # seconds between trace points (evaluation.episode.TRACE_EVERY world steps)

TEMPLATES = Environment(loader=PackageLoader("evaluation", "templates"), autoescape=select_autoescape(["html"]))


def episode_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in sorted(records, key=lambda r: r["key"]):
        s = r.get("suites") or {}
        rows.append(
            {
                "scenario": r["scenario"],
                "seed": r["seed"],
                "rig": r["rig"],
                "family": r.get("family", ""),
                "status": r["status"],
                "ending": ending_of(r),
                "score": _get(s, "leaderboard", "score"),
                "rc": _get(s, "leaderboard", "route_completion"),
                "pdms": _get(s, "pdms", "score"),
                "success": _get(s, "success", "score"),
                "infractions": ", ".join(i["type"] for i in r.get("infractions", [])),
                "wall_s": r.get("wall_s"),
                "video": r.get("video"),
                "error": r.get("error") or "",
                "reasoning": (r.get("reasoning") or [{}])[0].get("text", ""),
            }
        )
    return rows


def _get(suites: dict[str, Any], suite: str, key: str) -> float | None:
    v = suites.get(suite, {}).get(key)
    return round(v, 2) if isinstance(v, (int, float)) else None


def _map_lines(scenario: Any, bank_path: Path) -> tuple[list, Any]:
    """The lanes of a scenario's map as polygons and its route's centreline (empty and None when the
    map cannot be built now)."""
    import numpy as np

    from scenarios import load_map

    try:
        road = load_map(scenario, bank_path)
        route = road.lane_sequence_polyline(list(scenario.ego.route))
    except Exception:
        return [], None
    lanes = [
        np.asarray(lane.polygon.exterior.coords) for lane in road.lanes.values() if lane.polygon.geom_type == "Polygon"
    ]
    return lanes, route


def worst_episodes(records: list[dict[str, Any]], bank_ref: str, split: str | None) -> list[dict[str, Any]]:
    """Top views of the lowest-scoring episodes (of every route, for a route file), each with its
    planned route, the path driven and the infractions marked."""
    from scenarios import load_bank

    shown = ROUTE_FIGURES if RouteBankSpec.names(bank_ref) else WORST_EPISODES
    done = sorted(scored(records), key=lambda r: (r["score"], r["key"]))[:shown]
    try:
        bank = load_bank(bank_ref, split=split)
        scenarios = {s.id: s for s in bank.scenarios}
    except (FileNotFoundError, ValueError, KeyError):  # the report can be rebuilt without the bank
        bank, scenarios = None, {}
    figures = []
    for r in done:
        trace = r.get("trace", [])
        markers = []
        for inf in r.get("infractions", []):
            i = min(int(round(inf["t"] / TRACE_DT)), len(trace) - 1)
            if i >= 0:
                markers.append((trace[i][0], trace[i][1], inf["type"]))
        scn = scenarios.get(r["scenario"])
        lanes, route = _map_lines(scn, bank.path) if scn is not None else ([], None)
        title = f"{r['scenario']} s{r['seed']} {r['rig']}: score {r['score']:.1f}"
        figures.append(
            {
                "key": r["key"],
                "svg": plots.bev_trajectory(lanes, trace, title, markers, planned=route),
                "reasoning": (r.get("reasoning") or [{}])[0].get("text", ""),
                "video": r.get("video"),
            }
        )
    return figures


def write_report(out: str | Path, summary: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    """Render ``out/report.html`` from the summary and the episode records; returns its path."""
    out = Path(out)
    bank = summary["bank"]
    config = summary["provenance"].get("config") or {}
    figures = {}
    if summary["by_family"]:
        figures["family"] = plots.score_by_group(summary["by_family"], "score by family")
    figures["infractions"] = plots.infraction_breakdown(summary["infractions"], summary["distance_km"])
    if summary["rig_ablation"]:
        figures["rigs"] = plots.rig_ablation(summary["rig_ablation"], summary.get("curvature_ratio", {}))
    page = TEMPLATES.get_template("report.html").render(
        s=summary,
        bank=bank,
        config_json=json.dumps(config, indent=1),
        figures=figures,
        worst=worst_episodes(records, config.get("bank", bank["name"]), bank.get("split")),
        routes_view=RouteBankSpec.names(config.get("bank", bank["name"])),
        curve_tags=", ".join(sorted(CURVE_AND_TURN_TAGS)),
        rows_json=_script_json(episode_rows(records)),
        fmt=_fmt,
        ratio=ratio_text,
        stall={"progress": f"{STALL_PROGRESS_M:g}", "window": f"{STALL_WINDOW_S:g}"},
    )
    path = out / "report.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def _script_json(data: Any) -> str:
    """JSON safe to place inside a <script> element."""
    return json.dumps(data).replace("</", "<\\/")


def ratio_text(group: dict[str, Any] | None, name: str) -> str:
    """A curvature ratio and its interval, "0.42 (0.30-0.55)"; a dash where nothing was measured."""
    got = (group or {}).get(name) or {}
    if got.get("ratio") is None:
        return "–"
    lo, hi = got["ci95"]
    return f"{got['ratio']:.2f} ({lo:.2f}–{hi:.2f})"


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)  # the template escapes it
