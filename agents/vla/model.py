"""The Alpamayo-style VLA: a transformers VLM that writes its Chain-of-Causation, and a flow-matching
action expert that attends to the VLM's key / value cache (prompt + reasoning) to produce the plan.

Inputs (REFERENCE.md section 1): the rig's frames camera-major (4 cameras x 4 frames = 16 images),
48 ego-history delta tokens, an optional route-command token, and the Alpamayo prompt; the assistant
turn is prefilled with the reasoning-start token. Output: reasoning text (greedy, KV-cached), then
64 (acceleration, curvature) actions from the expert, integrated to ego-frame (x, y, yaw).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessorPil
from transformers.utils import logging as hf_logging

from agents.parts import TrainableParts
from agents.vla import action_space, route_prior
from agents.vla.checkpoint import CheckpointError, check_finite, check_tokenizer, load_strict, load_weights, read_config
from agents.vla.clearance import clearance_loss, lead_bound, synthetic_leads
from agents.vla.config import PRESETS, VLAConfig
from agents.vla.flow import (
    ActionExpert,
    ExpertConfig,
    FlowDraw,
    Guidance,
    NoiseLevel,
    flow_draw,
    log_prob,
    sample_ode,
    sample_sde,
)
from agents.vla.manoeuvre import ManoeuvreHead, is_lane_change, manoeuvre_names
from agents.vla.perception import PerceptionProbe
from agents.vla.positions import RopePositions
from agents.vla.tokenizer import (
    COMMANDS,
    COT_END,
    COT_START,
    SPECIAL,
    build_tokenizer,
    history_tokens,
    route_tokens,
)
from envs.observations import HEADING_ERROR, LATERAL_ERROR

SYSTEM = "You are a driving assistant."
INSTRUCTION = "output the chain-of-thought reasoning of the driving process, then output the future trajectory"
# the modules saved beside the backbone, each as its own file (the optional heads when the model has them)
MODULE_FILES = {
    "expert": "action_expert.safetensors",
    "perception_probe": "perception_probe.safetensors",
    "manoeuvre_head": "manoeuvre_head.safetensors",
}


# the Qwen-VL config fields that name the vision tokens, and their tokens
VISION_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}


def _backbone(cfg: VLAConfig, tok: PreTrainedTokenizerFast) -> nn.Module:
    p = PRESETS[cfg.size]
    ids = {name: tok.convert_tokens_to_ids(token) for name, token in VISION_TOKENS.items()}
    text = dict(
        vocab_size=len(tok),
        hidden_size=p["hidden"],
        intermediate_size=p["intermediate"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv_heads"],
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    head_dim = p["hidden"] // p["heads"]
    sec = head_dim // 2
    mrope_section = [sec // 4, (sec - sec // 4) // 2, sec - sec // 4 - (sec - sec // 4) // 2]
    vision = dict(
        depth=p["vision_depth"],
        hidden_size=p["vision_hidden"],
        intermediate_size=2 * p["vision_hidden"],
        num_heads=max(1, p["vision_hidden"] // 32),
        out_hidden_size=p["hidden"],
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    )
    if cfg.backbone == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        text["rope_scaling"] = {"type": "mrope", "mrope_section": mrope_section}
        vision |= {"window_size": 56, "fullatt_block_indexes": [p["vision_depth"] - 1]}
        return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids))
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    text["head_dim"] = head_dim
    text["rope_scaling"] = {"rope_type": "default", "mrope_section": mrope_section, "mrope_interleaved": True}
    vision["deepstack_visual_indexes"] = []
    return Qwen3VLForConditionalGeneration(Qwen3VLConfig(text_config=text, vision_config=vision, **ids))


def _local_backbone(path: Path, tokenizer: PreTrainedTokenizerFast | None):
    """A pretrained Qwen2.5-VL / Qwen3-VL from a local folder, with its own tokenizer extended by the
    VLA's special tokens (reasoning markers, history bins, commands; embeddings resized to match)."""
    from transformers import (
        AutoConfig,
        AutoTokenizer,
        Qwen2_5_VLForConditionalGeneration,
        Qwen3VLForConditionalGeneration,
    )

    if not (path / "config.json").exists():
        raise CheckpointError(f"{path}: not a local transformers model folder (no config.json)")
    try:
        kind = AutoConfig.from_pretrained(path, local_files_only=True).model_type
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path / 'config.json'}: {e}") from None
    classes = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen3_vl": Qwen3VLForConditionalGeneration}
    if kind not in classes:
        raise CheckpointError(f"{path}: a {kind!r} model; the VLA supports {sorted(classes)}")
    tok = tokenizer or AutoTokenizer.from_pretrained(path, local_files_only=True)
    missing = [t for t in SPECIAL if t not in tok.get_vocab()]
    if missing:
        tok.add_special_tokens({"additional_special_tokens": missing})
    hf_logging.disable_progress_bar()  # no "Loading weights" bar per load
    try:
        model, info = classes[kind].from_pretrained(path, local_files_only=True, output_loading_info=True)
    except (OSError, RuntimeError, ValueError, SafetensorError) as e:
        raise CheckpointError(f"{path}: the backbone's weights do not load: {str(e)[:300]}") from None
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:  # a partial load would leave random weights: refuse it
        detail = "; ".join(f"{k.replace('_', ' ')} {sorted(map(str, v))[:3]}" for k, v in problems.items())
        raise CheckpointError(f"{path}: the backbone's weights do not match its config: {detail}")
    check_finite(dict(model.state_dict()), path)
    if model.get_input_embeddings().weight.shape[0] < len(tok):
        model.resize_token_embeddings(len(tok))
    for name, token in (("image_token_id", "<|image_pad|>"), ("vision_start_token_id", "<|vision_start|>")):
        if tok.convert_tokens_to_ids(token) != getattr(model.config, name):
            raise CheckpointError(
                f"{path}: {token} is id {tok.convert_tokens_to_ids(token)} in the "
                f"tokenizer but {name}={getattr(model.config, name)} in the model config"
            )
    return model, tok


STATE_FEATURES = 7 + 16 + 4
_EGO_SCALE = np.array([20.0, 5.0, 0.5, 0.5, 20.0, 2.0, 0.5], np.float32)  # speed, accel, yaw rate, steer, limit,
# lateral and heading error to the route


_ROUTE_ERRORS = slice(LATERAL_ERROR, HEADING_ERROR + 1)  # the ego state's lateral and heading error to the route
EGO_MOTION = slice(0, 4)  # the state token's speed, acceleration, yaw rate and steering


def state_features(obs: dict[str, Any], route: bool = True, command: bool = True) -> np.ndarray:
    """The action expert's state token input: ego state, the route's lateral offsets every 4 m to 64 m,
    and the command (one-hot), scaled to about [-1, 1]. Missing keys read as zeros, and so do the
    route-derived features without ``route`` (the offsets and the errors to the route) and the command
    without ``command``: the layout stays the same, so every checkpoint reads the same token."""
    out = np.zeros(STATE_FEATURES, np.float32)
    if "ego_state" in obs:
        out[:7] = np.asarray(obs["ego_state"], np.float32)[:7] / _EGO_SCALE
        if not route:
            out[_ROUTE_ERRORS] = 0.0
    if route and "route" in obs:
        out[7:23] = np.clip(np.asarray(obs["route"], np.float32)[1::2, 1] / 10.0, -3.0, 3.0)
    if command and "command" in obs:
        out[23 + int(obs["command"])] = 1.0
    return out


def patchify(
    images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, patch: int = 14, merge: int = 2, temporal: int = 2
) -> torch.Tensor:
    """Qwen-VL pixel patches from ``[N, H, W, 3]`` uint8 images, in the layout its image processor
    produces (normalise, repeat over the temporal patch, group 2 x 2 merge blocks), on the images' device:
    on a GPU the uint8 pixels cross to it, a quarter of the float32 bytes and an eighth of the patches'."""
    x = (images.float() / 255.0 - mean) / std
    n, h, w, c = x.shape
    gh, gw = h // patch, w // patch
    x = x.permute(0, 3, 1, 2)[:, None].expand(n, temporal, c, h, w)  # [N, T, C, H, W]
    x = x.reshape(n, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(n * gh * gw, c * temporal * patch * patch)


class VLA(nn.Module, TrainableParts):
    def __init__(
        self,
        config: VLAConfig,
        tokenizer: PreTrainedTokenizerFast | None = None,
        expert_config: ExpertConfig | None = None,
    ) -> None:
        super().__init__()
        torch.manual_seed(config.seed)
        self.config = config
        if config.backbone_path:
            self.backbone, self.tokenizer = _local_backbone(Path(config.backbone_path), tokenizer)
        else:
            self.tokenizer = tokenizer or build_tokenizer()
            self.backbone = _backbone(config, self.tokenizer)
        self.tokenizer.padding_side = "left"
        if config.perception_in_state and not config.perception_targets:
            raise ValueError(
                "perception_in_state: the state token reads the perception probe, and there is none "
                "(SFT builds one with [train] perception_weight > 0)"
            )
        if config.manoeuvre_in_state and not config.manoeuvres:
            raise ValueError(
                "manoeuvre_in_state: the plan is given the manoeuvre head's choice, and there is no head "
                "(SFT builds one with [train] manoeuvre_weight > 0)"
            )
        if config.manoeuvre_stop and not config.manoeuvres:
            raise ValueError(
                "manoeuvre_stop: the stop is a class of the manoeuvre head, and there is no head "
                "(SFT builds one with [train] manoeuvre_weight > 0)"
            )
        if config.manoeuvre_stop_by_s is not None and not config.manoeuvre_stop:
            raise ValueError("manoeuvre_stop_by_s: the time names the stop class, and manoeuvre_stop is off")
        if config.keep_origin_with_stops and not (config.manoeuvre_stop and config.manoeuvre_origin):
            raise ValueError(
                "keep_origin_with_stops: the keep class's start with the stops needs manoeuvre_stop and "
                "manoeuvre_origin"
            )
        if config.manoeuvres and config.manoeuvres != len(manoeuvre_names(config.manoeuvre_stop)):
            raise ValueError(
                f"manoeuvres = {config.manoeuvres}, but a head with manoeuvre_stop = {config.manoeuvre_stop} chooses "
                f"among {manoeuvre_names(config.manoeuvre_stop)}"
            )
        if config.manoeuvre_origin and not config.manoeuvres:
            raise ValueError(
                "manoeuvre_origin: the flow starts from the manoeuvre head's choice, and there is no head "
                "(SFT builds one with [train] manoeuvre_weight > 0)"
            )
        perceived = config.perception_targets if config.perception_in_state else 0
        chosen = config.manoeuvres if config.manoeuvre_in_state else 0
        state_dim = STATE_FEATURES + perceived + chosen
        self.expert = ActionExpert(expert_config or self._expert_config(self.backbone, state_dim))
        self.perception_probe: PerceptionProbe | None = None
        if config.perception_targets:
            self.add_perception_probe(config.perception_targets)
        self.manoeuvre_head: ManoeuvreHead | None = None
        if config.manoeuvres:
            self.add_manoeuvre_head(config.manoeuvres)
        proc = Qwen2VLImageProcessorPil()  # only its normalisation constants: patchify is vectorised below
        self.pixel_mean = np.asarray(proc.image_mean, np.float32)
        self.pixel_std = np.asarray(proc.image_std, np.float32)
        self.cot_end = self.tokenizer.convert_tokens_to_ids(COT_END)
        self._positions = RopePositions(self.backbone.model)  # the VLM's rotary ids, once per prompt layout

    @staticmethod
    def _expert_config(backbone: nn.Module, state_dim: int) -> ExpertConfig:
        tc = backbone.config.text_config
        head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
        # the expert shares the backbone's layer count, kv heads and head size (it reads its cache) but is
        # narrower: half the query heads (as Alpamayo's 2.3B expert beside an 8.2B backbone)
        kv = tc.num_key_value_heads
        heads = max(kv, (tc.num_attention_heads // 2) // kv * kv)  # a multiple of the kv heads
        return ExpertConfig(
            hidden_size=heads * head_dim,
            num_layers=tc.num_hidden_layers,
            num_heads=heads,
            num_kv_heads=tc.num_key_value_heads,
            head_dim=head_dim,
            intermediate_size=2 * heads * head_dim,
            state_dim=state_dim,
            state_on_every_token=True,
        )

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def camera_size(self) -> tuple[int, int]:
        """(H, W) of the camera images the model was built for."""
        return tuple(self.config.image_size)

    @property
    def max_reasoning_tokens(self) -> int:
        return self.config.max_reasoning_tokens

    # the parts a trainer can move: the action expert (the trajectory head), the VLM (with the perception
    # probe and the manoeuvre head that read its image tokens, when there are), or both
    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "expert": ("expert.",),
        "vlm": ("backbone.", "perception_probe.", "manoeuvre_head."),
        "both": ("expert.", "backbone.", "perception_probe.", "manoeuvre_head."),
        "none": (),
    }

    def add_perception_probe(self, n_targets: int) -> None:
        """A fresh probe of ``n_targets`` on the image tokens (:mod:`agents.vla.perception`), seeded by the
        config's seed; a model that has one keeps it (a different width is refused)."""
        if self.perception_probe is not None:
            if self.config.perception_targets != n_targets:
                raise ValueError(
                    f"this VLA's perception probe has {self.config.perception_targets} targets, the data {n_targets}"
                )
            return
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.seed)
            hidden = self.backbone.config.text_config.hidden_size
            self.perception_probe = PerceptionProbe(hidden, n_targets).to(self.device)
        self.config.perception_targets = n_targets

    def add_manoeuvre_head(self, n_classes: int) -> None:
        """A fresh manoeuvre head choosing among ``n_classes`` (:mod:`agents.vla.manoeuvre`), seeded by the
        config's seed; a model that has one keeps it (a different number of classes is refused)."""
        if self.manoeuvre_head is not None:
            if self.config.manoeuvres != n_classes:
                raise ValueError(
                    f"this VLA's manoeuvre head has {self.config.manoeuvres} classes, the data {n_classes}"
                )
            return
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.seed + 1)  # not the probe's draw
            hidden = self.backbone.config.text_config.hidden_size
            self.manoeuvre_head = ManoeuvreHead(hidden, STATE_FEATURES, n_classes).to(self.device)
        self.config.manoeuvres = n_classes

    @property
    def plans_a_manoeuvre(self) -> bool:
        """Whether a plan is given a manoeuvre (in its state token, or as where its flow starts): the data's
        in training, the manoeuvre head's choice when planning."""
        return self.config.manoeuvre_in_state or self.config.manoeuvre_origin

    @property
    def plans_from_image_heads(self) -> bool:
        """Whether the plan's state token holds what a head read off the image tokens (so every VLM pass
        that plans must return its hidden states)."""
        return self.config.perception_in_state or self.plans_a_manoeuvre

    # --- inputs --------------------------------------------------------------------------------------------
    def _prompt(self, obs: dict[str, Any], n_images: int, tokens_per_image: int) -> str:
        vision = ("<|vision_start|>" + "<|image_pad|>" * tokens_per_image + "<|vision_end|>") * n_images
        c = self.config
        hist = "".join(history_tokens(obs["ego_history"])) if "ego_history" in obs else ""
        route = "".join(route_tokens(obs["route"])) if c.route_inputs and "route" in obs else ""
        cmd = COMMANDS[int(obs["command"])] if c.command_input and "command" in obs else ""
        return (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{vision}{hist}{route}{cmd} {INSTRUCTION}"
            f"<|im_end|>\n<|im_start|>assistant\n{COT_START}"
        )

    def prepare(self, observations: list[dict[str, Any]], reasoning: list[str] | None = None) -> dict[str, Any]:
        """Tokens, pixels and (for training) labels of a batch of observations (as many frames per camera as
        the model learnt from: more are more image tokens, a prompt it never saw, and it plans worse)."""
        h, w = self.config.image_size
        learnt = self.config.observation
        images = []
        for obs in observations:
            cams = np.asarray(obs["cameras"])  # [n_cams, n_frames, H, W, 3], camera-major order
            if learnt is not None and cams.shape[1] != learnt.n_frames:
                raise ValueError(
                    f"an observation with {cams.shape[1]} frame(s) per camera: this VLA learnt from "
                    f"{learnt.n_frames} (its vla_config.json observation); render n_frames = {learnt.n_frames}"
                )
            images += [cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in cams.reshape(-1, *cams.shape[-3:])]
        n_images = len(images) // len(observations)
        per_image = (h // 28) * (w // 28)
        prompts = [self._prompt(o, n_images, per_image) for o in observations]
        if reasoning is not None:  # teacher forcing: prompt + reasoning + end of reasoning
            texts = [p + r + COT_END for p, r in zip(prompts, reasoning)]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True)
            plen = [len(self.tokenizer(p)["input_ids"]) for p in prompts]
            labels = enc["input_ids"].clone()
            labels[enc["attention_mask"] == 0] = -100
            starts = []
            for i, n in enumerate(plen):
                pad = int((enc["attention_mask"][i] == 0).sum())
                labels[i, : pad + n] = -100
                starts.append(pad + n)
            enc["labels"] = labels
            enc["reasoning_start"] = torch.tensor(starts)  # first position after the prompt, per row
        else:
            enc = self.tokenizer(prompts, return_tensors="pt", padding=True)
        enc["mm_token_type_ids"] = (enc["input_ids"] == self.backbone.config.image_token_id).long()
        pixels = torch.from_numpy(np.stack(images)).to(self.device)
        mean, std = (torch.as_tensor(v, device=self.device) for v in (self.pixel_mean, self.pixel_std))
        enc["pixel_values"] = patchify(pixels, mean, std)
        enc["image_grid_thw"] = torch.tensor([[1, h // 14, w // 14]] * len(images))
        v0 = [
            float(action_space.initial_speed(torch.as_tensor(o["ego_history"], dtype=torch.float32)[None])[0])
            if "ego_history" in o
            else 0.0
            for o in observations
        ]
        enc["v0"] = torch.tensor(v0)
        enc["state"] = torch.from_numpy(self.state_inputs(observations))
        if self.config.route_origin:
            enc["route_origin"] = torch.from_numpy(self.route_origin(observations, np.asarray(v0)))
        return {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in enc.items()}

    def state_inputs(self, observations: list[dict[str, Any]]) -> np.ndarray:
        """The state token's features ``[B, STATE_FEATURES]``, standardised by the training data's
        statistics when the config has them: the near-field route offsets that steer the car are a few
        hundredths on the fixed scales, too small for a small head to read precisely."""
        c = self.config
        feats = np.stack([state_features(o, c.route_inputs, c.command_input) for o in observations])
        if c.state_mean is not None and c.state_std is not None:
            feats = (feats - np.asarray(c.state_mean, np.float32)) / np.asarray(c.state_std, np.float32)
        return feats.astype(np.float32)

    def route_origin(self, observations: list[dict[str, Any]], v0: np.ndarray) -> np.ndarray:
        """With ``route_origin``, what the route ahead adds to where each plan's flow starts ``[B, steps]``
        (:func:`agents.vla.route_prior.route_origin`)."""
        missing = [i for i, o in enumerate(observations) if "route" not in o]
        if missing:
            raise ValueError(f"route_origin: observation(s) {missing} have no 'route' (the route ahead)")
        route = np.stack([np.asarray(o["route"], np.float64) for o in observations])
        return route_prior.route_origin(route, v0, self.config.lateral_action, self.config.action_std)

    def _vlm_inputs(self, batch: dict[str, Any]) -> dict[str, Any]:
        keys = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")
        return {k: batch[k] for k in keys}

    def _vlm_forward(self, inputs: dict[str, Any], **kwargs: Any):
        """The VLM's forward pass on ``_vlm_inputs``, its rotary position ids from the layout cache."""
        positions = self._positions(
            inputs["input_ids"], inputs["mm_token_type_ids"], inputs["attention_mask"], inputs["image_grid_thw"]
        )
        return self.backbone(**inputs, position_ids=positions, **kwargs)

    # --- inference --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def reason(self, batch: dict[str, Any], max_new_tokens: int | None = None):
        """Greedy Chain-of-Causation with the KV cache; returns texts, the cache as expert context, its mask."""
        n = max_new_tokens or self.config.max_reasoning_tokens
        stop = [self.cot_end, self.tokenizer.eos_token_id]
        pad = self.tokenizer.pad_token_id
        out = self.backbone.generate(
            **self._vlm_inputs(batch),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=stop,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_hidden_states=self.plans_from_image_heads,
        )
        if self.plans_from_image_heads:
            self._perceive(batch, out.hidden_states[0])  # the prompt's pass
        prompt_len = batch["input_ids"].shape[1]
        gen = out.sequences[:, prompt_len:]
        texts, keep = [], []
        for row in gen.tolist():
            ends = [i for i, t in enumerate(row) if t in (self.cot_end, self.tokenizer.eos_token_id)]
            stop = ends[0] if ends else len(row)
            texts.append(self.tokenizer.decode(row[:stop], skip_special_tokens=True).strip())
            keep.append([1] * min(stop + 1, len(row)) + [0] * (len(row) - min(stop + 1, len(row))))
        cache = out.past_key_values
        cached = cache.layers[0].keys.shape[2]
        mask = torch.cat([batch["attention_mask"], torch.tensor(keep, device=self.device)], 1)[:, :cached]
        return texts, [(layer.keys, layer.values) for layer in cache.layers], mask

    def encode(self, batch: dict[str, Any], grad: bool = False):
        """Prompt only (no reasoning): the cache as expert context, and its mask. Only the cache is used,
        so the vocabulary head runs on the last position alone."""
        perceive = self.plans_from_image_heads
        with torch.set_grad_enabled(grad):
            out = self._vlm_forward(
                self._vlm_inputs(batch), use_cache=True, logits_to_keep=1, output_hidden_states=perceive
            )
            if perceive:
                self._perceive(batch, out.hidden_states)
        return [(layer.keys, layer.values) for layer in out.past_key_values.layers], batch["attention_mask"]

    def read_perception(self, observations: list[dict[str, Any]]) -> np.ndarray:
        """What the perception probe reads off the observations' image tokens (prompt only):
        ``[B, perception_targets]``, the reading a plan's state token carries."""
        if self.perception_probe is None:
            raise ValueError("read_perception: this VLA has no perception probe ([train] perception_weight)")
        batch = self.prepare(observations)
        self.encode(batch)
        return batch["perceived"].float().cpu().numpy()

    def _perceive(self, batch: dict[str, Any], hidden_states: Sequence[torch.Tensor]) -> None:
        """What the perception probe and the manoeuvre head read off the image tokens of a VLM pass (its
        hidden states at the input of the last layer; the prompt comes first in every pass), kept as
        ``batch["perceived"]`` and ``batch["manoeuvre_logits"]`` for :meth:`planning_state`."""
        images = batch["mm_token_type_ids"].bool()
        hidden = hidden_states[-2][:, : images.shape[1]]
        if self.perception_probe is not None:
            batch["perceived"] = self.perception_probe(hidden, images)
        if self.manoeuvre_head is not None:
            batch["manoeuvre_logits"] = self.manoeuvre_head(hidden, images, batch["state"])

    def planning_state(self, batch: dict[str, Any]) -> torch.Tensor:
        """The state token's input: the ego features, with ``perception_in_state`` what the probe read, and
        with ``manoeuvre_in_state`` the manoeuvre (one-hot): ``batch["manoeuvre"]`` when training gives the
        data's, else the head's choice in the batch's VLM pass (``encode``, ``reason``, the RL passes)."""
        parts = [batch["state"]]
        if self.config.perception_in_state:
            parts.append(batch["perceived"].to(batch["state"].dtype))
        if self.config.manoeuvre_in_state:
            parts.append(F.one_hot(self.planned_manoeuvre(batch), self.config.manoeuvres).to(batch["state"].dtype))
        return torch.cat(parts, 1) if len(parts) > 1 else parts[0]

    @staticmethod
    def planned_manoeuvre(batch: dict[str, Any]) -> torch.Tensor:
        """The manoeuvre classes ``[B]`` a plan is given: ``batch["manoeuvre"]`` when training gives the data's
        (or an agent overrides the head), else the head's choice in the batch's VLM pass."""
        return batch["manoeuvre"] if "manoeuvre" in batch else batch["manoeuvre_logits"].argmax(1)

    def flow_origin(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """With ``manoeuvre_origin``, where each sample's flow starts: its planned manoeuvre's mean plan in
        the SFT data (normalised actions ``[B, steps, dims]``), with ``route_origin`` that manoeuvre's mean
        residual plus the route's own lateral actions (``batch["route_origin"]``); else None (the prior's
        centre, 0)."""
        c = self.config
        if not c.manoeuvre_origin:
            return None
        if c.manoeuvre_origins is None:
            raise ValueError("manoeuvre_origin: this VLA has no manoeuvre_origins (SFT fills them from its data)")
        origins = torch.tensor(c.manoeuvre_origins, dtype=torch.float32, device=self.device)
        origin = origins[self.planned_manoeuvre(batch).to(self.device)]
        if c.route_origin:
            route = batch["route_origin"].to(self.device, origin.dtype)
            origin = torch.stack([origin[..., 0], origin[..., 1] + route], -1)
        return origin

    def actions_to_trajectory(self, u: torch.Tensor, v0: torch.Tensor) -> torch.Tensor:
        c = self.config
        return action_space.to_plan(u, v0, c.action_mean, c.action_std, c.lateral_action)

    def check_guidance(self, guidance: Guidance | None) -> None:
        """Context guidance compares against the field without the context, which only a head trained
        on such draws has; a weight per action dimension at most."""
        if guidance is None:
            return
        if not self.config.flow_unconditional:
            raise ValueError(
                "context guidance needs a flow head trained on draws without the VLM's context "
                "([train] flow_unconditional > 0); this model's vla_config.json has flow_unconditional = 0"
            )
        n = len(guidance) if isinstance(guidance, Sequence) else 1
        if n not in (1, self.expert.config.action_dim):
            raise ValueError(f"guidance: one weight or one per action dimension (accel, lateral), got {guidance!r}")

    @torch.no_grad()
    def act_batch(
        self,
        observations: list[dict[str, Any]],
        reasoning: bool = True,
        generator: torch.Generator | None = None,
        noise_scale: float = 1.0,
        steps: int | None = None,
        guidance: Guidance | None = None,
        choose: Callable[[torch.Tensor], torch.Tensor] | None = None,
        perceive: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> list[dict[str, Any]]:
        """The deterministic plan (the ODE from ``noise_scale`` x the prior's sample) in ``steps`` Euler
        steps (None: the model's ``flow_steps``), with the reasoning first when ``reasoning``, and
        context guidance ``guidance`` (None: none; needs a head trained with ``flow_unconditional``).
        ``choose`` maps the manoeuvre head's choices ``[B]`` to the ones planned (an agent's hold);
        ``perceive`` maps what the probe read ``[B, perception_targets]`` to what the state token is given
        (an agent's ``perception=oracle``, or its ``closing=tracked``)."""
        self.check_guidance(guidance)
        batch = self.prepare(observations)
        texts = [None] * len(observations)
        if reasoning:
            texts, ctx, mask = self.reason(batch)
        else:
            ctx, mask = self.encode(batch)
        self.give_manoeuvres(batch, choose)
        if perceive is not None:
            self.give_perception(batch, perceive)
        u = sample_ode(
            self.expert,
            len(observations),
            ctx,
            mask,
            steps or self.config.flow_steps,
            generator,
            self.device,
            state=self.planning_state(batch),
            noise_scale=noise_scale,
            guidance=guidance,
            origin=self.flow_origin(batch),
        )
        traj = self.actions_to_trajectory(u, batch["v0"]).cpu().numpy().astype(np.float32)
        return [{"trajectory": traj[i], "reasoning": texts[i]} for i in range(len(observations))]

    def give_manoeuvres(
        self,
        batch: dict[str, Any],
        choose: Callable[[torch.Tensor], torch.Tensor] | None = None,
        manoeuvres: torch.Tensor | None = None,
    ) -> None:
        """The manoeuvres a plan is given, where they are not the head's choice (after the VLM's pass):
        ``choose`` maps the head's choices ``[B]`` to the planned ones (a hold), ``manoeuvres`` ``[B]`` are
        given outright (those a stored sample was planned with, so its log-prob is scored as sampled)."""
        if choose is None and manoeuvres is None:
            return
        if not self.plans_a_manoeuvre:
            raise ValueError(
                "choose / manoeuvres: this VLA's plan is given no manoeuvre (manoeuvre_in_state, manoeuvre_origin)"
            )
        batch["manoeuvre"] = (
            manoeuvres.to(self.device).long() if manoeuvres is not None else choose(batch["manoeuvre_logits"].argmax(1))
        )

    def give_perception(self, batch: dict[str, Any], perceive: Callable[[np.ndarray], np.ndarray]) -> None:
        """What the state token carries as the probe's reading: ``perceive`` of what the probe read in the
        batch's VLM pass."""
        if not self.config.perception_in_state:
            raise ValueError("perceive: this VLA's plan does not read the perception probe (perception_in_state)")
        perceived = perceive(batch["perceived"].float().cpu().numpy())
        want = (len(batch["state"]), self.config.perception_targets)
        if np.shape(perceived) != want:
            raise ValueError(f"perceive: shape {np.shape(perceived)}, this VLA's probe reads {want}")
        batch["perceived"] = torch.as_tensor(np.asarray(perceived), dtype=torch.float32, device=self.device)

    # --- RL hooks ------------------------------------------------------------------------------------------------
    def sample_with_log_prob(
        self,
        observations,
        noise_level: NoiseLevel = 0.5,
        stochastic: str = "one",
        generator: torch.Generator | None = None,
        reasoning: bool = False,
        temperature: float = 1.0,
        init_noise: float = 1.0,
        steps: int | None = None,
        choose: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ):
        """Flow-SDE sampling: trajectories, the denoising chain, its stochastic-step mask and log-probs.

        ``init_noise`` scales the flow's starting noise (0: explore around the deterministic plan the
        evaluation drives); ``steps`` denoising steps (None: the model's ``flow_steps``; the chain's
        length carries it to ``chain_log_prob``); ``choose`` maps the manoeuvre head's choices to the
        planned ones (a hold; the log-probs take those as ``manoeuvres``). With ``reasoning`` the
        Chain-of-Causation is sampled first (from the full softmax at ``temperature``) and the trajectory
        is conditioned on it; then also returns the reasoning's token ids [B, L] (-1 after its end) and
        their summed log-prob [B]: ``(traj, chain, smask, logp, ids, text_logp)``.
        """
        batch = self.prepare(observations)
        if reasoning:
            ids, text_logp, ctx, mask = self._sample_reasoning(batch, generator, temperature)
        else:
            with torch.no_grad():
                ctx, mask = self.encode(batch)
        self.give_manoeuvres(batch, choose)
        u, chain, smask, logp = sample_sde(
            self.expert,
            len(observations),
            ctx,
            mask,
            steps or self.config.flow_steps,
            noise_level,
            stochastic,
            generator,
            self.device,
            state=self.planning_state(batch),
            noise_scale=init_noise,
            origin=self.flow_origin(batch),
        )
        traj = self.actions_to_trajectory(u, batch["v0"])
        if reasoning:
            return traj, chain, smask, logp, ids, text_logp
        return traj, chain, smask, logp

    @torch.no_grad()
    def _sample_reasoning(self, batch: dict[str, Any], generator: torch.Generator | None, temperature: float):
        stop = [self.cot_end, self.tokenizer.eos_token_id]
        seed = (
            int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
            if generator is not None
            else None
        )
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.backbone.generate(
                **self._vlm_inputs(batch),
                max_new_tokens=self.config.max_reasoning_tokens,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                eos_token_id=stop,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,
                output_hidden_states=self.plans_from_image_heads,
            )
        if self.plans_from_image_heads:
            self._perceive(batch, out.hidden_states[0])  # the prompt's pass
        gen = out.sequences[:, batch["input_ids"].shape[1] :]
        valid = self._until_stop(gen)
        logits = torch.stack(out.logits, 1).float() / temperature
        lp = torch.log_softmax(logits, -1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)
        cache = out.past_key_values
        cached = cache.layers[0].keys.shape[2]
        mask = torch.cat([batch["attention_mask"], valid.long()], 1)[:, :cached]
        ids = torch.where(valid, gen, torch.full_like(gen, -1))
        return ids, (lp * valid).sum(1), [(layer.keys, layer.values) for layer in cache.layers], mask

    def _until_stop(self, gen: torch.Tensor) -> torch.Tensor:
        """Mask of the generated tokens up to and including the first end-of-reasoning (or EOS) token."""
        is_stop = (gen == self.cot_end) | (gen == self.tokenizer.eos_token_id)
        after = torch.cumsum(is_stop.long(), 1) - is_stop.long()  # stops strictly before each position
        return after == 0

    def chain_log_prob(
        self,
        observations,
        chain,
        smask,
        noise_level: NoiseLevel = 0.5,
        train_vlm: bool = False,
        manoeuvres: torch.Tensor | None = None,
    ):
        """The stored chains' Flow-SDE log-prob [B] (with grad), each plan given ``manoeuvres`` where they
        are given (those it was sampled with) and the head's choice otherwise."""
        batch = self.prepare(observations)
        ctx, mask = self.encode(batch, grad=train_vlm)
        self.give_manoeuvres(batch, manoeuvres=manoeuvres)
        return log_prob(self.expert, chain, smask, ctx, mask, noise_level, state=self.planning_state(batch))

    def joint_log_prob(
        self,
        observations,
        reasoning_ids: torch.Tensor,
        chain,
        smask,
        noise_level: NoiseLevel = 0.5,
        temperature: float = 1.0,
        train_vlm: bool = True,
        manoeuvres: torch.Tensor | None = None,
    ):
        """(reasoning token log-prob [B], trajectory chain log-prob [B]) of stored samples, with grad:
        one teacher-forced pass over prompt + reasoning gives the token logits and the expert's cache,
        as during sampling (the last generated token was never fed, so it is not in the cache);
        ``manoeuvres`` as in :meth:`chain_log_prob`."""
        batch = self.prepare(observations)
        ids = reasoning_ids.to(self.device)
        valid = ids >= 0
        gen = torch.where(valid, ids, torch.full_like(ids, self.tokenizer.pad_token_id))
        prompt_len, n_gen = batch["input_ids"].shape[1], gen.shape[1]
        inputs = self._vlm_inputs(batch)
        inputs["input_ids"] = torch.cat([batch["input_ids"], gen[:, :-1]], 1)
        inputs["attention_mask"] = torch.cat([batch["attention_mask"], valid[:, :-1].long()], 1)
        inputs["mm_token_type_ids"] = torch.cat([batch["mm_token_type_ids"], torch.zeros_like(gen[:, :-1])], 1)
        perceive = self.plans_from_image_heads
        with torch.set_grad_enabled(train_vlm and torch.is_grad_enabled()):
            out = self._vlm_forward(inputs, use_cache=True, output_hidden_states=perceive)
            if perceive:
                self._perceive(batch, out.hidden_states)
        self.give_manoeuvres(batch, manoeuvres=manoeuvres)
        logits = out.logits[:, prompt_len - 1 : prompt_len - 1 + n_gen].float() / temperature
        lp = torch.log_softmax(logits, -1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)
        text_logp = (lp * valid).sum(1)
        ctx = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        traj_logp = log_prob(
            self.expert, chain, smask, ctx, inputs["attention_mask"], noise_level, state=self.planning_state(batch)
        )
        return text_logp, traj_logp

    def decode_reasoning(self, ids: torch.Tensor | np.ndarray) -> list[str]:
        rows = np.asarray(ids.cpu() if torch.is_tensor(ids) else ids).tolist()
        keep = [[t for t in row if t >= 0 and t not in (self.cot_end, self.tokenizer.eos_token_id)] for row in rows]
        return [self.tokenizer.decode(r, skip_special_tokens=True).strip() for r in keep]

    def reasoning_log_prob(self, observations, reasoning: list[str]) -> torch.Tensor:
        """Sum of token log-probs of the given reasoning texts (with grad), per sample."""
        batch = self.prepare(observations, reasoning)
        logits = self._vlm_forward(self._vlm_inputs(batch)).logits[:, :-1]
        labels = batch["labels"][:, 1:]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        return (lp * (labels != -100)).sum(1)

    # --- training ----------------------------------------------------------------------------------------------
    def losses(
        self,
        observations,
        reasoning: list[str],
        trajectories: torch.Tensor,
        generator: torch.Generator | None = None,
        flow_samples: int = 1,
        prompt_only: float = 0.0,
        unconditional: float = 0.0,
        motion_dropout: float = 0.0,
        perception: torch.Tensor | None = None,
        manoeuvres: torch.Tensor | None = None,
        actions: torch.Tensor | None = None,
        perception_weights: torch.Tensor | None = None,
        perception_truth: float = 0.0,
        clearance_margin: float | None = None,
        clearance_synthetic: float = 0.0,
    ) -> dict[str, torch.Tensor]:
        """Cross-entropy on the reasoning tokens and flow matching on the trajectory (teacher forcing).

        ``flow_samples`` draws that many (time, noise) pairs per sample for the flow loss from one VLM
        pass: the action expert is a small part of the compute, so its gradient gets k times the signal
        for little cost (as pi0's several flow samples per observation). ``prompt_only`` is the share
        of those draws (each a seeded coin) whose context is the prompt alone, the context a plan
        without reasoning meets: the cache is causal, so masking the reasoning's positions gives
        exactly the prompt's cache, at no extra cost. ``unconditional`` is the share (another seeded coin
        per draw) that sees none of the VLM's context, only the state token: the field context
        guidance compares against (:func:`agents.vla.flow.guided_velocity`). ``motion_dropout`` is the
        share (a third coin per draw) whose state token hides the ego motion (speed, acceleration, yaw
        rate, steering read as the data's mean), which the context's ego-history tokens and cameras
        still carry: a head that leans on its speed input copies what most samples at that speed do
        (Codevilla et al. 2019's inertia problem). ``perception`` ``[B, perception_targets]``: the privileged
        targets the perception probe regresses from the image tokens (mean squared error, as "perception"),
        each sample's error times its ``perception_weights`` ``[B]`` when given. ``perception_truth`` is the
        share (a fourth coin per draw) whose state token, with ``perception_in_state``, is given those
        targets where the probe's reading goes, so the plan learns from a reading that is right from the
        first step (at 1 the plan still hardly acts on it: docs/experiments/rl.md, stop 75).
        ``manoeuvres`` ``[B]``: the data's manoeuvre classes, which the manoeuvre head learns to choose
        (cross-entropy, as "manoeuvre") and, with ``manoeuvre_in_state`` or ``manoeuvre_origin``, the plan is given
        (teacher forcing). ``actions`` ``[B, 64, 2]``: the trajectories as (accel, lateral) actions when the
        caller has fitted them already (:meth:`training.data.DrivingDataset.target_actions`); fitted here
        otherwise. ``clearance_margin`` (metres) adds the clearance loss (``agents.vla.clearance``, as
        "clearance"): the plan each flow draw's prediction points at must stay that far behind the targets'
        car ahead; ``clearance_synthetic`` is the share of draws (a fifth coin per draw, after the flow's)
        whose expert is asked again, at the same noisy actions, given a synthetic car ahead."""
        if clearance_margin is not None and perception is None:
            raise ValueError("clearance_margin: the clearance loss needs the perception targets (the car ahead)")
        if clearance_synthetic > 0 and not self.config.perception_in_state:
            raise ValueError("clearance_synthetic: a synthetic car ahead reaches the plan through the state token")
        batch = self.prepare(observations, reasoning)
        if perception is not None and self.perception_probe is None:
            raise ValueError("perception targets given, but this VLA has no perception probe (add_perception_probe)")
        if manoeuvres is not None and self.manoeuvre_head is None:
            raise ValueError("manoeuvres given, but this VLA has no manoeuvre head (add_manoeuvre_head)")
        if self.plans_a_manoeuvre and manoeuvres is None:
            raise ValueError("a plan given a manoeuvre: the flow loss plans the data's manoeuvres; pass manoeuvres")
        heads = perception is not None or manoeuvres is not None or self.plans_from_image_heads
        out = self._vlm_forward(self._vlm_inputs(batch), use_cache=True, output_hidden_states=heads)
        if heads:
            self._perceive(batch, out.hidden_states)
        if manoeuvres is not None:
            batch["manoeuvre"] = manoeuvres.to(self.device)
        logits, labels = out.logits[:, :-1], batch["labels"][:, 1:]
        text = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100)
        ctx = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        c = self.config
        if actions is None:
            actions = action_space.from_trajectory(trajectories.float(), batch["v0"].float(), lateral=c.lateral_action)
        target = action_space.normalise(actions, c.action_mean, c.action_std, c.lateral_action)
        mask, state, start = batch["attention_mask"], self.planning_state(batch), batch["reasoning_start"]
        origin = self.flow_origin(batch)
        losses = {"text": text}
        if flow_samples > 1:
            ctx = [(k.repeat_interleave(flow_samples, 0), v.repeat_interleave(flow_samples, 0)) for k, v in ctx]
            target, mask, state, start = (x.repeat_interleave(flow_samples, 0) for x in (target, mask, state, start))
            origin = None if origin is None else origin.repeat_interleave(flow_samples, 0)
        if prompt_only > 0:
            drop = torch.rand(len(mask), generator=generator, device=mask.device) < prompt_only
            reasoning_part = torch.arange(mask.shape[1], device=mask.device)[None] >= start[:, None]
            mask = mask.masked_fill(drop[:, None] & reasoning_part, 0)
        if unconditional > 0:
            blind = torch.rand(len(mask), generator=generator, device=mask.device) < unconditional
            mask = mask.masked_fill(blind[:, None], 0)
        if motion_dropout > 0:
            hide = torch.rand(len(state), generator=generator, device=state.device) < motion_dropout
            state = state.clone()
            state[hide, EGO_MOTION] = 0.0  # standardised: 0 is the data's mean
        if perception_truth > 0:
            if perception is None or not c.perception_in_state:
                raise ValueError("perception_truth: needs perception targets and a state token that reads the probe")
            given = torch.rand(len(state), generator=generator, device=state.device) < perception_truth
            truth = perception.to(state).repeat_interleave(flow_samples, 0)
            state = state.clone()
            state[given, self._perception_columns] = truth[given]
        draw = flow_draw(self.expert, target.to(self.device), ctx, mask, generator, state=state, origin=origin)
        losses["flow"] = draw.loss
        if clearance_margin is not None:
            rows = {"v0": batch["v0"], "perception": perception}
            if "manoeuvre" in batch:
                rows["manoeuvre"] = batch["manoeuvre"]
            rows = {k: v.to(self.device).repeat_interleave(flow_samples, 0) for k, v in rows.items()}
            rows.update(target=target, context=ctx, mask=mask, state=state)  # (already one per draw)
            losses["clearance"] = self._clearance(draw, rows, clearance_margin, clearance_synthetic, generator)
        if perception is not None:
            error = (batch["perceived"] - perception.to(batch["perceived"])).square().mean(-1)
            if perception_weights is not None:
                error = error * perception_weights.to(error)
            losses["perception"] = error.mean()
        if manoeuvres is not None:
            losses["manoeuvre"] = F.cross_entropy(batch["manoeuvre_logits"], batch["manoeuvre"])
        return losses

    def _clearance(
        self,
        draw: FlowDraw,
        rows: dict[str, Any],
        margin: float,
        synthetic: float,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """The clearance loss of a training batch's flow draws (``agents.vla.clearance``): each draw's one-step
        estimate of the plan against the recorded car ahead, and, in ``synthetic`` of the draws that keep
        their lane, the expert's estimate at the same noisy actions given a synthetic car in the state token.
        ``rows`` holds one of each per draw: ``v0``, ``perception``, ``target`` (normalised actions), ``manoeuvre``
        (when planned), the ``context`` and its ``mask``, and the ``state`` the draw was given."""
        c = self.config
        v0, perception = rows["v0"].float(), rows["perception"].float()
        steps = self.expert.config.steps

        def travel(u: torch.Tensor) -> torch.Tensor:
            return action_space.travel(u, v0, c.action_mean, c.action_std, c.lateral_action)

        bound = torch.maximum(lead_bound(perception, v0, margin, steps), travel(rows["target"]))  # >= the label
        estimate = draw.estimate
        if synthetic > 0:
            given, chosen = synthetic_leads(perception, v0, synthetic, generator)
            if "manoeuvre" in rows:  # a car to stop for, not to pass: only draws that keep their lane
                chosen = chosen & ~is_lane_change(rows["manoeuvre"])
            if bool(chosen.any()):
                state = rows["state"][chosen].clone()
                state[:, self._perception_columns] = given[chosen].to(state)
                context = [(k[chosen], v[chosen]) for k, v in rows["context"]]
                x_t, t = draw.x_t[chosen], draw.t[chosen]
                asked = FlowDraw(
                    x_t, t, draw.velocity[chosen], self.expert(x_t, t, context, rows["mask"][chosen], state)
                )
                estimate = estimate.clone()
                estimate[chosen] = asked.estimate
                bound = torch.where(chosen[:, None], lead_bound(given, v0, margin, steps), bound)
        driven = travel(estimate)
        return clearance_loss(driven, bound)

    @property
    def _perception_columns(self) -> slice:
        """Where the state token's input carries what the probe read (``perception_in_state``)."""
        return slice(STATE_FEATURES, STATE_FEATURES + self.config.perception_targets)

    # --- persistence -------------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(path / "backbone")  # safetensors
        self.tokenizer.save_pretrained(path / "tokenizer")
        for name, file in MODULE_FILES.items():
            if (module := getattr(self, name)) is not None:
                save_file({k: v.contiguous() for k, v in module.state_dict().items()}, path / file)
        cfg = self.config.model_dump(mode="json")
        (path / "vla_config.json").write_text(
            json.dumps({"vla": cfg, "expert": self.expert.config.to_dict()}, indent=1)
        )

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu") -> VLA:
        """A saved VLA, checked as it is read (:mod:`agents.vla.checkpoint`): a damaged or incomplete
        folder is a ``CheckpointError`` naming the file and the reason, never a partial load."""
        path = Path(path)
        cfg, expert_cfg = read_config(path, STATE_FEATURES)  # as saved (older VLAs lack later options)
        cfg.backbone_path = str(path / "backbone")  # the saved copy, whatever it was built from
        folder = path / "tokenizer"
        if not (folder / "tokenizer.json").is_file():
            raise CheckpointError(f"{folder}: missing (no tokenizer.json)")
        try:
            tok = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True)
        except Exception as e:  # tokenizers and transformers raise many types for a damaged file
            raise CheckpointError(f"{folder}: not a readable tokenizer ({type(e).__name__}: {str(e)[:200]})") from None
        check_tokenizer(tok, folder, SPECIAL)
        model = cls(cfg, tok, expert_cfg)
        for name, file in MODULE_FILES.items():
            if (module := getattr(model, name)) is not None:
                load_strict(module, load_weights(path / file), path / file)
        return model.to(device).eval()
