"""SFT of a checkpoint in Alpamayo-R1's released layout through the project's trainer (``training/run.py``):
it trains, resumes bit for bit, and saves back in the release's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agents.alpamayo import AlpamayoR1
from tests.training.helpers import metrics_of, sft_recipe
from training.run import main as run_main

CHECKPOINT = Path(__file__).parents[1] / "data" / "alpamayo_r1_reference" / "checkpoint"


def test_sft_of_an_alpamayo_checkpoint_trains_resumes_exactly_and_saves_the_release_layout(dataset, tmp_path):
    recipe = sft_recipe(tmp_path, dataset, steps=4)
    recipe.write_text(f'init_from = "{CHECKPOINT}"\n' + recipe.read_text())
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main(["--config", str(recipe), "--run-dir", str(straight)]) == 0
    assert run_main(["--config", str(recipe), "--run-dir", str(broken), "--set", "train.max_steps_this_run=3"]) == 0
    assert run_main(["--resume", str(broken)]) == 0
    final = straight / "checkpoints" / "final"
    a, b = load_file(final / "model.safetensors"), load_file(broken / "checkpoints" / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert metrics_of(straight) == metrics_of(broken)
    start = load_file(CHECKPOINT / "model.safetensors")
    assert a.keys() == start.keys()  # the release's keys, nothing added or lost
    assert not torch.equal(a["expert.layers.0.mlp.up_proj.weight"], start["expert.layers.0.mlp.up_proj.weight"])
    assert json.loads((final / "config.json").read_text()) == json.loads((CHECKPOINT / "config.json").read_text())
    rows = metrics_of(straight)
    assert all(r["loss/flow"] > 0 and r["loss/text"] > 0 for r in rows)
    assert AlpamayoR1.from_pretrained(final) is not None  # loads on its own (base VLM files beside it)


@pytest.mark.parametrize(
    ("option", "why"),
    [
        ("flow_prompt_only", "an Alpamayo-R1 policy always plans after its reasoning"),
        ("flow_unconditional", "context guidance is a LoopDrive VLA option"),
        ("flow_motion_dropout", "the state token is a LoopDrive VLA part"),
        ("perception_weight", "the perception probe is a LoopDrive VLA part"),
        ("manoeuvre_weight", "the manoeuvre head is a LoopDrive VLA part"),
    ],
)
def test_loopdrive_vla_flow_options_are_refused_for_an_alpamayo_checkpoint(dataset, tmp_path, capsys, option, why):
    """Alpamayo-R1 always plans after its reasoning and has no state token, perception probe or manoeuvre
    head: a share of prompt-only, state-only or motion-hidden flow draws, or a head's loss, has no meaning
    there."""
    recipe = sft_recipe(tmp_path, dataset, steps=1)
    recipe.write_text(f'init_from = "{CHECKPOINT}"\n' + recipe.read_text())
    run = ["--config", str(recipe), "--run-dir", str(tmp_path / "run"), "--set", f"train.{option}=0.5"]
    assert run_main(run) == 2
    assert f"train.{option}: {why}" in capsys.readouterr().err
