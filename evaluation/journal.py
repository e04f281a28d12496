"""The run's journal: ``episodes.jsonl``, one JSON object per finished episode.

Each record is written with one ``write`` of a whole line, flushed and fsynced, so a kill -9 loses at
most the episode in flight; a torn last line (a kill during the write) is cut off on the next open.
Rerunning the same command reads the journal and runs only the missing episodes.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from evaluation.episode import SCORED, STATUSES, json_safe


class JournalError(ValueError):
    """A journal line that is not an episode record; the message names ``file:line``."""


class Journal:
    """The records of ``episodes.jsonl`` by episode key, checked as they are read (``JournalError``
    naming ``file:line`` for a bad one); ``append`` writes one more, durably."""

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
            except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not UTF-8
                why = getattr(e, "msg", None) or str(e)
                raise JournalError(f"{self.path}:{lineno}: not a JSON record ({why}); fix or move the file") from None
            problem = record_problem(rec)
            if problem:
                raise JournalError(f"{self.path}:{lineno}: {problem}; fix or move the file")
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


def record_problem(rec: Any) -> str | None:
    """What makes ``rec`` not an episode record (None when it is one): a string key, a known status,
    and for a scored status the score and the suites it is scored on, as finite numbers."""
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
        return "record without a string 'key'"
    if rec.get("status") not in STATUSES:
        return f"status {rec.get('status')!r} is not one of {list(STATUSES)}"
    if rec["status"] not in SCORED or (rec["status"] == "timeout" and "suites" not in rec):
        return None  # (a time-out whose worker was killed carries no metrics: it scores zero)
    if not _finite(rec.get("score")):
        return f"a {rec['status']} record needs a numeric 'score', got {rec.get('score')!r}"
    suites = rec.get("suites")
    if not isinstance(suites, dict) or "leaderboard" not in suites:
        return f"a {rec['status']} record needs its 'suites' (the leaderboard's at least)"
    for name, suite in suites.items():
        if not isinstance(suite, dict) or (name != "extra" and not _finite(suite.get("score"))):
            return f"suites.{name} has no numeric 'score'"
    return None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """All records of a run folder's (or file's) journal."""
    p = Path(path)
    if p.is_dir():
        p = p / "episodes.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"{p}: no episodes journal (is this an evaluation run folder?)")
    return list(Journal(p).records.values())
