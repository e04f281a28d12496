"""Alpamayo's unicycle action space: per step (acceleration, curvature), integrated to (x, y, yaw).

Bounds: acceleration +-9.8 m/s^2, curvature +-0.2 1/m. The flow head works on standardised actions
(the training data's mean and std, kept in the model's config), or bound-scaled ones by default.
Integration per 0.1 s step: v += a dt (kept in [0, 40] m/s); yaw += k v dt + k a dt^2 / 2; x, y
trapezoidal. The initial speed comes from the ego history (regularised least squares over its speeds).

The lateral action is Alpamayo's curvature, or the lateral acceleration ``k v^2`` (``v`` the step's
mean speed, floored at ``SPEED_FLOOR``). Curvature puts a highway lane change (k ~ 0.002 1/m) at a
few hundredths of the standard deviation that junction turns set (~0.03), where the flow head's
errors are as large as the manoeuvre; lateral acceleration puts both at the same scale (about
1 m/s^2).
"""

from __future__ import annotations

from typing import Literal

import torch

from envs.interface import TRAJ_HIGH, TRAJ_LOW

ACCEL_MAX = 9.8
CURV_MAX = 0.2
LAT_ACCEL_MAX = 9.8  # m/s^2, about the tyres' grip; the curvature bound applies as well
SPEED_FLOOR = 2.0  # m/s: below it, a lateral acceleration is read as at this speed, so a car pulling away steers
SPEED_MAX = 40.0  # m/s, above the embedded world's top speed (35 m/s)
DT = 0.1
STEPS = 64

LateralAction = Literal["curvature", "lateral_acceleration"]


def bounds(lateral: LateralAction = "curvature") -> tuple[float, float]:
    """The (longitudinal, lateral) action bounds."""
    return ACCEL_MAX, CURV_MAX if lateral == "curvature" else LAT_ACCEL_MAX


def _curvature_scale(v_mid: torch.Tensor, lateral: LateralAction) -> torch.Tensor | float:
    """``k = lateral_action / scale``: 1 for curvature, the floored squared speed for lateral acceleration."""
    return 1.0 if lateral == "curvature" else v_mid.clamp_min(SPEED_FLOOR) ** 2


def normalise(actions: torch.Tensor, mean=None, std=None, lateral: LateralAction = "curvature") -> torch.Tensor:
    """(accel, lateral) -> the flow head's space: ``(a - mean) / std`` with the training data's
    statistics, or the bounds (-> [-1, 1]) when none are given. Standardising matters: driving
    curvatures are a few hundredths of the 0.2 bound, so bound-scaled targets would be tiny next to
    the unit noise of flow matching and the head would barely see the road's shape."""
    mean = actions.new_zeros(2) if mean is None else actions.new_tensor(mean)
    std = actions.new_tensor(bounds(lateral) if std is None else std)
    return (actions - mean) / std


def denormalise(u: torch.Tensor, mean=None, std=None, lateral: LateralAction = "curvature") -> torch.Tensor:
    """Back to physical (accel, lateral), clipped to the bounds."""
    limit = u.new_tensor(bounds(lateral))
    if std is None:
        return u.clamp(-1.0, 1.0) * limit
    a = u * u.new_tensor(std) + u.new_tensor(mean if mean is not None else [0.0, 0.0])
    return torch.maximum(torch.minimum(a, limit), -limit)


def integrate(
    actions: torch.Tensor, v0: torch.Tensor, dt: float = DT, lateral: LateralAction = "curvature"
) -> torch.Tensor:
    """Actions ``[B, T, 2]`` (physical units) and initial speed ``[B]`` -> trajectory ``[B, T, 3]``.

    Speed stays within [0, SPEED_MAX], as a vehicle's does: a run of braking stops the plan rather
    than reversing it (the training targets never reverse either, see :func:`from_trajectory`), so
    even an untrained head's plan stays inside the env's action space (<= 256 m ahead in 6.4 s).
    """
    v = _speeds(actions[..., 0], v0, dt)
    v_mid = 0.5 * (v[..., :-1] + v[..., 1:])
    k = (actions[..., 1] / _curvature_scale(v_mid, lateral)).clamp(-CURV_MAX, CURV_MAX)
    return _path(k, v, dt)


def travel(
    u: torch.Tensor, v0: torch.Tensor, mean=None, std=None, lateral: LateralAction = "curvature"
) -> torch.Tensor:
    """Metres the plan of the flow head's output ``u`` ``[B, T, 2]`` has driven along its path by the end of
    each step ``[B, T]``, from initial speed ``v0`` ``[B]``: the acceleration channel alone sets it (with
    grad, as :func:`integrate` drives it), so a loss on how far a plan goes reaches the head."""
    a = denormalise(u.float(), mean, std, lateral)[..., 0]
    v = _speeds(a, v0.float(), DT)
    return torch.cumsum(0.5 * (v[..., :-1] + v[..., 1:]) * DT, -1)


def _speeds(a: torch.Tensor, v0: torch.Tensor, dt: float) -> torch.Tensor:
    """Speeds ``[B, T + 1]`` at the step boundaries, from v0 and the accelerations."""
    speeds = [v0]
    for t in range(a.shape[-1]):  # 64 clamped steps: a recursion, not a cumulative sum
        speeds.append((speeds[-1] + a[..., t] * dt).clamp(0.0, SPEED_MAX))
    return torch.stack(speeds, -1)


def _path(k: torch.Tensor, v: torch.Tensor, dt: float) -> torch.Tensor:
    """Curvatures ``[B, T]`` along the speeds ``[B, T + 1]`` -> (x, y, yaw) ``[B, T, 3]``."""
    v_prev, v_next = v[..., :-1], v[..., 1:]
    dyaw = k * 0.5 * (v_prev + v_next) * dt  # = k (v dt + a dt^2 / 2) while the speed is not clamped
    yaw_next = torch.cumsum(dyaw, -1)
    yaw_prev = yaw_next - dyaw
    x = torch.cumsum(0.5 * (v_prev * torch.cos(yaw_prev) + v_next * torch.cos(yaw_next)) * dt, -1)
    y = torch.cumsum(0.5 * (v_prev * torch.sin(yaw_prev) + v_next * torch.sin(yaw_next)) * dt, -1)
    return torch.stack([x, y, yaw_next], -1)


def to_plan(
    u: torch.Tensor, v0: torch.Tensor, mean=None, std=None, lateral: LateralAction = "curvature"
) -> torch.Tensor:
    """The flow head's output ``[B, T, 2]`` -> the plan the env drives ``[B, T, 3]``.

    Positions are clipped to the env's action space, as a continuous policy's samples are clipped to
    its Box: forward driving can still leave it (a U-turn, then 40 m/s straight back), and only an
    untrained or noise-driven head plans that.
    """
    traj = integrate(denormalise(u.float(), mean, std, lateral), v0.float(), lateral=lateral)
    low, high = traj.new_tensor(TRAJ_LOW[0, :2]), traj.new_tensor(TRAJ_HIGH[0, :2])
    return torch.cat([torch.maximum(torch.minimum(traj[..., :2], high), low), traj[..., 2:]], -1)


def from_trajectory(
    traj: torch.Tensor, v0: torch.Tensor, dt: float = DT, smooth: float = 1e-4, lateral: LateralAction = "curvature"
) -> torch.Tensor:
    """The (accel, lateral) sequence that reproduces an ego-frame trajectory ``[B, T, 3]``
    (the training target of the flow head), clipped to the action bounds.

    Speeds come from one least-squares solve of the trapezoidal position equations
    0.5 dt (v_{t-1} u_{t-1} + v_t u_t) = p_t - p_{t-1} (u = heading unit vectors from the yaw
    channel) with a smoothness term on the change of acceleration. Without it (or with a very small
    one) the trapezoidal equations let speeds zig-zag from step to step: on simulator logs that
    turned a gentle 1.5 m/s^2 braking into alternating +-9.8 m/s^2 (28% of actions clipped).
    Curvatures are the yaw channel's change per metre, fitted to the positions where those miss them
    (:func:`_fit_positions`).
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
    a = a.clamp(-ACCEL_MAX, ACCEL_MAX)
    k = _fit_positions(k.clamp(-CURV_MAX, CURV_MAX), _speeds(a, v0, dt), traj[..., :2], dt)
    side = k * _curvature_scale(denom / dt, lateral)  # denom / dt: the step's mean speed
    return torch.stack([a, side.clamp(-LAT_ACCEL_MAX, LAT_ACCEL_MAX)], -1).to(dtype)


def _fit_positions(
    k: torch.Tensor, v: torch.Tensor, xy: torch.Tensor, dt: float, above_m: float = 0.25, steps: int = 100
) -> torch.Tensor:
    """Curvatures from the yaw channel, corrected where their path misses the target's positions by more
    than ``above_m``: there, projected gradient steps on the curvatures (within the bound, the speeds
    kept) bring the path to the positions, and the better of the two is kept.

    The target's yaw is the world vehicle's direction of motion, which a car turning out of a standstill
    (its wheels turned before it moves) swings by up to the slip angle within centimetres; the unicycle
    cannot, and the clipped curvature sent its path metres away from the expert's (more than 1 m on 8.5%
    of the `core` expert data, 43% of `parked_blocking`'s, up to 18 m at 6.4 s): the flow head was taught
    turns the expert never drove. Fitted, 1.2% miss by more than 1 m."""
    miss = (_path(k, v, dt)[..., :2] - xy).norm(dim=-1).amax(-1)
    bad = miss > above_m
    if not bool(bad.any()):
        return k
    fitted = k[bad].clone().requires_grad_(True)
    vb, xyb = v[bad], xy[bad]
    opt = torch.optim.Adam([fitted], lr=1e-3)  # curvature units (1/m): driving curvatures are ~1e-3 .. 1e-1
    with torch.enable_grad():
        for _ in range(steps):
            loss = ((_path(fitted, vb, dt)[..., :2] - xyb) ** 2).sum(-1).mean(-1).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                fitted.clamp_(-CURV_MAX, CURV_MAX)
    fitted = fitted.detach()
    better = (_path(fitted, vb, dt)[..., :2] - xyb).norm(dim=-1).amax(-1) < miss[bad]
    out = k.clone()
    out[bad] = torch.where(better[:, None], fitted, k[bad])
    return out


def initial_speed(history: torch.Tensor, reg: float = 0.1) -> torch.Tensor:
    """Regularised least-squares speed at t0 from ego history ``[B, 16, 4]`` (x, y, yaw, speed): a
    line fitted to the last second of speeds, evaluated at t0 and pulled towards the last sample."""
    v = history[:, -10:, 3]
    t = torch.arange(-9, 1, dtype=v.dtype, device=v.device) * DT
    A = torch.stack([torch.ones_like(t), t], 1)  # v(t) = c0 + c1 t
    ata = A.T @ A + reg * torch.eye(2, dtype=v.dtype, device=v.device)
    coef = torch.linalg.solve(ata, A.T @ v.T + reg * torch.stack([v[:, -1], torch.zeros_like(v[:, -1])]))
    return coef[0].clamp_min(0.0)
