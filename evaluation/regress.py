"""``loopdrive regress``: is the candidate run worse than the baseline run on the same bank?

Episodes are paired by (scenario, seed, rig); two runs of one rig each, different ones (models trained on
different rigs), by (scenario, seed). The test is on the paired score differences:
a one-sided paired bootstrap of the mean difference (default) or an exact sign test. A regression
is a mean drop larger than ``tolerance`` points with p < alpha, or a must-pass scenario (by tag)
that succeeded in the baseline and fails in the candidate. Exit codes: 1 regression, 0 none,
2 unusable input (missing files, different banks, nothing to pair). Several training draws of each
arm, pooled: :mod:`evaluation.draws`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from evaluation.journal import JournalError, read_episodes
from evaluation.report import TEMPLATES
from evaluation.summary import BOOTSTRAP_SAMPLES, ending_counts, ending_of, scored, suite_score

SCENARIO_DELTA = 5.0  # points: a per-scenario change this large is listed as regressed / improved


class RegressInputError(ValueError):
    """The two runs cannot be compared (exit code 2)."""


@dataclass
class Comparison:
    metric: str
    test: str
    alpha: float
    tolerance: float
    bank: dict[str, Any]
    baseline: str
    candidate: str
    n_pairs: int
    baseline_mean: float
    candidate_mean: float
    mean_diff: float
    ci95: tuple[float, float]
    p_value: float
    significant_drop: bool
    regressed: list[dict[str, Any]] = field(default_factory=list)
    improved: list[dict[str, Any]] = field(default_factory=list)
    newly_failing_must_pass: list[dict[str, Any]] = field(default_factory=list)
    unpaired: list[str] = field(default_factory=list)
    endings: dict[str, dict[str, int]] = field(default_factory=dict)  # ending -> {"baseline": n, "candidate": n}
    rigs: dict[str, str] = field(default_factory=dict)  # {"baseline": rig, "candidate": rig} where they differ

    @property
    def failed(self) -> bool:
        return self.significant_drop or bool(self.newly_failing_must_pass)


def _load_run(path: str | Path, role: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    p = Path(path)
    summary_path = p / "summary.json"
    if not summary_path.exists():
        raise RegressInputError(f"{role} {p}: no summary.json (is this a `loopdrive eval` run folder?)")
    try:
        summary = json.loads(summary_path.read_text())
        records = read_episodes(p)
    except (json.JSONDecodeError, JournalError, FileNotFoundError) as e:
        raise RegressInputError(f"{role} {p}: {e}") from None
    return summary, {r["key"]: r for r in scored(records)}


def sign_test_p(n_negative: int, n_positive: int) -> float:
    """One-sided exact sign test: P(at most ``n_positive`` improvements) if changes were coin flips."""
    n = n_negative + n_positive
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(n_positive + 1)) / 2**n


def bootstrap_p(diffs: np.ndarray, seed: int = 0) -> tuple[float, tuple[float, float]]:
    """One-sided p-value of 'mean difference >= 0' and the 95% interval, by paired bootstrap."""
    if np.all(diffs == diffs[0]):
        return (0.0 if diffs[0] < 0 else 1.0), (float(diffs[0]), float(diffs[0]))
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), (BOOTSTRAP_SAMPLES, len(diffs)))].mean(1)
    p = float((np.sum(means >= 0) + 1) / (len(means) + 1))
    lo, hi = np.quantile(means, [0.025, 0.975])
    return p, (float(lo), float(hi))


@dataclass
class PairedRuns:
    """Two runs' episodes on one bank, paired: ``b[i]`` and ``c[i]`` score episode ``keys[i]`` in each."""

    baseline: str
    candidate: str
    metric: str
    base_summary: dict[str, Any]
    cand_summary: dict[str, Any]
    base: dict[str, dict[str, Any]]
    cand: dict[str, dict[str, Any]]
    keys: list[str]
    b: np.ndarray
    c: np.ndarray
    rigs: dict[str, str]


def pair_runs(baseline: str | Path, candidate: str | Path, metric: str = "leaderboard") -> PairedRuns:
    """Load two run folders and pair their scored episodes (by scenario, seed and rig; across rigs without it)."""
    base_sum, base = _load_run(baseline, "baseline")
    cand_sum, cand = _load_run(candidate, "candidate")
    if base_sum["bank"] != cand_sum["bank"]:
        raise RegressInputError(
            f"the runs are on different banks: baseline {base_sum['bank']}, candidate {cand_sum['bank']}"
        )
    rigs = _one_rig_each(base, cand)
    if rigs:
        base, cand = _by_scenario_and_seed(base), _by_scenario_and_seed(cand)
    keys = sorted(set(base) & set(cand))
    if not keys:
        raise RegressInputError("no episode (scenario, seed, rig) was scored in both runs")
    try:
        b = np.array([suite_score(base[k], metric) for k in keys])
        c = np.array([suite_score(cand[k], metric) for k in keys])
    except KeyError:
        raise RegressInputError(f"metric {metric!r} is not in both runs' suites") from None
    return PairedRuns(str(baseline), str(candidate), metric, base_sum, cand_sum, base, cand, keys, b, c, rigs)


class PairedVerdict(NamedTuple):
    """What a paired check concludes from the episodes' scores: the fields ``Comparison`` and the pooled
    check over draws share."""

    baseline_mean: float
    candidate_mean: float
    mean_diff: float
    ci95: tuple[float, float]  # bootstrap
    p_value: float  # one-sided, of the chosen test
    significant_drop: bool  # p below alpha and the mean down by more than the tolerance


def paired_verdict(b: np.ndarray, c: np.ndarray, test: str, alpha: float, tolerance: float) -> PairedVerdict:
    """The paired test (``bootstrap`` or ``sign``) of candidate scores ``c`` against baseline scores ``b``."""
    d = c - b
    p, ci = bootstrap_p(d)
    if test == "sign":
        p = sign_test_p(int(np.sum(d < 0)), int(np.sum(d > 0)))
    drop = bool(p < alpha and d.mean() < -tolerance)
    return PairedVerdict(float(b.mean()), float(c.mean()), float(d.mean()), ci, p, drop)


def compare(
    baseline: str | Path,
    candidate: str | Path,
    metric: str = "leaderboard",
    alpha: float = 0.05,
    must_pass: list[str] | None = None,
    test: str = "bootstrap",
    tolerance: float = 0.5,
) -> Comparison:
    return compare_paired(pair_runs(baseline, candidate, metric), alpha, must_pass, test, tolerance)


def compare_paired(
    runs: PairedRuns,
    alpha: float = 0.05,
    must_pass: list[str] | None = None,
    test: str = "bootstrap",
    tolerance: float = 0.5,
) -> Comparison:
    """The regression check on two runs already paired by :func:`pair_runs`."""
    _check_test(test)
    base, cand, keys, metric = runs.base, runs.cand, runs.keys, runs.metric
    rows = [_row(k, base[k], cand[k], metric) for k in keys]
    tags = set(must_pass or [])
    newly_failing = [
        r
        for k, r in zip(keys, rows)
        if tags
        and (tags & set(base[k].get("tags", [])) or "all" in tags)
        and suite_score(base[k], "success") == 100.0
        and suite_score(cand[k], "success") < 100.0
    ]
    return Comparison(
        metric=metric,
        test=test,
        alpha=alpha,
        tolerance=tolerance,
        bank=runs.cand_summary["bank"],
        baseline=f"{runs.base_summary['agent']} ({runs.baseline})",
        candidate=f"{runs.cand_summary['agent']} ({runs.candidate})",
        n_pairs=len(keys),
        **paired_verdict(runs.b, runs.c, test, alpha, tolerance)._asdict(),
        regressed=sorted((r for r in rows if r["diff"] <= -SCENARIO_DELTA), key=lambda r: r["diff"]),
        improved=sorted((r for r in rows if r["diff"] >= SCENARIO_DELTA), key=lambda r: -r["diff"]),
        newly_failing_must_pass=newly_failing,
        unpaired=sorted(set(base) ^ set(cand)),
        endings=paired_endings([base[k] for k in keys], [cand[k] for k in keys]),
        rigs=runs.rigs,
    )


def _check_test(test: str) -> None:
    if test not in ("bootstrap", "sign"):
        raise RegressInputError(f"--test must be 'bootstrap' or 'sign', got {test!r}")


def _one_rig_each(base: dict[str, dict[str, Any]], cand: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{"baseline": rig, "candidate": rig}`` where each run ran one rig and they differ, else empty."""
    base_rigs, cand_rigs = {r["rig"] for r in base.values()}, {r["rig"] for r in cand.values()}
    if len(base_rigs) == len(cand_rigs) == 1 and base_rigs != cand_rigs:
        return {"baseline": base_rigs.pop(), "candidate": cand_rigs.pop()}
    return {}


def _by_scenario_and_seed(records: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The records keyed without their rig."""
    return {f"{r['scenario']}|{r['seed']}": r for r in records.values()}


def paired_endings(base: list[dict[str, Any]], cand: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """How the paired episodes ended in each run: {ending: {"baseline": n, "candidate": n}}."""
    b, c = ending_counts(base), ending_counts(cand)
    return {e: {"baseline": b.get(e, 0), "candidate": c.get(e, 0)} for e in sorted(b.keys() | c.keys())}


def _row(key: str, b: dict[str, Any], c: dict[str, Any], metric: str) -> dict[str, Any]:
    sb, sc = suite_score(b, metric), suite_score(c, metric)
    return {
        "key": key,
        "scenario": b["scenario"],
        "family": b.get("family", ""),
        "baseline": sb,
        "candidate": sc,
        "diff": sc - sb,
        "candidate_infractions": [i["type"] for i in c.get("infractions", [])],
        "candidate_status": c["status"],
        "baseline_ending": ending_of(b),
        "candidate_ending": ending_of(c),
    }


def to_markdown(cmp: Comparison) -> str:
    verdict = "REGRESSION" if cmp.failed else "no significant regression"
    across_rigs = []
    if cmp.rigs:
        baseline, candidate = cmp.rigs["baseline"], cmp.rigs["candidate"]
        across_rigs.append(f"- rigs: baseline {baseline}, candidate {candidate}: paired by scenario and seed")
    lines = [
        f"# Regression check: {verdict}",
        "",
        f"- bank: {cmp.bank['name']} v{cmp.bank['version']} (split {cmp.bank.get('split')})",
        f"- baseline: {cmp.baseline}",
        f"- candidate: {cmp.candidate}",
        *across_rigs,
        f"- metric: {cmp.metric}; {cmp.n_pairs} paired episodes; test: {cmp.test} (alpha {cmp.alpha}, "
        f"tolerance {cmp.tolerance} points)",
        f"- mean: {cmp.baseline_mean:.2f} -> {cmp.candidate_mean:.2f} (diff {cmp.mean_diff:+.2f}, "
        f"95% CI {cmp.ci95[0]:+.2f} .. {cmp.ci95[1]:+.2f}, one-sided p {cmp.p_value:.4f})",
        "",
    ]
    if cmp.endings:
        lines += ["## How the paired episodes ended", "", "| ending | baseline | candidate |", "|---|---:|---:|"]
        lines += [f"| {e} | {n['baseline']} | {n['candidate']} |" for e, n in cmp.endings.items()]
        lines.append("")
    for title, rows in (
        ("Newly failing must-pass scenarios", cmp.newly_failing_must_pass),
        (f"Regressed scenarios (<= -{SCENARIO_DELTA:g} points)", cmp.regressed),
        (f"Improved scenarios (>= +{SCENARIO_DELTA:g} points)", cmp.improved),
    ):
        lines.append(f"## {title}: {len(rows)}")
        if rows:
            lines += [
                "",
                "| episode | family | baseline | candidate | diff | ending | candidate infractions |",
                "|---|---|---:|---:|---:|---|---|",
            ]
            lines += [
                f"| {r['key']} | {r['family']} | {r['baseline']:.1f} | {r['candidate']:.1f} | {r['diff']:+.1f} | "
                f"{_ending_change(r)} | {', '.join(r['candidate_infractions']) or '-'} |"
                for r in rows
            ]
        lines.append("")
    if cmp.unpaired:
        lines.append(f"Unpaired episodes (scored in one run only): {len(cmp.unpaired)}")
    return "\n".join(lines) + "\n"


def _ending_change(row: dict[str, Any]) -> str:
    """The candidate's ending, or "time_limit -> stalled" where the two runs' episodes ended differently."""
    b, c = row["baseline_ending"], row["candidate_ending"]
    return c if b == c else f"{b} -> {c}"


def write_outputs(cmp: Comparison, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "regress.md").write_text(to_markdown(cmp))
    (out / "regress.json").write_text(json.dumps(asdict(cmp) | {"failed": cmp.failed}, indent=1))
    page = TEMPLATES.get_template("regress.html").render(c=cmp, delta=SCENARIO_DELTA, ending=_ending_change)
    (out / "regress.html").write_text(page)
    return out
