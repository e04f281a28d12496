"""Scenario and bank schema (pydantic), with errors that name the file, the field path and the reason.

A scenario file is small: the map is a procedural family with parameters (or a JSON map file), the
ego starts on a lane at an arc length and follows a route of connected lanes, actors carry a
behaviour, signals carry a phase program. Everything the world needs is derived from this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ScenarioError(ValueError):
    """One or more problems in scenario / bank files, each as ``file: field.path: reason``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


Coordinate = Annotated[float, Field(ge=-1e6, le=1e6)]  # metres: a point within 1,000 km of the origin
Angle = Annotated[float, Field(ge=-10.0, le=10.0)]  # radians
Time = Annotated[float, Field(ge=0.0, le=3600.0)]  # seconds into the scenario


class _Strict(BaseModel):
    # numbers are finite everywhere: NaN or infinity in a scenario is a mistake, named where it is
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


# --- map ----------------------------------------------------------------------------------------
class MapSpec(_Strict):
    family: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    file: str | None = None  # JSON road map or OpenDRIVE file (.xodr, .xodr.gz), relative to the scenario file

    @model_validator(mode="after")
    def _one_source(self) -> MapSpec:
        if (self.family is None) == (self.file is None):
            raise ValueError("give exactly one of 'family' (procedural) or 'file' (JSON road map)")
        return self


# --- behaviours ---------------------------------------------------------------------------------
class Trigger(_Strict):
    """Fires at ``time`` seconds, or when the ego comes within ``ego_distance`` metres; first wins."""

    time: float | None = Field(default=None, ge=0)
    ego_distance: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _some(self) -> Trigger:
        if self.time is None and self.ego_distance is None:
            raise ValueError("a trigger needs 'time' or 'ego_distance'")
        return self


class IDM(_Strict):
    """Lane following with the Intelligent Driver Model; reacts to leaders, the ego, peds and signals."""

    type: Literal["idm"] = "idm"
    desired_speed: float | None = Field(default=None, ge=0, le=60)  # None: the lane's speed limit
    time_headway: float = Field(default=1.5, gt=0, le=5)
    min_gap: float = Field(default=2.0, ge=0, le=20)
    max_accel: float = Field(default=1.5, gt=0, le=6)
    comfort_decel: float = Field(default=2.5, gt=0, le=9)
    reacts_to_signals: bool = True
    # stop / yield signs and crossing traffic where no light decides (left out of files while off, so
    # the banks written before it stay byte for byte)
    yields_at_junctions: bool = Field(default=False, exclude_if=lambda on: not on)


class HardBrake(IDM):
    type: Literal["hard_brake"] = "hard_brake"  # type: ignore[assignment]
    trigger: Trigger
    decel: float = Field(default=7.0, gt=0, le=10)
    hold: float = Field(default=3.0, ge=0, le=600)  # seconds stopped before driving on


class LaneChange(IDM):
    """Change into ``target_lane`` (cut-in when it is the ego's lane) once the trigger fires."""

    type: Literal["lane_change"] = "lane_change"  # type: ignore[assignment]
    target_lane: str
    trigger: Trigger
    duration: float = Field(default=2.5, gt=0.5, le=10)
    # stands still until the trigger (a parked car pulling out, a car in a stopped queue cutting in)
    starts_parked: bool = Field(default=False, exclude_if=lambda on: not on)


class Walk(_Strict):
    """A pedestrian walking along ``path`` (world points) at ``speed`` once triggered."""

    type: Literal["walk"] = "walk"
    path: list[tuple[Coordinate, Coordinate]] = Field(min_length=2, max_length=10_000)
    speed: float = Field(default=1.4, gt=0, le=4)
    trigger: Trigger = Field(default_factory=lambda: Trigger(time=0.0))


class Static(_Strict):
    """Standing still; with ``remove_after``, removed that many seconds after its trigger fires (a
    blocker that clears the way once the ego has waited behind it)."""

    type: Literal["static"] = "static"
    trigger: Trigger | None = Field(default=None, exclude_if=lambda v: v is None)
    remove_after: float | None = Field(default=None, ge=0, le=3600, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _timed(self) -> Static:
        if (self.trigger is None) != (self.remove_after is None):
            raise ValueError("give 'trigger' and 'remove_after' together (or neither)")
        return self


class Replay(_Strict):
    """Non-reactive replay of a logged track: rows of (t, x, y, yaw)."""

    type: Literal["replay"] = "replay"
    track: list[tuple[Time, Coordinate, Coordinate, Angle]] = Field(min_length=2, max_length=100_000)


Behaviour = Annotated[IDM | HardBrake | LaneChange | Walk | Static | Replay, Field(discriminator="type")]


class ActorSpec(_Strict):
    id: str
    kind: Literal["vehicle", "pedestrian", "cyclist", "static"] = "vehicle"
    lane: str | None = None  # start lane (vehicles following lanes)
    s: float = Field(default=0.0, ge=0)
    lateral: float = Field(default=0.0, ge=-6, le=6)  # offset from the lane centre, left positive
    position: tuple[Coordinate, Coordinate, Angle] | None = None  # x, y, yaw: for walkers / static props
    speed: float = Field(default=0.0, ge=0, le=60)
    path: list[str] | None = None  # lanes to follow; default: successors from ``lane``
    length: float = Field(default=4.6, gt=0.2, le=25)
    width: float = Field(default=1.9, gt=0.2, le=4)
    height: float = Field(default=1.5, gt=0.2, le=5)
    behaviour: Behaviour = Field(default_factory=IDM)
    # the stretch of the ego's route (metres of route arc length, as the route's lanes are laid end to
    # end) over which the actor exists: a route's scenario actors appear as the ego comes near and
    # leave once it has passed (left out of files while unset, so earlier banks stay byte for byte)
    appear_at: float | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)
    leave_at: float | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _placed(self) -> ActorSpec:
        if self.lane is None and self.position is None and self.behaviour.type not in ("walk", "replay"):
            raise ValueError("an actor needs a 'lane' or a 'position'")
        if self.appear_at is not None and self.leave_at is not None and self.leave_at <= self.appear_at:
            raise ValueError(f"leave_at ({self.leave_at}) must come after appear_at ({self.appear_at})")
        return self


class ActorFlow(_Strict):
    """A stream of vehicles (scenario_runner's actor flow): while the ego's route arc length is in
    [``appear_at``, ``leave_at``), a vehicle enters ``path`` at ``s`` with ``speed`` whenever the last
    one is a gap (drawn uniformly from ``gap``) down the path; each leaves at ``end_s`` (the path's end
    by default). Flow vehicles keep to their lanes with IDM and do not give way at junctions."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: list[str] = Field(min_length=1)  # connected lanes from the source to the sink
    s: float = Field(default=0.0, ge=0)
    end_s: float | None = Field(default=None, gt=0)
    speed: float = Field(gt=0, le=60)
    gap: tuple[float, float] = (15.0, 30.0)
    lateral: float = Field(default=0.0, ge=-3, le=3)  # offset from the lane centre, left positive
    kind: Literal["vehicle", "cyclist"] = "vehicle"
    reacts_to_signals: bool = True
    appear_at: float = Field(default=0.0, ge=0)
    leave_at: float = Field(default=1e9, gt=0)
    max_actors: int = Field(default=12, ge=1, le=60)

    @model_validator(mode="after")
    def _sane(self) -> ActorFlow:
        lo, hi = self.gap
        if not 2.0 <= lo <= hi <= 1e4:
            raise ValueError(f"gap must be [from, to] with 2 <= from <= to, got {list(self.gap)}")
        if self.leave_at <= self.appear_at:
            raise ValueError(f"leave_at ({self.leave_at}) must come after appear_at ({self.appear_at})")
        return self


class FrontBrake(_Strict):
    """When the ego's route arc length reaches ``at``, the vehicles ahead of it on its route (up to
    ``ahead`` metres) brake hard to a stop, stand a few seconds and drive on (the Leaderboard's
    HardBreakRoute, which stops the background vehicles in front of the ego; the world's
    ``FRONT_BRAKE_DECEL`` and ``FRONT_BRAKE_HOLD``)."""

    at: float = Field(ge=0)
    ahead: float = Field(default=60.0, gt=0, le=300)


class ClearBackground(_Strict):
    """While the ego's route arc length is in [``appear_at``, ``leave_at``), background vehicles are
    kept out of the route's lane between the ego and ``ahead_to``, with ``oncoming`` out of the lanes
    beside the route running the other way up to ``ahead_to`` + ``ONCOMING_BEYOND``, and out of the
    map ``lanes`` listed (the Leaderboard's background manager making room for a scenario:
    LeaveSpaceInFront, ChangeOppositeBehavior(active=False), and for the junction types
    HandleJunctionScenario: the ego's entry, the junction itself, the entries a scenario's flow comes
    from)."""

    appear_at: float = Field(ge=0)
    leave_at: float = Field(gt=0)
    ahead_to: float = Field(gt=0)
    oncoming: bool = False
    lanes: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)

    @model_validator(mode="after")
    def _sane(self) -> ClearBackground:
        if self.leave_at <= self.appear_at:
            raise ValueError(f"leave_at ({self.leave_at}) must come after appear_at ({self.appear_at})")
        return self


class ScenarioWindow(_Strict):
    """One played scenario element of a route file as the Leaderboard times and judges it. It begins when
    the ego's route arc length reaches ``start`` (its trigger) and is over once the ego passes ``end``.
    Not over within ``timeout_s`` (scenario_runner's ``ScenarioTimeout``): a scenario-timeout infraction,
    and its ``actors`` (actor and flow ids) leave, as scenario_runner destroys them. With ``duration_s``
    it ends that long after it began, or, with an ``emergency_vehicle``, after that vehicle first came
    within 50 m of the ego (scenario_runner gives the ego 10 s from there); if the vehicle has not got
    past the ego by then, the ego failed to yield."""

    name: str
    type: str
    start: float = Field(ge=0)
    end: float | None = Field(default=None, gt=0)
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    duration_s: float | None = Field(default=None, gt=0, le=3600)
    actors: list[str] = Field(default_factory=list)
    emergency_vehicle: str | None = None

    @model_validator(mode="after")
    def _sane(self) -> ScenarioWindow:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end}) must come after start ({self.start})")
        if self.end is None and self.duration_s is None:
            raise ValueError("a scenario window needs an end or a duration_s")
        return self


# --- ego, signals, success ------------------------------------------------------------------------
class EgoSpec(_Strict):
    lane: str
    s: float = Field(default=0.0, ge=0)
    speed: float = Field(default=0.0, ge=0, le=40)
    route: list[str] = Field(min_length=1)  # connected lane ids, starting with ``lane``
    goal_distance: float | None = Field(default=None, gt=0)  # metres along the route; None: its end
    length: float = Field(4.8, gt=1.0, le=25)
    width: float = Field(2.0, gt=0.5, le=4)


class SignalPhase(_Strict):
    state: Literal["green", "yellow", "red"]
    duration: float = Field(gt=0, le=300)


class SignalProgram(_Strict):
    phases: list[SignalPhase] = Field(min_length=1)
    offset: float = 0.0  # seconds into the cycle at t = 0


class SignalHold(_Strict):
    """From the moment the ego's route arc length reaches ``at``, the named signals run their ``phases``
    once, then go back to their own programs; a hold also ends once the ego is past ``until``
    (Bench2Drive's TrafficLightFreezer: a light set for the ego as it comes to a junction)."""

    at: float = Field(ge=0)
    until: float = Field(gt=0)
    signals: dict[str, list[SignalPhase]] = Field(min_length=1)

    @model_validator(mode="after")
    def _sane(self) -> SignalHold:
        if self.until <= self.at:
            raise ValueError(f"until ({self.until}) must come after at ({self.at})")
        if any(not phases for phases in self.signals.values()):
            raise ValueError("each held signal needs at least one phase")
        return self


class BackgroundTraffic(_Strict):
    """Vehicles (and pedestrians) kept around the ego as it drives (the Leaderboard's background
    activity): spawned on the driving lanes (sidewalks, crosswalks) near the route within ``radius`` of
    the ego, ``density`` per 100 m of lane, despawned beyond it; vehicles drive IDM on random paths
    through the junctions, pedestrians walk the sidewalks or cross."""

    density: float = Field(0.75, ge=0, le=5)
    radius: float = Field(100.0, ge=30, le=500)
    max_vehicles: int = Field(40, ge=0, le=200)
    pedestrians: float = Field(0.0, ge=0, le=20)  # per 100 m of sidewalk; some cross at crosswalks
    max_pedestrians: int = Field(0, ge=0, le=200)
    near_route: float = Field(120.0, ge=10, le=500)  # metres from the route that a lane may be used


class SuccessCriteria(_Strict):
    route_completion: float = Field(default=0.95, gt=0, le=1)
    allow_infractions: bool = False


class Scenario(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    family: str = "custom"
    description: str = ""
    split: Literal["train", "val", "test"] = "test"
    seed: int = Field(0, ge=0, lt=2**63)
    params: dict[str, Any] = Field(default_factory=dict)
    map: MapSpec
    ego: EgoSpec
    actors: list[ActorSpec] = Field(default_factory=list)
    signals: dict[str, SignalProgram] = Field(default_factory=dict)
    background: BackgroundTraffic | None = None
    flows: list[ActorFlow] = Field(default_factory=list, exclude_if=lambda v: not v)
    front_brakes: list[FrontBrake] = Field(default_factory=list, exclude_if=lambda v: not v)
    clear_background: list[ClearBackground] = Field(default_factory=list, exclude_if=lambda v: not v)
    windows: list[ScenarioWindow] = Field(default_factory=list, exclude_if=lambda v: not v)
    signal_holds: list[SignalHold] = Field(default_factory=list, exclude_if=lambda v: not v)
    # "leaderboard": a route file's episode, judged by the Leaderboard's route tests (min speed; scenario
    # timeouts from its windows rather than from standing when the scenario's time runs out)
    rules: Literal["bank", "leaderboard"] = Field(default="bank", exclude_if=lambda v: v == "bank")
    duration_s: float = Field(default=30.0, gt=0, le=3600)  # an hour: the longest Leaderboard routes
    success: SuccessCriteria = Field(default_factory=SuccessCriteria)
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_actor_ids(self) -> Scenario:
        seen: set[str] = set()
        for a in [*self.actors, *self.flows]:
            if a.id in seen or a.id == "ego":
                raise ValueError(f"duplicate or reserved actor id {a.id!r}")
            seen.add(a.id)
        if self.ego.route[0] != self.ego.lane:
            raise ValueError("ego.route must start with ego.lane")
        for w in self.windows:
            missing = [a for a in [*w.actors, *([w.emergency_vehicle] if w.emergency_vehicle else [])] if a not in seen]
            if missing:
                raise ValueError(f"scenario window {w.name!r} names actors that are not in the scenario: {missing}")
        return self


class BankManifest(_Strict):
    """``bank.toml``: what a bank is and how it was generated."""

    name: str
    version: str
    description: str = ""
    seed: int = 0
    families: list[str] = Field(default_factory=list)
    count: int = Field(ge=0)
    splits: dict[str, int] = Field(default_factory=dict)
    generator: dict[str, Any] = Field(default_factory=dict)


def format_validation_error(err: ValidationError, source: str | Path) -> list[str]:
    """``file: a.b[2].c: reason`` lines from a pydantic error."""
    lines = []
    for e in err.errors():
        path = ""
        for part in e["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            elif part in ("idm", "hard_brake", "lane_change", "walk", "static", "replay"):
                continue  # discriminator branch names add noise, not information
            else:
                path += f".{part}" if path else str(part)
        lines.append(f"{source}: {path or '<root>'}: {e['msg']}")
    return lines
