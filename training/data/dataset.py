"""Reading collected driving data: ``DrivingDataset`` (the complete samples, in memory, as the env
gave them), the dataset card, and the zarr layout both sides agree on (``FORMAT``, the arrays)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

FORMAT = "loopdrive-driving-data/2"  # 2: the target's yaw is the direction of motion
NUMERIC = {
    "cameras": "uint8",
    "ego_history": "float32",
    "ego_state": "float32",
    "route": "float32",
    "command": "int8",
    "target": "float32",
    "speed0": "float32",
    "episode": "int32",
    "t": "float32",
    "consistency": "float32",
    "perturbed": "bool",
}
TEXT = ("scenario", "reasoning", "agent_reasoning", "meta_actions", "causes")


class DatasetError(ValueError):
    pass


def card_path(dataset: str | Path) -> Path:
    """``data/x.zarr`` -> ``data/x.card.json`` (beside the zarr group, which holds only arrays)."""
    return Path(dataset).with_suffix(".card.json")


def dataset_card(path: str | Path) -> dict[str, Any]:
    g = zarr.open_group(Path(path), mode="r")
    n = int(g.attrs.get("n_complete", 0))
    cfg = g.attrs["config"]
    cons = np.asarray(g["consistency"][:n]) if "consistency" in g and n else np.zeros(0)
    return {
        "format": FORMAT,
        "path": str(path),
        "samples": n,
        "episodes_complete": len(g.attrs.get("episodes_complete", [])),
        "rig": cfg["rig"],
        "camera_size": cfg["camera_size"],
        "image_size": cfg["image_size"],
        "n_frames": cfg["n_frames"],
        "decision_every": cfg["decision_every"],
        "source": {
            "bank": cfg["bank"],
            "split": cfg["split"],
            "agent": cfg["agent"],
            "seeds": cfg["seeds"],
            "perturb_fraction": cfg["perturb_fraction"],
        },
        "labels": {
            "teacher": cfg["teacher"],
            "filter_threshold": cfg["filter_threshold"],
            "consistency_mean": float(cons.mean()) if len(cons) else None,
            **g.attrs.get("stats", {}),
        },
        "arrays": {name: {"shape": list(g[name].shape), "dtype": str(g[name].dtype)} for name in g.array_keys()},
    }


class DrivingDataset:
    """The complete samples of a collected dataset, held in memory (the tiny recipes fit easily;
    ``max_gb`` guards against loading something that will not)."""

    def __init__(self, path: str | Path, max_gb: float = 8.0) -> None:
        path = Path(path)
        try:
            g = zarr.open_group(path, mode="r")
        except (FileNotFoundError, zarr.errors.GroupNotFoundError):
            raise DatasetError(f"{path}: no dataset here (run `loopdrive collect` first)") from None
        if g.attrs.get("format") != FORMAT:
            raise DatasetError(f"{path}: not a LoopDrive driving dataset (format {g.attrs.get('format')!r})")
        self.n = int(g.attrs.get("n_complete", 0))
        if self.n == 0:
            raise DatasetError(f"{path}: the dataset has no complete samples")
        size = sum(np.dtype(g[k].dtype).itemsize * int(np.prod(g[k].shape[1:])) for k in NUMERIC) * self.n / 1e9
        if size > max_gb:
            raise DatasetError(f"{path}: {size:.1f} GB does not fit the in-memory loader (max_gb={max_gb})")
        self.arrays = {k: np.asarray(g[k][: self.n]) for k in NUMERIC}
        self.text = {k: [str(x) for x in g[k][: self.n]] for k in TEXT}
        self.card = dataset_card(path)

    def __len__(self) -> int:
        return self.n

    def batch(self, idx: Sequence[int]) -> tuple[list[dict[str, Any]], list[str], np.ndarray]:
        """Observations (as the env gives them), teacher reasoning, and targets ``[B, 64, 3]``."""
        idx = np.asarray(idx)
        obs = [
            {
                "cameras": self.arrays["cameras"][i],
                "ego_history": self.arrays["ego_history"][i],
                "ego_state": self.arrays["ego_state"][i],
                "route": self.arrays["route"][i],
                "command": int(self.arrays["command"][i]),
            }
            for i in idx
        ]
        return obs, [self.text["reasoning"][i] for i in idx], self.arrays["target"][idx]
