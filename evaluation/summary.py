"""From episode records to ``summary.json``: means with bootstrap confidence intervals, per family,
per tag and per rig, infractions, statuses, and where the numbers came from.

The summary is a pure function of the records (sorted by key; no wall times, no dates), so a run
resumed after a kill and an uninterrupted run write the same file. Episodes that ended in
``agent_error`` or ``timeout`` are scored with the metrics they had reached (the agent's fault);
``infra_error`` episodes are counted but not scored (and rerun).
"""

from __future__ import annotations

import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.episode import SCORED, STATUSES
from evaluation.steering import SteeringSums, pooled_ratio
from scenarios.leaderboard import TYPES

HEADLINE_SUITES = ("leaderboard", "pdms", "alpasim", "comfort", "success")
CURVE_AND_TURN_TAGS = frozenset({"curve", "sharp_curve", "turn_left", "turn_right"})
BOOTSTRAP_SAMPLES = 2000


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (seeded: the same values give the same interval)."""
    x = np.asarray(values, float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    if len(x) == 1 or np.all(x == x[0]):
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (samples, len(x)))].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def clustered_bootstrap_ci(
    values: Sequence[float],
    clusters: Sequence[str],
    level: float = 0.95,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean that resamples whole clusters (the runs of one route
    path), as correlated runs are one sample, not several."""
    x = np.asarray(values, float)
    names = sorted(set(clusters))
    if len(x) == 0:
        return (float("nan"), float("nan"))
    index = {c: k for k, c in enumerate(names)}
    of = np.array([index[c] for c in clusters])
    sums, counts = np.bincount(of, x, len(names)), np.bincount(of, None, len(names))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), (samples, len(names)))
    means = sums[picks].sum(1) / counts[picks].sum(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def scored(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episodes that count, in a fixed order: one rule, by status. ``ok``, ``agent_error`` and
    ``timeout`` are the agent's (scored with the metrics reached, as the Leaderboard scores a crashed
    agent's route); ``infra_error`` is the suite's and never scored, whatever metrics it carries.
    A time-out whose worker had to be killed lost its metrics with it: it scores zero everywhere."""
    records = [r for r in records if r["status"] in SCORED]
    template = next((r["suites"] for r in records if "suites" in r), None)
    return sorted((r if "suites" in r else _zero_metrics(r, template) for r in records), key=lambda r: r["key"])


def _zero_metrics(record: dict[str, Any], suites: dict[str, Any] | None) -> dict[str, Any]:
    """``record`` with every metric zero, in the layout of ``suites`` (another record's)."""
    if suites is None:
        suites = {s: {"score": 0.0} for s in HEADLINE_SUITES} | {
            "leaderboard": {"score": 0.0, "route_completion": 0.0},
            "extra": {"distance_m": 0.0},
        }
    zero = {name: {k: 0.0 for k, v in suite.items() if isinstance(v, (int, float))} for name, suite in suites.items()}
    return record | {"score": 0.0, "suites": zero, "infractions": [], "events": {}, "reward_returns": {}}


def suite_score(record: dict[str, Any], suite: str) -> float:
    return float(record["suites"][suite]["score"])


def _stat(values: Sequence[float]) -> dict[str, Any]:
    lo, hi = bootstrap_ci(values)
    return {"mean": float(np.mean(values)) if len(values) else None, "ci95": [lo, hi], "n": len(values)}


def _group(records: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {s: float(np.mean([suite_score(r, s) for r in records])) for s in HEADLINE_SUITES}
    out["n"] = len(records)
    out["route_completion"] = float(np.mean([r["suites"]["leaderboard"]["route_completion"] for r in records]))
    out["lateral_error_m"] = float(np.mean([r.get("lateral_error_m", 0.0) for r in records]))
    out["endings"] = ending_counts(records)
    return out


def ending_of(record: dict[str, Any]) -> str:
    """An episode record's ending (:mod:`rewards.ending`); a failed episode's is its status, and a
    record written before endings were recorded has "unrecorded"."""
    if record.get("ending"):
        return record["ending"]
    return record["status"] if record.get("status", "ok") != "ok" else "unrecorded"


def ending_counts(records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many episodes ended each way, by name."""
    return dict(sorted(Counter(ending_of(r) for r in records).items()))


def git_revision() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def summarize(records: Iterable[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """``meta``: bank {name, version, split}, agent, config, expected episode count, git revision."""
    records = sorted(records, key=lambda r: r["key"])
    counts = dict.fromkeys(STATUSES, 0)
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    done = scored(records)
    out: dict[str, Any] = {
        "bank": meta["bank"],
        "agent": meta["agent"],
        "episodes": {"total": len(records), "expected": meta.get("expected", len(records)), **counts},
        "complete": len(records) >= meta.get("expected", len(records)),
        "scoring": "episodes with status ok, agent_error or timeout; infra_error episodes are not scored (and rerun)",
        "suites": {s: _stat([suite_score(r, s) for r in done]) for s in _suite_names(done)},
    }
    succ = [suite_score(r, "success") for r in done]
    out["success_rate"] = float(np.mean(succ)) if succ else None
    out["success_rate_ci95"] = list(bootstrap_ci(succ))
    km = sum(r["suites"]["extra"]["distance_m"] for r in done) / 1000.0
    infractions: dict[str, int] = defaultdict(int)
    for r in done:
        for inf in r["infractions"]:
            infractions[inf["type"]] += 1
    out["distance_km"] = km
    out["infractions"] = dict(sorted(infractions.items()))
    out["infractions_per_km"] = sum(infractions.values()) / km if km > 0 else None
    out["comfort"] = out["suites"].get("comfort", {}).get("mean")
    cons = [r["consistency"] for r in done if r.get("consistency") is not None]
    out["consistency"] = {"mean": float(np.mean(cons)), "n": len(cons)} if cons else None
    out["route_completion"] = _stat([r["suites"]["leaderboard"]["route_completion"] for r in done])
    out["endings"] = ending_counts(done)
    terms = sorted({k for r in done for k in r.get("reward_returns", {})})
    out["reward_returns"] = {k: float(np.mean([r["reward_returns"].get(k, 0.0) for r in done])) for k in terms}
    out["reward_vs_score"] = reward_vs_score(done, (meta.get("config") or {}).get("rewards"))
    out["by_family"] = _by(done, lambda r: [r["family"]])
    out["by_tag"] = _by(done, lambda r: r.get("tags", []))
    out["by_rig"] = _by(done, lambda r: [r["rig"]])
    out["rig_ablation"] = _by(done, lambda r: [r["rig"]] if CURVE_AND_TURN_TAGS & set(r["tags"]) else [])
    out["curvature_ratio"] = curvature_ratios(done)
    out["failures"] = [
        {"key": r["key"], "status": r["status"], "error": r.get("error")} for r in records if r["status"] != "ok"
    ]
    if "routes" in meta:  # a route file's run: the routes that could not be made, the types not played
        out["routes"] = meta["routes"]
        out["by_ability"] = _by(done, _abilities)
        # the Leaderboard 2.0's own Driving Score also scales by the min-speed infractions (Bench2Drive's
        # and the headline ``suites.leaderboard`` do not)
        out["driving_score_min_speed"] = _stat([_leaderboard(r, "score_min_speed") for r in done])
        paths = [next((t for t in r["tags"] if t.startswith("path:")), r["key"]) for r in done]
        if done and len(set(paths)) < len(done):  # a path driven more than once: one sample, not several
            scores = [suite_score(r, "leaderboard") for r in done]
            out["route_paths"] = {"n": len(set(paths)), "ci95": list(clustered_bootstrap_ci(scores, paths))}
    out["provenance"] = {"git": meta.get("git"), "config": meta.get("config")}
    return out


def _leaderboard(record: dict[str, Any], key: str) -> float:
    """A leaderboard figure of an episode (records from before it existed: the score)."""
    lb = record["suites"]["leaderboard"]
    return float(lb.get(key, lb["score"]))


def reward_vs_score(records: Sequence[dict[str, Any]], weights: dict[str, float] | None) -> dict[str, Any] | None:
    """How the episodes' weighted return follows their Driving Score (Pearson and Spearman over episodes).

    A reward that RL climbs is only worth climbing if it ranks episodes as the Driving Score does;
    ``weights``: the terms of the run's ``rewards`` (default ``rewards.DEFAULT_REWARDS``)."""
    from scipy.stats import pearsonr, spearmanr

    from rewards import DEFAULT_REWARDS

    weights = weights or DEFAULT_REWARDS
    returns = [sum(w * r["reward_returns"].get(k, 0.0) for k, w in weights.items()) for r in records]
    scores = [suite_score(r, "leaderboard") for r in records]
    if len(records) < 3 or np.ptp(returns) == 0 or np.ptp(scores) == 0:
        return None  # (a correlation needs spread in both)
    return {
        "pearson": float(pearsonr(returns, scores).statistic),
        "spearman": float(spearmanr(returns, scores).statistic),
        "n": len(records),
        "weights": dict(weights),
    }


def _road_kind(record: dict[str, Any]) -> list[str]:
    """Where the road bends: "turns" at junctions, "curves" elsewhere (none on straight roads)."""
    tags = set(record.get("tags", []))
    if not CURVE_AND_TURN_TAGS & tags:
        return []
    return ["turns" if "junction" in tags else "curves"]


def curvature_ratios(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per rig, the straight-driving bias (:mod:`evaluation.steering`) on the curve and turn episodes:
    the ratio of the curvature planned and driven to the road's, over "all" of them, "curves" and
    "turns", each with its 95% interval over episodes. Episodes that ended in an agent error or a
    time-out (and records written before the ratio existed) carry no steering sums and are left out."""
    out: dict[str, dict[str, Any]] = {}
    measured = [r for r in records if r.get("steering") is not None and _road_kind(r)]
    for rig, rs in _split(measured, lambda r: [r["rig"]]).items():
        groups = {"all": rs} | _split(rs, _road_kind)
        out[rig] = {k: pooled_ratio([SteeringSums(**r["steering"]) for r in g]) for k, g in groups.items()}
    return out


def _abilities(record: dict[str, Any]) -> list[str]:
    """Bench2Drive's ability groups of the scenario types a route played (a route of Leaderboard 2.0
    plays many, so it counts towards each of their groups)."""
    types = [t.split(":", 1)[1] for t in record.get("tags", []) if t.startswith("scenario:")]
    return sorted({TYPES[t].group for t in types if t in TYPES and TYPES[t].group})


def _suite_names(done: list[dict[str, Any]]) -> list[str]:
    names = [s for s in HEADLINE_SUITES if done and s in done[0]["suites"]]
    extra = sorted({k for r in done for k in r["suites"] if k not in HEADLINE_SUITES and k != "extra"})
    return names + extra


def _split(records: list[dict[str, Any]], keys) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        for k in keys(r):
            groups[k].append(r)
    return dict(sorted(groups.items()))


def _by(records: list[dict[str, Any]], keys) -> dict[str, dict[str, Any]]:
    return {k: _group(rs) for k, rs in _split(records, keys).items()}
