"""Train from a recipe: ``python training/run.py --config configs/sft_tiny.toml [--set a.b=v ...]``.

    --run-dir DIR     where checkpoints, metrics.jsonl, tb/, curves.png and evals/ go
                      (default runs/<recipe name>)
    --resume DIR      continue DIR from its latest checkpoint, with the config saved there
                      (the same results as a run that was never interrupted)

The resolved config is saved as ``DIR/config.json``; the final policy is ``DIR/checkpoints/final``
and loads as the agent ``vla:DIR/checkpoints/final``. Same as ``loopdrive train``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
from typing import Any

from training.checkpoints import latest_checkpoint
from training.data import CollectSettings
from training.recipes import (
    DDRLRecipe,
    EvalSection,
    GRPORecipe,
    PPORecipe,
    Recipe,
    RecipeError,
    SB3PPORecipe,
    SFTRecipe,
    WorldModelRecipe,
    load_recipe,
    recipe_from_dict,
)


def make_evaluator(
    e: EvalSection, d: CollectSettings, agent: str | None = None, rewards: dict[str, float] | None = None
):
    """Closed-loop evaluation of a checkpoint through ``evaluation`` with the data's observation set-up
    ``d`` (``agent``: a spec with ``{checkpoint}`` in it; default the VLA with the eval section's options).
    ``rewards``: an RL recipe's terms, so its evaluations record how their return follows the score."""
    from evaluation import EvalConfig, evaluate
    from scenarios import load_bank

    def run(checkpoint: Path, out: Path, split: str | None = None) -> dict[str, Any]:
        """Evaluate on the eval split, or on ``split`` (model selection) with the same settings."""
        split = split or e.split
        ids = [s.id for s in load_bank(e.bank, split=split).scenarios]
        ids = ids[: e.scenarios] if e.scenarios else None
        from agents.policy import policy_kind

        if agent is None:
            spec = f"{policy_kind(checkpoint)}:{checkpoint}?{e.agent_options()}"
            decision_every = d.decision_every
        else:  # a control policy renews its command every world step, as in training
            spec, decision_every = agent.format(checkpoint=checkpoint), 1
        cfg = EvalConfig(
            bank=e.bank,
            split=split,
            agent=spec,
            scenarios=ids,
            workers=e.workers,
            rigs=[d.rig],
            n_frames=d.n_frames,
            frame_every=d.frame_every,
            decision_every=decision_every,
            camera_size=tuple(d.camera_size),
            episode_timeout_s=3600,
            rewards=rewards,
        )
        return evaluate(cfg, out, progress=False)

    return run


def train(recipe: Recipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None) -> dict[str, Any]:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = run_dir / "config.json"
    resolved = recipe.model_dump(mode="json")
    if not resume and (ckpt := latest_checkpoint(run_dir)) is not None:
        # starting over would drop the run's checkpoints and metrics: a re-typed command after a kill
        raise RecipeError(
            f"{run_dir} already holds a run (checkpoint {ckpt.name}); continue it with --resume {run_dir}, "
            "or give a new --run-dir"
        )
    if saved.exists() and not resume:
        before = json.loads(saved.read_text())
        if {k: v for k, v in before.items() if k != "train"} != {k: v for k, v in resolved.items() if k != "train"}:
            raise RecipeError(f"{run_dir} holds a run with another recipe; use --resume {run_dir} or a new --run-dir")
    saved.write_text(json.dumps(resolved, indent=1))
    if isinstance(recipe, SFTRecipe):
        from training.sft import train_sft

        evaluate = make_evaluator(recipe.eval, recipe.data)
        return train_sft(recipe, run_dir, resume=resume, progress=progress, evaluate_fn=evaluate)
    if isinstance(recipe, GRPORecipe):
        from training.rl.grpo import train_grpo

        evaluate = make_evaluator(recipe.eval, recipe.data, rewards=recipe.rl.rewards)
        return train_grpo(recipe, run_dir, resume=resume, progress=progress, evaluate_fn=evaluate)
    if isinstance(recipe, PPORecipe):
        from training.rl.ppo import train_ppo

        evaluate = make_evaluator(recipe.eval, recipe.data, rewards=recipe.rl.rewards)
        return train_ppo(recipe, run_dir, resume=resume, progress=progress, evaluate_fn=evaluate)
    if isinstance(recipe, SB3PPORecipe):
        from training.rl.ppo_sb3 import train_ppo_sb3

        result = train_ppo_sb3(recipe, run_dir, resume=resume, progress=progress)
        if recipe.eval.final:
            evaluate = make_evaluator(recipe.eval, CollectSettings(), agent="sb3:{checkpoint}")
            result["eval"] = evaluate(Path(result["final"]), run_dir / "evals" / "final")
        return result
    if isinstance(recipe, DDRLRecipe):  # (before WorldModelRecipe, which it extends)
        from training.world_model.ddrl import train_ddrl

        return train_ddrl(recipe, run_dir, resume=resume, progress=progress)
    if isinstance(recipe, WorldModelRecipe):
        from training.world_model.train import train_world_model

        return train_world_model(recipe, run_dir, resume=resume, progress=progress)
    raise RecipeError(f"algorithm {recipe.algorithm!r} is not implemented")  # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="training/run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", help="recipe TOML (configs/*.toml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. train.steps=50")
    p.add_argument("--run-dir")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    args = p.parse_args(argv)
    try:
        if args.resume:
            run_dir = Path(args.resume)
            saved = run_dir / "config.json"
            if not saved.exists():
                raise RecipeError(f"--resume {run_dir}: no config.json (is it a training run folder?)")
            recipe = recipe_from_dict(json.loads(saved.read_text()), args.set, str(saved))
        else:
            if not args.config:
                raise RecipeError("give --config RECIPE.toml (or --resume RUN_DIR)")
            recipe = load_recipe(args.config, args.set)
            run_dir = Path(args.run_dir or Path("runs") / Path(args.config).stem)
        result = train(recipe, run_dir, resume=bool(args.resume))
    except (RecipeError, FileNotFoundError, ValueError) as e:
        print(f"training: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in result.items() if k != "eval"}, indent=1))
    if "eval" in result:
        s = result["eval"]
        print(
            f"closed-loop eval: driving score {s['suites']['leaderboard']['mean']:.1f}, "
            f"success {s['success_rate']:.1f}% ({s['episodes']['total']} episodes)"
        )
    print(f"run folder: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
