"""Alpamayo-R1 in the release's layout: a Qwen3-VL backbone, a Qwen3-VL text model as the action expert,
the per-waypoint action-input projection, a linear action output and the unicycle action space.

The expert has the VLM's layer count, kv heads and head size, so its layer i attends to [the VLM's
layer-i cache of the prefix ; its own 64 action tokens]. The prefix is the prompt, the reasoning and
``<|traj_future_start|>``; the action tokens sit at positions ``prefix length + rope delta + 0..63``
on all three M-RoPE axes and see the whole prefix and each other (``expert_non_causal_attention``).
Flow time runs from 0 (noise) to 1 (data); Euler steps on a uniform grid.

Built from transformers' own classes where the release uses them; the release's repository
(NVlabs/alpamayo, Apache-2.0) is a source of facts only. Weights load strictly: every key, every shape.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F
from transformers import (
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedTokenizerFast,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLTextConfig,
    Qwen3VLTextModel,
    StoppingCriteria,
    StoppingCriteriaList,
)

from agents.alpamayo.action_space import UnicycleActionSpace, yaw_rotation
from agents.alpamayo.config import ReleaseConfig, read_release_config
from agents.alpamayo.prompt import HISTORY_POSES, build_tokenizer, encode_prompts, image_processor
from agents.parts import TrainableParts
from agents.vla.checkpoint import CheckpointError, load_strict, load_weights
from agents.vla.flow import NoiseLevel, log_prob, sample_sde
from envs.interface import TRAJ_HIGH, TRAJ_LOW

# files of the base VLM folder the model needs besides weights (copied beside a saved model)
BASE_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "preprocessor_config.json",
)


class FourierFeatures(nn.Module):
    """sqrt(2) [sin(2 pi x f), cos(2 pi x f)] over log-spaced frequencies 1..max_freq (a buffer)."""

    def __init__(self, n: int, max_freq: float) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.logspace(0, math.log10(max_freq), n // 2)[None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        angle = 2 * math.pi * x.unsqueeze(-1) * self.freqs
        return math.sqrt(2) * torch.cat([torch.sin(angle), torch.cos(angle)], -1)


class _Encoder(nn.Module):
    def __init__(self, trunk: nn.Sequential) -> None:
        super().__init__()
        self.trunk = trunk


class ActionInProjection(nn.Module):
    """Per waypoint [f(accel), f(curvature), f(t)] -> MLP (SiLU, RMSNorm between layers) -> LayerNorm."""

    def __init__(self, n_fourier: int, max_freq: float, hidden: int, layers: int, out: int) -> None:
        super().__init__()
        self.sinus = nn.ModuleList([FourierFeatures(n_fourier, max_freq) for _ in range(2)])
        self.timestep_fourier_encoder = FourierFeatures(n_fourier, max_freq)
        trunk: list[nn.Module] = [nn.Linear(3 * n_fourier, hidden), nn.SiLU()]
        for _ in range(layers - 1):
            trunk += [nn.RMSNorm(hidden, eps=1e-5), nn.Linear(hidden, hidden), nn.SiLU()]
        trunk += [nn.RMSNorm(hidden, eps=1e-5), nn.Linear(hidden, out)]
        self.encoder = _Encoder(nn.Sequential(*trunk))
        self.norm = nn.LayerNorm(out, eps=1e-5)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``x`` [B, 64, 2] standardised actions, ``t`` flow time ([B], [B, 1] or [B, 1, 1])."""
        t = t.reshape(t.shape[0], -1)[:, -1:].expand(-1, x.shape[1]).to(x)
        feats = [self.sinus[0](x[..., 0]), self.sinus[1](x[..., 1]), self.timestep_fourier_encoder(t)]
        # the features in float32 (the flow state is), the MLP in the weights' dtype (bf16 on a GPU)
        return self.norm(self.encoder.trunk(torch.cat(feats, -1).to(self.norm.weight.dtype)))


@dataclass
class Prefix:
    """What the expert reads: the VLM's per-layer keys / values ``[B, kv, L, d]`` of the prefix, which of
    the L positions are real ``[B, L]`` (not padding, not past the prefix's end), and the M-RoPE
    position of the first action token ``[B]``."""

    cache: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor
    start: torch.Tensor

    def repeat(self, n: int) -> Prefix:
        return Prefix(
            [(k.repeat_interleave(n, 0), v.repeat_interleave(n, 0)) for k, v in self.cache],
            self.mask.repeat_interleave(n, 0),
            self.start.repeat_interleave(n, 0),
        )


@dataclass(frozen=True)
class FieldShape:
    steps: int
    action_dim: int


class VelocityField:
    """The expert as ``field(x, t, context, context_mask, start)``: the signature the project's flow
    samplers and Flow-SDE log-probs use (:mod:`agents.vla.flow`), so GRPO / PPO work on this head too."""

    def __init__(self, model: AlpamayoR1) -> None:
        self.model = model
        self.config = FieldShape(model.n_waypoints, 2)

    def __call__(self, x, t, context, context_mask, start):
        return self.model.velocity(x, t, Prefix(list(context), context_mask, start))


class _MaskTrajectoryTokens(LogitsProcessor):
    """The reasoning never emits trajectory tokens (``<i0>``..): the release masks them while generating."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores[:, self.lo : self.hi] = -float("inf")
        return scores


class _Force(LogitsProcessor):
    """Emit the given ids (then anything): a fixed reasoning replayed through ``generate``."""

    def __init__(self, ids: torch.Tensor, prompt_len: int) -> None:
        self.ids, self.prompt_len = ids.tolist(), prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        k = input_ids.shape[1] - self.prompt_len
        if k < len(self.ids):
            forced = torch.full_like(scores, -float("inf"))
            forced[:, self.ids[k]] = 0.0
            return forced
        return scores


class _OneTokenPast(StoppingCriteria):
    """Stop once every row has generated one token after ``<|traj_future_start|>``: that token's step
    feeds ``<|traj_future_start|>`` into the cache (the expert's prefix ends with it)."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        done = (input_ids[:, :-1] == self.token).any(1)
        return done.all().expand(input_ids.shape[0]).clone()


def resolve_base(path: Path, name: str, base: str | Path | None) -> Path:
    """The base VLM folder: ``base`` when given; else ``vlm_name_or_path`` beside the checkpoint folder
    (the release's relative convention) or inside it (a folder this project saved), else the local
    Hugging Face cache (offline). Never the network."""
    if base is not None:
        if not Path(base).is_dir():
            raise CheckpointError(f"{base}: the base VLM folder does not exist")
        return Path(base)
    for candidate in (path.parent / name, path / name, path / "base_vlm", Path(name)):
        if (candidate / "config.json").is_file():
            return candidate
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:
        raise CheckpointError(
            f"{path / 'config.json'}: vlm_name_or_path = {name!r} is not a local folder (tried beside and inside "
            f"{path}) nor in the local Hugging Face cache; pass the base VLM folder: alpamayo:{path}?base=DIR"
        ) from None


class AlpamayoR1(nn.Module, TrainableParts):
    """A released Alpamayo-R1 checkpoint, ready for inference, SFT of its heads and RL of its expert."""

    def __init__(self, config: ReleaseConfig, raw_config: dict[str, Any], base: Path) -> None:
        super().__init__()
        self.config, self.raw_config, self.base = config, raw_config, base
        self.tokenizer: PreTrainedTokenizerFast = build_tokenizer(base, config)
        self.processor = image_processor(base, config)
        try:
            vlm_config = Qwen3VLConfig.from_pretrained(base, local_files_only=True)
        except Exception as e:
            raise CheckpointError(f"{base / 'config.json'}: not a Qwen3-VL config ({type(e).__name__}: {e})") from None
        if vlm_config.model_type != "qwen3_vl":
            raise CheckpointError(f"{base / 'config.json'}: model_type {vlm_config.model_type!r}, not 'qwen3_vl'")
        vlm_config.text_config.vocab_size = config.vocab_size
        vlm_config._attn_implementation = "sdpa"
        self.vlm = Qwen3VLForConditionalGeneration(vlm_config)
        text = vlm_config.text_config.to_dict()
        text.update(config.expert_cfg)
        expert_config = Qwen3VLTextConfig(**text)
        expert_config._attn_implementation = "sdpa"
        if (expert_config.num_key_value_heads, expert_config.head_dim) != (
            vlm_config.text_config.num_key_value_heads,
            vlm_config.text_config.head_dim,
        ):
            raise CheckpointError(f"{base}: expert_cfg must keep the VLM's kv heads and head_dim (it reads its cache)")
        self.expert = Qwen3VLTextModel(expert_config)
        self.expert.embed_tokens = None  # the expert reads action embeddings, never token ids
        p = config.action_in_proj_cfg
        hidden = expert_config.hidden_size
        self.action_in_proj = ActionInProjection(
            p.num_fourier_feats, p.max_freq, p.hidden_size, p.num_enc_layers, hidden
        )
        self.action_out_proj = nn.Linear(hidden, 2)
        self.action_space = UnicycleActionSpace(config.action_space_cfg.solver())
        self.n_waypoints = config.action_space_cfg.n_waypoints
        self.future_start = config.traj_token_ids.future_start
        self.max_reasoning_tokens = 256  # the generation budget of a Chain-of-Causation
        self.cot_end = self.tokenizer.convert_tokens_to_ids("<|cot_end|>")

    # --- persistence ------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, base: str | Path | None = None, device: str = "cpu") -> AlpamayoR1:
        """A folder in the release's layout (``config.json`` + ``model.safetensors``), loaded strictly."""
        path = Path(path)
        config, raw = read_release_config(path / "config.json")
        model = cls(config, raw, resolve_base(path, config.vlm_name_or_path, base))
        files = sorted(path.glob("model*.safetensors"))
        if not files:
            raise CheckpointError(f"{path}: no model.safetensors")
        weights: dict[str, torch.Tensor] = {}
        for file in files:
            weights.update(load_weights(file))
        load_strict(model, weights, files[0] if len(files) == 1 else path)
        return model.to(device).eval()

    def in_dtype(self, dtype: torch.dtype) -> AlpamayoR1:
        """Weights in ``dtype`` (bf16 on a GPU, as the release runs), the action-space fits kept in float32
        as the release keeps them; the flow state stays float32 either way."""
        self.to(dtype)
        self.action_space.float()
        return self

    def save_pretrained(self, path: str | Path) -> None:
        """The release's layout again: its config unchanged, every parameter and buffer in safetensors, and
        the base VLM's tokenizer / processor files in ``base_vlm/`` so the folder loads on its own."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, path / "model.safetensors", metadata={"format": "pt"})
        (path / "config.json").write_text(json.dumps(self.raw_config, indent=2, sort_keys=True) + "\n")
        (path / "base_vlm").mkdir(exist_ok=True)
        for name in BASE_FILES:
            if (self.base / name).is_file() and (self.base / name).resolve() != (path / "base_vlm" / name).resolve():
                shutil.copyfile(self.base / name, path / "base_vlm" / name)

    @property
    def camera_size(self) -> tuple[int, int]:
        """(H, W) for the cameras: the image the processor keeps unresized (sides multiples of patch x merge,
        area within the checkpoint's pixel budget) closest to 16:9, the larger on a tie: 320 x 576 for the
        release, as its 1080 x 1920 frames become."""
        unit = self.processor.patch_size * self.processor.merge_size
        low, high = self.processor.size["shortest_edge"], self.processor.size["longest_edge"]
        sides = range(unit, 4096 + unit, unit)
        fits = [(h, w) for h in sides for w in sides if low <= h * w <= high and w >= h]
        if not fits:
            raise CheckpointError(f"{self.base}: no image size fits the pixel budget [{low}, {high}]")
        return min(fits, key=lambda hw: (abs(hw[1] / hw[0] - 16 / 9), -hw[0] * hw[1]))

    @property
    def field(self) -> VelocityField:
        return VelocityField(self)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # --- inputs -------------------------------------------------------------------------------------------------
    def prepare(self, observations: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Model inputs from the project's observations: cameras ``[n_cams, n_frames, H, W, 3]`` (the
        alpamayo4 rig's order is the release's), ego history ``[16, 4]`` (x, y, yaw, speed in the t0 frame;
        z = 0 on a flat world)."""
        images, xyz, rot = [], [], []
        for obs in observations:
            cams = np.asarray(obs["cameras"])
            images.append(cams.reshape(-1, *cams.shape[-3:]))
            h = torch.as_tensor(np.asarray(obs["ego_history"])[-HISTORY_POSES:], dtype=torch.float32)
            xyz.append(torch.cat([h[:, :2], torch.zeros(len(h), 1)], -1))
            rot.append(yaw_rotation(h[:, 2]))
        xyz_t, rot_t = torch.stack(xyz), torch.stack(rot)
        batch = encode_prompts(self.tokenizer, self.processor, self.config, images, xyz_t)
        batch["history_xyz"], batch["history_rot"] = xyz_t, rot_t
        return {k: v.to(self.device) for k, v in batch.items()}

    def _vlm_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        keys = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")
        return {k: batch[k] for k in keys}

    # --- the expert -------------------------------------------------------------------------------------------------
    def velocity(self, x: torch.Tensor, t: torch.Tensor, prefix: Prefix) -> torch.Tensor:
        """The expert's velocity ``[B, 64, 2]`` at standardised actions ``x`` and flow time ``t``."""
        return self.action_out_proj(self.expert_hidden(x, t, prefix)).float()

    def expert_hidden(self, x: torch.Tensor, t: torch.Tensor, prefix: Prefix) -> torch.Tensor:
        """The expert's last hidden states of the 64 action tokens (after its final norm)."""
        emb = self.action_in_proj(x, t).to(self.expert.dtype)
        cache = DynamicCache()
        for i, (k, v) in enumerate(prefix.cache):
            cache.update(k, v, i)
        n, L = x.shape[1], prefix.mask.shape[1]
        seen = torch.cat([prefix.mask.bool(), prefix.mask.new_ones(len(x), n).bool()], 1)  # [B, L + n]
        if self.config.expert_non_causal_attention:
            allowed = seen[:, None, None, :].expand(-1, 1, n, -1)
        else:
            causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            allowed = seen[:, None, None, :].expand(-1, 1, n, -1).clone()
            allowed[..., L:] &= causal
        mask = torch.zeros(allowed.shape, dtype=emb.dtype, device=x.device).masked_fill(
            ~allowed, torch.finfo(emb.dtype).min
        )
        pos = (prefix.start[:, None] + torch.arange(n, device=x.device)).long()
        out = self.expert(
            inputs_embeds=emb,
            position_ids=pos.unsqueeze(0).expand(3, -1, -1),
            past_key_values=cache,
            attention_mask=mask,
            use_cache=True,
        )
        return out.last_hidden_state[:, -n:]

    def prefix_of(self, out, batch: dict[str, torch.Tensor], ids: torch.Tensor, keep: torch.Tensor) -> Prefix:
        """The expert's prefix from a VLM pass over ``ids`` [B, n] whose cache holds the first L of them:
        ``keep`` [B, n] marks the real prefix tokens (not padding, not past ``<|traj_future_start|>``).
        The action tokens start one M-RoPE position after the prefix's last token."""
        cache = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        L = cache[0][0].shape[2]
        positions, _ = self.vlm.model.get_rope_index(
            ids, batch["mm_token_type_ids"], batch["image_grid_thw"], attention_mask=keep.long()
        )
        last = keep.shape[1] - 1 - torch.argmax(keep.flip(1).long(), 1)
        start = positions[0].gather(1, last[:, None]).squeeze(1) + 1
        return Prefix(cache, keep[:, :L].long(), start)

    def teacher_forced_prefix(self, batch: dict[str, torch.Tensor], reasoning_ids: torch.Tensor, grad: bool = False):
        """One VLM pass over prompt + given reasoning ids ``[B, n]`` (-1 = none; each row ends with
        ``<|traj_future_start|>``): the expert's prefix and the logits over the reasoning."""
        valid = reasoning_ids >= 0
        gen = torch.where(valid, reasoning_ids, torch.full_like(reasoning_ids, self.tokenizer.pad_token_id))
        inputs = self._vlm_inputs(batch)
        inputs["input_ids"] = torch.cat([batch["input_ids"], gen], 1)
        inputs["attention_mask"] = torch.cat([batch["attention_mask"], valid.long()], 1)
        inputs["mm_token_type_ids"] = torch.cat([batch["mm_token_type_ids"], torch.zeros_like(gen)], 1)
        self.vlm.model.rope_deltas = None
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            out = self.vlm(**inputs, use_cache=True)
        prefix = self.prefix_of(out, inputs, inputs["input_ids"], inputs["attention_mask"].bool())
        return prefix, out.logits

    @torch.no_grad()
    def generate_reasoning(
        self,
        batch: dict[str, torch.Tensor],
        generator: torch.Generator | None = None,
        temperature: float = 0.6,
        top_p: float = 0.98,
        max_new_tokens: int = 256,
        forced: torch.Tensor | None = None,
        logits: bool = False,
    ) -> tuple[torch.Tensor, Prefix, Any]:
        """Sample the Chain-of-Causation (trajectory tokens masked) until ``<|traj_future_start|>``; returns
        the generated ids ``[B, n]`` (-1 after the prefix's end) and the expert's prefix from the
        incremental cache, as the release does, and ``generate``'s output (its raw ``logits`` per step when
        asked). ``temperature=0`` decodes greedily; ``forced`` ids are emitted instead of sampled ones
        (the reference check replays a fixed reasoning this way)."""
        seed = (
            int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
            if generator is not None
            else None
        )
        lo = self.config.traj_token_start_idx
        self.vlm.model.rope_deltas = None
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.vlm.generate(
                **self._vlm_inputs(batch),
                max_new_tokens=max_new_tokens,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=top_p if temperature > 0 else None,
                top_k=None,
                logits_processor=LogitsProcessorList(
                    [_MaskTrajectoryTokens(lo, lo + self.config.traj_vocab_size)]
                    + ([_Force(forced, batch["input_ids"].shape[1])] if forced is not None else [])
                ),
                stopping_criteria=StoppingCriteriaList([_OneTokenPast(self.future_start)]),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=None,
                return_dict_in_generate=True,
                output_logits=logits,
            )
        P = batch["input_ids"].shape[1]
        gen = out.sequences[:, P:]
        hit = gen == self.future_start
        ended = hit.any(1)
        last = torch.full_like(ended, gen.shape[1] - 1, dtype=torch.long)  # no end: the whole budget
        first = torch.where(ended, torch.argmax(hit.long(), 1), last)
        index = torch.arange(gen.shape[1], device=gen.device)[None]
        upto = (index <= first[:, None]) & (index < gen.shape[1] - 1)  # the last token never entered the cache
        ids = torch.where(upto, gen, torch.full_like(gen, -1))
        keep = torch.cat([batch["attention_mask"].bool(), upto], 1)
        full = torch.cat([batch["input_ids"], gen], 1)
        mm = torch.cat([batch["mm_token_type_ids"], torch.zeros_like(gen)], 1)
        prefix = self.prefix_of(out, {**batch, "mm_token_type_ids": mm}, full, keep)
        return ids, prefix, out

    def decode_reasoning(self, ids: torch.Tensor) -> list[str]:
        stops = {self.cot_end, self.future_start}
        rows = [[t for t in row if t >= 0] for row in ids.tolist()]
        return [
            self.tokenizer.decode(row[: next((i for i, t in enumerate(row) if t in stops), len(row))]).strip()
            for row in rows
        ]

    # --- sampling ----------------------------------------------------------------------------------------------------
    def euler(self, prefix: Prefix, x0: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        """Euler from noise ``x0`` (t = 0) to actions (t = 1); returns all states ``[B, steps + 1, 64, 2]``."""
        n = steps or self.config.diffusion_cfg.num_inference_steps
        grid = torch.linspace(0, 1, n + 1, device=x0.device)
        states = [x0]
        for k in range(n):
            t = grid[k].expand(len(x0)).reshape(-1, 1, 1)
            states.append(states[-1] + (grid[k + 1] - grid[k]) * self.velocity(states[-1], t, prefix))
        return torch.stack(states, 1)

    def to_trajectory(self, action: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Standardised actions -> t0-frame positions ``[B, 64, 3]`` and yaws ``[B, 64]`` (release conventions)."""
        v0 = self.action_space.initial_speed(batch["history_xyz"], batch["history_rot"])
        return self.action_space.action_to_trajectory(action, v0, batch["history_xyz"][:, -1, 2])

    def plan(self, action: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The plan the env drives ``[B, 64, 3]`` (x, y, yaw), positions clipped to its action space as
        the VLA's are (:func:`agents.vla.action_space.to_plan`): the release lets a plan reverse."""
        xyz, yaw = self.to_trajectory(action.float(), batch)
        low, high = xyz.new_tensor(TRAJ_LOW[0, :2]), xyz.new_tensor(TRAJ_HIGH[0, :2])
        return torch.cat([torch.maximum(torch.minimum(xyz[..., :2], high), low), yaw.unsqueeze(-1)], -1)

    def empty_reasoning(self, batch: dict[str, torch.Tensor]) -> Prefix:
        """The prefix without a Chain-of-Causation: the prompt, ``<|cot_end|>`` and ``<|traj_future_start|>``
        (how the trajectory head runs when reasoning is off, in rollouts and their log-probs)."""
        n = batch["input_ids"].shape[0]
        prefix, _ = self.teacher_forced_prefix(batch, self.reasoning_ids([""] * n), grad=torch.is_grad_enabled())
        return prefix

    @torch.no_grad()
    def act_batch(
        self,
        observations: list[dict[str, Any]],
        reasoning: bool = True,
        generator: torch.Generator | None = None,
        noise_scale: float = 1.0,
        temperature: float = 0.6,
        steps: int | None = None,
    ) -> list[dict[str, Any]]:
        """Reasoning (sampled at ``temperature``, top-p 0.98, as the release does), then the expert's
        Euler plan from ``noise_scale`` x N(0, I) for each observation, in ``steps`` Euler steps
        (None: the release's ``num_inference_steps``)."""
        batch = self.prepare(observations)
        if reasoning:
            budget = self.max_reasoning_tokens
            ids, prefix, _ = self.generate_reasoning(batch, generator, temperature, max_new_tokens=budget)
            texts: list[str | None] = list(self.decode_reasoning(ids))
        else:
            prefix, texts = self.empty_reasoning(batch), [None] * len(observations)
        x0 = noise_scale * torch.randn(len(observations), self.n_waypoints, 2, generator=generator, device=self.device)
        plans = self.plan(self.euler(prefix, x0, steps)[:, -1], batch).cpu().numpy().astype(np.float32)
        return [{"trajectory": plans[i], "reasoning": texts[i]} for i in range(len(observations))]

    # --- RL hooks: the same as the project VLA's (agents.vla.model.VLA), so GRPO / PPO run on this model -------
    def sample_with_log_prob(
        self,
        observations: list[dict[str, Any]],
        noise_level: NoiseLevel = 0.5,
        stochastic: str = "one",
        generator: torch.Generator | None = None,
        reasoning: bool = False,
        temperature: float = 1.0,
        init_noise: float = 1.0,
        steps: int | None = None,
    ):
        """Flow-SDE sampling of the plan in ``steps`` denoising steps (None: the release's
        ``num_inference_steps``): ``(plans, chain, stochastic-step mask, log-prob)``; with
        ``reasoning`` the Chain-of-Causation is sampled first (full softmax at ``temperature``,
        trajectory tokens masked) and its ids [B, n] (-1 after ``<|traj_future_start|>``) and summed
        log-prob [B] follow."""
        batch = self.prepare(observations)
        if reasoning:
            ids, prefix, out = self.generate_reasoning(
                batch, generator, temperature, top_p=1.0, max_new_tokens=self.max_reasoning_tokens, logits=True
            )
            logits = torch.stack(out.logits, 1)[:, : ids.shape[1]]
            text_logp = self._token_log_prob(logits, ids, temperature)
        else:
            with torch.no_grad():
                prefix = self.empty_reasoning(batch)
        steps = steps or self.config.diffusion_cfg.num_inference_steps
        u, chain, smask, logp = sample_sde(
            self.field,
            len(observations),
            prefix.cache,
            prefix.mask,
            steps,
            noise_level,
            stochastic,
            generator,
            self.device,
            state=prefix.start,
            noise_scale=init_noise,
        )
        plans = self.plan(u, batch)
        if reasoning:
            return plans, chain, smask, logp, ids, text_logp
        return plans, chain, smask, logp

    def _token_log_prob(self, logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
        """Summed log-prob [B] of ``ids`` [B, n] (-1 = none) under ``logits`` [B, n, V] at ``temperature``,
        with the trajectory tokens masked as in sampling."""
        lo = self.config.traj_token_start_idx
        logits = logits.float() / temperature
        logits[..., lo : lo + self.config.traj_vocab_size] = -float("inf")
        valid = ids >= 0
        lp = torch.log_softmax(logits, -1).gather(-1, ids.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        return torch.where(valid, lp, torch.zeros_like(lp)).sum(1)

    def chain_log_prob(self, observations, chain, smask, noise_level: NoiseLevel = 0.5, train_vlm: bool = False):
        """Log-prob [B] of stored denoising chains (reasoning off), with grad through the expert."""
        batch = self.prepare(observations)
        with torch.set_grad_enabled(train_vlm and torch.is_grad_enabled()):
            prefix = self.empty_reasoning(batch)
        return log_prob(self.field, chain, smask, prefix.cache, prefix.mask, noise_level, state=prefix.start)

    def joint_log_prob(
        self,
        observations,
        reasoning_ids: torch.Tensor,
        chain,
        smask,
        noise_level: NoiseLevel = 0.5,
        temperature: float = 1.0,
        train_vlm: bool = True,
    ):
        """(reasoning log-prob [B], chain log-prob [B]) of stored samples from one teacher-forced pass."""
        batch = self.prepare(observations)
        ids = reasoning_ids.to(self.device)
        prefix, logits = self.teacher_forced_prefix(batch, ids, grad=train_vlm)
        P = batch["input_ids"].shape[1]
        text_logp = self._token_log_prob(logits[:, P - 1 : P - 1 + ids.shape[1]], ids, temperature)
        traj_logp = log_prob(self.field, chain, smask, prefix.cache, prefix.mask, noise_level, state=prefix.start)
        return text_logp, traj_logp

    # --- training ------------------------------------------------------------------------------------------------
    def target_actions(self, batch: dict[str, torch.Tensor], trajectories: torch.Tensor) -> torch.Tensor:
        """Standardised actions of t0-frame plans ``[B, 64, 3]`` (x, y, yaw), through the release's fit."""
        traj = trajectories.to(self.device, torch.float32)
        xyz = torch.cat([traj[..., :2], torch.zeros_like(traj[..., :1])], -1)
        return self.action_space.trajectory_to_action(
            batch["history_xyz"], batch["history_rot"], xyz, yaw_rotation(traj[..., 2])
        )["action"]

    def flow_time(self, n: int, sampler: str, generator: torch.Generator | None = None) -> torch.Tensor:
        """Training flow times ``[n]``: ``release`` t = 0.999 (1 - u), u ~ Beta(1.5, 1) (more time near
        the noise); ``uniform``; or ``loopdrive`` 0.001 + 0.998 u (the project VLA's, near the data)."""
        u = torch.rand(n, generator=generator, device=self.device)
        if sampler == "uniform":
            return u
        beta = u ** (1 / 1.5)  # Beta(1.5, 1) by its inverse CDF
        if sampler == "release":
            return 0.999 - 0.999 * beta
        if sampler == "loopdrive":
            return 0.001 + 0.998 * beta
        raise ValueError(f"unknown flow-time sampler {sampler!r}: release, uniform or loopdrive")

    def flow_loss(
        self,
        prefix: Prefix,
        x: torch.Tensor,
        t: torch.Tensor | None = None,
        noise: torch.Tensor | None = None,
        sampler: str = "release",
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """MSE between the expert's velocity at t x + (1 - t) noise and the target x - noise."""
        if t is None:
            t = self.flow_time(len(x), sampler, generator)
        if noise is None:
            noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        t = t.reshape(-1, 1, 1).to(x)
        return F.mse_loss(self.velocity(t * x + (1 - t) * noise, t, prefix), x - noise)

    def losses(
        self,
        observations: list[dict[str, Any]],
        reasoning: list[str],
        trajectories: torch.Tensor,
        generator: torch.Generator | None = None,
        flow_samples: int = 1,
        sampler: str | None = None,
    ) -> dict[str, torch.Tensor]:
        """Teacher-forced SFT: cross-entropy on the reasoning and flow matching on the plan's actions
        (``flow_samples`` (time, noise) draws per sample from one VLM pass; ``sampler`` of the flow
        time: the checkpoint's by default, see :meth:`flow_time`). Gradients reach what
        :meth:`set_trainable` left trainable."""
        batch = self.prepare(observations)
        ids = self.reasoning_ids(reasoning)
        train_vlm = any(p.requires_grad for p in self.vlm.parameters())
        prefix, logits = self.teacher_forced_prefix(batch, ids, grad=train_vlm)
        P = batch["input_ids"].shape[1]
        labels = torch.where(ids >= 0, ids, torch.full_like(ids, -100))
        text = F.cross_entropy(logits[:, P - 1 : -1].flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        target = self.target_actions(batch, trajectories)
        if flow_samples > 1:
            prefix, target = prefix.repeat(flow_samples), target.repeat_interleave(flow_samples, 0)
        sampler = sampler or self.default_flow_time
        flow = self.flow_loss(prefix, target, sampler=sampler, generator=generator)
        return {"text": text, "flow": flow}

    @property
    def default_flow_time(self) -> str:
        """The checkpoint's own training-time sampler (``beta``: the release's)."""
        return "release" if self.config.diffusion_cfg.train_timestep_sampler == "beta" else "uniform"

    def reasoning_ids(self, reasoning: list[str]) -> torch.Tensor:
        """Token ids of reasoning texts, each followed by ``<|cot_end|><|traj_future_start|>``, right-padded with -1."""
        rows = [
            self.tokenizer(r, add_special_tokens=False)["input_ids"] + [self.cot_end, self.future_start]
            for r in reasoning
        ]
        n = max(len(r) for r in rows)
        return torch.tensor([r + [-1] * (n - len(r)) for r in rows], device=self.device)

    # the parts a trainer can move, as the VLA's: the trajectory head (expert + action projections), the VLM
    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "expert": ("expert.", "action_in_proj.", "action_out_proj."),
        "vlm": ("vlm.",),
        "both": ("expert.", "action_in_proj.", "action_out_proj.", "vlm."),
        "none": (),
    }
