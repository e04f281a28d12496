"""The run's journal: ``episodes.jsonl``, one JSON object per finished episode.

Each record is written with one ``write`` of a whole line, flushed and fsynced, so a kill -9 loses at
most the episode in flight; a torn last line (a kill during the write) is cut off on the next open.
Rerunning the same command reads the journal and runs only the missing episodes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from evaluation.episode import json_safe


class JournalError(ValueError):
    pass


class Journal:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        good = 0  # byte offset after the last complete line
        for lineno, line in enumerate(raw.splitlines(keepends=True), 1):
            if not line.endswith(b"\n"):
                break  # torn write at the end: dropped below
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise JournalError(f"{self.path}:{lineno}: not a JSON record ({e.msg}); fix or move the file") from None
            if not isinstance(rec, dict) or "key" not in rec:
                raise JournalError(f"{self.path}:{lineno}: record without a 'key'")
            self.records[rec["key"]] = rec  # a retried episode's later record wins
            good += len(line)
        if good < len(raw):
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(json_safe(record), separators=(",", ":"), allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.records[record["key"]] = json.loads(line)  # exactly what a resumed run will read back


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """All records of a run folder's (or file's) journal."""
    p = Path(path)
    if p.is_dir():
        p = p / "episodes.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"{p}: no episodes journal (is this an evaluation run folder?)")
    return list(Journal(p).records.values())
