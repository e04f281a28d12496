"""The settings of a data collection (only pydantic here: the command line builds its flags from them
without importing the simulator)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class CollectSettings(BaseModel):
    """What to record and how: the one definition behind ``loopdrive collect``'s flags, a recipe's
    ``[data]`` section and the settings stored with a dataset (a resumed collection must match them)."""

    model_config = ConfigDict(extra="forbid")

    bank: str = Field("core", description="scenario bank (name or folder)")
    split: str | None = Field("train", description="bank split (all: the whole bank)")
    agent: str = Field("expert", description="who drives: an agent spec")
    seeds: int = Field(1, ge=1, description="episodes per scenario (seeds 0..K-1)")
    scenarios: list[str] | None = Field(None, description="a subset of the split's scenario ids")
    max_episodes: int | None = Field(None, ge=1, description="stop after this many episodes")
    rig: str = Field("alpamayo4", description="camera rig")
    camera_size: tuple[int, int] = Field((128, 256), description="rendered camera size (H, W), as in evaluation")
    image_size: tuple[int, int] = Field((56, 112), description="stored image size (H, W): the VLA's input")
    n_frames: int = Field(4, ge=1, description="frames per camera in an observation")
    frame_every: int = Field(1, ge=1, description="world steps (0.1 s) between a camera's frames")
    decision_every: int = Field(5, ge=1, description="world steps (0.1 s) per decision")
    teacher: str = Field(
        "template", description="template, template_standing, or a critic spec whose LM writes the reasoning"
    )
    filter_threshold: float = Field(0.5, ge=0, le=1, description="consistency a sample's reasoning needs")
    perturb_fraction: float = Field(0.0, ge=0, le=1, description="extra episodes started off the lane centre")
    target: Literal["executed", "plan", "expert"] = Field(
        "executed",
        description="the trajectory to learn: the future driven, the agent's plan at each decision, or the "
        "future the expert drives from each decision's state (DAgger: any agent drives, the expert labels)",
    )
    label_every: int = Field(1, ge=1, description="with target expert: label every k-th decision")
    run_out: bool = Field(
        False,
        description="drive on past each episode's end (the expert past a DAgger label's), so that the decisions "
        "of its last 6.4 s have a driven future to learn where the road goes on",
    )
    closer_lead: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the share of decisions with a car ahead (with target expert: of labelled ones) at which a second "
        "sample is recorded with that car moved back along its lane, to a gap drawn between 2 m and its own (at most "
        "20 m), the cameras rendered there and the expert's driven future from there as its target: the near cars "
        "at speed that the expert's data lacks",
    )
    offset_ego: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the share of decisions (with target expert: of labelled ones) at which a second sample is "
        "recorded with the ego moved sideways and turned (up to offset_ego_lateral_m and offset_ego_heading_deg, "
        "its history carried along), the cameras rendered there and the expert's driven future from there as its "
        "target: recovery to the lane's centre on either side, anywhere on the route, which the expert's data lacks. "
        "A branch of either kind is declined where a fresh expert would not plan as the driver did (an overtake half "
        "done): its label there would teach another decision",
    )
    offset_ego_lateral_m: float = Field(1.5, ge=0, description="largest sideways move of an offset_ego branch")
    offset_ego_heading_deg: float = Field(5.0, ge=0, description="largest turn of an offset_ego branch")
    perturb_lateral_m: float = Field(1.0, ge=0, description="largest lateral offset of a perturbed start")
    perturb_heading_deg: float = Field(8.0, ge=0, description="largest heading offset of a perturbed start")
    chunk: int = Field(64, ge=1, description="samples per zarr chunk")
    agent_threads: int = Field(
        1, ge=1, description="torch threads of the agent, in-process and in every worker: one policy, one dataset"
    )
    workers: int = Field(
        0, ge=0, description="Ray actors that drive the episodes (0: in-process); the data is the same for any count"
    )

    @field_validator("split", mode="before")
    @classmethod
    def _whole_bank(cls, v: Any) -> Any:
        """TOML has no null: ``split = "all"`` means the whole bank (banks without splits, like smoke)."""
        return None if v == "all" else v

    @model_validator(mode="after")
    def _branches_are_labelled(self) -> CollectSettings:
        """A branch's state (a closer lead, an offset ego) is one no driver reached: its target is the
        expert's driven future from there (no agent's plan), and only one frame can show the world moved."""
        for name in ("closer_lead", "offset_ego"):
            share = getattr(self, name)
            if share and self.target == "plan":
                raise ValueError(f"{name} = {share}: target = 'plan' has no plan where the world was moved")
            if share and self.n_frames > 1:
                raise ValueError(f"{name} = {share} needs n_frames = 1: older frames show the world unmoved")
        return self
