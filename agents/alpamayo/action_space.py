"""Alpamayo-R1's unicycle action space, with the release's conventions.

An action is 64 steps of (acceleration, curvature), standardised by the checkpoint's statistics
(``(a - accel_mean) / accel_std``, ``(k - curvature_mean) / curvature_std``). Going from a trajectory to
actions is a chain of regularised least-squares fits, each a small dense normal-equation solve:

1. heading: the future yaws (unwrapped), fitted with theta_0 = 0 fixed and a third-difference penalty;
2. speed: the trapezoidal position equations dt / 2 (v_t u_t + v_{t+1} u_{t+1}) = p_{t+1} - p_t with
   v_0 from the history, a third-difference penalty and a ridge;
3. acceleration: a_t dt = v_{t+1} - v_t with a second-difference penalty;
4. curvature: kappa_t (v_t dt + a_t dt^2 / 2) = theta_{t+1} - theta_t with a second-difference penalty,
   clipped to the bounds and zero where either end of the step is below 0.6 m/s.

The speed at t0 comes from the same speed fit over the 16 history poses (no known v_0). Integration back
is explicit: v_{t+1} = v_t + a_t dt (no clamp: the release lets a plan reverse), theta by the exact
per-step increment, x / y trapezoidal. Penalties of order k are scaled by lambda / dt^(2k).

Facts from NVIDIA's Alpamayo-R1 release (Apache-2.0), written anew here; the goldens of
``agents.alpamayo.check_reference`` pin every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOW_SPEED = 0.6  # m/s: below this at either end of a step the curvature is not observable -> 0


@dataclass(frozen=True)
class ActionSpaceConfig:
    """The ``action_space_cfg`` of a release config (defaults: the released checkpoint's solver)."""

    accel_mean: float = 0.0
    accel_std: float = 1.0
    curvature_mean: float = 0.0
    curvature_std: float = 1.0
    accel_bounds: tuple[float, float] = (-9.8, 9.8)
    curvature_bounds: tuple[float, float] = (-0.2, 0.2)
    dt: float = 0.1
    n_waypoints: int = 64
    theta_lambda: float = 1e-6
    theta_ridge: float = 1e-8
    v_lambda: float = 1e-6
    v_ridge: float = 1e-4
    a_lambda: float = 1e-4
    a_ridge: float = 1e-4
    kappa_lambda: float = 1e-4
    kappa_ridge: float = 1e-4


def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    """Into [-pi, pi)."""
    return a - 2 * math.pi * torch.floor((a + math.pi) / (2 * math.pi))


def unwrap(yaw: torch.Tensor) -> torch.Tensor:
    """Along the last dimension: each step's change wrapped, then summed from the first value."""
    steps = wrap_angle(torch.diff(yaw, dim=-1))
    return torch.cat([yaw[..., :1], yaw[..., :1] + torch.cumsum(steps, -1)], -1)


def yaw_of(rot: torch.Tensor) -> torch.Tensor:
    """The yaw of rotation matrices ``[..., 3, 3]``."""
    return torch.atan2(rot[..., 1, 0], rot[..., 0, 0])


def yaw_rotation(yaw: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[..., 3, 3]`` about z."""
    c, s = torch.cos(yaw), torch.sin(yaw)
    zero, one = torch.zeros_like(yaw), torch.ones_like(yaw)
    rows = [torch.stack([c, -s, zero], -1), torch.stack([s, c, zero], -1), torch.stack([zero, zero, one], -1)]
    return torch.stack(rows, -2)


def smoothness(n: int, order: int, weight: float, dt: float, like: torch.Tensor) -> torch.Tensor:
    """``weight / dt^(2 order) * D^T D`` for the ``order``-th difference operator D on n values."""
    d = torch.diff(torch.eye(n, dtype=like.dtype, device=like.device), n=order, dim=0)
    return weight / dt ** (2 * order) * d.T @ d


def _solve(lhs: torch.Tensor, rhs: torch.Tensor, ridge: float) -> torch.Tensor:
    """Cholesky solve of ``(lhs + ridge I) x = rhs``; a singular system gets a ten times larger ridge
    until it factorises (a standing car's speed fit has no data on its curvature)."""
    eye = torch.eye(lhs.shape[-1], dtype=lhs.dtype, device=lhs.device)
    for _ in range(12):
        factor, info = torch.linalg.cholesky_ex(lhs + ridge * eye)
        if not bool(info.any()):
            return torch.cholesky_solve(rhs.unsqueeze(-1), factor).squeeze(-1)
        ridge = ridge * 10 if ridge > 0 else 1e-8
    raise ValueError("the action-space fit is singular even with a large ridge (non-finite trajectory?)")


def fit_scaled(s: torch.Tensor, y: torch.Tensor, order: int, lam: float, ridge: float, dt: float) -> torch.Tensor:
    """argmin_x sum (s_i x_i - y_i)^2 + lam / dt^(2 order) |D x|^2 + ridge |x|^2, batched over leading dims."""
    lhs = torch.diag_embed(s * s) + smoothness(y.shape[-1], order, lam, dt, y)
    return _solve(lhs, s * y, ridge)


def fit_heading(yaw: torch.Tensor, lam: float, ridge: float, dt: float) -> torch.Tensor:
    """Smoothed headings ``[..., N + 1]``, theta_0 = 0 fixed, from future yaws ``[..., N]``."""
    n = yaw.shape[-1]
    gram = smoothness(n + 1, 3, lam, dt, yaw)  # over theta_0..theta_N; theta_0 = 0 drops its column
    lhs = torch.eye(n, dtype=yaw.dtype, device=yaw.device) + gram[1:, 1:]
    theta = _solve(lhs.expand(*yaw.shape[:-1], n, n), unwrap(yaw), ridge)
    return torch.cat([torch.zeros_like(yaw[..., :1]), theta], -1)


def _trapezoid_system(dxy: torch.Tensor, theta: torch.Tensor, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A [.., 2N, N+1] and b [.., 2N] of dt / 2 (v_t u_t + v_{t+1} u_{t+1}) = dp_t, in the form
    v_t u_t + v_{t+1} u_{t+1} = 2 dp_t / dt."""
    *lead, n, _ = dxy.shape
    u = torch.stack([torch.cos(theta), torch.sin(theta)], -1)  # [..., N+1, 2]
    a = dxy.new_zeros(*lead, n, 2, n + 1)
    idx = torch.arange(n, device=dxy.device)
    a[..., idx, :, idx] = u[..., :-1, :].movedim(-2, 0)
    a[..., idx, :, idx + 1] = u[..., 1:, :].movedim(-2, 0)
    return a.reshape(*lead, 2 * n, n + 1), (2.0 / dt * dxy).reshape(*lead, 2 * n)


def fit_speed(
    dxy: torch.Tensor, theta: torch.Tensor, v0: torch.Tensor | None, lam: float, ridge: float, dt: float
) -> torch.Tensor:
    """Speeds ``[..., N + 1]`` from displacements ``[..., N, 2]`` and headings ``[..., N + 1]``; with ``v0``
    the first is fixed to it, without (the t0 estimate from history) all N + 1 are free."""
    a, b = _trapezoid_system(dxy, theta, dt)
    ata = a.transpose(-1, -2) @ a
    atb = (a.transpose(-1, -2) @ b.unsqueeze(-1)).squeeze(-1)
    gram = smoothness(theta.shape[-1], 3, lam, dt, dxy)
    if v0 is None:
        return _solve(ata + gram, atb, ridge)
    fixed = ata[..., 1:, 0] + gram[1:, 0]
    v = _solve(ata[..., 1:, 1:] + gram[1:, 1:], atb[..., 1:] - fixed * v0.unsqueeze(-1), ridge)
    return torch.cat([v0.unsqueeze(-1), v], -1)


class UnicycleActionSpace(torch.nn.Module):
    """The release's action space; its four statistics are buffers (``action_space.*`` in a checkpoint)."""

    def __init__(self, config: ActionSpaceConfig) -> None:
        super().__init__()
        self.config = config
        for name in ("accel_mean", "accel_std", "curvature_mean", "curvature_std"):
            self.register_buffer(name, torch.tensor(float(getattr(config, name))))

    def normalise(self, accel: torch.Tensor, kappa: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [(accel - self.accel_mean) / self.accel_std, (kappa - self.curvature_mean) / self.curvature_std], -1
        )

    def physical(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(acceleration m/s^2, curvature 1/m) of standardised actions."""
        return (
            action[..., 0] * self.accel_std + self.accel_mean,
            action[..., 1] * self.curvature_std + self.curvature_mean,
        )

    def initial_speed(self, history_xyz: torch.Tensor, history_rot: torch.Tensor) -> torch.Tensor:
        """Speed at t0 ``[...]`` from the 16 history poses: positions ``[..., 16, 3]``, rotations
        ``[..., 16, 3, 3]``."""
        c = self.config
        dxy = torch.diff(history_xyz[..., :2], dim=-2)
        theta = unwrap(yaw_of(history_rot))
        return fit_speed(dxy, theta, None, c.v_lambda, c.v_ridge, c.dt)[..., -1]

    def trajectory_to_action(
        self,
        history_xyz: torch.Tensor,
        history_rot: torch.Tensor,
        future_xyz: torch.Tensor,
        future_rot: torch.Tensor,
        v0: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Standardised actions ``[..., 64, 2]`` of a future in the t0 frame, and the fit's stages
        (``theta``, ``v``, ``accel``, ``kappa``). The history's last pose is the origin."""
        c = self.config
        if future_xyz.shape[-2] != c.n_waypoints:
            raise ValueError(f"a future of {c.n_waypoints} waypoints is needed, got {future_xyz.shape[-2]}")
        if v0 is None:
            v0 = self.initial_speed(history_xyz, history_rot)
        xy = torch.cat([history_xyz[..., -1:, :2], future_xyz[..., :2]], -2)
        theta = fit_heading(yaw_of(future_rot), c.theta_lambda, c.theta_ridge, c.dt)
        v = fit_speed(torch.diff(xy, dim=-2), theta, v0, c.v_lambda, c.v_ridge, c.dt)
        dv = torch.diff(v, dim=-1) / c.dt
        accel = fit_scaled(torch.ones_like(dv), dv, 2, c.a_lambda, c.a_ridge, c.dt)
        length = c.dt * v[..., :-1] + c.dt**2 / 2 * accel
        kappa = fit_scaled(length, torch.diff(theta, dim=-1), 2, c.kappa_lambda, c.kappa_ridge, c.dt)
        kappa = kappa.clamp(*c.curvature_bounds)
        slow = (v[..., :-1].abs() < LOW_SPEED) | (v[..., 1:].abs() < LOW_SPEED)
        kappa = torch.where(slow, torch.zeros_like(kappa), kappa)
        return {"action": self.normalise(accel, kappa), "theta": theta, "v": v, "accel": accel, "kappa": kappa}

    def action_to_trajectory(self, action: torch.Tensor, v0: torch.Tensor, z0: torch.Tensor | None = None):
        """Positions ``[..., 64, 3]`` (z = the t0 height ``z0``) and yaws ``[..., 64]`` of standardised actions."""
        accel, kappa = self.physical(action)
        dt = self.config.dt
        v = torch.cat([v0.unsqueeze(-1), v0.unsqueeze(-1) + torch.cumsum(accel * dt, -1)], -1)
        dtheta = kappa * v[..., :-1] * dt + kappa * accel * (dt * dt / 2)
        theta = torch.cat([torch.zeros_like(v0).unsqueeze(-1), torch.cumsum(dtheta, -1)], -1)
        half = 0.5 * dt
        x = torch.cumsum(half * (v[..., :-1] * torch.cos(theta[..., :-1]) + v[..., 1:] * torch.cos(theta[..., 1:])), -1)
        y = torch.cumsum(half * (v[..., :-1] * torch.sin(theta[..., :-1]) + v[..., 1:] * torch.sin(theta[..., 1:])), -1)
        z = torch.zeros_like(x) if z0 is None else z0.unsqueeze(-1).expand_as(x)
        return torch.stack([x, y, z], -1), theta[..., 1:]
