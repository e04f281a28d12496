"""Alpamayo's unicycle action space: per step (acceleration, curvature), integrated to (x, y, yaw).

Bounds: acceleration +-9.8 m/s^2, curvature +-0.2 1/m, normalised to [-1, 1] for the flow head.
Integration per 0.1 s step: v += a dt; yaw += k v dt + k a dt^2 / 2; x, y trapezoidal. The initial
speed comes from the ego history (regularised least squares over its speeds).
"""

from __future__ import annotations

import torch

ACCEL_MAX = 9.8
CURV_MAX = 0.2
DT = 0.1
STEPS = 64


def normalise(actions: torch.Tensor) -> torch.Tensor:
    """(accel, curvature) -> [-1, 1]^2."""
    return actions / actions.new_tensor([ACCEL_MAX, CURV_MAX])


def denormalise(u: torch.Tensor) -> torch.Tensor:
    return u.clamp(-1.0, 1.0) * u.new_tensor([ACCEL_MAX, CURV_MAX])


def integrate(actions: torch.Tensor, v0: torch.Tensor, dt: float = DT) -> torch.Tensor:
    """Actions ``[B, T, 2]`` (physical units) and initial speed ``[B]`` -> trajectory ``[B, T, 3]``."""
    a, k = actions[..., 0], actions[..., 1]
    v_prev = v0.unsqueeze(-1) + torch.cumsum(a * dt, -1) - a * dt  # speed at the start of each step
    v_next = v_prev + a * dt
    dyaw = k * v_prev * dt + k * a * dt * dt / 2
    yaw_next = torch.cumsum(dyaw, -1)
    yaw_prev = yaw_next - dyaw
    x = torch.cumsum(0.5 * (v_prev * torch.cos(yaw_prev) + v_next * torch.cos(yaw_next)) * dt, -1)
    y = torch.cumsum(0.5 * (v_prev * torch.sin(yaw_prev) + v_next * torch.sin(yaw_next)) * dt, -1)
    return torch.stack([x, y, yaw_next], -1)


def from_trajectory(traj: torch.Tensor, v0: torch.Tensor, dt: float = DT, smooth: float = 1e-7) -> torch.Tensor:
    """The (accel, curvature) sequence that reproduces an ego-frame trajectory ``[B, T, 3]``
    (the training target of the flow head), clipped to the action bounds.

    Speeds come from one least-squares solve of the trapezoidal position equations
    0.5 dt (v_{t-1} u_{t-1} + v_t u_t) = p_t - p_{t-1} (u = heading unit vectors from the yaw
    channel) with a small smoothness term (raise ``smooth`` for noisy logs: differencing positions
    twice amplifies centimetre noise into m/s^2).
    """
    B, T, _ = traj.shape
    dtype = traj.dtype
    traj, v0 = traj.double(), v0.double()  # the solve is ill-conditioned in float32 at the far end
    yaw = torch.cat([traj.new_zeros(B, 1), traj[..., 2]], 1)  # heading at steps 0..T
    u = torch.stack([torch.cos(yaw), torch.sin(yaw)], -1)  # [B, T+1, 2]
    xy = torch.cat([traj.new_zeros(B, 1, 2), traj[..., :2]], 1)
    d = xy[:, 1:] - xy[:, :-1]  # [B, T, 2]
    A = traj.new_zeros(B, 2 * T + T, T)
    rhs = traj.new_zeros(B, 2 * T + T)
    for t in range(T):
        A[:, 2 * t : 2 * t + 2, t] = 0.5 * dt * u[:, t + 1]
        rhs[:, 2 * t : 2 * t + 2] = d[:, t]
        if t > 0:
            A[:, 2 * t : 2 * t + 2, t - 1] = 0.5 * dt * u[:, t]
        else:
            rhs[:, 0:2] -= 0.5 * dt * v0.unsqueeze(-1) * u[:, 0]
        # smoothness rows: sqrt(smooth) (v_t - v_{t-1})
        A[:, 2 * T + t, t] = smooth**0.5
        if t > 0:
            A[:, 2 * T + t, t - 1] = -(smooth**0.5)
        else:
            rhs[:, 2 * T] = smooth**0.5 * v0
    v = torch.linalg.lstsq(A, rhs.unsqueeze(-1)).solution.squeeze(-1).clamp_min(0.0).to(dtype)
    v_prev = torch.cat([v0.unsqueeze(-1), v[:, :-1]], 1)
    a = (v - v_prev) / dt
    dyaw = yaw[:, 1:] - yaw[:, :-1]
    denom = v_prev * dt + a * dt * dt / 2
    moving = denom.abs() > 1e-3
    k = torch.where(moving, dyaw / torch.where(moving, denom, torch.ones_like(denom)), torch.zeros_like(dyaw))
    return torch.stack([a.clamp(-ACCEL_MAX, ACCEL_MAX), k.clamp(-CURV_MAX, CURV_MAX)], -1).to(dtype)


def initial_speed(history: torch.Tensor, reg: float = 0.1) -> torch.Tensor:
    """Regularised least-squares speed at t0 from ego history ``[B, 16, 4]`` (x, y, yaw, speed): a
    line fitted to the last second of speeds, evaluated at t0 and pulled towards the last sample."""
    v = history[:, -10:, 3]
    t = torch.arange(-9, 1, dtype=v.dtype, device=v.device) * DT
    A = torch.stack([torch.ones_like(t), t], 1)  # v(t) = c0 + c1 t
    ata = A.T @ A + reg * torch.eye(2, dtype=v.dtype, device=v.device)
    coef = torch.linalg.solve(ata, A.T @ v.T + reg * torch.stack([v[:, -1], torch.zeros_like(v[:, -1])]))
    return coef[0].clamp_min(0.0)
