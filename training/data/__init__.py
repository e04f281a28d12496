"""Driving data: record labelled rollouts (``collect``, resumable), read them back (``DrivingDataset``),
and the labels (meta-actions, teacher reasoning, the consistency filter).

Names are imported on first use: ``CollectSettings`` (pydantic only) must not pull in the simulator,
because the command line builds its flags from it at start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CollectSettings": "training.data.settings",
    "collect": "training.data.record",
    "future_in_ego_frame": "training.data.record",
    "DatasetError": "training.data.dataset",
    "DrivingDataset": "training.data.dataset",
    "SampleBatch": "training.data.dataset",
    "card_path": "training.data.dataset",
    "dataset_card": "training.data.dataset",
    "scenario_families": "training.data.dataset",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'training.data' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
