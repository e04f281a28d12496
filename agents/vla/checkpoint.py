"""Opening a saved VLA folder without trusting it: every file is checked when it is read, and every
failure names the file and the reason (``CheckpointError``), never a partial load.

A folder holds ``vla_config.json`` (the VLA's and the action expert's configuration: no unknown
fields, sane values, data statistics of the right lengths), ``tokenizer/`` (with every special token
the VLA writes), ``backbone/`` (a transformers model folder: every weight present, of the right
shape) and ``action_expert.safetensors`` (every weight present, of the right shape, finite).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from safetensors import SafetensorError
from safetensors.torch import load_file

from agents.vla.config import VLAConfig
from agents.vla.flow import ExpertConfig


class CheckpointError(ValueError):
    """A saved model that cannot be used as it is; the message names the file and the reason."""


def read_config(path: Path, state_features: int) -> tuple[VLAConfig, ExpertConfig]:
    """``vla_config.json``: the VLA's configuration and its expert's, validated."""
    file = path / "vla_config.json"
    if not file.is_file():
        raise CheckpointError(f"{path} is not a saved VLA (no vla_config.json)")
    try:
        raw = json.loads(file.read_text())
        vla, expert = raw["vla"], raw["expert"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{file}: not a VLA config ({type(e).__name__}: {e})") from None
    try:
        config = VLAConfig.model_validate(vla)
    except ValidationError as e:
        problems = "; ".join(f"vla.{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise CheckpointError(f"{file}: {problems}") from None
    expert_config = _expert_config(expert, file)
    for name, stats, size in (
        ("action", (config.action_mean, config.action_std), 2),
        ("state", (config.state_mean, config.state_std), state_features),
    ):
        mean, std = stats
        if (mean is None) != (std is None):
            raise CheckpointError(f"{file}: vla.{name}_mean and vla.{name}_std come together")
        if mean is None:
            continue
        if len(mean) != size or len(std) != size:
            raise CheckpointError(
                f"{file}: vla.{name}_mean / _std must have {size} values, got {len(mean)} / {len(std)}"
            )
        if not all(math.isfinite(m) for m in mean) or not all(math.isfinite(s) and s > 0 for s in std):
            raise CheckpointError(f"{file}: vla.{name}_std must be finite and positive, and the means finite")
    return config, expert_config


def _expert_config(raw: Any, file: Path) -> ExpertConfig:
    if not isinstance(raw, dict):
        raise CheckpointError(f"{file}: expert: not a mapping")
    known = {f.name: f for f in dataclasses.fields(ExpertConfig)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise CheckpointError(f"{file}: expert: unknown fields {unknown}")
    for key, value in raw.items():
        kind = bool if known[key].type in ("bool", bool) else int
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
            raise CheckpointError(f"{file}: expert.{key}: {value!r} is not a valid {kind.__name__}")
    try:
        return ExpertConfig(**raw)
    except ValueError as e:
        raise CheckpointError(f"{file}: expert: {e}") from None


def check_tokenizer(tokenizer: Any, folder: Path, special: list[str]) -> None:
    """Every special token the VLA writes must be one token of its own (not split into bytes)."""
    vocab = tokenizer.get_vocab()
    encoded = tokenizer(special, add_special_tokens=False)["input_ids"]
    missing = [t for t, ids in zip(special, encoded, strict=True) if t not in vocab or ids != [vocab[t]]]
    if missing:
        raise CheckpointError(
            f"{folder}: the tokenizer lacks {len(missing)} of the VLA's special tokens, e.g. {missing[:3]}"
        )


def load_weights(file: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; a missing, truncated or damaged file is a ``CheckpointError``."""
    if not file.is_file():
        raise CheckpointError(f"{file}: missing")
    try:
        return load_file(file)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{file}: not a readable safetensors file ({e})") from None


def load_strict(module: torch.nn.Module, weights: dict[str, torch.Tensor], file: Path) -> None:
    """Every weight of ``module`` from ``weights``: none missing, none extra, every shape right, finite."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    wrong = [k for k in expected if k in weights and tuple(weights[k].shape) != tuple(expected[k].shape)]
    if missing or extra or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        if extra:
            parts.append(f"unexpected {extra[:3]}{' ...' if len(extra) > 3 else ''}")
        for k in wrong[:3]:
            parts.append(f"{k} has shape {tuple(weights[k].shape)}, the model {tuple(expected[k].shape)}")
        raise CheckpointError(f"{file}: {'; '.join(parts)}")
    check_finite(weights, file)
    module.load_state_dict(weights)


def check_finite(weights: dict[str, torch.Tensor], file: Path) -> None:
    bad = [k for k, v in weights.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"{file}: non-finite values in {bad[:3]}")
