"""The flow-matching action expert and its samplers (Euler ODE, and the Flow-GRPO SDE with log-probs).

The expert is a small transformer of the backbone's family without token embeddings: 64 action
tokens (one per waypoint) built from Fourier features of the noisy action and of the flow time,
MLP -> LayerNorm -> hidden; non-causal self-attention among them plus attention to the backbone's
per-layer key / value cache (prompt + reasoning); a linear head predicts the velocity field. Without
a cache it attends to the state token alone: the field context guidance (``guided_velocity``) compares
against.

Time convention (Alpamayo): t = 0 is noise, t = 1 is data; x_t = t x + (1 - t) eps, v = x - eps;
training samples t from Beta(1.5, 1). An ``origin`` shifts the source: eps ~ N(origin, I), one origin
per sample (DiffusionDrive's anchors, Liao et al. 2025: the flow starts from the chosen mode's mean plan,
so the mode is readable in the noisy actions themselves, not only in a conditioning input).
For the SDE we switch to Flow-GRPO's s = 1 - t (1 = noise):
sigma = a sqrt(s / (1 - s)); mean = x (1 + sigma^2 dt / (2 s)) + v_s (1 + sigma^2 (1 - s) / (2 s)) dt,
std = sigma sqrt(-dt), with v_s = -v and dt = -1 / steps; every stochastic step is Gaussian, so
its log-probability is exact and can be recomputed under new weights (``log_prob``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

Context = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values): [B, H_kv, T, D]
Guidance = float | Sequence[float]  # context guidance: one weight, or one per action dimension (accel, lateral)


@dataclass
class ExpertConfig:
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    steps: int = 64  # action tokens
    action_dim: int = 2
    fourier_features: int = 16
    state_dim: int = 0  # > 0: one extra token from the ego state and route (as pi0's proprioceptive token)
    state_on_every_token: bool = False  # also add the state embedding to every action token (direct conditioning)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"expert num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )

    def to_dict(self) -> dict:
        return asdict(self)


class FourierFeatures(nn.Module):
    """The value itself plus sin / cos at log-spaced frequencies. The lowest period (8 units) spans the
    noisy actions' range: with periods of 2 or less alone, x and x + 2 look alike and the head cannot
    read the noisy action it must denoise."""

    def __init__(self, n: int, min_freq: float = 0.25, max_freq: float = 64.0) -> None:
        super().__init__()
        freqs = torch.logspace(math.log10(min_freq), math.log10(max_freq), n) * math.pi
        self.register_buffer("freqs", freqs, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.unsqueeze(-1) * self.freqs
        return torch.cat([x.unsqueeze(-1), z.sin(), z.cos()], -1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # one fused op, not six


class ExpertLayer(nn.Module):
    """Pre-norm attention (queries from action tokens, keys / values = backbone cache + own) + SwiGLU."""

    def __init__(self, c: ExpertConfig) -> None:
        super().__init__()
        self.c = c
        self.norm1, self.norm2 = RMSNorm(c.hidden_size), RMSNorm(c.hidden_size)
        self.q = nn.Linear(c.hidden_size, c.num_heads * c.head_dim)
        self.k = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim)
        self.v = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim)
        self.o = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)
        self.gate = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, h: torch.Tensor, ctx: tuple[torch.Tensor, torch.Tensor] | None, mask: torch.Tensor | None):
        """``mask`` [B, 1, 1, T_ctx + N] (True = attend) covers the cache and the action tokens, or None."""
        c = self.c
        B, N, _ = h.shape
        x = self.norm1(h)
        q = self.q(x).view(B, N, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k(x).view(B, N, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v(x).view(B, N, c.num_kv_heads, c.head_dim).transpose(1, 2)
        if ctx is not None:
            k, v = torch.cat([ctx[0], k], 2), torch.cat([ctx[1], v], 2)
        # grouped-query attention without materialising repeated key / value heads
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=c.num_heads != c.num_kv_heads)
        h = h + self.o(att.transpose(1, 2).reshape(B, N, -1))
        x = self.norm2(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))


class ActionExpert(nn.Module):
    def __init__(self, c: ExpertConfig) -> None:
        super().__init__()
        self.config = c
        self.fourier = FourierFeatures(c.fourier_features)
        n_in = (c.action_dim + 1) * (2 * c.fourier_features + 1)
        self.embed = nn.Sequential(
            nn.Linear(n_in, c.hidden_size),
            nn.SiLU(),
            nn.Linear(c.hidden_size, c.hidden_size),
            nn.LayerNorm(c.hidden_size),
        )
        self.position = nn.Parameter(torch.zeros(c.steps, c.hidden_size))
        if c.state_dim:
            self.state_embed = nn.Sequential(
                nn.Linear(c.state_dim, c.hidden_size), nn.SiLU(), nn.Linear(c.hidden_size, c.hidden_size)
            )
        self.layers = nn.ModuleList(ExpertLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size)
        self.head = nn.Linear(c.hidden_size, c.action_dim)
        nn.init.normal_(self.position, std=0.02)

    def forward(
        self,
        x_t: torch.Tensor,
        t: torch.Tensor,
        context: Context | None = None,
        context_mask: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Velocity ``[B, 64, 2]`` at noisy actions ``x_t`` and flow time ``t`` ``[B]`` (``state``
        ``[B, state_dim]``: the ego-state token's features, when the expert has one)."""
        B, N, _ = x_t.shape
        feats = torch.cat([x_t, t.view(B, 1, 1).expand(B, N, 1)], -1)
        h = self.embed(self.fourier(feats)) + self.position[:N]
        n_state = 0
        if self.config.state_dim:
            if state is None:
                raise ValueError("this action expert has a state token: pass state [B, state_dim]")
            s = self.state_embed(state.to(h.dtype)).unsqueeze(1)
            if self.config.state_on_every_token:  # each waypoint reads the state without going through attention
                h = h + s
            h = torch.cat([s, h], 1)
            n_state = 1
        N = N + n_state
        mask = None
        if context and context_mask is not None and not bool(context_mask.all()):  # (no padding: SDPA's fast path)
            own = torch.ones(B, N, dtype=torch.bool, device=h.device)
            mask = torch.cat([context_mask.bool(), own], 1)[:, None, None, :]
        for i, layer in enumerate(self.layers):
            ctx = context[i % len(context)] if context else None
            if ctx is not None and ctx[0].dtype != h.dtype:
                ctx = (ctx[0].to(h.dtype), ctx[1].to(h.dtype))
            h = layer(h, ctx, mask)
        return self.head(self.norm(h[:, n_state:]))


# --- training ----------------------------------------------------------------------------------------------
@dataclass
class FlowDraw:
    """One (time, noise) draw per row of flow-matching training and the expert's answer to it."""

    x_t: torch.Tensor  # the noisy actions [B, steps, dims]
    t: torch.Tensor  # the flow time [B]
    velocity: torch.Tensor  # the target velocity x - eps
    predicted: torch.Tensor  # the expert's velocity at (x_t, t)

    @property
    def loss(self) -> torch.Tensor:
        """The flow-matching loss: MSE between predicted and target velocity."""
        return F.mse_loss(self.predicted, self.velocity)

    @property
    def estimate(self) -> torch.Tensor:
        """The plan the prediction points at: x_t + (1 - t) v, the one-step estimate of the clean actions."""
        return self.x_t + (1 - self.t.view(-1, 1, 1)) * self.predicted


def flow_draw(
    expert: ActionExpert,
    x1: torch.Tensor,
    context: Context | None = None,
    context_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    state: torch.Tensor | None = None,
    origin: torch.Tensor | None = None,
) -> FlowDraw:
    """A draw of t ~ Beta(1.5, 1) (mapped to [0.001, 0.999]) and noise per row of ``x1``, and the expert's
    velocity there (``.loss`` is the flow-matching loss); ``origin`` (like ``x1``): where each sample's
    source noise is centred (None: at 0)."""
    B = x1.shape[0]
    beta = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0))
    if generator is None:
        t = beta.sample((B,)).to(x1)
    else:  # Beta by inverse CDF of a seeded uniform: Beta(1.5, 1) has CDF u^1.5
        t = torch.rand(B, generator=generator, device=x1.device, dtype=x1.dtype) ** (1 / 1.5)
    t = 0.001 + 0.998 * t
    eps = torch.randn(x1.shape, generator=generator, device=x1.device, dtype=x1.dtype)
    if origin is not None:
        eps = eps + origin.to(eps)
    x_t = t.view(B, 1, 1) * x1 + (1 - t.view(B, 1, 1)) * eps
    return FlowDraw(x_t, t, x1 - eps, expert(x_t, t, context, context_mask, state))


# --- sampling -------------------------------------------------------------------------------------------------
@torch.no_grad()
def sample_ode(
    expert: ActionExpert,
    batch: int,
    context: Context | None = None,
    context_mask=None,
    steps: int = 10,
    generator: torch.Generator | None = None,
    device=None,
    dtype=torch.float32,
    state: torch.Tensor | None = None,
    noise_scale: float = 1.0,
    guidance: Guidance | None = None,
    origin: torch.Tensor | None = None,
) -> torch.Tensor:
    """Euler integration of the learned ODE from noise (t = 0) to actions (t = 1). ``noise_scale``
    < 1 starts closer to the prior's mean (0: a deterministic, mode-seeking plan), ``origin`` [B, steps,
    dims] (None: 0) when the expert was trained from shifted sources. ``guidance`` w (one, or one per
    action dimension) follows :func:`guided_velocity` instead of the plain field."""
    x = _source(expert, batch, generator, device, dtype, noise_scale, origin)
    w = None if guidance is None else torch.as_tensor(guidance, dtype=dtype, device=x.device).reshape(-1)
    if w is not None and bool((w == 1).all()):  # w = 1 is the plain field: one pass, not two
        w = None
    for i in range(steps):
        t = torch.full((batch,), i / steps, device=x.device, dtype=dtype)
        if w is None:
            v = expert(x, t, context, context_mask, state)
        else:
            v = guided_velocity(expert, x, t, context, context_mask, state, w)
        x = x + v / steps
    return x


def guided_velocity(
    expert: ActionExpert,
    x_t: torch.Tensor,
    t: torch.Tensor,
    context: Context | None,
    context_mask: torch.Tensor | None,
    state: torch.Tensor | None,
    guidance: Guidance | torch.Tensor,
) -> torch.Tensor:
    """Classifier-free guidance on the VLM's context (Ho & Salimans, 2022): ``v_s + w (v_c - v_s)``,
    ``v_c`` the field with the context, ``v_s`` with the state token alone (speed, route, command).
    A plan regressed towards what the state alone suggests (creeping on where the camera shows a stop
    sign) is pushed, for w > 1, further along what the camera adds. It needs an expert that trained
    on draws without the context (``[train] flow_unconditional``); w = 1 is the plain field."""
    w = torch.as_tensor(guidance, dtype=x_t.dtype, device=x_t.device).reshape(-1)
    conditional = expert(x_t, t, context, context_mask, state)
    state_only = expert(x_t, t, None, None, state)  # = the context fully masked (tested)
    return state_only + w * (conditional - state_only)


def _source(expert: ActionExpert, batch: int, generator, device, dtype, noise_scale: float, origin) -> torch.Tensor:
    """Where sampling starts: ``origin`` (None: 0) plus ``noise_scale`` x the prior's noise."""
    c = expert.config
    x = noise_scale * torch.randn(batch, c.steps, c.action_dim, generator=generator, device=device, dtype=dtype)
    return x if origin is None else x + origin.to(x)


# one level, or one per action dimension (accel, curvature); log_prob also takes a [B, dims] tensor,
# a level per sample (a batch whose rollouts explored with different levels)
NoiseLevel = float | Sequence[float] | torch.Tensor


def _sde_step_params(x, v, i: int, steps: int, noise_level: NoiseLevel):
    """Mean and std of the Flow-GRPO SDE step i (Alpamayo t = i / steps -> s = 1 - t). A per-dimension
    ``noise_level`` gives a per-dimension std; a dimension at level 0 takes the plain ODE step."""
    dt = -1.0 / steps
    s = 1.0 - i / steps
    s_sigma = min(s, 1.0 - 1.0 / steps)  # s = 1 makes sigma infinite: use the next grid point there
    level = (
        noise_level
        if isinstance(noise_level, float | int)
        else torch.as_tensor(noise_level, dtype=x.dtype, device=x.device)
    )
    sigma = level * math.sqrt(s_sigma / (1 - s_sigma))
    v_s = -v
    mean = x * (1 + sigma**2 * dt / (2 * s)) + v_s * (1 + sigma**2 * (1 - s) / (2 * s)) * dt
    return mean, sigma * math.sqrt(-dt)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: float | torch.Tensor) -> torch.Tensor:
    """Sum over all but the batch dimension of log N(x; mean, std^2); ``std`` may be per last dimension,
    and a dimension with std 0 (deterministic) adds nothing."""
    if isinstance(std, float | int):
        z = (x - mean) / std
        per = -0.5 * z * z - math.log(std) - 0.5 * math.log(2 * math.pi)
        return per.flatten(1).sum(1)
    noisy = std > 0
    safe = torch.where(noisy, std, torch.ones_like(std))
    z = (x - mean) / safe
    per = torch.where(noisy, -0.5 * z * z - torch.log(safe) - 0.5 * math.log(2 * math.pi), torch.zeros_like(z))
    return per.flatten(1).sum(1)


def sample_sde(
    expert: ActionExpert,
    batch: int,
    context: Context | None = None,
    context_mask=None,
    steps: int = 10,
    noise_level: NoiseLevel = 0.5,
    stochastic: str = "one",
    generator: torch.Generator | None = None,
    device=None,
    dtype=torch.float32,
    state: torch.Tensor | None = None,
    noise_scale: float = 1.0,
    origin: torch.Tensor | None = None,
):
    """Sample with the ODE turned into an SDE on ``stochastic`` steps ("one" random step, or "all").

    ``noise_scale`` and ``origin`` place the start as in :func:`sample_ode` (noise 0: explore around the
    deterministic plan; the start is not part of the log-prob, which covers the stochastic steps).
    ``noise_level`` per action dimension, e.g. ``(0.0, 0.5)``, explores the curvature only: the
    acceleration then follows the ODE and stays out of the log-prob.

    Returns (actions [B, 64, 2], chain [steps + 1, B, 64, 2], stochastic mask [steps] bool,
    log-prob [B] summed over the stochastic steps).
    """
    if stochastic not in ("one", "all"):
        raise ValueError(f"stochastic must be 'one' or 'all', got {stochastic!r}")
    x = _source(expert, batch, generator, device, dtype, noise_scale, origin)
    if stochastic == "all":
        mask = torch.ones(steps, dtype=torch.bool)
    else:
        mask = torch.zeros(steps, dtype=torch.bool)
        mask[int(torch.randint(steps, (1,), generator=generator, device=device))] = True
    chain, logp = [x], torch.zeros(batch, device=x.device, dtype=dtype)
    with torch.no_grad():
        for i in range(steps):
            t = torch.full((batch,), i / steps, device=x.device, dtype=dtype)
            v = expert(x, t, context, context_mask, state)
            if mask[i]:
                mean, std = _sde_step_params(x, v, i, steps, noise_level)
                noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=dtype)
                x = mean + std * noise
                logp = logp + gaussian_log_prob(x, mean, std)
            else:
                x = x + v / steps
            chain.append(x)
    return x, torch.stack(chain), mask, logp


def log_prob(
    expert: ActionExpert,
    chain: torch.Tensor,
    mask: torch.Tensor,
    context: Context | None = None,
    context_mask=None,
    noise_level: NoiseLevel = 0.5,
    state: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probability [B] of a stored denoising chain under the expert's current weights (with grad).

    ``mask`` marks the stochastic steps: [steps] for the whole batch, or [B, steps] per sample (a
    training batch mixes decisions that each drew their own random step); each step's expert pass
    runs only on the samples stochastic there. ``noise_level`` may be [B, dims]: a level per sample.
    """
    steps, batch = chain.shape[0] - 1, chain.shape[1]
    per_sample = isinstance(noise_level, torch.Tensor) and noise_level.dim() == 2
    mask = mask.to(chain.device).bool()
    if mask.dim() == 1:
        mask = mask.expand(batch, steps)
    logp = torch.zeros(batch, device=chain.device, dtype=chain.dtype)
    for i in range(steps):
        rows = mask[:, i].nonzero().squeeze(1)
        if len(rows) == 0:
            continue
        full = len(rows) == batch
        x = chain[i] if full else chain[i, rows]
        ctx = context if full or context is None else [(k[rows], v[rows]) for k, v in context]
        cmask = context_mask if full or context_mask is None else context_mask[rows]
        st = state if full or state is None else state[rows]
        t = torch.full((len(rows),), i / steps, device=x.device, dtype=x.dtype)
        level = noise_level
        if per_sample:
            level = (noise_level if full else noise_level[rows]).to(x)[:, None, :]
        mean, std = _sde_step_params(x, expert(x, t, ctx, cmask, st), i, steps, level)
        target = chain[i + 1] if full else chain[i + 1, rows]
        logp = logp.index_add(0, rows, gaussian_log_prob(target, mean, std))
    return logp
