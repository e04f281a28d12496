"""A real two-node Ray cluster on loopback (``ray start --head`` + ``ray start --address``): a distributed
evaluation and a short GRPO run across both nodes give the same results as without the cluster.

Every run is a subprocess, so this test process never joins a Ray cluster itself; the two nodes are
``ray start --block`` processes, stopped by terminating them (``ray stop`` would stop every Ray
instance on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
ENV = os.environ | {"RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}

pytestmark = [pytest.mark.ray, pytest.mark.skipif(not RAY.exists(), reason="the ray command line is not installed")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nodes(address: str) -> int:
    out = subprocess.run([str(RAY), "status", f"--address={address}"], capture_output=True, text=True, env=ENV)
    if out.returncode != 0:
        return 0
    active = out.stdout.split("Active:")[-1].split("Pending:")[0]
    return sum(1 for line in active.splitlines() if "node_" in line)


@pytest.fixture(scope="module")
def cluster():
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # a short folder: Ray's sockets live under it, and an AF_UNIX path has at most 107 bytes (under pytest's
    # per-worker tmp folder the plasma store's path passed that once the session's process id had 5 digits)
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    common = ["--num-cpus=1", "--disable-usage-stats", "--block"]
    procs = [
        subprocess.Popen(
            [str(RAY), "start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *common],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 90
        while _nodes(address) < 1:
            assert time.monotonic() < deadline, "the head node did not come up"
            time.sleep(1)
        procs.append(
            subprocess.Popen(
                [str(RAY), "start", f"--address={address}", *common],
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        while _nodes(address) < 2:
            assert time.monotonic() < deadline, "the second node did not join"
            time.sleep(1)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(temp, ignore_errors=True)


def _run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_distributed_eval_across_two_nodes_matches_in_process(cluster, tmp_path):
    scenarios = "curve-000,lead_brake-000,cut_in-000,straight-000"
    base = [sys.executable, "-m", "loopdrive.cli", *f"eval --bank smoke --agent expert --scenarios {scenarios}".split()]
    _run([*base, "--out", str(tmp_path / "local")])
    _run([*base, "--workers", "2", "--ray-address", cluster, "--out", str(tmp_path / "cluster")])
    local = json.loads((tmp_path / "local" / "summary.json").read_text())
    remote = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert remote["episodes"] == local["episodes"] and remote["episodes"]["total"] == 4
    assert remote["suites"] == local["suites"] and remote["success_rate"] == local["success_rate"]


def test_grpo_across_two_nodes_matches_a_single_machine_run(cluster, tmp_path):
    from agents.vla.model import VLA, VLAConfig

    VLA(VLAConfig(size="tiny", image_size=(56, 112))).save_pretrained(tmp_path / "vla")
    sets = [
        "--set",
        'algorithm="grpo"',
        "--set",
        f'init_from="{tmp_path / "vla"}"',
        "--set",
        "data.collect=false",
        "--set",
        "data.n_frames=1",
        "--set",
        'rl.bank="smoke"',
        "--set",
        'rl.split="all"',
        "--set",
        'rl.scenarios=["lead_brake-000"]',
        "--set",
        "rl.iterations=1",
        "--set",
        "rl.groups_per_iter=2",
        "--set",
        "rl.group_size=2",
        "--set",
        "rl.env_runners=2",
        "--set",
        "eval.final=false",
    ]
    recipe = tmp_path / "r.toml"
    recipe.write_text("seed = 5\n")
    cmd = [sys.executable, "training/run.py", "--config", str(recipe), *sets]
    _run([*cmd, "--run-dir", str(tmp_path / "local")])
    _run([*cmd, "--set", f'rl.ray_address="{cluster}"', "--run-dir", str(tmp_path / "cluster")])
    for run, nodes in (("local", 1), ("cluster", 2)):  # on the cluster, one env runner on each node
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert {r["env_runner_nodes"] for r in rows if "env_runner_nodes" in r} == {nodes}, run
    a = VLA.from_pretrained(tmp_path / "local" / "checkpoints" / "final")
    b = VLA.from_pretrained(tmp_path / "cluster" / "checkpoints" / "final")
    for (name, x), (_, y) in zip(a.expert.state_dict().items(), b.expert.state_dict().items()):
        assert torch.equal(x, y), name
