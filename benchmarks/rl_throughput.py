"""RL throughput: closed-loop env steps/s on RLlib env runners, and GRPO policy updates/min.

    python benchmarks/rl_throughput.py [--vla PATH] [--runners 0,1,2] [--envs 1,4] [--flow-steps 10,5]
                                       [--episodes 8] [--out FILE]

For each env-runner count, each count of envs per runner (driven side by side, one batched module
call per decision) and each count of denoising steps (``rl.flow_steps``): a warm-up call, then
``--episodes`` Flow-SDE episodes of the tiny VLA on the smoke bank (the embedded world, 4 cameras,
one decision per 0.5 s) through the same ``RolloutWorkers`` GRPO uses; then one GRPO update over the
collected decisions (minibatches of 32, action expert trained, on CUDA when there is one). Prints
JSON (and writes it with ``--out``). An env step here is one agent decision (5 world steps of 0.1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> dict:
    import numpy as np
    import ray
    import torch

    from agents.vla.model import VLA, VLAConfig
    from benchmarks.machine import emit
    from training.recipes import recipe_from_dict
    from training.rl.grpo import samples_of, update
    from training.rl.losses import group_advantages
    from training.rl.rollouts import RolloutWorkers, Task
    from training.rl.setup import env_config

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vla", help="a saved VLA (default: a random tiny one)")
    p.add_argument("--runners", default="0,1,2")
    p.add_argument("--envs", default="1,4", help="envs per runner, driven side by side")
    p.add_argument("--flow-steps", default="10", help="denoising steps of the rollouts' Flow-SDE")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--out")
    args = p.parse_args(argv)

    tmp = tempfile.mkdtemp()
    path = Path(args.vla) if args.vla else Path(tmp) / "vla"
    if not args.vla:
        VLA(VLAConfig(size="tiny", image_size=(56, 112))).save_pretrained(path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    policy = VLA.from_pretrained(path).to(device).train()
    recipe = recipe_from_dict(
        {
            "algorithm": "grpo",
            "init_from": str(path),
            "data": {"collect": False, "n_frames": 1},
            "rl": {"bank": "smoke", "split": None, "minibatch": 32},
        }
    )
    params = policy.set_trainable("expert")
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False)
    scenarios = ["straight-000", "curve-000", "lead_brake-000", "cut_in-000"]
    results: list[dict] = []
    details: list[dict] = []
    settings = [
        (int(n), int(e), int(k))
        for n in args.runners.split(",")
        for e in args.envs.split(",")
        for k in args.flow_steps.split(",")
    ]
    for n, envs, flow_steps in settings:
        t0 = time.perf_counter()
        workers = RolloutWorkers(
            env_config(recipe, policy.config.image_size),
            {"path": str(path), "threads": 1 if n else None, "flow_steps": flow_steps},
            n,
            envs_per_runner=envs,
        )
        workers.run([Task(0, 0, "straight-000", 0)], None)  # warm-up: actors up, numba and weights loaded
        startup = time.perf_counter() - t0
        tasks = [Task(i, i // 2, scenarios[(i // 2) % len(scenarios)], i // 2) for i in range(args.episodes)]
        t0 = time.perf_counter()
        rollouts = workers.run(tasks, None)
        rollout_s = time.perf_counter() - t0
        workers.stop()
        steps = sum(r.env_steps for r in rollouts)
        scores = torch.tensor([r.score("driving_score") for r in rollouts])
        groups = torch.tensor([r.group for r in rollouts])
        batch = samples_of(rollouts, group_advantages(scores, groups))
        t0 = time.perf_counter()
        stats = update(policy, None, optimizer, params, batch, recipe, 0)
        update_s = time.perf_counter() - t0
        n_updates = int(np.ceil(len(batch["obs"]) / recipe.rl.minibatch))
        row = {
            "env_runners": n,
            "envs_per_runner": envs,
            "flow_steps": flow_steps,
            "episodes": len(rollouts),
            "env_steps": steps,
            "rollout_s": round(rollout_s, 2),
            "env_steps_per_s": round(steps / rollout_s, 1),
            "startup_s": round(startup, 1),
            "update_s": round(update_s, 2),
            "gradient_steps": n_updates,
            "policy_updates_per_min": round(60 * n_updates / update_s, 1),
            "update_samples_per_s": round(len(batch["obs"]) / update_s, 1),
            "clip_fraction": stats["clip_fraction"],
        }
        details.append(row)
        setting = f"runners={n},envs={envs},flow_steps={flow_steps}"
        results += [
            {"name": f"decisions_per_s[{setting}]", "value": row["env_steps_per_s"], "unit": "decisions/s"},
            {"name": f"policy_updates_per_min[{setting}]", "value": row["policy_updates_per_min"], "unit": "1/min"},
        ]
        print(json.dumps(row), file=sys.stderr)
    ray.shutdown()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "gpu": gpu}
    out = {
        "benchmark": "rl_throughput",
        "machine": machine | {"torch": torch.__version__},
        "policy": "tiny VLA (trajectory only, Flow-SDE; denoising steps per row)"
        + (f" from {args.vla}" if args.vla else ""),
        "env": "smoke bank, 4 cameras 128x256 -> 56x112, 1 frame, decision every 0.5 s",
        "results": results,
        "details": details,
    }
    return emit(out, args.out)


if __name__ == "__main__":
    main()
