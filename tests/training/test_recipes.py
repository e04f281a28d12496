"""Recipes: validation with file and key in the errors, overrides, a type per algorithm, shipped recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.recipes import RecipeError, load_recipe, parse_override
from training.run import main as run_main


def test_recipe_validation_and_overrides(tmp_path):
    assert parse_override("train.steps=50") == (["train", "steps"], 50)
    assert parse_override("data.path=data/x.zarr") == (["data", "path"], "data/x.zarr")
    r = load_recipe(None, ["train.lr=0.01", "model.size='tiny'", "init_from=runs/a/checkpoints/final"])
    assert r.train.lr == 0.01 and r.init_from == "runs/a/checkpoints/final"
    bad = tmp_path / "bad.toml"
    bad.write_text('algorithm = "sft"\n[train]\nstepz = 3\n')
    with pytest.raises(RecipeError, match=r"bad.toml: train.stepz: Extra inputs"):
        load_recipe(bad)
    with pytest.raises(RecipeError, match=r"train\.steps"):
        load_recipe(None, ["train.steps=-1"])
    assert run_main(["--config", str(tmp_path / "missing.toml")]) == 2
    with pytest.raises(RecipeError, match=r"rl: Extra inputs"):  # each algorithm has exactly its own sections
        load_recipe(None, ["rl.lr=0.1"])
    grpo = ['algorithm="grpo"']
    with pytest.raises(RecipeError, match=r"stall_noise_level needs"):  # a level for stalls, but no stalls
        load_recipe(None, [*grpo, "rl.stall_noise_level=[1.0, 0.5]"])
    with pytest.raises(RecipeError, match=r"rl.stall_noise_level.*two"):
        stalls = ['rl.branch="before_failure"', "rl.stall_decisions=4"]
        load_recipe(None, [*grpo, *stalls, "rl.stall_noise_level=[1, 0, 2]"])
    with pytest.raises(RecipeError, match=r"rl.gamma: Extra inputs"):  # PPO's settings are not GRPO's
        load_recipe(None, [*grpo, "rl.gamma=0.9"])
    with pytest.raises(RecipeError, match=r"differ"):
        load_recipe(None, ["model.image_size=[56, 112]", "data.image_size=[28, 56]"])
    assert load_recipe(None, ["model.image_size=[28, 56]"]).data.image_size == (28, 56)  # stored as the VLA reads
    assert load_recipe(None, ["seed=7"]).model.seed == 7
    assert load_recipe(None, ["train.ema_decay=0.995"]).train.ema_decay == 0.995
    with pytest.raises(RecipeError, match=r"train\.ema_decay"):
        load_recipe(None, ["train.ema_decay=1.0"])
    with pytest.raises(RecipeError, match=r"ema_decay: the world model saves its last step"):
        load_recipe(None, ['algorithm="world_model"', "train.ema_decay=0.99"])


def test_every_shipped_recipe_validates():
    """``configs/eval_*.toml`` are evaluation configs (``loopdrive eval --config``); the rest recipes."""
    from evaluation import load_eval_config
    from training.recipes import load_recipe

    files = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))
    evals = [p for p in files if p.stem.startswith("eval_")]
    recipes = [p for p in files if p not in evals]
    assert {p.stem for p in recipes} >= {
        "sft_tiny",
        "sft_dagger_tiny",
        "sft_demo",
        "grpo_tiny",
        "ppo_sb3_state",
        "rig_adapt_text",
    }
    assert {p.stem for p in evals} >= {"eval_rigs"}
    for path in evals:
        assert load_eval_config(path).rigs, path.name
    for path in recipes:
        recipe = load_recipe(path)
        if recipe.algorithm in ("grpo", "ppo"):
            assert recipe.init_from, f"{path.name}: RL starts from a trained policy"
        if path.stem == "sft_dagger_tiny":
            assert recipe.dagger.rounds > 0 and recipe.eval.noise == 0.0, "the rounds' policy drives as evaluated"
