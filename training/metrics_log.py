"""Training metrics: ``RUN/metrics.jsonl`` (one object per logged step), TensorBoard, a PNG of curves."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


class MetricsLogger:
    def __init__(self, run_dir: str | Path, resume_step: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        if self.path.exists():  # after a resume, drop lines logged past the checkpoint (they are redone)
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
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
        """``RUN/curves.png``: every logged scalar (or ``keys``) against the step."""
        from matplotlib.figure import Figure

        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for line in self.path.read_text().splitlines() if self.path.exists() else []:
            rec: dict[str, Any] = json.loads(line)
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and (keys is None or k in keys):
                    series[k].append((rec["step"], v))
        names = sorted(series)
        cols = 3
        rows = max(1, -(-len(names) // cols))
        fig = Figure(figsize=(4 * cols, 2.6 * rows))
        for i, name in enumerate(names):
            ax = fig.add_subplot(rows, cols, i + 1)
            xs, ys = zip(*series[name])
            ax.plot(xs, ys, lw=1.2)
            ax.set_title(name, fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        out = self.run_dir / "curves.png"
        fig.savefig(out, dpi=90)
        return out


def progress_bar(desc: str, total: int, done: int = 0, unit: str = "step", show: bool | None = None):
    """A run's progress bar from ``done`` to ``total`` (``show=None``: only on a terminal)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc=desc, unit=unit, disable=None if show is None else not show)
