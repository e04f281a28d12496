"""Hundreds of hostile and careless scenario files: each is either valid (and then it runs) or
refused with ``file: field: reason`` lines; never a crash, a hang or runaway memory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # a runaway allocation fails, not the machine


def test_fuzzed_scenario_files_give_clean_errors_or_run():
    out = subprocess.run(
        [sys.executable, "-m", "scenarios.fuzz", "--per-file", "25"],
        cwd="/",  # relative map paths must resolve against the scenario's folder, not here
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=_limit_memory,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["tried"] >= 400
    assert result["crashes"] == [], result["crashes"][:5]
    assert result["clean"] > 0 and result["valid"] == result["ran"] > 0
    assert result["slowest_load_s"] < 10
