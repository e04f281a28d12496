"""Shared by the training tests: the smoke data set-up, a tiny SFT recipe, reading a run's weights and metrics."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from training.data import CollectSettings

SCENARIOS = ["lead_brake-000", "curve-000"]


def collect_settings(**kw) -> CollectSettings:
    base = dict(bank="smoke", split=None, scenarios=SCENARIOS, n_frames=1, chunk=16, perturb_fraction=0.5)
    return CollectSettings(**(base | kw))


def sft_recipe(tmp: Path, data: Path, **train) -> Path:
    t = {"steps": 6, "batch_size": 4, "log_every": 1, "warmup_steps": 2, "threads": 1} | train
    text = f"""algorithm = "sft"
seed = 3
[data]
path = "{data}"
collect = false
n_frames = 1
[train]
{chr(10).join(f"{k} = {json.dumps(v)}" for k, v in t.items())}
[eval]
final = false
[checkpoint]
every = 2
keep_last = 2
"""
    path = tmp / "recipe.toml"
    path.write_text(text)
    return path


def weights_of(path: Path) -> dict[str, torch.Tensor]:
    out = load_file(path / "action_expert.safetensors")
    for f in sorted((path / "backbone").glob("*.safetensors")):
        out |= {f"backbone.{k}": v for k, v in load_file(f).items()}
    return out


def metrics_of(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("samples_per_s", None)
    return rows
