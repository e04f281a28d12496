"""What every trainer does between and after its steps: checkpoint on schedule, evaluate in closed loop
on schedule, and at the end publish ``checkpoints/final``, evaluate it, and draw the curves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.checkpoints import latest_checkpoint, publish_final
from training.config import Recipe
from training.metrics_log import MetricsLogger


def eval_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """An evaluation summary as ``eval/<suite>`` scalars for the metrics log."""
    out = {f"eval/{k}": v["mean"] for k, v in summary["suites"].items() if v.get("mean") is not None}
    out["eval/success_rate"] = summary.get("success_rate") or 0.0
    return out


def after_step(step: int, total: int, recipe: Recipe, checkpoint: Callable[[int], Path], evaluate_fn,
               logger: MetricsLogger, run_dir: Path) -> None:  # fmt: skip
    """Checkpoint every ``checkpoint.every`` steps (and at the last); evaluate every ``eval.every``. An
    evaluation reads a checkpoint (and a resume restarts from it), so it saves one when none is due."""
    path = checkpoint(step) if step % recipe.checkpoint.every == 0 or step == total else None
    if evaluate_fn is not None and recipe.eval.every and step % recipe.eval.every == 0 and step < total:
        path = path or checkpoint(step)
        logger.log(step, eval_metrics(evaluate_fn(path, run_dir / "evals" / path.name)))


def finish(step: int, total: int, recipe: Recipe, evaluate_fn, logger: MetricsLogger, run_dir: Path,
           result: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """When the run is complete: ``final`` (and its evaluation) into ``result``; curves; close the log."""
    if step >= total:
        final = publish_final(run_dir, latest_checkpoint(run_dir))
        result["final"] = str(final)
        if evaluate_fn is not None and recipe.eval.final:
            summary = evaluate_fn(final, run_dir / "evals" / "final")
            logger.log(step, eval_metrics(summary))
            result["eval"] = summary
    logger.plot()
    logger.close()
    return result
