"""What every trainer does between and after its steps: checkpoint on schedule, evaluate in closed loop
on schedule, and at the end publish ``checkpoints/final``, evaluate it, and draw the curves.

With ``eval.select_on = "val"`` the periodic evaluations run on that split instead, the best of them is
kept as ``checkpoints/best`` (RL also scores its starting policy there first, at step 0), and ``final``
is a copy of the best: model selection on held-out scenarios, so that the final evaluation on
``eval.split`` (the test split) never chooses what it measures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.checkpoints import checkpoint_dir, latest_checkpoint, publish_final
from training.metrics_log import MetricsLogger
from training.recipes import Recipe

BEST = "best"


def eval_metrics(summary: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    """An evaluation summary as ``<prefix>/<suite>`` scalars for the metrics log."""
    out = {f"{prefix}/{k}": v["mean"] for k, v in summary["suites"].items() if v.get("mean") is not None}
    out[f"{prefix}/success_rate"] = summary.get("success_rate") or 0.0
    return out


def best_so_far(run_dir: Path) -> dict[str, Any] | None:
    """``{"step", "score", "split"}`` of ``checkpoints/best``, or None before the first selection."""
    path = checkpoint_dir(run_dir) / f"{BEST}.json"
    return json.loads(path.read_text()) if path.exists() and (checkpoint_dir(run_dir) / BEST).exists() else None


def _select(step: int, path: Path, summary: dict[str, Any], split: str, run_dir: Path) -> None:
    """Keep ``path`` as ``checkpoints/best`` if it beats the best Driving Score on ``split`` so far."""
    score = float(summary["suites"]["leaderboard"]["mean"])
    best = best_so_far(run_dir)
    if best is None or score > best["score"]:
        publish_final(run_dir, path, BEST)
        record = checkpoint_dir(run_dir) / f"{BEST}.json"
        tmp = record.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"step": step, "score": score, "split": split}))
        tmp.replace(record)


def _periodic_eval(
    step: int, path: Path, recipe: Recipe, evaluate_fn, logger: MetricsLogger, run_dir: Path, name: str | None = None
) -> None:
    split, name = recipe.eval.select_on, name or path.name
    if split is None:
        logger.log(step, eval_metrics(evaluate_fn(path, run_dir / "evals" / name)))
        return
    summary = evaluate_fn(path, run_dir / "evals" / f"{split}_{name}", split=split)
    _select(step, path, summary, split, run_dir)
    logger.log(step, eval_metrics(summary, split) | {"select/best_step": float(best_so_far(run_dir)["step"])})


def before_first_step(recipe: Recipe, start_path: Path, evaluate_fn, logger: MetricsLogger, run_dir: Path) -> None:
    """Before an RL run's first step: with ``select_on``, score the starting policy there (step 0), so
    that ``final`` is never worse on held-out scenarios than where the run began."""
    if evaluate_fn is not None and recipe.eval.select_on and best_so_far(run_dir) is None:
        _periodic_eval(0, Path(start_path), recipe, evaluate_fn, logger, run_dir, name="start")


def after_step(
    step: int,
    total: int,
    recipe: Recipe,
    checkpoint: Callable[[int], Path],
    evaluate_fn,
    logger: MetricsLogger,
    run_dir: Path,
) -> None:
    """Checkpoint every ``checkpoint.every`` steps (and at the last); evaluate every ``eval.every`` (with
    ``select_on``, the last step too: it is a candidate). An evaluation reads a checkpoint (and a resume
    restarts from it), so it saves one when none is due."""
    path = checkpoint(step) if step % recipe.checkpoint.every == 0 or step == total else None
    every = recipe.eval.every
    due = every and ((step % every == 0 and step < total) or (step == total and recipe.eval.select_on))
    if evaluate_fn is not None and due:
        path = path or checkpoint(step)
        _periodic_eval(step, path, recipe, evaluate_fn, logger, run_dir)


def finish(
    step: int, total: int, recipe: Recipe, evaluate_fn, logger: MetricsLogger, run_dir: Path, result: dict[str, Any]
) -> dict[str, Any]:
    """When the run is complete: ``final`` (the last checkpoint, or the best on ``select_on``) and its
    evaluation into ``result``; curves; close the log."""
    if step >= total:
        best = best_so_far(run_dir) if recipe.eval.select_on else None
        chosen = checkpoint_dir(run_dir) / BEST if best else latest_checkpoint(run_dir)
        final = publish_final(run_dir, chosen)
        result["final"] = str(final)
        if best:
            result["selected"] = best
        if evaluate_fn is not None and recipe.eval.final:
            summary = evaluate_fn(final, run_dir / "evals" / "final")
            logger.log(step, eval_metrics(summary))
            result["eval"] = summary
    logger.plot()
    logger.close()
    return result


def last_step_of_this_run(total: int, done: int, max_this_run: int | None) -> int:
    """Where this run stops: ``total``, or earlier with ``max_*_this_run`` (as a kill would: resume tests)."""
    return total if max_this_run is None else min(total, done + max_this_run)
