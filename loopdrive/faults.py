"""Damaged artefacts of every kind LoopDrive reads, and what its readers make of them.

Each ``FaultSet`` builds a good artefact (a saved VLA, a collected dataset, an evaluation journal, a
training metrics log), and each of its faults damages a copy of it the way a careless user, a full
disk or a kill would: files deleted, truncated, zeroed, not JSON, of the wrong shape, non-finite,
unknown fields, torn last lines. ``attempt`` opens the damaged copy with the set's reader and says
what happened:

- ``clean``: a refused artefact raised the reader's own error, naming the damaged path; a damage the
  reader should repair (a torn last line) opened with nothing lost;
- ``loaded``: damage that opened as if nothing were wrong (silently wrong results);
- ``crash``: any other exception (a traceback instead of a reason);
- ``hang``: no answer within the time limit.

The tests run every fault (``tests/loopdrive/test_faults.py``); ``benchmarks/fault_sweep.py`` prints the
counts of the whole sweep (with the scenario fuzz and kill -9 resumes) as JSON.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.loading import AgentSpecError
from evaluation.journal import JournalError
from training.data.dataset import DatasetError

OUTCOMES = ("clean", "loaded", "crash", "hang")


@dataclass(frozen=True)
class Fault:
    name: str
    damage: Callable[[Path], None]  # damages the artefact at this path (a copy of a good one)
    refused: bool = True  # False: harmless damage the reader must repair, losing nothing


@dataclass(frozen=True)
class FaultSet:
    """Faults of one kind of artefact, the good one they damage, and the reader that must refuse them."""

    artefact: str
    build: Callable[[Path], Path]  # writes a good artefact under the folder, returns its path
    open: Callable[[Path], Any]
    error: type[Exception]  # what the reader raises for a refused artefact
    intact: Callable[[Any], bool]  # a repaired artefact kept everything the good one had
    faults: tuple[Fault, ...]


@dataclass(frozen=True)
class Outcome:
    fault: str
    result: str  # one of OUTCOMES
    message: str = ""


class _Hang(BaseException):
    pass


def attempt(faults: FaultSet, fault: Fault, good: Path, work: Path, time_limit_s: float = 60.0) -> Outcome:
    """Damage a copy of ``good`` (at ``work``) with ``fault`` and open it with the set's reader."""
    if work.exists():
        shutil.rmtree(work) if work.is_dir() else work.unlink()
    (shutil.copytree if good.is_dir() else shutil.copy)(good, work)
    fault.damage(work)

    def hang(*_: Any) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, time_limit_s)
    try:
        opened = faults.open(work)
    except _Hang:
        return Outcome(fault.name, "hang", f"no answer in {time_limit_s:g} s")
    except faults.error as e:
        named = str(work) in str(e)
        ok = fault.refused and named
        return Outcome(fault.name, "clean" if ok else "crash", f"{type(e).__name__}: {e}"[:400])
    except Exception as e:
        return Outcome(fault.name, "crash", f"{type(e).__name__}: {e}"[:400])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fault.refused:
        return Outcome(fault.name, "loaded", "opened without an error")
    if not faults.intact(opened):
        return Outcome(fault.name, "crash", "opened, but lost part of what the good artefact held")
    return Outcome(fault.name, "clean", "repaired")


def sweep(faults: FaultSet, folder: Path) -> list[Outcome]:
    good = faults.build(folder / "good")
    return [attempt(faults, f, good, folder / "damaged") for f in faults.faults]


# --- damage, in general -----------------------------------------------------------------------------------------------
def _truncate(rel: str, fraction: float = 0.5) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        file = path / rel
        data = file.read_bytes()
        file.write_bytes(data[: int(len(data) * fraction)])

    return damage


def _zero_bytes(rel: str, at: float) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        file = path / rel
        data = bytearray(file.read_bytes())
        i = int(len(data) * at)
        data[i : i + 64] = bytes(len(data[i : i + 64]))
        file.write_bytes(bytes(data))

    return damage


def _write(rel: str, content: str) -> Callable[[Path], None]:
    return lambda path: (path / rel).write_text(content)


def _delete(rel: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        target = path / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return damage


def _empty(path: Path) -> None:
    for child in list(path.iterdir()):
        shutil.rmtree(child) if child.is_dir() else child.unlink()


def _edit_json(rel: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = json.loads((path / rel).read_text())
        edit(data)
        (path / rel).write_text(json.dumps(data))

    return damage


def _edit_tensors(rel: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(path / rel)
        edit(tensors)
        save_file(tensors, path / rel, metadata={"format": "pt"})

    return damage


# --- saved VLAs -------------------------------------------------------------------------------------------------------
def _build_vla(folder: Path) -> Path:
    import torch

    from agents.vla import VLA, VLAConfig

    torch.manual_seed(0)
    VLA(VLAConfig()).save_pretrained(folder)
    return folder


def _open_vla(path: Path) -> Any:
    from agents import load_agent

    return load_agent(f"vla:{path}")


def _nth(tensors: dict[str, Any], n: int = 0) -> str:
    return sorted(tensors)[n]


def _reshape(n: int) -> Callable[[dict[str, Any]], None]:
    def edit(t: dict[str, Any]) -> None:
        import torch

        t[_nth(t, n)] = torch.zeros(5, 7)

    return edit


def _nan(t: dict[str, Any]) -> None:
    k = _nth(t)
    t[k] = t[k].clone().fill_(float("nan"))


def _extra(t: dict[str, Any]) -> None:
    import torch

    t["bogus.weight"] = torch.zeros(2)


def _strip_cot_tokens(path: Path) -> None:
    _edit_json(
        "tokenizer/tokenizer.json",
        lambda j: j.update(added_tokens=[t for t in j["added_tokens"] if "cot" not in t["content"]]),
    )(path)
    _edit_json(
        "tokenizer/tokenizer_config.json",
        lambda c: c.update(extra_special_tokens=[t for t in c.get("extra_special_tokens", []) if "cot" not in t]),
    )(path)


_CONFIG = "vla_config.json"
_EXPERT = "action_expert.safetensors"
_BACKBONE = "backbone/model.safetensors"

CHECKPOINTS = FaultSet(
    artefact="saved VLA",
    build=lambda folder: _build_vla(folder),
    open=_open_vla,
    error=AgentSpecError,  # wrapping the CheckpointError
    intact=lambda _: True,
    faults=(
        Fault("vla_config.json missing", _delete(_CONFIG)),
        Fault("vla_config.json not JSON", _write(_CONFIG, "{not json")),
        Fault("vla_config.json a list", _write(_CONFIG, "[1, 2]")),
        Fault("unknown VLA field", _edit_json(_CONFIG, lambda c: c["vla"].update(colour="red"))),
        Fault("unknown expert field", _edit_json(_CONFIG, lambda c: c["expert"].update(colour="red"))),
        Fault("flow_steps = 0", _edit_json(_CONFIG, lambda c: c["vla"].update(flow_steps=0))),
        Fault("flow_steps a string", _edit_json(_CONFIG, lambda c: c["vla"].update(flow_steps="ten"))),
        Fault("1-long action_std", _edit_json(_CONFIG, lambda c: c["vla"].update(action_mean=[0.0], action_std=[1.0]))),
        Fault(
            "zero action_std",
            _edit_json(_CONFIG, lambda c: c["vla"].update(action_mean=[0.0, 0.0], action_std=[0.0, 1.0])),
        ),
        Fault(
            "state statistics of the wrong length",
            _edit_json(_CONFIG, lambda c: c["vla"].update(state_mean=[0.0] * 5, state_std=[1.0] * 5)),
        ),
        Fault("expert hidden size changed", _edit_json(_CONFIG, lambda c: c["expert"].update(hidden_size=96))),
        Fault("expert layers negative", _edit_json(_CONFIG, lambda c: c["expert"].update(layers=-1))),
        Fault("expert weights missing", _delete(_EXPERT)),
        Fault("expert weights truncated", _truncate(_EXPERT)),
        Fault("expert weights' header zeroed", _zero_bytes(_EXPERT, 0.0)),
        Fault("expert weight of the wrong shape", _edit_tensors(_EXPERT, _reshape(0))),
        Fault("expert weight missing", _edit_tensors(_EXPERT, lambda t: t.pop(_nth(t)))),
        Fault("extra expert weight", _edit_tensors(_EXPERT, _extra)),
        Fault("NaN expert weights", _edit_tensors(_EXPERT, _nan)),
        Fault("backbone folder missing", _delete("backbone")),
        Fault("backbone weights missing", _delete(_BACKBONE)),
        Fault("backbone weights truncated", _truncate(_BACKBONE)),
        Fault("backbone weight missing", _edit_tensors(_BACKBONE, lambda t: t.pop(_nth(t, 3)))),
        Fault("backbone weight of the wrong shape", _edit_tensors(_BACKBONE, _reshape(3))),
        Fault("NaN backbone weights", _edit_tensors(_BACKBONE, _nan)),
        Fault("backbone config not JSON", _write("backbone/config.json", "{")),
        Fault("tokenizer missing", _delete("tokenizer")),
        Fault("tokenizer not JSON", _write("tokenizer/tokenizer.json", "{")),
        Fault("tokenizer without the reasoning tokens", _strip_cot_tokens),
        Fault("empty folder", _empty),
    ),
)


# --- collected datasets -----------------------------------------------------------------------------------------------
def _build_dataset(folder: Path) -> Path:
    from training.data import CollectSettings, collect

    settings = CollectSettings(
        bank="smoke", split=None, scenarios=["lead_brake-000", "curve-000"], n_frames=1, chunk=16, perturb_fraction=0.5
    )
    collect(settings, folder.with_suffix(".zarr"), progress=False)
    return folder.with_suffix(".zarr")


def _open_dataset(path: Path) -> Any:
    from training.data import DrivingDataset

    return DrivingDataset(path)


def _chunk_files(path: Path, array: str) -> list[Path]:
    return sorted(f for f in (path / array / "c").rglob("*") if f.is_file())


def _delete_chunk(array: str) -> Callable[[Path], None]:
    return lambda path: _chunk_files(path, array)[1].unlink()


def _truncate_chunk(array: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        chunk = _chunk_files(path, array)[0]
        chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])

    return damage


def _with_array(array: str, edit: Callable[[Any], None]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        import zarr

        edit(zarr.open_group(path, mode="a")[array])

    return damage


DATASETS = FaultSet(
    artefact="collected dataset",
    build=_build_dataset,
    open=_open_dataset,
    error=DatasetError,
    intact=lambda _: True,
    faults=(
        Fault("camera chunk deleted", _delete_chunk("cameras")),
        Fault("reasoning chunk deleted", _delete_chunk("reasoning")),
        Fault("command chunk deleted (all zeros)", _delete_chunk("command")),
        Fault("camera chunk truncated", _truncate_chunk("cameras")),
        Fault("reasoning chunk truncated", _truncate_chunk("reasoning")),
        Fault("target array shorter than the samples", _with_array("target", lambda a: a.resize((10, *a.shape[1:])))),
        Fault("array deleted", _delete("command")),
        Fault("NaN target", _with_array("target", lambda a: a.__setitem__(0, np.nan))),
        Fault("group zarr.json not JSON", _write("zarr.json", "{")),
        Fault("array zarr.json not JSON", _write("target/zarr.json", "{")),
        Fault("empty folder", _empty),
    ),
)


# --- evaluation journals ----------------------------------------------------------------------------------------------
_GOOD_RECORDS = 3


def _build_journal(folder: Path) -> Path:
    from evaluation import EvalConfig, evaluate

    config = EvalConfig(
        bank="smoke", agent="expert", scenarios=["curve-000"], seeds=_GOOD_RECORDS, camera_size=(32, 64), n_frames=1
    )
    evaluate(config, folder, progress=False)
    return folder / "episodes.jsonl"


def _open_journal(path: Path) -> Any:
    from evaluation.journal import Journal

    return Journal(path)


def _edit_record(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        lines = path.read_text().splitlines()
        record = json.loads(lines[1])
        edit(record)
        lines[1] = json.dumps(record)
        path.write_text("\n".join(lines) + "\n")

    return damage


def _replace_line(content: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        lines = path.read_bytes().splitlines(keepends=True)
        lines[1] = content + b"\n"
        path.write_bytes(b"".join(lines))

    return damage


def _append(content: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with open(path, "ab") as f:
            f.write(content)

    return damage


JOURNALS = FaultSet(
    artefact="evaluation journal",
    build=_build_journal,
    open=_open_journal,
    error=JournalError,
    intact=lambda journal: len(journal.records) == _GOOD_RECORDS,
    faults=(
        Fault("torn last line", _append(b'{"key": "curve-000|9|alpa'), refused=False),
        Fault("a line not JSON", _replace_line(b"{not json")),
        Fault("a line not UTF-8", _replace_line(b'{"key": "\xff\xfe"}')),
        Fault("a record that is a list", _replace_line(b"[1, 2, 3]")),
        Fault("record without a key", _edit_record(lambda r: r.pop("key"))),
        Fault("key not a string", _edit_record(lambda r: r.update(key=7))),
        Fault("record without a status", _edit_record(lambda r: r.pop("status"))),
        Fault("unknown status", _edit_record(lambda r: r.update(status="great"))),
        Fault('"score": "abc"', _edit_record(lambda r: r.update(score="abc"))),
        Fault("NaN score", _replace_line(b'{"key": "k", "status": "ok", "score": NaN, "suites": {}}')),
        Fault("ok record without suites", _edit_record(lambda r: r.pop("suites"))),
        Fault("suite score not a number", _edit_record(lambda r: r["suites"]["leaderboard"].update(score=None))),
    ),
)


# --- training metrics logs --------------------------------------------------------------------------------------------
def _build_metrics(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 6)))
    return path


def _open_metrics(path: Path) -> Any:
    from training.metrics_log import MetricsLogger, read_metrics

    MetricsLogger(path.parent, resume_step=5).close()  # what --resume does
    return read_metrics(path)


METRICS_LOGS = FaultSet(
    artefact="training metrics log",
    build=_build_metrics,
    open=_open_metrics,
    error=ValueError,
    intact=lambda records: [r["step"] for r in records] == [1, 2, 3, 4, 5],
    faults=(
        Fault("torn last line", _append(b'{"step": 6, "lo'), refused=False),
        Fault("a line not JSON", _replace_line(b"{not json")),
        Fault("a line not UTF-8", _replace_line(b'{"step": 2, "x": "\xff"}')),
        Fault("a step that is not an integer", _replace_line(b'{"step": "two"}')),
    ),
)

FAULT_SETS = (CHECKPOINTS, DATASETS, JOURNALS, METRICS_LOGS)
