"""The demo (``make demo``): closed-loop evaluations of the privileged expert and a baseline on a bank,
with a video per episode and an HTML report per agent, then a side-by-side table.

It is ``loopdrive eval`` run once per agent into ``OUT/<agent>``, so everything the evaluation
promises holds here too: rerun after a kill and only missing episodes run.
"""

from __future__ import annotations

from pathlib import Path

from evaluation import EvalConfig, evaluate


def run_demo(bank: str, out: Path, video: bool = True, split: str | None = None,
             agents: str = "expert,constant_velocity") -> int:  # fmt: skip
    specs = [a.strip() for a in agents.split(",") if a.strip()]
    results = {}
    for spec in specs:
        run_dir = out / spec.replace(":", "_").replace("/", "_")
        print(f"== {spec} on {bank} -> {run_dir}")
        results[spec] = (run_dir, evaluate(EvalConfig(bank=bank, split=split, agent=spec, video=video), run_dir))
    print(f"\n{'agent':24s} {'driving score':>14s} {'success %':>10s} {'PDMS':>6s} {'infractions/km':>15s}  report")
    for spec, (run_dir, s) in results.items():
        lb, pdms = s["suites"]["leaderboard"]["mean"], s["suites"]["pdms"]["mean"]
        ipk = s["infractions_per_km"]
        print(f"{spec:24s} {lb:14.1f} {s['success_rate']:10.1f} {pdms:6.1f} {ipk if ipk is not None else 0:15.2f}  "
              f"{(run_dir / 'report.html').resolve()}")  # fmt: skip
    failed = sum(s["episodes"]["total"] - s["episodes"]["ok"] for _, s in results.values())
    return 1 if failed or any(s["interrupted"] for _, s in results.values()) else 0
