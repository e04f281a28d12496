"""Rewards and metrics on generated camera frames (a world model's predictions vs the simulator's).

A frame reward is ``fn(predicted, true) -> per-image values [N]`` on uint8 ``[N, H, W, 3]`` arrays;
built-ins register by name in ``FRAME_REWARDS``, a user's is named ``"my_pkg.mod:fn"`` (as reward
terms are). DDRL combines them by config weights; the world model's evaluation reports PSNR and SSIM.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import cv2
import numpy as np

from loopdrive.plugins import Registry

FrameReward = Callable[[np.ndarray, np.ndarray], np.ndarray]
FRAME_REWARDS: Registry = Registry("frame reward")


register_frame_reward = FRAME_REWARDS.register()


def _pairs(predicted: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, t = np.asarray(predicted), np.asarray(true)
    if p.shape != t.shape or p.ndim != 4 or p.shape[-1] != 3:
        raise ValueError(f"frame rewards compare [N, H, W, 3] arrays of one shape, got {p.shape} and {t.shape}")
    return p.astype(np.float32), t.astype(np.float32)


@register_frame_reward
def psnr(predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Peak signal-to-noise ratio per image in dB (capped at 60 dB for identical images)."""
    p, t = _pairs(predicted, true)
    mse = ((p - t) ** 2).reshape(len(p), -1).mean(1)
    return np.minimum(10 * np.log10(255.0**2 / np.maximum(mse, 1e-12)), 60.0)


@register_frame_reward
def ssim(predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Structural similarity per image (Wang et al. 2004: 11 x 11 Gaussian window, sigma 1.5, mean over
    colour channels and pixels)."""
    p, t = _pairs(predicted, true)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    out = np.empty(len(p), np.float64)
    for i in range(len(p)):
        x, y = p[i], t[i]
        mx, my = _window_mean(x), _window_mean(y)
        vx, vy, cxy = _window_mean(x * x) - mx * mx, _window_mean(y * y) - my * my, _window_mean(x * y) - mx * my
        s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
        out[i] = s.mean()
    return out


def _window_mean(a: np.ndarray) -> np.ndarray:
    """SSIM's local mean: an 11 x 11 Gaussian window, sigma 1.5."""
    return cv2.GaussianBlur(a, (11, 11), 1.5)


class FrameRewards:
    """Weighted sum of frame rewards; ``__call__`` returns the total per image and each term's values."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        if not weights:
            raise ValueError("frame rewards: give at least one {name: weight}")
        self.weights = {k: float(v) for k, v in weights.items()}
        self.fns = {k: FRAME_REWARDS.resolve(k) for k in weights}

    def __call__(self, predicted: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        terms = {k: np.asarray(fn(predicted, true), np.float64) for k, fn in self.fns.items()}
        for k, v in terms.items():
            if v.shape != (len(predicted),) or not np.isfinite(v).all():
                raise ValueError(f"frame reward {k!r} must return {len(predicted)} finite values, got {v!r}")
        return sum(self.weights[k] * v for k, v in terms.items()), terms
