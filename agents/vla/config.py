"""The VLA's configuration: one definition, saved with every model (``vla_config.json``) and embedded
as the ``[model]`` section of a training recipe."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.base import ObservationSetup
from agents.vla.action_space import LateralAction
from agents.vla.manoeuvre import ManoeuvreFrame

PRESETS = {
    # text: hidden, layers, heads, kv heads, intermediate; vision: depth, hidden
    "tiny": dict(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=256, vision_depth=2, vision_hidden=64),
    "small": dict(hidden=768, layers=12, heads=12, kv_heads=4, intermediate=2048, vision_depth=6, vision_hidden=384),
}


class VLAConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backbone: Literal["qwen2_5_vl", "qwen3_vl"] = Field("qwen2_5_vl", description="the VLM's transformers class")
    size: Literal["tiny", "small"] = Field("tiny", description="a preset of the backbone's sizes")
    image_size: tuple[int, int] = Field(
        (56, 112), description="(H, W) of each image fed to the VLM, multiples of 28 (patch 14 x merge 2)"
    )
    max_reasoning_tokens: int = Field(40, ge=1, description="longest Chain-of-Causation generated")
    flow_steps: int = Field(10, ge=1, description="Euler steps of the flow-matching trajectory head")
    seed: int = Field(0, description="initialisation seed (a recipe sets it to its own seed)")
    backbone_path: str | None = Field(None, description="a local pretrained Qwen2.5-VL / Qwen3-VL folder")
    # what the model reads besides the cameras and its ego motion (history, speed, acceleration, yaw rate)
    route_inputs: bool = Field(
        True,
        description="the route: its tokens, its offsets and the lateral / heading error to it in the state token; "
        "False gives Alpamayo-R1's inputs (it sees no route and no map: it must see the road bend)",
    )
    command_input: bool = Field(True, description="the navigation command (left / straight / right / follow)")
    lateral_action: LateralAction = Field(
        "curvature",
        description="the flow head's lateral action: Alpamayo-R1's curvature, or the lateral acceleration "
        "(curvature x speed^2), on which a lane change at speed is as large as a turn at a junction",
    )
    flow_unconditional: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the share of the flow head's training draws that saw only the state token, none of the "
        "VLM's context; > 0 makes context guidance (the agent's guidance option) available. Set by SFT",
    )
    perception_targets: int = Field(
        0,
        ge=0,
        description="how many privileged targets the perception probe on the image tokens regresses "
        "(agents.vla.perception.PERCEPTION_TARGETS); 0: no probe. Set by SFT's [train] perception_weight",
    )
    perception_in_state: bool = Field(
        False,
        description="the action expert's state token also carries what the perception probe reads off the image "
        "tokens (its targets), beside speed, route and command: the head reads those inputs, not the cameras",
    )
    manoeuvres: int = Field(
        0,
        ge=0,
        description="how many manoeuvre classes the manoeuvre head on the image tokens and the ego features "
        "chooses from (agents.vla.manoeuvre.MANOEUVRES); 0: no head. Set by SFT's [train] manoeuvre_weight",
    )
    manoeuvre_stop: bool = Field(
        False,
        description="the manoeuvre head also chooses a stop: a moving car whose future keeps its lane and stands "
        "within manoeuvre_by_s (training.data.labels.stops_by), so with manoeuvre_origin a plan to stop starts "
        "from the data's mean stop, as a lane change starts from its mean change. Set in SFT's [model]",
    )
    manoeuvre_stop_by_s: float | None = Field(
        None,
        gt=0,
        le=6.4,
        description="with manoeuvre_stop, a future is a stop when it stands within this many seconds; None: "
        "manoeuvre_by_s. Longer names the stop from where the expert starts braking, before the car is close to "
        "its line (stop 87: chosen 6-8 m before a stop sign at 3 s). Set in SFT's [model]",
    )
    keep_origin_with_stops: bool = Field(
        False,
        description="with manoeuvre_stop and manoeuvre_origin, a keep_lane plan starts from the mean of the keep "
        "and stop classes' futures, as without the stop class: the stops' braking stays in the keep class's start "
        "(taken out, a plan behind a braking car brakes less; stop 88). Set in SFT's [model]",
    )
    manoeuvre_in_state: bool = Field(
        False,
        description="the action expert's state token also carries a manoeuvre (one-hot): the data's own in "
        "training, the manoeuvre head's choice when planning; the head plans the manoeuvre it is given",
    )
    manoeuvre_origin: bool = Field(
        False,
        description="the flow starts from the planned manoeuvre's mean plan in the SFT data (manoeuvre_origins) "
        "plus the prior's noise, not from the noise alone (DiffusionDrive's anchors): the manoeuvre is in the "
        "noisy actions the head denoises, which it cannot ignore as it can an input. Needs a manoeuvre head",
    )
    route_origin: bool = Field(
        False,
        description="with manoeuvre_origin, the flow starts from the route's own lateral actions "
        "(agents.vla.route_prior: its centreline driven at a speed its curvature allows) plus the manoeuvre's "
        "mean residual from them, so a head that has learnt little still turns with the road. Needs route_inputs",
    )
    manoeuvre_by_s: float | None = Field(
        None,
        gt=0,
        le=6.4,
        description="what the manoeuvre classes mean: a lane change counts once its future is under way by this "
        "many seconds (training.data.labels.manoeuvre_under_way); None: within the 6.4 s. Set by SFT's "
        "[train] manoeuvre_by_s, so RL's demonstrations give the plan the classes it was trained on",
    )
    manoeuvre_frame: ManoeuvreFrame = Field(
        "ego",
        description="what a lane change class names (training.data.labels.manoeuvre_classes): ego, its start "
        "(half-way through it the class reads keep_lane); route, the lane the future is in at manoeuvre_by_s "
        "beside the route's, until the car drives back. Set by SFT's [train] manoeuvre_frame",
    )
    # statistics of the training data (None: fixed scales); filled by SFT from its dataset
    action_mean: tuple[float, float] | None = None  # (accel, the lateral action)
    action_std: tuple[float, float] | None = None
    state_mean: list[float] | None = None  # the state token's features
    state_std: list[float] | None = None
    # [class][step][accel, lateral action]: each manoeuvre's mean plan in normalised actions (manoeuvre_origin)
    manoeuvre_origins: list[list[list[float]]] | None = None
    observation: ObservationSetup | None = None  # filled by SFT from its dataset (None: saved before it was)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("image_size")
    @classmethod
    def _patch_multiple(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] % 28 or v[1] % 28 or min(v) <= 0:
            raise ValueError(f"image_size {v} must be positive multiples of 28 (patch 14 x merge 2)")
        return v

    @model_validator(mode="after")
    def _route_origin_needs(self) -> VLAConfig:
        if self.route_origin and not (self.manoeuvre_origin and self.route_inputs):
            raise ValueError(
                "route_origin: the flow starts from the route's actions plus the manoeuvre's mean residual; "
                "it needs manoeuvre_origin = true and route_inputs = true"
            )
        return self
