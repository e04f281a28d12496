"""Periodic evaluation and model selection: the best checkpoint on val, or the start, becomes final."""

from __future__ import annotations

import json
from pathlib import Path


class _Weights:
    """A stand-in policy for checkpoint tests: saves one file naming its version."""

    def __init__(self) -> None:
        self.version = 0

    def save_pretrained(self, path) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "weights.txt").write_text(str(self.version))


def test_select_on_val_publishes_the_best_checkpoint_or_the_start(tmp_path):
    from training.checkpoints import save_checkpoint
    from training.metrics_log import MetricsLogger
    from training.milestones import after_step, before_first_step, finish
    from training.recipes import recipe_from_dict

    start = tmp_path / "sft_final"
    start.mkdir()
    (start / "weights.txt").write_text("start")
    policy, calls = _Weights(), []

    def evaluate(checkpoint, out, split=None):
        calls.append((out.name, split))
        version = (checkpoint / "weights.txt").read_text()
        score = {"start": 50.0, "2": 40.0, "4": 60.0, "6": 55.0}[version] if split else 99.0
        return {"suites": {"leaderboard": {"mean": score}}, "success_rate": 0.0}

    def run(scores_from: str | None, run_dir):
        recipe = recipe_from_dict(
            {
                "eval": {"every": 2, "select_on": scores_from, "split": "test"},
                "checkpoint": {"every": 2, "keep_last": 1},
            }
        )
        logger = MetricsLogger(run_dir)
        before_first_step(recipe, start, evaluate, logger, run_dir)

        def checkpoint(at):
            return save_checkpoint(run_dir, at, policy, None, {"iteration": at}, {}, 1)

        for step in range(1, 7):
            policy.version = step
            after_step(step, 6, recipe, checkpoint, evaluate, logger, run_dir)
        return finish(6, 6, recipe, evaluate, logger, run_dir, {})

    result = run("val", tmp_path / "selected")
    # the start and steps 2, 4, 6 were scored on val; step 4 won though keep_last pruned its folder
    assert calls == [
        ("val_start", "val"),
        ("val_step_0000002", "val"),
        ("val_step_0000004", "val"),
        ("val_step_0000006", "val"),
        ("final", None),
    ]
    assert result["selected"] == {"step": 4, "score": 60.0, "split": "val"}
    assert (Path(result["final"]) / "weights.txt").read_text() == "4"
    logged = [json.loads(line) for line in (tmp_path / "selected" / "metrics.jsonl").read_text().splitlines()]
    assert [d["val/leaderboard"] for d in logged if "val/leaderboard" in d] == [50.0, 40.0, 60.0, 55.0]
    assert logged[-1]["eval/leaderboard"] == 99.0  # the final evaluation, on the eval split

    calls.clear()
    result = run(None, tmp_path / "last")  # no selection: periodic evals on the eval split, final = the last
    assert calls == [("step_0000002", None), ("step_0000004", None), ("final", None)]
    assert (Path(result["final"]) / "weights.txt").read_text() == "6" and "selected" not in result


def test_select_on_keeps_the_start_when_nothing_beats_it(tmp_path):
    from training.metrics_log import MetricsLogger
    from training.milestones import before_first_step, finish
    from training.recipes import recipe_from_dict

    start = tmp_path / "sft_final"
    start.mkdir()
    (start / "weights.txt").write_text("start")
    recipe = recipe_from_dict({"eval": {"every": 2, "select_on": "val", "final": False}})
    run_dir = tmp_path / "run"
    logger = MetricsLogger(run_dir)
    before_first_step(
        recipe, start, lambda c, o, split=None: {"suites": {"leaderboard": {"mean": 70.0}}}, logger, run_dir
    )
    result = finish(4, 4, recipe, None, logger, run_dir, {})
    assert result["selected"]["step"] == 0 and (Path(result["final"]) / "weights.txt").read_text() == "start"


def test_an_rl_recipes_evaluations_record_its_reward_beside_the_score(tmp_path):
    from training.data import CollectSettings
    from training.recipes import EvalSection
    from training.run import make_evaluator

    weights = {"progress": 0.05, "collision": -20.0, "min_speed": -0.5}
    section = EvalSection(bank="smoke", split=None, scenarios=3, workers=0)
    evaluate = make_evaluator(section, CollectSettings(n_frames=1), agent="constant_velocity", rewards=weights)
    summary = evaluate(tmp_path / "unused_checkpoint", tmp_path / "eval")
    assert json.loads((tmp_path / "eval" / "config.json").read_text())["rewards"] == weights
    assert summary["reward_returns"].keys() == weights.keys()
