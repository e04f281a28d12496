"""Checkpoints: safetensors + JSON, written atomically, keep-last-K.

A checkpoint is a folder ``RUN/checkpoints/step_0000100`` holding the VLA exactly as
``save_pretrained`` writes it (so ``vla:`` loads any checkpoint), plus ``trainer.safetensors``
(optimizer moments, RNG states) and ``trainer_state.json`` (step, data position, optimizer
hyper-parameters). A run that averages its weights (``[train] ema_decay``) saves the average as the
model, the policy evaluations read, and the weights it trains as ``trained/*`` tensors in
``trainer.safetensors``, which a resume continues. A checkpoint is written into a hidden temporary
folder and renamed into place, then ``RUN/checkpoints/latest`` (one line naming it) is replaced
atomically: a kill at any moment leaves the previous checkpoint as the latest, never a half-written one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

LATEST = "latest"


class CheckpointError(RuntimeError):
    pass


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def clean_stale(run_dir: str | Path) -> None:
    """Remove temporary folders left by a save that was killed."""
    d = checkpoint_dir(run_dir)
    for p in d.glob(".tmp-*") if d.exists() else []:
        shutil.rmtree(p, ignore_errors=True)


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = optimizer.state_dict()
    tensors = {}
    for idx, st in sd["state"].items():
        for name, value in st.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"optim/{idx}/{name}"] = t.detach().cpu().contiguous()
    return tensors, {"param_groups": sd["param_groups"]}


def _optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, t in tensors.items():
        if key.startswith("optim/"):
            _, idx, name = key.split("/", 2)
            state.setdefault(int(idx), {})[name] = t
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: Any,
    optimizer: torch.optim.Optimizer | None,
    trainer_state: dict[str, Any],
    rng: dict[str, torch.Tensor],
    keep_last: int = 2,
    trained: dict[str, torch.Tensor] | None = None,
) -> Path:
    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:07d}"
    tmp = d / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Writing model shards" bar per checkpoint
    model.save_pretrained(tmp)
    tensors, meta = _optimizer_tensors(optimizer) if optimizer is not None else ({}, {})
    tensors |= {f"rng/{k}": v.contiguous() for k, v in rng.items()}
    # cloned: tied weights (the embedding and the LM head) share memory, which safetensors refuses
    tensors |= {f"trained/{k}": v.detach().cpu().clone().contiguous() for k, v in (trained or {}).items()}
    save_file(tensors, tmp / "trainer.safetensors")
    (tmp / "trainer_state.json").write_text(json.dumps(trainer_state | {"step": step, "optimizer": meta}, indent=1))
    final = d / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_atomic(d / LATEST, name + "\n")
    _prune(d, keep_last, keep=name)
    return final


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _prune(d: Path, keep_last: int, keep: str) -> None:
    steps = sorted(p for p in d.glob("step_*") if p.is_dir())
    for p in steps[:-keep_last]:
        if p.name != keep:
            shutil.rmtree(p, ignore_errors=True)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    d = checkpoint_dir(run_dir)
    pointer = d / LATEST
    if not pointer.exists():
        return None
    path = d / pointer.read_text().strip()
    if not (path / "trainer_state.json").exists():
        raise CheckpointError(f"{pointer} names {path.name}, which is missing or incomplete")
    return path


def load_trainer_state(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """(trainer state, optimizer state dict, RNG tensors) of a checkpoint folder."""
    path = Path(path)
    state = json.loads((path / "trainer_state.json").read_text())
    tensors = load_file(path / "trainer.safetensors")
    rng = {k[4:]: v for k, v in tensors.items() if k.startswith("rng/")}
    return state, _optimizer_state(tensors, state.pop("optimizer")), rng


def load_trained_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights a run trains, where its model folder holds their average (``ema_decay``)."""
    path = Path(path) / "trainer.safetensors"
    trained = {k[8:]: v for k, v in load_file(path).items() if k.startswith("trained/")}
    if not trained:
        raise CheckpointError(f"{path}: no trained/* weights (saved without train.ema_decay); resume without it")
    return trained


def restore_trainer(
    path: str | Path, optimizer: torch.optim.Optimizer, generators: dict[str, torch.Generator]
) -> dict[str, Any]:
    """Load a checkpoint's optimizer moments and RNG states into ``optimizer`` and ``generators`` (by the
    names they were saved under); returns the trainer state (step, data positions)."""
    state, optim_state, rng = load_trainer_state(path)
    optimizer.load_state_dict(optim_state)
    for name, generator in generators.items():
        generator.set_state(rng[name])
    return state


def publish_final(run_dir: str | Path, checkpoint: Path, name: str = "final") -> Path:
    """``RUN/checkpoints/final`` (or ``name``): a copy of ``checkpoint``, replaced atomically (loads as
    ``vla:RUN/checkpoints/final``)."""
    final = checkpoint_dir(run_dir) / name
    tmp = checkpoint_dir(run_dir) / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint, tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


class Checkpointer:
    """A trainer's checkpoints: ``save(step, model, optimizer, state, rng, trained)`` into ``run_dir``,
    keeping the last ``keep_last``."""

    def __init__(self, run_dir: str | Path, keep_last: int) -> None:
        self.run_dir, self.keep_last = Path(run_dir), keep_last

    def save(
        self,
        step: int,
        model: Any,
        optimizer: torch.optim.Optimizer | None,
        state: dict[str, Any],
        rng: dict[str, torch.Tensor],
        trained: dict[str, torch.Tensor] | None = None,
    ) -> Path:
        return save_checkpoint(self.run_dir, step, model, optimizer, state, rng, self.keep_last, trained)
