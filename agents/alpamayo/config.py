"""The release's ``config.json`` (model_type ``alpamayo_r1``), read strictly.

Every key is known: a key this loader does not read, a component it does not implement (another
action space, tokenizer, action-input projection or integrator) or a value outside what it
supports is a :class:`CheckpointError` naming the file, the key and the reason, never a model that
silently computes something else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agents.alpamayo.action_space import ActionSpaceConfig
from agents.vla.checkpoint import CheckpointError

# keys transformers writes into every config; they describe the file, not the model
BOOKKEEPING = {
    "_name_or_path",
    "architectures",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "model_dtype",
    "keep_same_dtype",
    "attn_implementation",
    "add_special_tokens",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "use_cache",
    "tie_word_embeddings",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "id2label",
    "label2id",
    "problem_type",
    "torchscript",
    "pruned_heads",
    "tokens_per_future_traj",  # the discrete future tokens of the release's text-only SFT path (unused here)
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    target: str = Field(alias="_target_")

    def check_target(self, suffix: str, key: str) -> None:
        if not self.target.endswith(suffix):
            raise ValueError(f"{key}._target_ = {self.target!r}: only {suffix} is supported")


class ActionInProj(_Section):
    hidden_size: int = Field(gt=0)
    max_freq: float = Field(gt=0)
    num_enc_layers: int = Field(ge=1)
    num_fourier_feats: int = Field(gt=0, multiple_of=2)


class ActionSpace(_Section):
    accel_mean: float
    accel_std: float = Field(gt=0)
    curvature_mean: float
    curvature_std: float = Field(gt=0)
    accel_bounds: tuple[float, float] = (-9.8, 9.8)
    curvature_bounds: tuple[float, float] = (-0.2, 0.2)
    dt: float = Field(0.1, gt=0)
    n_waypoints: int = Field(64, gt=0)
    theta_lambda: float = Field(1e-6, ge=0)
    theta_ridge: float = Field(1e-8, ge=0)
    v_lambda: float = Field(1e-6, ge=0)
    v_ridge: float = Field(1e-4, ge=0)
    a_lambda: float = Field(1e-4, ge=0)
    a_ridge: float = Field(1e-4, ge=0)
    kappa_lambda: float = Field(1e-4, ge=0)
    kappa_ridge: float = Field(1e-4, ge=0)

    def solver(self) -> ActionSpaceConfig:
        return ActionSpaceConfig(**self.model_dump(exclude={"target"}))


class Diffusion(_Section):
    int_method: Literal["euler"] = "euler"
    num_inference_steps: int = Field(10, ge=1)
    train_timestep_sampler: Literal["beta", "uniform"] = "beta"


class HistoryTokenizer(_Section):
    ego_xyz_min: tuple[float, float, float]
    ego_xyz_max: tuple[float, float, float]
    num_bins: int = Field(ge=2)


class FutureTokenizer(_Section):
    recursive: bool | None = Field(None, alias="_recursive_")
    action_space_cfg: dict[str, Any] | None = None
    dims_min: tuple[float, float] | None = None
    dims_max: tuple[float, float] | None = None
    num_bins: int = Field(ge=1)


class TrajTokenIds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    history: int
    future: int
    history_start: int
    history_end: int
    future_start: int
    future_end: int


class ReleaseConfig(BaseModel):
    """What this loader reads from the release's config (the rest is in :data:`BOOKKEEPING`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model_type: Literal["alpamayo_r1"]
    vlm_backend: Literal["qwenvl3"]
    vlm_name_or_path: str
    vocab_size: int = Field(gt=0)
    traj_vocab_size: int = Field(gt=0)
    traj_token_start_idx: int = Field(ge=0)
    traj_token_ids: TrajTokenIds
    tokens_per_history_traj: int = Field(gt=0)
    hist_traj_tokenizer_cfg: HistoryTokenizer
    traj_tokenizer_cfg: FutureTokenizer
    action_space_cfg: ActionSpace
    action_in_proj_cfg: ActionInProj
    action_out_proj_cfg: _Section
    diffusion_cfg: Diffusion
    expert_cfg: dict[str, Any] = Field(default_factory=dict)
    expert_non_causal_attention: bool = True
    min_pixels: int | None = Field(None, gt=0)
    max_pixels: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _supported(self) -> ReleaseConfig:
        self.hist_traj_tokenizer_cfg.check_target("DeltaTrajectoryTokenizer", "hist_traj_tokenizer_cfg")
        self.traj_tokenizer_cfg.check_target("DiscreteTrajectoryTokenizer", "traj_tokenizer_cfg")
        self.action_space_cfg.check_target("UnicycleAccelCurvatureActionSpace", "action_space_cfg")
        self.action_in_proj_cfg.check_target("PerWaypointActionInProjV2", "action_in_proj_cfg")
        self.action_out_proj_cfg.check_target("torch.nn.Linear", "action_out_proj_cfg")
        self.diffusion_cfg.check_target("FlowMatching", "diffusion_cfg")
        if self.tokens_per_history_traj != 3 * 16:
            raise ValueError("tokens_per_history_traj: 48 (16 poses x xyz) is supported")
        unknown = sorted(set(self.expert_cfg) - EXPERT_KEYS)
        if unknown:
            raise ValueError(f"expert_cfg: {unknown} are not text-model settings this loader applies")
        return self

    @property
    def hist_token_start_idx(self) -> int:
        """The history tokens follow the future tokens' bins among the trajectory tokens."""
        return self.traj_token_start_idx + self.traj_tokenizer_cfg.num_bins


# the expert's overrides of the VLM's text config that keep it able to read the VLM's cache
EXPERT_KEYS = {"hidden_size", "intermediate_size", "num_attention_heads", "head_dim", "num_key_value_heads"}


def read_release_config(file: Path) -> tuple[ReleaseConfig, dict[str, Any]]:
    """The typed config and the raw dict (saved back unchanged), or a ``CheckpointError`` naming the key."""
    if not file.is_file():
        raise CheckpointError(f"{file}: missing (an Alpamayo-R1 folder has config.json and model.safetensors)")
    try:
        raw = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{file}: not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{file}: not a JSON object")
    if raw.get("model_type") != "alpamayo_r1":
        raise CheckpointError(f"{file}: model_type = {raw.get('model_type')!r}, not 'alpamayo_r1'")
    try:
        return ReleaseConfig.model_validate({k: v for k, v in raw.items() if k not in BOOKKEEPING}), raw
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        reason = "a key this loader does not know" if err["type"] == "extra_forbidden" else err["msg"]
        raise CheckpointError(f"{file}: {where}: {reason} ({len(e.errors())} problem(s))") from None
