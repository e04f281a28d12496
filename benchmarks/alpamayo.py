"""An Alpamayo-R1 checkpoint in the release's layout: load time, inference latency and one training step.

    python benchmarks/alpamayo.py [--size tiny|1b] [--device cpu|cuda] [--dtype float32|bfloat16]
                                  [--reasoning-tokens 32] [--repeats 3] [--out FILE]

``tiny`` is the reference fixture (tests/data/alpamayo_r1_reference). ``1b`` writes a release-shaped folder
with random weights at a realistic size (a Qwen3-VL backbone of ~0.8B and an expert of ~0.3B: 1.1B
parameters, the released 10.5B's architecture narrowed) and the release's pixel budget, so 16 camera
images of 320 x 576 make a prompt of about 3,000 tokens. Each decision: the processor, reasoning
generation of ``--reasoning-tokens`` (trajectory tokens masked), then 10 Euler steps of the expert.
The training step: SFT of the trajectory head (flow matching, the release's time sampler; VLM frozen)
with AdamW, batch 1. Prints the benchmark JSON (best of ``--repeats``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import resource
import shutil
import tempfile
import time

import numpy as np
import torch

from benchmarks.machine import emit, machine_info, timed

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "alpamayo_r1_reference"

# the 1B preset: Qwen3-VL-8B's proportions narrowed (head_dim 128 and 8 kv heads as the release's)
TEXT_1B = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
}
VISION_1B = {
    "depth": 12,
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_heads": 12,
    "out_hidden_size": 2048,
    "deepstack_visual_indexes": [3, 7, 11],
    "num_position_embeddings": 2304,
}
EXPERT_1B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 8,
    "head_dim": 128,
    "num_key_value_heads": 8,
}


def release_folder(size: str, root: Path) -> Path:
    """A checkpoint folder in the release's layout for ``size``; returns its ``checkpoint/``."""
    if size == "tiny":
        return FIXTURE / "checkpoint"
    from agents.alpamayo.model import AlpamayoR1

    shutil.copytree(FIXTURE / "base_vlm", root / "base_vlm")
    base = json.loads((root / "base_vlm" / "config.json").read_text())
    base["text_config"] |= TEXT_1B
    base["text_config"]["rope_parameters"]["mrope_section"] = [24, 20, 20]
    base["vision_config"] |= VISION_1B
    (root / "base_vlm" / "config.json").write_text(json.dumps(base))
    config = json.loads((FIXTURE / "checkpoint" / "config.json").read_text())
    config["expert_cfg"] = EXPERT_1B
    config["min_pixels"], config["max_pixels"] = 163840, 196608  # the release's: 1080 x 1920 -> 320 x 576
    (root / "checkpoint").mkdir()
    (root / "checkpoint" / "config.json").write_text(json.dumps(config))
    from agents.alpamayo.config import read_release_config

    cfg, raw = read_release_config(root / "checkpoint" / "config.json")
    torch.manual_seed(0)
    AlpamayoR1(cfg, raw, root / "base_vlm").save_pretrained(root / "checkpoint")
    return root / "checkpoint"


def observation(h: int, w: int, rng: np.random.Generator) -> dict:
    history = np.zeros((16, 4), np.float32)
    history[:, 0] = np.arange(-15, 1) * 0.8  # 8 m/s straight
    history[:, 3] = 8.0
    return {"cameras": rng.integers(0, 255, (4, 4, h, w, 3), dtype=np.uint8), "ego_history": history}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["tiny", "1b"], default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    ap.add_argument("--reasoning-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device == "cuda" else "float32"))
    from agents.alpamayo.model import AlpamayoR1

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        folder = release_folder(args.size, Path(tmp))
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = AlpamayoR1.from_pretrained(folder, device=args.device)
        load_s = time.perf_counter() - t0
    model.in_dtype(dtype)
    model.max_reasoning_tokens = args.reasoning_tokens
    n_params = sum(p.numel() for p in model.parameters())
    n_expert = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("vlm."))
    h, w = model.camera_size
    obs = [observation(h, w, np.random.default_rng(0))]
    batch = model.prepare(obs)
    prompt_tokens = int(batch["input_ids"].shape[1])
    gen = torch.Generator(device=args.device).manual_seed(0)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def decide():
        return model.act_batch(obs, True, gen, 1.0, 0.6)

    decide()  # warm-up
    _, decision_s = timed(decide, args.device, args.repeats)
    with torch.no_grad():
        prefix = model.empty_reasoning(batch)
        x0 = torch.randn(1, 64, 2, device=args.device)
        _, flow_s = timed(lambda: model.euler(prefix, x0), args.device, args.repeats)
    infer_peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None

    model.train()
    params = model.set_trainable("expert")
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    plan = torch.zeros(1, 64, 3)
    plan[0, :, 0] = torch.arange(1, 65) * 0.8

    def train_step():
        loss = model.losses(obs, ["Keep lane."], plan)["flow"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    train_step()  # warm-up (AdamW allocates its moments)
    _, step_s = timed(train_step, args.device, args.repeats)
    result = {
        "benchmark": "alpamayo",
        "machine": machine_info(),
        "config": {
            "size": args.size,
            "device": args.device,
            "dtype": str(dtype).removeprefix("torch."),
            "parameters": n_params,
            "trajectory_head_parameters": n_expert,
            "camera_size": [h, w],
            "images": 16,
            "prompt_tokens": prompt_tokens,
            "reasoning_tokens": args.reasoning_tokens,
            "threads": torch.get_num_threads(),
        },
        "results": [
            {"name": "build_s", "value": round(build_s, 2), "unit": "s (random weights written in the release layout)"},
            {"name": "load_s", "value": round(load_s, 2), "unit": "s (strict load)"},
            {"name": "decision_ms", "value": round(decision_s * 1000, 1), "unit": "ms (processor + reasoning + flow)"},
            {"name": "flow_10_steps_ms", "value": round(flow_s * 1000, 1), "unit": "ms"},
            {"name": "sft_step_ms", "value": round(step_s * 1000, 1), "unit": "ms (head only, batch 1, AdamW)"},
            {
                "name": "peak_rss_gb",
                "value": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                "unit": "GiB",
            },
        ],
    }
    if args.device == "cuda":
        result["results"] += [
            {"name": "inference_peak_gpu_gb", "value": round(infer_peak, 2), "unit": "GiB"},
            {
                "name": "training_peak_gpu_gb",
                "value": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                "unit": "GiB",
            },
        ]
    emit(result, args.out)


if __name__ == "__main__":
    main()
