"""The demo (``make demo``): a short SFT of the tiny VLA on expert driving, then closed-loop
evaluations of the expert, the VLA and a baseline on a bank, with a video per episode and an HTML
report per agent, and a side-by-side table.

Every part is the real command underneath (``training/run.py`` with ``configs/sft_demo.toml``,
then ``loopdrive eval`` per agent into ``OUT/<agent>``), so a kill is recovered by rerunning: the
data collection, the training and each evaluation resume where they stopped.
"""

from __future__ import annotations

from pathlib import Path

from evaluation import EvalConfig, evaluate

DEMO_RECIPE = Path(__file__).resolve().parents[1] / "configs" / "sft_demo.toml"


def train_demo_vla(out: Path, recipe_path: Path = DEMO_RECIPE) -> tuple[Path, object]:
    from training.checkpoints import latest_checkpoint
    from training.recipes import load_recipe
    from training.run import train

    recipe = load_recipe(recipe_path)
    run_dir = out / "sft"
    final = run_dir / "checkpoints" / "final"
    if not final.exists():
        print(f"== SFT of the tiny VLA ({recipe_path.name}: {recipe.train.steps} steps) -> {run_dir}")
        train(recipe, run_dir, resume=latest_checkpoint(run_dir) is not None if run_dir.exists() else False)
    return final, recipe


def run_demo(
    bank: str,
    out: Path,
    video: bool = True,
    split: str | None = None,
    agents: str = "expert,constant_velocity",
    sft: bool = True,
) -> int:
    specs = [a.strip() for a in agents.split(",") if a.strip()]
    setup: dict = {}
    if sft:
        final, recipe = train_demo_vla(out)
        specs.insert(1, f"vla:{final}")
        d = recipe.data
        setup = {
            "n_frames": d.n_frames,
            "frame_every": d.frame_every,
            "decision_every": d.decision_every,
            "rigs": [d.rig],
            "camera_size": tuple(d.camera_size),
        }
    results = {}
    for spec in specs:
        name = "vla" if spec.startswith("vla:") else spec.replace(":", "_").replace("/", "_")
        run_dir = out / name
        print(f"== {spec} on {bank} -> {run_dir}")
        cfg = EvalConfig(bank=bank, split=split, agent=spec, video=video, episode_timeout_s=3600, **setup)
        results[name] = (run_dir, evaluate(cfg, run_dir))
    print(f"\n{'agent':20s} {'driving score':>14s} {'success %':>10s} {'PDMS':>6s} {'infractions/km':>15s}  report")
    for name, (run_dir, s) in results.items():
        lb, pdms = s["suites"]["leaderboard"]["mean"], s["suites"]["pdms"]["mean"]
        ipk = s["infractions_per_km"]
        print(
            f"{name:20s} {lb:14.1f} {s['success_rate']:10.1f} {pdms:6.1f} {ipk if ipk is not None else 0:15.2f}  "
            f"{(run_dir / 'report.html').resolve()}"
        )
    failed = sum(s["episodes"]["total"] - s["episodes"]["ok"] for _, s in results.values())
    return 1 if failed or any(s["interrupted"] for _, s in results.values()) else 0
