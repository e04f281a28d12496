"""An action-conditioned flow-matching model of the camera stream, one agent decision at a time.

Given the last ``context`` decisions' frames of one camera and the motion the ego then executed (its
positions at every 0.1 s world step of the next decision, in the ego frame, and its speed), the model
generates that camera's frames at the next decision. Cameras share the weights and are told apart by
a one-hot id, so a rig of four is a batch of four.

What the flow generates is the *change* from the last context frame (pixels in [-1, 1], scaled to unit
spread): copying the last frame is the zero of the output, so the model only has to learn what moves.
A small U-Net with FiLM conditioning (flow time, motion, camera) estimates the clean change x_hat
(optionally gated by a per-pixel compositing mask, as in masked video-prediction models, so still
pixels can stay still), and the velocity follows as v = (x_hat - x_t) / (1 - t): a small network
need not pass the noise through itself, as a velocity network must. Time runs as in the VLA's flow
(t = 0 noise, t = 1 data, x_t = t x + (1 - t) eps).

Sampling: Euler steps from noise (``noise_scale`` 0 starts at the prior's mean and gives the
deterministic, PSNR-friendly prediction), or every step turned into the Flow-GRPO SDE so that each
step is Gaussian and its log-probability can be recomputed under new weights (DDRL).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

CONFIG_FILE = "world_model_config.json"
WEIGHTS_FILE = "world_model.safetensors"


@dataclass
class WorldModelConfig:
    image_size: tuple[int, int] = (56, 112)  # (H, W) of the frames it reads and writes
    rig: str = "alpamayo4"  # the camera rig it was trained on (cameras in rig order)
    cameras: int = 4
    frames: int = 1  # frames per decision (the env's n_frames)
    decision_every: int = 5  # world steps of 0.1 s per decision
    context: int = 2  # past decisions it sees
    channels: tuple[int, ...] = (24, 48, 96, 96)  # U-Net width per level (each level halves H and W)
    patch: int = 1  # 2: the U-Net works on 2 x 2 pixel patches (pixel unshuffle), ~3x cheaper
    mask: bool = False  # a per-pixel compositing mask gates the change (0: keep the last frame's pixel)
    cond_dim: int = 128
    fourier: int = 16
    flow_steps: int = 8
    change_scale: float = 1.0  # the flow works on change x scale: ~1 / the data's std, so data and noise match

    def __post_init__(self) -> None:
        self.image_size, self.channels = tuple(self.image_size), tuple(self.channels)
        scale = self.patch * 2 ** (len(self.channels) - 1)
        if self.image_size[0] % scale or self.image_size[1] % scale:
            raise ValueError(
                f"world model image_size {self.image_size} must be a multiple of {scale} "
                f"for {len(self.channels)} U-Net levels"
            )
        if any(c % 8 for c in self.channels):
            raise ValueError(f"world model channels {self.channels} must be multiples of 8 (GroupNorm)")

    @property
    def motion_dim(self) -> int:
        return 2 * self.decision_every + 1  # (x, y) per world step, then the speed

    def to_dict(self) -> dict:
        return asdict(self) | {"image_size": list(self.image_size), "channels": list(self.channels)}


class FiLMBlock(nn.Module):
    """Two 3x3 convolutions with GroupNorm; the conditioning scales and shifts the first one's output."""

    def __init__(self, cin: int, cout: int, cond_dim: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(8, cout)
        self.conv2, self.norm2 = nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(8, cout)
        self.film = nn.Linear(cond_dim, 2 * cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.norm1(self.conv1(x)))
        scale, shift = self.film(cond)[:, :, None, None].chunk(2, 1)
        h = F.silu(self.norm2(self.conv2(h * (1 + scale) + shift)))
        return h + self.skip(x)


class FrameUNet(nn.Module):
    """Velocity of the flow on a camera's next frames, given its context frames and the conditioning."""

    def __init__(self, c: WorldModelConfig) -> None:
        super().__init__()
        out_ch = 3 * c.frames * c.patch**2
        self.patch, self.mask = c.patch, c.mask
        self.stem = nn.Conv2d(out_ch * (c.context + 1), c.channels[0], 3, padding=1)
        self.down = nn.ModuleList(FiLMBlock(ch, ch, c.cond_dim) for ch in c.channels)
        self.pool = nn.ModuleList(nn.Conv2d(a, b, 3, stride=2, padding=1) for a, b in zip(c.channels, c.channels[1:]))
        self.mid = FiLMBlock(c.channels[-1], c.channels[-1], c.cond_dim)
        self.up = nn.ModuleList(nn.Conv2d(b, a, 3, padding=1) for a, b in zip(c.channels, c.channels[1:]))
        self.merge = nn.ModuleList(FiLMBlock(2 * ch, ch, c.cond_dim) for ch in c.channels[:-1])
        self.head = nn.Conv2d(c.channels[0], out_ch + (out_ch // 3 if c.mask else 0), 3, padding=1)
        nn.init.zeros_(self.head.weight)  # starts as "nothing moves": the copy-last-frame prediction
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor, context: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = self.stem(F.pixel_unshuffle(torch.cat([x, context], 1), self.patch))
        skips = []
        for i, block in enumerate(self.down):
            h = block(h, cond)
            if i < len(self.pool):
                skips.append(h)
                h = self.pool[i](h)
        h = self.mid(h, cond)
        for i in reversed(range(len(self.up))):
            h = self.up[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
            h = self.merge[i](torch.cat([h, skips[i]], 1), cond)
        out = F.pixel_shuffle(self.head(h), self.patch)
        if not self.mask:
            return out
        change, gate = out.split([out.shape[1] * 3 // 4, out.shape[1] // 4], 1)  # 3 colours + 1 gate per frame
        return change * torch.sigmoid(gate).repeat_interleave(3, 1)


class WorldModel(nn.Module):
    """The network plus everything around it: pixels in and out, conditioning, loss, samplers, files."""

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.register_buffer("freqs", torch.logspace(0, math.log10(200.0), c.fourier) * math.pi, persistent=False)
        cond_in = 2 * c.fourier + c.motion_dim + c.cameras
        self.cond = nn.Sequential(nn.Linear(cond_in, c.cond_dim), nn.SiLU(), nn.Linear(c.cond_dim, c.cond_dim))
        self.unet = FrameUNet(c)

    # --- tensors ---------------------------------------------------------------------------------------------
    def pixels(self, frames: torch.Tensor | np.ndarray) -> torch.Tensor:
        """uint8 frames ``[B, N, F, H, W, 3]`` (N decisions) -> float ``[B, N*F*3, H, W]`` in [-1, 1]."""
        f = torch.as_tensor(frames, device=self.freqs.device)
        b, n, k, h, w, _ = f.shape
        if (h, w) != self.config.image_size:
            raise ValueError(f"world model frames must be {self.config.image_size} (H, W), got {(h, w)}")
        return (f.float() / 127.5 - 1.0).permute(0, 1, 2, 5, 3, 4).reshape(b, n * k * 3, h, w)

    def to_uint8(self, change: torch.Tensor, context: torch.Tensor) -> np.ndarray:
        """The generated change added to the last context frame -> uint8 ``[B, F, H, W, 3]``."""
        c = self.config
        x = ((self._last_frame(context) + change / self.config.change_scale).clamp(-1, 1) + 1) * 127.5
        b, _, h, w = x.shape
        return x.round().to(torch.uint8).reshape(b, c.frames, 3, h, w).permute(0, 1, 3, 4, 2).cpu().numpy()

    def target_change(self, target: torch.Tensor | np.ndarray, context: torch.Tensor) -> torch.Tensor:
        """What the flow must generate for true next frames ``[B, F, H, W, 3]``: their change from the last
        context frame (scaled by ``change_scale``)."""
        change = self.pixels(torch.as_tensor(target)[:, None]) - self._last_frame(context)
        return change * self.config.change_scale

    def _last_frame(self, context: torch.Tensor) -> torch.Tensor:
        """The newest context frame, repeated for each generated frame."""
        return context[:, -3:].repeat(1, self.config.frames, 1, 1)

    def conditioning(self, t: torch.Tensor, motion: torch.Tensor, camera: torch.Tensor) -> torch.Tensor:
        """Flow time (Fourier features), the ego's motion over the decision (m / 10, speed / 10), camera id."""
        z = t[:, None] * self.freqs
        onehot = F.one_hot(camera.long(), self.config.cameras).to(z)
        return self.cond(torch.cat([z.sin(), z.cos(), motion.to(z) / 10.0, onehot], 1))

    def denoise(self, x, t, context, motion, camera) -> torch.Tensor:
        """The network's estimate of the clean (scaled) change, given its noisy version ``x`` at time ``t``."""
        return self.unet(x, context, self.conditioning(t, motion, camera))

    def velocity(self, x, t, context, motion, camera) -> torch.Tensor:
        """The flow's velocity from the clean estimate: v = (x_hat - x_t) / (1 - t)."""
        return (self.denoise(x, t, context, motion, camera) - x) / (1 - t).clamp(min=0.05).view(-1, 1, 1, 1)

    # --- training ----------------------------------------------------------------------------------------------
    def loss(
        self,
        context: torch.Tensor,
        target: torch.Tensor,
        motion: torch.Tensor,
        camera: torch.Tensor,
        generator: torch.Generator | None = None,
        relative: float | None = None,
    ) -> torch.Tensor:
        """Flow-matching loss on pixels (``context`` from :meth:`pixels`, uint8 ``target``) in its clean-
        estimate form: the MSE between the network's x_hat and the true change.

        ``relative=eps`` divides each sample's error by its change's mean square + eps (weights normalised
        to mean 1): the gradient of mean log-error, which is what per-image PSNR averages. Without it, the
        near-still frames, where copying is almost exact, hardly count."""
        x1 = self.target_change(target, context)
        b = x1.shape[0]
        t = torch.rand(b, generator=generator, device=x1.device)
        eps = torch.randn(x1.shape, generator=generator, device=x1.device)
        x_t = t.view(b, 1, 1, 1) * x1 + (1 - t.view(b, 1, 1, 1)) * eps
        error = (self.denoise(x_t, t, context, motion, camera) - x1).pow(2).flatten(1).mean(1)
        if relative is None:
            return error.mean()
        weight = 1.0 / (x1.pow(2).flatten(1).mean(1) + relative)
        return (error * weight / weight.mean()).mean()

    # --- sampling ----------------------------------------------------------------------------------------------
    def _start(self, context: torch.Tensor, noise_scale: float, generator) -> torch.Tensor:
        shape = (context.shape[0], 3 * self.config.frames, *context.shape[2:])
        return noise_scale * torch.randn(shape, generator=generator, device=context.device)

    @torch.no_grad()
    def predict(
        self,
        context: torch.Tensor,
        motion: torch.Tensor,
        camera: torch.Tensor,
        noise_scale: float = 0.0,
        generator: torch.Generator | None = None,
        steps: int | None = None,
    ) -> np.ndarray:
        """Euler integration of the flow -> the next decision's frames, uint8 ``[B, F, H, W, 3]``."""
        n = steps or self.config.flow_steps
        x = self._start(context, noise_scale, generator)
        for i in range(n):
            t = torch.full((x.shape[0],), i / n, device=x.device)
            x = x + self.velocity(x, t, context, motion, camera) / n
        return self.to_uint8(x, context)

    def sde_step(
        self, x: torch.Tensor, v: torch.Tensor, i: int, noise_level: float, steps: int | None = None
    ) -> tuple[torch.Tensor, float]:
        """Mean and std of Gaussian step ``i`` of ``steps`` of the Flow-GRPO SDE (s = 1 - t counts down from
        noise). More steps than the ODE's make the last steps' injected noise small."""
        n = steps or self.config.flow_steps
        s = 1.0 - i / n
        sigma = noise_level * math.sqrt(min(s, 1 - 1 / n) / (1 - min(s, 1 - 1 / n)))
        drift = 1 + sigma**2 * (1 - s) / (2 * s)
        return x * (1 - sigma**2 / (2 * s * n)) + v * drift / n, sigma / math.sqrt(n)

    @torch.no_grad()
    def sample_sde(
        self,
        context,
        motion,
        camera,
        noise_level: float = 0.7,
        noise_scale: float = 1.0,
        generator: torch.Generator | None = None,
        steps: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every step stochastic: (chain ``[steps + 1, B, C, H, W]``, per-step log-probs ``[B, steps]``)."""
        n = steps or self.config.flow_steps
        x = self._start(context, noise_scale, generator)
        chain, logps = [x], []
        for i in range(n):
            t = torch.full((x.shape[0],), i / n, device=x.device)
            mean, std = self.sde_step(x, self.velocity(x, t, context, motion, camera), i, noise_level, n)
            x = mean + std * torch.randn(x.shape, generator=generator, device=x.device)
            logps.append(gaussian_log_density(x, mean, std))
            chain.append(x)
        return torch.stack(chain), torch.stack(logps, 1)

    def step_log_probs(
        self,
        chain: torch.Tensor,
        context,
        motion,
        camera,
        noise_level: float = 0.7,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-step log-probs ``[B, steps]`` of a stored chain under the current weights (with grad), and the
        step means ``[steps, B, ...]`` (for a closed-form KL to a reference)."""
        n = chain.shape[0] - 1
        logps, means = [], []
        for i in range(n):
            t = torch.full((chain.shape[1],), i / n, device=chain.device)
            mean, std = self.sde_step(chain[i], self.velocity(chain[i], t, context, motion, camera), i, noise_level, n)
            logps.append(gaussian_log_density(chain[i + 1], mean, std))
            means.append(mean)
        return torch.stack(logps, 1), torch.stack(means)

    # --- files -------------------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, path / WEIGHTS_FILE)
        (path / CONFIG_FILE).write_text(json.dumps(self.config.to_dict(), indent=1))

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu") -> WorldModel:
        path = Path(path)
        if not (path / CONFIG_FILE).exists():
            raise FileNotFoundError(f"{path} is not a saved world model (no {CONFIG_FILE})")
        model = cls(WorldModelConfig(**json.loads((path / CONFIG_FILE).read_text())))
        model.load_state_dict(load_file(path / WEIGHTS_FILE, device=device))
        return model.to(device).eval()


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """log N(x; mean, std^2 I) per sample (summed over every non-batch dimension)."""
    d = x[0].numel()
    return -0.5 * ((x - mean) / std).pow(2).flatten(1).sum(1) - d * (math.log(std) + 0.5 * math.log(2 * math.pi))
