"""What an evaluation run is: one validated config, from a TOML file and/or command-line flags.

The config is saved into the run folder; rerunning with the same folder checks that it matches, so
a resumed run can never mix episodes of two different set-ups.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class EvalConfigError(ValueError):
    """A bad eval config: the message names the file (or flag) and the field."""


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bank: str = "smoke"
    routes: str | None = Field(None, description="a Leaderboard / Bench2Drive route file: its routes are the bank")
    maps: list[str] = Field(default_factory=list, description="folders with the route file's towns (and the shipped)")
    route_ids: str | None = Field(None, description="routes to run, e.g. '0,3-5' (default: all)")
    strict: bool = Field(False, description="refuse a route with a scenario type that is not supported")
    split: str | None = None
    agent: str = "expert"
    seeds: int = Field(1, ge=1, description="episodes per scenario, with seeds 0..seeds-1")
    rigs: list[str] | None = Field(
        None, min_length=1, description="camera rigs, each run; default: the one a vla: agent was trained on"
    )
    scenarios: list[str] | None = None  # a subset of the bank's scenario ids
    workers: int = Field(0, ge=0, description="0: in-process; N: N Ray actors")
    ray_address: str | None = None
    video: bool = False
    episode_timeout_s: float = Field(600.0, gt=0, description="wall-clock budget of one episode")
    # the observation set-up; None: the one a vla: agent was trained on (its vla_config.json), else 5 / 4 /
    # (128, 256) (and rigs alpamayo4). A model given more or fewer frames than it learnt from reads a different
    # input; one given another rig too, which a rig ablation asks for by naming it.
    decision_every: int | None = Field(None, ge=1)
    n_frames: int | None = Field(None, ge=1)
    frame_every: int | None = Field(None, ge=1, description="world steps (0.1 s) between a camera's frames")
    camera_size: tuple[int, int] | None = None
    leaderboard_version: str = "2.0"
    extra_metrics: list[str] = Field(default_factory=list)
    consistency: bool = True  # score the agent's reasoning against what it did (rules critic)
    rewards: dict[str, float] | None = Field(
        None,
        description="reward terms and weights whose returns each episode records (e.g. an RL recipe's, to see how"
        " its return follows the Driving Score; default: rewards.DEFAULT_REWARDS)",
    )
    retries: int = Field(1, ge=0, description="re-runs of an episode whose worker crashed")
    agent_threads: int = Field(
        1, ge=1, description="torch threads of the agent, in-process and in every worker: one policy, one result"
    )
    backend: Literal["embedded", "worldmodel", "carla"] = "embedded"  # worldmodel: cameras from a learned model
    world_model: str | None = Field(None, description="a saved world model, for backend = worldmodel")
    world_model_noise: float = Field(0.0, ge=0, description="its starting-noise scale (0: deterministic frames)")
    carla_host: str = Field("localhost", description="the CARLA server, for backend = carla")
    carla_port: int = Field(2000, ge=1, le=65535)
    carla_container: str | None = Field(None, description="docker container to restart when the server hangs")

    @model_validator(mode="after")
    def _observation_of_the_agent(self) -> EvalConfig:
        """Unset observation fields (the rig too) take the agent's training set-up (or the defaults); a frame count
        other than the one the agent learnt from is refused."""
        from agents.base import DEFAULT_OBSERVATION
        from agents.loading import is_saved_vla, trained_observation

        trained = trained_observation(self.agent)
        if trained is not None and (self.n_frames is not None or self.frame_every is not None):
            n_frames = trained.n_frames if self.n_frames is None else self.n_frames
            frame_every = trained.frame_every if self.frame_every is None else self.frame_every
            if why := trained.other_frames(n_frames, self.agent, frame_every):
                raise ValueError(f"n_frames: {why}; leave n_frames and frame_every out to evaluate it on its own")
        if trained is None and self.n_frames is None and is_saved_vla(self.agent):  # else loading it says what is wrong
            warnings.warn(
                f"{self.agent} records no training set-up (saved before SFT recorded it): rendering"
                f" {DEFAULT_OBSERVATION.n_frames} frames per camera; set n_frames to what it learnt from",
                stacklevel=2,
            )
        own = trained or DEFAULT_OBSERVATION
        if self.rigs is None:
            self.rigs = [own.rig]
        if self.decision_every is None:
            self.decision_every = own.decision_every
        if self.n_frames is None:
            self.n_frames = own.n_frames
        if self.frame_every is None:
            self.frame_every = own.frame_every
        if self.camera_size is None:
            self.camera_size = own.camera_size
        return self

    @model_validator(mode="after")
    def _routes_are_the_bank(self) -> EvalConfig:
        """A route file becomes the bank (a ``routes:`` spec with absolute paths, so a resumed run
        from another folder is the same run)."""
        from scenarios.routes import RouteBankSpec, shipped_towns

        if self.routes is not None and not RouteBankSpec.names(self.bank):
            if not Path(self.routes).is_file():
                raise ValueError(f"routes: no route file at {self.routes}")
            maps = tuple(str(Path(m).resolve()) for m in self.maps) + (str(shipped_towns()),)
            self.bank = RouteBankSpec(
                str(Path(self.routes).resolve()), maps, self.route_ids, strict=self.strict
            ).to_string()
        return self

    @field_validator("rewards")
    @classmethod
    def _rewards(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        """Unknown terms are refused here, not by every episode's env."""
        from rewards import RewardComposer, RewardConfigError

        if v is not None:
            try:
                RewardComposer(v)
            except RewardConfigError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("split")
    @classmethod
    def _split(cls, v: str | None) -> str | None:
        if v not in (None, "train", "val", "test"):
            raise ValueError(f"split must be train, val or test, got {v!r}")
        return v

    @field_validator("leaderboard_version")
    @classmethod
    def _lb(cls, v: str) -> str:
        if v not in ("2.0", "2.1"):
            raise ValueError(f"leaderboard_version must be '2.0' or '2.1', got {v!r}")
        return v

    def identity(self) -> dict[str, Any]:
        """The fields that decide episode results (not how they are computed or shown)."""
        keep = ("bank", "split", "agent", "decision_every", "n_frames", "camera_size", "leaderboard_version")
        if self.frame_every != 1:  # (runs from before frame_every keep their identity)
            keep += ("frame_every",)
        if self.backend != "embedded":  # (embedded runs keep the identity they had before backends existed)
            keep += ("backend", "world_model", "world_model_noise")
        if self.agent_threads != 1:  # (likewise runs from before the thread policy)
            keep += ("agent_threads",)
        return {k: v for k, v in self.model_dump(mode="json").items() if k in keep}


def read_toml(path: str | Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """A TOML file as a dict; a missing or malformed file raises ``error`` naming it."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None


def describe(e: ValidationError) -> str:
    """A pydantic error as ``dotted.key: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or '?'}: {err['msg']}" for err in e.errors())


def load_eval_config(path: str | Path | None = None, **overrides: Any) -> EvalConfig:
    """Read ``path`` (a TOML file with the fields at top level or under ``[eval]``), then apply the
    overrides that are not None."""
    data: dict[str, Any] = {}
    where = "command line"
    if path is not None:
        where = str(path)
        raw = read_toml(path, "eval config", EvalConfigError)
        data = dict(raw.get("eval", raw))
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return EvalConfig(**data)
    except ValidationError as e:
        raise EvalConfigError(f"{where}: {describe(e)}") from None
