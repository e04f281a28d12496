"""Per-decision latency of the VLA, broken down: vision + prompt, reasoning generation, flow sampling.

    python benchmarks/agent_latency.py [--size tiny] [--device cpu|cuda] [--dtype float32|bfloat16]
                                       [--batches 1,8] [--image-size 56,112] [--reasoning-tokens 0]
                                       [--guidance 2,1]

Runs the default 4-camera x 4-frame observation (16 images) at batch 1 and 8, and 4 cameras x 1 frame
(4 images: what `configs/sft_tiny.toml` trains; results named `..._f1_...`). On CPU the process uses
one core (threads pinned to 1) unless --threads says otherwise. ``--batches`` sweeps the batch (the
RL rollouts batch one decision across a runner's envs: ``..._trajectory_only_decisions_per_s`` is that
batch's ceiling); ``--reasoning-tokens 0`` skips the reasoning stage; ``--guidance`` samples the flow
with context guidance (two passes of the action expert per step). Prints the benchmark JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json

import gymnasium as gym
import torch

from benchmarks.machine import machine_info, pin_to_one_core
from benchmarks.machine import timed as best_time


def timed(fn, device, repeats):
    out, seconds = best_time(fn, device, repeats)
    return out, seconds * 1000.0


def measure(model, observations, args, dtype) -> list[dict]:
    """Best-of-N times (ms) of each stage for one batch of observations."""
    from agents.vla.flow import sample_ode

    batch = len(observations)
    frames = observations[0]["cameras"].shape[1]
    data, t_prep = timed(lambda: model.prepare(observations), args.device, args.repeats)
    if dtype != torch.float32:
        data["pixel_values"] = data["pixel_values"].to(dtype)
    with torch.no_grad():
        (ctx, mask), t_encode = timed(lambda: model.encode(data), args.device, args.repeats)
        t_reason = 0.0
        if args.reasoning_tokens:
            _, t_reason = timed(
                lambda: model.reason(data, args.reasoning_tokens), args.device, max(2, args.repeats // 3)
            )
        steps = model.config.flow_steps
        _, t_flow = timed(
            lambda: sample_ode(
                model.expert,
                batch,
                ctx,
                mask,
                steps,
                device=args.device,
                dtype=dtype,
                state=model.planning_state(data),
                guidance=args.guidance,
            ),
            args.device,
            args.repeats,
        )
    pre = f"{args.size}_b{batch}" + ("" if frames == 4 else f"_f{frames}")
    trajectory_only = t_prep + t_encode + t_flow
    results = [
        {"name": f"{pre}_prepare_ms", "value": round(t_prep, 2), "unit": "ms"},
        {"name": f"{pre}_vision_prompt_ms", "value": round(t_prep + t_encode, 2), "unit": "ms"},
        {"name": f"{pre}_flow_sampling_ms", "value": round(t_flow, 2), "unit": "ms"},
        {"name": f"{pre}_decision_trajectory_only_ms", "value": round(trajectory_only, 2), "unit": "ms"},
        {
            "name": f"{pre}_trajectory_only_decisions_per_s",
            "value": round(1000.0 * batch / trajectory_only, 1),
            "unit": "decisions/s",
        },
    ]
    if args.reasoning_tokens:
        results += [
            {"name": f"{pre}_reasoning_ms", "value": round(t_prep + t_reason, 2), "unit": "ms"},
            {"name": f"{pre}_decision_with_reasoning_ms", "value": round(t_prep + t_reason + t_flow, 2), "unit": "ms"},
        ]
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="tiny", choices=["tiny", "small"])
    p.add_argument("--backbone", default="qwen2_5_vl", choices=["qwen2_5_vl", "qwen3_vl"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--reasoning-tokens", type=int, default=32)
    p.add_argument("--frames", default="4,1", help="frames per camera to measure, comma-separated")
    p.add_argument("--batches", default="1,8", help="batch sizes to measure, comma-separated")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: bfloat16 on CUDA, else float32")
    p.add_argument("--image-size", help="H,W the VLA resizes each camera to (default: the model's own)")
    p.add_argument("--guidance", help="context guidance's weight(s), e.g. 2 or 2,1 (default: none)")
    args = p.parse_args()
    args.guidance = tuple(float(w) for w in args.guidance.split(",")) if args.guidance else None
    pinned = None
    if args.device == "cpu" and args.threads == 1:
        pinned = pin_to_one_core()
    torch.set_num_threads(args.threads)
    import envs  # noqa: F401
    from agents.vla.model import VLA, VLAConfig

    dtype_name = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    sizes = {"image_size": tuple(int(v) for v in args.image_size.split(","))} if args.image_size else {}
    config = VLAConfig(
        backbone=args.backbone, size=args.size, max_reasoning_tokens=max(1, args.reasoning_tokens), **sizes
    )
    model = VLA(config)
    model = model.to(args.device, dtype).eval()
    results = []
    for frames in (int(f) for f in args.frames.split(",")):
        env = gym.make("LoopDrive-v0", scenario="signalized_intersection-000", n_frames=frames)
        obs, _ = env.reset(seed=0)
        for batch in (int(b) for b in args.batches.split(",")):
            results += measure(model, [obs] * batch, args, dtype)
    params = sum(p.numel() for p in model.parameters())
    print(
        json.dumps(
            {
                "benchmark": "agent_latency",
                "machine": machine_info() | {"pinned_core": pinned, "torch_threads": args.threads},
                "config": {
                    "size": args.size,
                    "backbone": args.backbone,
                    "device": args.device,
                    "dtype": str(dtype),
                    "parameters_m": round(params / 1e6, 2),
                    "cameras": 4,
                    "frames": args.frames,
                    "image_size": list(model.config.image_size),
                    "reasoning_tokens": args.reasoning_tokens,
                    "flow_steps": model.config.flow_steps,
                    "guidance": args.guidance,
                    "best_of": args.repeats,
                },
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
