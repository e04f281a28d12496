"""Cost of the world model: training images/s, one decision's imagined rig, and an env step on the
``worldmodel`` backend beside the embedded renderer.

    python benchmarks/world_model.py [--model RUN/checkpoints/final] [--threads 2] [--repeats 20]

Without ``--model`` a randomly initialised model of the tiny recipe's shape is timed (the cost does not
depend on the weights). Prints the benchmark JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import tempfile
import time

import numpy as np
import torch

from benchmarks.machine import machine_info


def best_ms(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a saved world model (default: the tiny recipe's shape, random weights)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    import gymnasium as gym

    import envs  # noqa: F401
    from envs.backends.world_model import WorldModel, WorldModelConfig

    tmp = tempfile.TemporaryDirectory()
    path = args.model
    if path is None:
        path = str(Path(tmp.name) / "wm")
        WorldModel(WorldModelConfig(channels=(32, 64, 128), patch=2, mask=True, flow_steps=2)).save_pretrained(path)
    model = WorldModel.from_pretrained(path)
    c = model.config
    rng = np.random.default_rng(0)

    # training: one optimiser step on 8 samples x the rig's cameras
    rows = 8 * c.cameras
    ctx = model.pixels(rng.integers(0, 256, (rows, c.context, c.frames, *c.image_size, 3), dtype=np.uint8))
    target = rng.integers(0, 256, (rows, c.frames, *c.image_size, 3), dtype=np.uint8)
    motion, camera = torch.randn(rows, c.motion_dim), torch.arange(rows) % c.cameras
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step() -> None:
        model.loss(ctx, target, motion, camera, relative=0.1).backward()  # as configs/world_model_tiny.toml
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    train_ms = best_ms(train_step, max(3, args.repeats // 4))
    model.eval()
    rig = slice(0, c.cameras)
    predict_ms = best_ms(lambda: model.predict(ctx[rig], motion[rig], camera[rig]), args.repeats)

    # env steps: the same scenario and plan, rendered vs imagined
    plan = np.zeros((64, 3), np.float32)
    plan[:, 0] = np.linspace(0.8, 51.2, 64)
    steps = {}
    for backend in ("embedded", "worldmodel"):
        env = gym.make(
            "LoopDrive-v0",
            bank="smoke",
            scenario="curve-000",
            rig=c.rig,
            n_frames=c.frames,
            decision_every=c.decision_every,
            backend=backend,
            world_model=path if backend == "worldmodel" else None,
        ).unwrapped
        env.reset(seed=0)

        def step(env=env) -> None:
            *_, term, trunc, _ = env.step(plan)
            if term or trunc:
                env.reset(seed=0)

        steps[backend] = best_ms(step, args.repeats)
    result = {
        "benchmark": "world_model",
        "machine": machine_info() | {"torch_threads": args.threads},
        "config": {"params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 3), **c.to_dict()},
        "results": [
            {"name": "train_step_8_samples", "value": round(train_ms, 1), "unit": "ms"},
            {"name": "train_images_per_s", "value": round(rows / train_ms * 1000, 1), "unit": "images/s"},
            {"name": "imagine_rig", "value": round(predict_ms, 1), "unit": "ms"},
            *({"name": f"env_step_{k}", "value": round(v, 1), "unit": "ms"} for k, v in steps.items()),
        ],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
