"""Alpamayo's unicycle action space: per step (acceleration, curvature), integrated to (x, y, yaw).

Bounds: acceleration +-9.8 m/s^2, curvature +-0.2 1/m. The flow head works on standardised actions
(the training data's mean and std, kept in the model's config), or bound-scaled ones by default.
Integration per 0.1 s step: v += a dt (kept in [0, 40] m/s); yaw += k v dt + k a dt^2 / 2; x, y
trapezoidal. The initial speed comes from the ego history (regularised least squares over its speeds).
"""

from __future__ import annotations

import torch

from envs.interface import TRAJ_HIGH, TRAJ_LOW

ACCEL_MAX = 9.8
CURV_MAX = 0.2
SPEED_MAX = 40.0  # m/s, above the embedded world's top speed (35 m/s)
DT = 0.1
STEPS = 64


def normalise(actions: torch.Tensor, mean=None, std=None) -> torch.Tensor:
    """(accel, curvature) -> the flow head's space: ``(a - mean) / std`` with the training data's
    statistics, or the bounds (-> [-1, 1]) when none are given. Standardising matters: driving
    curvatures are a few hundredths of the 0.2 bound, so bound-scaled targets would be tiny next to
    the unit noise of flow matching and the head would barely see the road's shape."""
    mean = actions.new_zeros(2) if mean is None else actions.new_tensor(mean)
    std = actions.new_tensor([ACCEL_MAX, CURV_MAX] if std is None else std)
    return (actions - mean) / std


def denormalise(u: torch.Tensor, mean=None, std=None) -> torch.Tensor:
    """Back to physical (accel, curvature), clipped to the bounds."""
    bounds = u.new_tensor([ACCEL_MAX, CURV_MAX])
    if std is None:
        return u.clamp(-1.0, 1.0) * bounds
    a = u * u.new_tensor(std) + u.new_tensor(mean if mean is not None else [0.0, 0.0])
    return torch.maximum(torch.minimum(a, bounds), -bounds)


def integrate(actions: torch.Tensor, v0: torch.Tensor, dt: float = DT) -> torch.Tensor:
    """Actions ``[B, T, 2]`` (physical units) and initial speed ``[B]`` -> trajectory ``[B, T, 3]``.

    Speed stays within [0, SPEED_MAX], as a vehicle's does: a run of braking stops the plan rather
    than reversing it (the training targets never reverse either, see :func:`from_trajectory`), so
    even an untrained head's plan stays inside the env's action space (<= 256 m ahead in 6.4 s).
    """
    a, k = actions[..., 0], actions[..., 1]
    speeds = [v0]
    for t in range(a.shape[-1]):  # 64 clamped steps: a recursion, not a cumulative sum
        speeds.append((speeds[-1] + a[..., t] * dt).clamp(0.0, SPEED_MAX))
    v = torch.stack(speeds, -1)
    v_prev, v_next = v[..., :-1], v[..., 1:]
    dyaw = k * 0.5 * (v_prev + v_next) * dt  # = k (v dt + a dt^2 / 2) while the speed is not clamped
    yaw_next = torch.cumsum(dyaw, -1)
    yaw_prev = yaw_next - dyaw
    x = torch.cumsum(0.5 * (v_prev * torch.cos(yaw_prev) + v_next * torch.cos(yaw_next)) * dt, -1)
    y = torch.cumsum(0.5 * (v_prev * torch.sin(yaw_prev) + v_next * torch.sin(yaw_next)) * dt, -1)
    return torch.stack([x, y, yaw_next], -1)


def to_plan(u: torch.Tensor, v0: torch.Tensor, mean=None, std=None) -> torch.Tensor:
    """The flow head's output ``[B, T, 2]`` -> the plan the env drives ``[B, T, 3]``.

    Positions are clipped to the env's action space, as a continuous policy's samples are clipped to
    its Box: forward driving can still leave it (a U-turn, then 40 m/s straight back), and only an
    untrained or noise-driven head plans that.
    """
    traj = integrate(denormalise(u.float(), mean, std), v0.float())
    low, high = traj.new_tensor(TRAJ_LOW[0, :2]), traj.new_tensor(TRAJ_HIGH[0, :2])
    return torch.cat([torch.maximum(torch.minimum(traj[..., :2], high), low), traj[..., 2:]], -1)


def from_trajectory(traj: torch.Tensor, v0: torch.Tensor, dt: float = DT, smooth: float = 1e-4) -> torch.Tensor:
    """The (accel, curvature) sequence that reproduces an ego-frame trajectory ``[B, T, 3]``
    (the training target of the flow head), clipped to the action bounds.

    Speeds come from one least-squares solve of the trapezoidal position equations
    0.5 dt (v_{t-1} u_{t-1} + v_t u_t) = p_t - p_{t-1} (u = heading unit vectors from the yaw
    channel) with a smoothness term on the change of acceleration. Without it (or with a very small
    one) the trapezoidal equations let speeds zig-zag from step to step: on simulator logs that
    turned a gentle 1.5 m/s^2 braking into alternating +-9.8 m/s^2 (28% of actions clipped).
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
        # smoothness rows on the change of acceleration: sqrt(smooth) (v_t - 2 v_{t-1} + v_{t-2}),
        # with v_{-1} = v0 known (a first-difference penalty would bias every acceleration to zero)
        w = smooth**0.5
        A[:, 2 * T + t, t] = w
        if t >= 1:
            A[:, 2 * T + t, t - 1] = -2 * w
        else:
            rhs[:, 2 * T + t] += 2 * w * v0
        if t >= 2:
            A[:, 2 * T + t, t - 2] = w
        elif t == 1:
            rhs[:, 2 * T + t] -= w * v0
        else:  # t == 0: v_{-2} unknown; use v0 for it (zero acceleration before the plan)
            rhs[:, 2 * T + t] -= w * v0
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
