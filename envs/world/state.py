"""World state as arrays (struct of arrays), Waymax-style.

``ActorTable`` holds what never changes during an episode (sizes, kinds, behaviour parameters);
``WorldState`` holds everything that does. Row 0 is always the ego. A snapshot is a deep copy of
the ``WorldState`` (including the RNG state), which is all that ``restore`` needs.

The integer codes of the arrays (actor kinds, motion models, behaviours, behaviour modes, signal
states) are defined here once, as ``IntEnum`` classes for readable Python and as plain ints for the
compiled kernels and hot loops (comparing int8 arrays with ``IntEnum`` members is several times slower).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from envs.episode_rules import MinSpeedBook, RouteBook


class Kind(IntEnum):
    EGO = 0
    VEHICLE = 1
    PEDESTRIAN = 2
    CYCLIST = 3
    STATIC = 4


class Motion(IntEnum):
    EGO = 0  # kinematic bicycle driven by the controller
    PATH = 1  # lane following (IDM + behaviours) along a path
    WALK = 2  # walking along a polyline
    STATIC = 3
    REPLAY = 4  # non-reactive log replay


class Behaviour(IntEnum):
    IDM = 0
    HARD_BRAKE = 1
    LANE_CHANGE = 2
    WALK = 3
    STATIC = 4
    REPLAY = 5


class Mode(IntEnum):
    WAITING = 0  # before the trigger (behaviours with triggers), or plain driving
    ACTIVE = 1  # triggered: lane change under way / walker walking
    BRAKING = 2
    HOLDING = 3
    DONE = 4


class SignalState(IntEnum):
    GREEN = 0
    YELLOW = 1
    RED = 2


# the same codes as plain ints, for numba kernels and per-step loops
WAITING, ACTIVE, BRAKING, HOLDING, DONE = (int(m) for m in Mode)
GREEN, YELLOW, RED = (int(s) for s in SignalState)


@dataclass
class ActorTable:
    ids: list[str]
    kind: np.ndarray
    motion: np.ndarray
    behaviour: np.ndarray
    length: np.ndarray
    width: np.ndarray
    height: np.ndarray
    # IDM
    desired_speed: np.ndarray
    time_headway: np.ndarray
    min_gap: np.ndarray
    max_accel: np.ndarray
    comfort_decel: np.ndarray
    reacts_to_signals: np.ndarray
    yields_at_junctions: np.ndarray
    follows_speed_limit: np.ndarray  # desired speed taken from the current lane's limit
    # triggers and behaviour parameters
    trigger_time: np.ndarray
    trigger_distance: np.ndarray
    brake_decel: np.ndarray
    brake_hold: np.ndarray
    lc_target_path: np.ndarray
    lc_duration: np.ndarray
    parked: np.ndarray  # stands still until its trigger fires
    walk_speed: np.ndarray
    replay_tracks: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.ids)

    def index(self, actor_id: str) -> int:
        return self.ids.index(actor_id)


@dataclass
class WorldState:
    t: float
    step: int
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed: np.ndarray
    accel: np.ndarray
    active: np.ndarray
    path_id: np.ndarray
    s: np.ndarray
    d: np.ndarray
    mode: np.ndarray
    mode_t: np.ndarray
    lc_d0: np.ndarray
    z: np.ndarray  # height on the lane (0 on a flat map): actors more than LEVEL_GAP apart never meet
    stopped_at: np.ndarray  # the junction hold point (path arc length) each actor last stopped at (-inf)
    stopped_t: np.ndarray  # when it stopped there
    steer: float = 0.0
    yaw_rate: float = 0.0
    # ego bookkeeping along its route
    route_s: float = 0.0
    route_seg: int = 0
    lateral: float = 0.0
    heading_error: float = 0.0
    progress: float = 0.0  # furthest route arc length reached (metres from the route start)
    distance: float = 0.0  # odometer
    route: RouteBook = field(default_factory=lambda: RouteBook(goal_distance=0.0))  # the episode's rules' state
    in_contact: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    offroad: bool = False
    stop_done: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # route stop signs stopped at
    speed_limit: float = 0.0  # of the route lane at the ego's projection
    pending_triggers: int = 0  # actors still waiting for their trigger
    appeared: int = 0  # how many of the route-progress appearances (``appear_order``) have happened
    left: int = 0  # ... and departures (``leave_order``)
    brakes_done: int = 0  # front-brake events fired
    flow_last: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # each flow's newest vehicle (-1)
    flow_gap: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the gap before its next vehicle
    # route files: the scenario windows (when each began, nan before; whether it is over), what they
    # removed for good (actors, flows), and the min-speed test
    window_t0: np.ndarray = field(default_factory=lambda: np.zeros(0))
    window_over: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    windows_begun: int = 0  # windows (in start order) the ego has reached
    windows_open: list[int] = field(default_factory=list)  # begun and not over
    gone: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    flow_gone: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    min_speed: MinSpeedBook | None = None
    hold_t0: np.ndarray = field(default_factory=lambda: np.zeros(0))  # when each signal hold began (nan)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def copy(self) -> WorldState:
        return copy.deepcopy(self)
