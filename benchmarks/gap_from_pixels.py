"""How well one camera's pixels tell the gap to the car ahead: a small CNN trained on that camera alone.
A diagnostic of the perception probe's limit: its pixels, or what the VLM learns to see in them.

    python benchmarks/gap_from_pixels.py --train DATA.zarr [MORE.zarr ...] --test HELD_OUT.zarr
        --camera 3 [--camera 4 ...] [--frames last|all] [--epochs 10] [--out FILE]

For each ``--camera`` (an index into the data's rig; ``all`` for every camera as channels of one image) a
CNN is trained on ``--train``'s driven samples to read the gap to the car ahead and its closing speed from
that camera's last frame (with ``--frames all``, every frame the data records: a motion cue), scaled as
the perception targets are, by mean squared error. It then reads ``--test``'s driven samples, and
``reading_report`` of ``benchmarks/probe_reading.py`` scores what it reads, so the numbers sit beside the
probe's: the gap's error near the car ahead, its change between decisions, and the closing speed tracked
from it. Other targets are left as recorded; read only the gap and closing speed figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _driven(path: str) -> dict[str, np.ndarray]:
    """The arrays of a dataset's driven samples (:func:`benchmarks.probe_reading.driven_samples`), and their
    scenario families."""
    from benchmarks.probe_reading import dataset_with_perception, driven_samples

    data = dataset_with_perception(path)
    keep, n = driven_samples(data), len(data)
    arrays = {k: np.asarray(data.arrays[k][:n])[keep] for k in ("cameras", "perception", "ego_state", "episode", "t")}
    return arrays | {"family": data.families()[keep]}


def _images(cameras: np.ndarray, camera: str, frames: str = "last") -> np.ndarray:
    """``[N, C, H, W]`` float32 in [0, 1] from ``cameras`` ``[N, cams, frames, H, W, 3]``: one camera or every
    camera, its last frame or every frame (a motion cue), their channels side by side."""
    chosen = cameras if camera == "all" else cameras[:, [int(camera)]]
    chosen = chosen if frames == "all" else chosen[:, :, -1:]
    n, cams, n_frames, h, w, _ = chosen.shape
    return chosen.transpose(0, 1, 2, 5, 3, 4).reshape(n, cams * n_frames * 3, h, w).astype(np.float32) / 255.0


def gap_reader(channels: int, height: int, width: int, n_out: int):
    """A small CNN that keeps where things are (no global pooling: the car ahead's place and size are the cue)."""
    from torch import nn

    def block(i: int, o: int, stride: int) -> list:
        return [nn.Conv2d(i, o, 3, stride, 1), nn.BatchNorm2d(o), nn.ReLU()]

    features = nn.Sequential(*block(channels, 16, 1), *block(16, 32, 2), *block(32, 64, 2), *block(64, 64, 2))
    flat = 64 * -(-height // 8) * -(-width // 8)
    return nn.Sequential(features, nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Linear(128, n_out))


def train_and_read(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, epochs: int, seed: int
) -> tuple[np.ndarray, float]:
    """What a CNN trained to read ``y_train`` ``[N, targets]`` off images ``x_train`` (:func:`_images`) reads
    off ``x_test``; and its seconds."""
    import torch

    torch.manual_seed(seed)
    y_train = torch.from_numpy(y_train)
    model = gap_reader(x_train.shape[1], x_train.shape[2], x_train.shape[3], y_train.shape[1])
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    steps = epochs * (len(x_train) // 64)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, 2e-3, total_steps=steps)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x_train), generator=generator)
        for first in range(0, len(order) - 63, 64):
            idx = order[first : first + 64]
            loss = torch.nn.functional.mse_loss(model(torch.from_numpy(x_train[idx])), y_train[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
    model.eval()
    with torch.no_grad():
        batches = (torch.from_numpy(x_test[i : i + 256]) for i in range(0, len(x_test), 256))
        read = np.concatenate([model(batch).numpy() for batch in batches])
    return read, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    from benchmarks.probe_reading import add_near_options, reading_report

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", nargs="+", required=True, help="datasets with perception targets to learn from")
    p.add_argument("--test", required=True, help="a held-out dataset (e.g. a policy's DAgger round) to read")
    p.add_argument("--camera", action="append", required=True, help="a camera index of the rig, or 'all'")
    p.add_argument("--frames", choices=("last", "all"), default="last", help="each camera's last frame, or all")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    add_near_options(p)
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)

    import torch

    from agents.vla.perception import PERCEPTION_TARGETS
    from benchmarks.machine import emit

    torch.set_num_threads(os.cpu_count() or 1)
    parts = [_driven(path) for path in args.train]  # rigs may differ: a camera index is one camera in each
    test = _driven(args.test)
    columns = [PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")]
    y_train = np.concatenate([part["perception"][:, columns] for part in parts])
    result: dict = {"train": args.train, "test": args.test, "train_samples": len(y_train)}
    result |= {"test_samples": len(test["perception"]), "frames": args.frames, "epochs": args.epochs, "cameras": {}}
    for camera in args.camera:
        x_train = np.concatenate([_images(part["cameras"], camera, args.frames) for part in parts])
        x_test = _images(test["cameras"], camera, args.frames)
        got, seconds = train_and_read(x_train, y_train, x_test, args.epochs, args.seed)
        read = test["perception"].copy()
        read[:, columns] = got
        report = reading_report(
            read,
            test["perception"],
            test["ego_state"][:, 0],
            test["episode"],
            test["t"],
            args.ttc,
            args.min_speed,
            test["family"],
        )
        result["cameras"][camera] = {"train_s": round(seconds, 1)} | report
        print(f"camera {camera}: {seconds:.0f} s", file=sys.stderr)
    return emit(result, args.out)


if __name__ == "__main__":
    main()
