"""Shared by the training tests: the smoke data set-up (and a copy with cars closing in), a tiny SFT recipe,
reading a run's weights and metrics."""

from __future__ import annotations

import json
import shutil
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


def closing_copy(data: Path, tmp: Path) -> Path:
    """A copy of smoke data (whose scenarios have no car closing in) where every third state has a car 20 m
    ahead closing at 10 m/s (2 s away) and every third but one a car 45 m ahead at 10 m/s (4.5 s)."""
    import zarr

    from agents.vla.perception import PERCEPTION_TARGETS

    copy = tmp / "closing.zarr"
    shutil.copytree(data, copy)
    perception = zarr.open_array(str(copy / "perception"), mode="r+")
    values = perception[:]
    gap, closing = PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")
    values[::3, gap], values[::3, closing] = 20.0 / 60.0, 1.0
    values[1::3, gap], values[1::3, closing] = 45.0 / 60.0, 1.0
    perception[:] = values
    return copy
