"""Reading collected driving data: ``DrivingDataset`` (the complete samples, in memory, as the env
gave them), the dataset card, and the zarr layout both sides agree on (``FORMAT``, the arrays)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
import zarr

from agents.vla import action_space
from agents.vla.manoeuvre import ManoeuvreFrame
from training.data.labels import manoeuvre_class, manoeuvre_classes

if TYPE_CHECKING:
    from agents.vla.config import VLAConfig

# 3: the cameras show cars' brake lights (2: the target's yaw is the direction of motion)
FORMAT = "loopdrive-driving-data/3"
_OLDER_FORMATS = {
    "loopdrive-driving-data/2": "its cameras show no brake lights",
    "loopdrive-driving-data/1": "its targets' yaw is the car's heading, and its cameras show no brake lights",
}
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
# The driving agent's own plan at each decision (its trajectory, as ``target``): what DAgger compares
# with the expert's label. Recorded since 2026-11-27; a dataset collected before has no such array.
# ``perception``: the privileged world's ``agents.vla.perception.PERCEPTION_TARGETS`` at the decision,
# what the perception probe learns (recorded since 2026-11-27, stop 59).
OPTIONAL_NUMERIC = {"plan": "float32", "perception": "float32"}
TEXT = ("scenario", "reasoning", "agent_reasoning", "meta_actions", "causes")
EVERY_CHUNK_STORED = "every_chunk_stored"  # an array attribute: its writer stored all-zero chunks too


class DatasetError(ValueError):
    pass


def check_format(path: Path, found: str | None) -> None:
    """Refuse a zarr group that is not this version's driving data, saying why an older one is not."""
    if found == FORMAT:
        return
    if found in _OLDER_FORMATS:
        raise DatasetError(
            f"{path}: collected by an earlier LoopDrive (format {found!r}: {_OLDER_FORMATS[found]}); "
            "collect it again into a new path (or delete this one)"
        )
    raise DatasetError(f"{path}: not a LoopDrive driving dataset (format {found!r})")


class SampleBatch(NamedTuple):
    """Samples as a trainer reads them."""

    observations: list[dict[str, Any]]  # as the env gave them
    reasoning: list[str]  # the teacher's
    targets: np.ndarray  # [B, 64, 3]: the future the car drove (or the expert's, for DAgger data)
    perception: np.ndarray | None  # [B, len(PERCEPTION_TARGETS)]; None for data recorded without it
    manoeuvres: np.ndarray  # [B] int64: each target's index in agents.vla.manoeuvre.MANOEUVRES
    actions: np.ndarray | None = None  # [B, 64, 2]: the targets as a VLA's flow head learns them, when asked for

    @staticmethod
    def concatenate(batches: Sequence[SampleBatch]) -> SampleBatch:
        """One batch of several (their perception, and their target actions, only if every one has them)."""
        perception, actions = [b.perception for b in batches], [b.actions for b in batches]
        return SampleBatch(
            [o for b in batches for o in b.observations],
            [r for b in batches for r in b.reasoning],
            np.concatenate([b.targets for b in batches]),
            None if any(p is None for p in perception) else np.concatenate(perception),
            np.concatenate([b.manoeuvres for b in batches]),
            None if any(a is None for a in actions) else np.concatenate(actions),
        )

    def manoeuvre_classes(
        self, by_s: float | None, frame: ManoeuvreFrame = "ego", stop: bool = False, stop_by_s: float | None = None
    ) -> np.ndarray:
        """The manoeuvre classes as a head trained with ``manoeuvre_by_s = by_s``, ``manoeuvre_frame = frame``,
        ``manoeuvre_stop = stop`` and ``manoeuvre_stop_by_s = stop_by_s`` knows them
        (``training.data.labels.manoeuvre_classes``)."""
        routes = np.stack([o["route"] for o in self.observations]) if frame == "route" else None
        return manoeuvre_classes(self.manoeuvres, self.targets, by_s, frame, routes, stop, stop_by_s)

    def manoeuvre_classes_for(self, config: VLAConfig) -> np.ndarray:
        """:meth:`manoeuvre_classes` as the VLA of ``config`` was trained to read them (SFT, RL's anchor)."""
        return self.manoeuvre_classes(
            config.manoeuvre_by_s, config.manoeuvre_frame, config.manoeuvre_stop, config.manoeuvre_stop_by_s
        )


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
        "frame_every": cfg.get("frame_every", 1),
        "decision_every": cfg["decision_every"],
        "source": {
            "bank": cfg["bank"],
            "split": cfg["split"],
            "agent": cfg["agent"],
            "target": cfg.get("target", "executed"),
            "seeds": cfg["seeds"],
            "perturb_fraction": cfg["perturb_fraction"],
            "run_out": cfg.get("run_out", False),
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
    ``max_gb`` guards against loading something that will not).

    Opening checks the folder before anything trains on it: every array present with its dtype,
    at least as long as the recorded complete samples, no chunk of those samples missing (zarr
    would read a deleted chunk as zeros: black frames, empty text), every chunk decoding, and
    finite numbers. Each failure is a ``DatasetError`` naming the array and the reason.
    """

    def __init__(self, path: str | Path, max_gb: float = 8.0) -> None:
        path = Path(path)
        try:
            g = zarr.open_group(path, mode="r")
        except (FileNotFoundError, zarr.errors.GroupNotFoundError):
            raise DatasetError(f"{path}: no dataset here (run `loopdrive collect` first)") from None
        except (ValueError, TypeError, KeyError) as e:  # a damaged zarr.json (JSONDecodeError is a ValueError)
            raise DatasetError(f"{path / 'zarr.json'}: not readable ({type(e).__name__}: {e})") from None
        check_format(path, g.attrs.get("format"))
        self.path = path
        self.n = int(g.attrs.get("n_complete", 0))
        if self.n == 0:
            raise DatasetError(f"{path}: the dataset has no complete samples")
        numeric = [*NUMERIC, *(k for k in OPTIONAL_NUMERIC if k in g)]
        for name in (*numeric, *TEXT):
            _check_array(g, path, name, self.n)
        size = sum(np.dtype(g[k].dtype).itemsize * int(np.prod(g[k].shape[1:])) for k in numeric) * self.n / 1e9
        if size > max_gb:
            raise DatasetError(f"{path}: {size:.1f} GB does not fit the in-memory loader (max_gb={max_gb})")
        self.arrays = {k: _read(g, path, k, self.n) for k in numeric}
        self.text = {k: [str(x) for x in _read(g, path, k, self.n)] for k in TEXT}
        self.manoeuvres = _manoeuvres(self.text["meta_actions"], path)
        for name, values in self.arrays.items():
            if values.dtype.kind != "f":
                continue
            finite = np.isfinite(values)
            if name == "plan":  # a closer lead's sample has no plan: its row is all NaN (collect's closer_lead)
                finite |= np.isnan(values).all(axis=tuple(range(1, values.ndim)), keepdims=True)
            if not finite.all():
                raise DatasetError(f"{path / name}: non-finite values in the complete samples")
        try:
            self.card = dataset_card(path)
        except (KeyError, TypeError) as e:
            raise DatasetError(f"{path / 'zarr.json'}: the dataset's attributes lack {e}") from None
        self._actions: dict[str, np.ndarray] = {}  # target_actions' fits, by lateral action

    def __len__(self) -> int:
        return self.n

    def families(self) -> np.ndarray:
        """Each sample's scenario family, from the bank the data was collected on (its card's source); a
        scenario that bank lacks is a ``DatasetError`` naming the sample."""
        bank = self.card["source"]["bank"]
        family_of = scenario_families(bank)
        for i, scenario in enumerate(self.text["scenario"]):
            if scenario not in family_of:
                raise DatasetError(
                    f"{self.path / 'scenario'}: sample {i}'s scenario {scenario!r} is not in bank {bank!r}"
                )
        return np.array([family_of[scenario] for scenario in self.text["scenario"]])

    @functools.cached_property
    def initial_speeds(self) -> np.ndarray:
        """Each sample's speed at its decision ``[N]`` (float32), as a VLA reads it from the ego history
        (:func:`agents.vla.action_space.initial_speed`): where its targets' and plans' actions start."""
        return action_space.initial_speed(torch.from_numpy(self.arrays["ego_history"])).numpy()

    def target_actions(self, lateral: action_space.LateralAction, chunk: int = 512) -> np.ndarray:
        """Every sample's target as a VLA's flow head learns it: (accel, ``lateral``) actions ``[N, 64, 2]``.

        Fitted once per dataset (:func:`agents.vla.action_space.from_trajectory`, ``chunk`` samples at a
        time): the fit is a least-squares solve and up to 100 gradient steps per sample, and refitting
        each training batch's took a fifth of an SFT step."""
        if lateral not in self._actions:
            targets = torch.from_numpy(self.arrays["target"])
            speeds = torch.from_numpy(self.initial_speeds)
            fits = [
                action_space.from_trajectory(targets[i : i + chunk], speeds[i : i + chunk], lateral=lateral)
                for i in range(0, self.n, chunk)
            ]
            self._actions[lateral] = torch.cat(fits).numpy()
        return self._actions[lateral]

    def batch(self, idx: Sequence[int], lateral: action_space.LateralAction | None = None) -> SampleBatch:
        """The samples ``idx`` (with their target actions for that ``lateral`` action, if one is given)."""
        idx = np.asarray(idx, int)
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
        perception = self.arrays["perception"][idx] if "perception" in self.arrays else None
        reasoning = [self.text["reasoning"][i] for i in idx]
        actions = None if lateral is None else self.target_actions(lateral)[idx]
        return SampleBatch(obs, reasoning, self.arrays["target"][idx], perception, self.manoeuvres[idx], actions)


@functools.cache
def scenario_families(bank_name: str) -> dict[str, str]:
    """Scenario id -> family for a bank, read once per process: the DAgger rounds' samplers ask again
    for every round's data each time a round is added."""
    from scenarios.banks import load_bank

    return {s.id: s.family for s in load_bank(bank_name).scenarios}


def _manoeuvres(meta_actions: Sequence[str], path: Path) -> np.ndarray:
    """Each sample's manoeuvre class from its recorded meta-actions (a JSON list per sample)."""
    out = np.empty(len(meta_actions), np.int64)
    for i, text in enumerate(meta_actions):
        try:
            labels = json.loads(text)
        except json.JSONDecodeError:
            labels = None
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise DatasetError(f"{path / 'meta_actions'}: sample {i} is not a JSON list of meta-actions: {text[:80]!r}")
        out[i] = manoeuvre_class(labels)
    return out


def _check_array(g: zarr.Group, path: Path, name: str, n: int) -> None:
    """Present, of its dtype, ``n`` samples long at least, and every chunk of them on disk."""
    if not (path / name / "zarr.json").is_file():
        raise DatasetError(f"{path / name}: missing array")
    try:
        arr = g[name]
    except (ValueError, TypeError, KeyError) as e:
        raise DatasetError(f"{path / name / 'zarr.json'}: not readable ({type(e).__name__}: {e})") from None
    expected = (NUMERIC | OPTIONAL_NUMERIC).get(name)
    if expected is not None and arr.dtype != np.dtype(expected):
        raise DatasetError(f"{path / name}: dtype {arr.dtype}, expected {expected}")
    if arr.shape[0] < n:
        raise DatasetError(f"{path / name}: {arr.shape[0]} samples, but the dataset records {n} complete ones")
    if not arr.attrs.get(EVERY_CHUNK_STORED):  # written before chunks were all stored: none to check
        return
    rows = -(-n // arr.chunks[0])  # the chunks that hold the first n samples (a kill can leave later ones unwritten)
    if arr.nchunks_initialized == arr.nchunks:  # every chunk there (one directory listing)
        return
    encode = arr.metadata.chunk_key_encoding.encode_chunk_key
    for coord in np.ndindex(rows, *arr.cdata_shape[1:]):
        if not (path / name / encode(coord)).is_file():
            first = coord[0] * arr.chunks[0]
            raise DatasetError(
                f"{path / name / encode(coord)}: missing chunk (samples {first}-{first + arr.chunks[0] - 1}); "
                "a deleted chunk would read as zeros"
            )


def _read(g: zarr.Group, path: Path, name: str, n: int) -> np.ndarray:
    try:
        return np.asarray(g[name][:n])
    except Exception as e:  # codecs raise their own types for a damaged chunk
        raise DatasetError(f"{path / name}: a chunk does not decode ({type(e).__name__}: {e})") from None
