"""Training metrics: ``RUN/metrics.jsonl`` (one object per logged step), TensorBoard, a PNG of curves."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rewards import Ending


class MetricsLogger:
    def __init__(self, run_dir: str | Path, resume_step: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        if self.path.exists():  # after a resume, drop lines logged past the checkpoint (they are redone)
            kept = [rec for rec in read_metrics(self.path) if rec["step"] <= resume_step]
            self.path.write_text("".join(json.dumps(rec) + "\n" for rec in kept))
        try:
            from tensorboardX import SummaryWriter

            self.tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=resume_step + 1 if resume_step else None)
        except ImportError:  # pragma: no cover
            self.tb = None

    def log(self, step: int, values: dict[str, float]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **values}) + "\n")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()

    def plot(self, keys: list[str] | None = None) -> Path:
        """``RUN/curves.png``: every logged scalar (or ``keys``) against the step, a point where it was logged once.

        Fixed margins and four ticks an axis instead of ``tight_layout``: 31 panels took 7.6 s on a 2-core
        Xeon, now 3.2 (``benchmarks/curves_plot.py``), and every training run ends with one."""
        import matplotlib
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for rec in read_metrics(self.path) if self.path.exists() else []:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and (keys is None or k in keys):
                    series[k].append((rec["step"], v))
        names = sorted(series)
        cols = 3
        rows = max(1, -(-len(names) // cols))
        height = 2.6 * rows  # inches; the margins below are in inches too, whatever the rows
        with matplotlib.rc_context(_CURVE_STYLE):
            fig = Figure(figsize=(4 * cols, height))
            fig.subplots_adjust(0.06, 0.35 / height, 0.98, 1 - 0.3 / height, wspace=0.3, hspace=0.5)
            axes = fig.subplots(rows, cols, squeeze=False).ravel()
            for ax, name in zip(axes, names):
                xs, ys = zip(*series[name])
                ax.plot(xs, ys, marker="o" if len(xs) == 1 else None)
                ax.set_title(name)
                ax.xaxis.set_major_locator(MaxNLocator(4))
                ax.yaxis.set_major_locator(MaxNLocator(4))
            for ax in axes[len(names) :]:
                ax.remove()
            out = self.run_dir / "curves.png"
            fig.savefig(out, dpi=90)
        return out


_CURVE_STYLE = {
    "axes.titlesize": 9,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.2,
}


def ending_shares(endings: list[str]) -> dict[str, float]:
    """``episode/ending_<name>``: the share of these episodes (their metrics' ``ending``) that ended each
    way, every ending named (0 where none did), so a windowed mean over episodes is a share too."""
    return {f"episode/ending_{e.value}": endings.count(e.value) / len(endings) for e in Ending} if endings else {}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``. A torn last line (a kill mid-write) is dropped; any other
    unreadable line is a ``ValueError`` naming ``file:line``, so nothing is silently thrown away."""
    lines = path.read_bytes().split(b"\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise ValueError("no integer 'step'")
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            if number == len(lines):  # the last line, unterminated: torn by a kill
                break
            raise ValueError(f"{path}:{number}: not a metrics record ({e}); fix or move the file") from None
        records.append(rec)
    return records


def progress_bar(desc: str, total: int, done: int = 0, unit: str = "step", show: bool | None = None):
    """A run's progress bar from ``done`` to ``total`` (``show=None``: only on a terminal)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc=desc, unit=unit, disable=None if show is None else not show)
