"""``loopdrive regress`` over training draws: is a recipe change better across several trained models?

One training run of a recipe is one draw, and draws of the same recipe with other seeds score several
points apart (docs/experiments), so a change judged on one pair of runs is judged on that noise. Given N
baseline runs and N candidate runs, paired in order (draw i of each trained with seed i), each draw's
episodes are paired as ``regress`` pairs them, and each episode's difference is averaged over the
draws: the pooled difference, bootstrapped over episodes. Its interval holds the variation over the
scenarios for these N pairs of models, not that of a new draw; the per-draw rows show how far the
draws agree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation import regress
from evaluation.regress import Comparison, RegressInputError
from evaluation.report import TEMPLATES

FAMILY_LOSS = 5.0  # points: a family whose pooled difference is this low or lower is flagged


@dataclass
class FamilyChange:
    family: str
    n: int  # episodes paired in every draw
    baseline_mean: float
    candidate_mean: float
    mean_diff: float  # pooled over the draws


@dataclass
class DrawsComparison:
    metric: str
    test: str
    alpha: float
    tolerance: float
    bank: dict[str, Any]
    draws: list[Comparison]
    n_pooled: int  # episodes paired in every draw
    baseline_mean: float
    candidate_mean: float
    mean_diff: float
    ci95: tuple[float, float]
    p_value: float
    significant_drop: bool
    families: list[FamilyChange]  # worst first

    @property
    def failed(self) -> bool:
        return self.significant_drop or any(d.newly_failing_must_pass for d in self.draws)

    @property
    def families_lost(self) -> list[FamilyChange]:
        return [f for f in self.families if f.mean_diff <= -FAMILY_LOSS]


def compare_draws(
    baselines: list[str | Path],
    candidates: list[str | Path],
    metric: str = "leaderboard",
    alpha: float = 0.05,
    must_pass: list[str] | None = None,
    test: str = "bootstrap",
    tolerance: float = 0.5,
) -> DrawsComparison:
    """Compare draw i of the candidate with draw i of the baseline, then pool the draws."""
    if len(baselines) != len(candidates):
        raise RegressInputError(
            f"{len(baselines)} baseline runs and {len(candidates)} candidate runs: draws pair one to one, in order"
        )
    if not baselines:
        raise RegressInputError("no runs to compare")
    paired = [regress.pair_runs(b, c, metric) for b, c in zip(baselines, candidates)]
    bank = paired[0].cand_summary["bank"]
    for runs in paired[1:]:
        if runs.cand_summary["bank"] != bank:
            raise RegressInputError(
                f"the draws are on different banks: {paired[0].candidate} {bank}, "
                f"{runs.candidate} {runs.cand_summary['bank']}"
            )
    draws = [regress.compare_paired(runs, alpha, must_pass, test, tolerance) for runs in paired]
    keys = sorted(set.intersection(*(set(runs.keys) for runs in paired)))
    if not keys:
        raise RegressInputError("no episode was scored in every run")
    rows = [np.searchsorted(runs.keys, keys) for runs in paired]  # both sorted: each run's pooled rows
    b = np.mean([runs.b[r] for runs, r in zip(paired, rows)], axis=0)
    c = np.mean([runs.c[r] for runs, r in zip(paired, rows)], axis=0)
    d = c - b
    family_of = np.array([paired[0].base[k].get("family", "") for k in keys])
    families = [
        FamilyChange(
            family=str(f),
            n=int(np.sum(family_of == f)),
            baseline_mean=float(b[family_of == f].mean()),
            candidate_mean=float(c[family_of == f].mean()),
            mean_diff=float(d[family_of == f].mean()),
        )
        for f in np.unique(family_of)
    ]
    return DrawsComparison(
        metric=metric,
        test=test,
        alpha=alpha,
        tolerance=tolerance,
        bank=bank,
        draws=draws,
        n_pooled=len(keys),
        **regress.paired_verdict(b, c, test, alpha, tolerance)._asdict(),
        families=sorted(families, key=lambda f: f.mean_diff),
    )


def to_markdown(cmp: DrawsComparison) -> str:
    verdict = "REGRESSION" if cmp.failed else "no significant regression"
    lines = [
        f"# Regression check over {len(cmp.draws)} draws: {verdict}",
        "",
        f"- bank: {cmp.bank['name']} v{cmp.bank['version']} (split {cmp.bank.get('split')})",
        f"- metric: {cmp.metric}; {cmp.n_pooled} episodes paired in every draw; test: {cmp.test} (alpha "
        f"{cmp.alpha}, tolerance {cmp.tolerance} points)",
        f"- pooled: {cmp.baseline_mean:.2f} -> {cmp.candidate_mean:.2f} (diff {cmp.mean_diff:+.2f}, "
        f"95% CI {cmp.ci95[0]:+.2f} .. {cmp.ci95[1]:+.2f}, one-sided p {cmp.p_value:.4f})",
        f"- families losing {FAMILY_LOSS:g} points or more (pooled): "
        + (", ".join(f"{f.family} {f.mean_diff:+.1f}" for f in cmp.families_lost) or "none"),
        "",
        "## Each draw",
        "",
        "| draw | baseline | candidate | mean | diff (95% CI) | p | must-pass newly failing |",
        "|---|---|---|---|---|---:|---:|",
    ]
    lines += [
        f"| {i} | {d.baseline} | {d.candidate} | {d.baseline_mean:.2f} -> {d.candidate_mean:.2f} | "
        f"{d.mean_diff:+.2f} ({d.ci95[0]:+.2f} .. {d.ci95[1]:+.2f}) | {d.p_value:.4f} | "
        f"{len(d.newly_failing_must_pass)} |"
        for i, d in enumerate(cmp.draws, 1)
    ]
    lines += ["", "## By family (pooled)", "", "| family | episodes | baseline | candidate | diff |"]
    lines.append("|---|---:|---:|---:|---:|")
    lines += [
        f"| {f.family} | {f.n} | {f.baseline_mean:.1f} | {f.candidate_mean:.1f} | {f.mean_diff:+.1f} |"
        for f in cmp.families
    ]
    return "\n".join(lines) + "\n"


def write_outputs(cmp: DrawsComparison, out: str | Path) -> Path:
    """``regress.md`` / ``.json`` / ``.html`` for the pooled check, each draw's own report in ``draw_<i>/``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for i, draw in enumerate(cmp.draws, 1):
        regress.write_outputs(draw, out / f"draw_{i}")
    (out / "regress.md").write_text(to_markdown(cmp))
    record = asdict(cmp) | {"failed": cmp.failed, "families_lost": [f.family for f in cmp.families_lost]}
    (out / "regress.json").write_text(json.dumps(record, indent=1))
    page = TEMPLATES.get_template("regress_draws.html").render(c=cmp, family_loss=FAMILY_LOSS)
    (out / "regress.html").write_text(page)
    return out
