"""``LoopDrive-v0`` on the embedded world: :class:`LoopDriveEnv`."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from envs import observations as obs_mod
from envs.drive_env import DriveEnv
from envs.interface import DEFAULT_OBSERVATIONS
from envs.sensors import BEVRenderer, CameraRenderer
from envs.sensors.video import camera_grid, status_bar
from envs.world import DT, World, compile_scenario
from rewards import EgoState, EpisodeLog, Event, EventKind
from scenarios import Scenario
from scenarios import geometry as geo

BACKENDS = ("embedded", "worldmodel")  # what this class runs; envs.make_env also takes "carla"


class LoopDriveEnv(DriveEnv):
    """Drive a scenario bank closed loop with a planner's trajectory, seen through a camera rig.

    ## Description

    The ego car starts on its route in a scenario of a bank (a road map, traffic with behaviours,
    traffic-light programs) and must follow the route to its goal: keep its lane, follow leaders,
    obey signals and stop signs, yield, merge, overtake, and avoid pedestrians. The agent plans like
    Alpamayo-R1: every decision it returns the ego's next 6.4 s as 64 waypoints; a trajectory
    controller (AlpaSim's limits) tracks that plan for ``decision_every`` world steps of 0.1 s. The
    world is embedded and vectorised (struct-of-arrays state, compiled kernels), deterministic given
    the scenario, the seed and the actions, and can be snapshotted and restored mid-episode.

    ## Action Space

    ``action_mode="trajectory"`` (default): ``Box(-, -, (64, 3), float32)``: waypoints at 0.1 .. 6.4 s
    as (x, y, yaw) in the ego frame at the decision (x forward, y left, yaw counter-clockwise; x in
    [-50, 300] m, y in [-100, 100] m, yaw in [-pi, pi]). ``action_mode="control"``: ``Box(-1, 1, (2,))``:
    normalised (acceleration, steering), renewed every world step; -1 / 1 map to AlpaSim's limits
    (-8 / 6 m/s^2, +-45 degrees).

    ## Observation Space

    A ``Dict`` of the keys in ``observations`` (default: the first five):

    | key | space | what |
    |---|---|---|
    | ``cameras`` | ``Box(0, 255, (C, F, H, W, 3))`` | the rig's C cameras, the last F frames at 10 Hz, uint8 RGB |
    | ``ego_history`` | ``Box(-inf, inf, (16, 4))`` | the last 1.6 s of (x, y, yaw, speed) in the ego frame |
    | ``ego_state`` | ``Box(-inf, inf, (7,))`` | speed, accel, yaw rate, steer, speed limit, lateral and heading error |
    | ``route`` | ``Box(-inf, inf, (32, 2))`` | the next 64 m of route every 2 m, ego frame |
    | ``command`` | ``Discrete(4)`` | the next junction's turn: follow, left, straight, right |
    | ``bev`` | ``Box(0, 255, (B, B, 3))`` | a privileged bird's-eye raster of lanes, actors, signals |
    | ``state`` | ``Box(-inf, inf, (106,))`` | a compact privileged vector for classic RL baselines |

    ## Rewards

    A weighted sum of reward terms, each a function of one 0.1 s transition (``rewards=`` maps a
    registered name or a ``"module:function"`` import path to its weight; default
    ``rewards.DEFAULT_REWARDS``: progress 0.1 per metre, collision -10, off-road -1 per step, red light
    -5, route complete +5). ``info["reward_terms"]`` holds every term's total over the decision.

    ## Starting State

    The scenario's ego start on its route at its initial speed (``reset(options={"scenario": id})``
    picks one, else a random scenario of the bank); ``options={"ego_offset": (lateral_m, heading_rad)}``
    perturbs it (recovery data for imitation learning), ``options={"ego_speed": m_s}`` replaces its
    speed (0: a standing start, which RL's ``standing_starts`` trains on). The ego history starts as if
    it had driven along its route at that speed (standing there, at 0).

    ## Episode End

    Terminated when the route is complete, when the ego deviates more than 12 m from it, or on an
    at-fault collision (``terminate_on_collision``); with ``invalid_action="terminate"`` a malformed
    action ends the episode with an ``invalid_action`` event instead of raising. Truncated at the
    scenario's ``duration_s``. The last ``info["metrics"]`` holds the episode's summary: statistics,
    infractions and every metric suite (Leaderboard Driving Score, PDMS, AlpaSim, comfort, success).

    ## Arguments

    ``gym.make("LoopDrive-v0", bank="smoke", scenario=None, split=None, rig="alpamayo4", rewards=None,
    action_mode="trajectory", backend="embedded")`` and: ``observations`` (keys above),
    ``camera_size=(128, 256)``, ``n_frames=4``, ``decision_every=5`` (2 Hz; 1 = 10 Hz), ``frame_every=1``
    (world steps between a camera's frames: 5 gives frames 0.5 s apart, as NAVSIM's 2 Hz history),
    ``bev_size=128``, ``invalid_action="raise"``, ``terminate_on_collision=True``,
    ``leaderboard_version="2.0"``, ``reference_planner`` (the expert's plan for reward terms that compare
    with it), ``render_mode="rgb_array"``; ``backend="worldmodel", world_model=PATH`` shows the agent
    frames a learned world model generates while the embedded world keeps the state the metrics read
    (``world_model_noise``, ``world_model_warmup`` real decisions first). ``LoopDriveState-v0`` is the
    ``state`` observation alone; ``LoopDriveControl-v0`` adds control actions.

    ``snapshot()`` / ``restore(snap)`` branch an episode: the world (with its RNG), the controller's
    plan, the ego history, the frames and the returns (step-level GRPO scores G continuations from one
    snapshot). ``run_out(driver, steps)`` drives on past an ended episode and returns the poses, the env
    left at the end (data for the decisions of an episode's last 6.4 s). ``step_hooks`` run after every
    world step (an evaluation's video recorder uses them).

    ## Version History

    - v0: the first release (embedded world, Alpamayo camera rig, trajectory and control actions).
    """

    def __init__(
        self,
        backend: str = "embedded",
        bev_size: int = 128,
        reference_planner: Callable[[World], np.ndarray] | None = None,
        world_model: str | None = None,
        world_model_noise: float = 0.0,
        world_model_warmup: int = 0,
        **options: Any,
    ) -> None:
        """``options``: :class:`envs.drive_env.DriveEnv`'s (bank, scenario, rig, rewards, ...)."""
        if backend not in BACKENDS:
            hint = "; CARLA's env comes from gym.make('LoopDrive-v0', backend='carla')" if backend == "carla" else ""
            raise ValueError(f"unknown backend {backend!r} for LoopDriveEnv; available: {list(BACKENDS)}{hint}")
        observations = options.get("observations", DEFAULT_OBSERVATIONS)
        if backend == "worldmodel" and (world_model is None or "cameras" not in observations):
            raise ValueError(
                "backend='worldmodel' needs world_model=PATH (a saved world model) and the 'cameras' observation"
            )
        if backend == "worldmodel" and options.get("frame_every", 1) != 1:
            raise ValueError("backend='worldmodel' generates a decision's last frames: frame_every must be 1")
        super().__init__(bev_size=bev_size, **options)
        render_mode = options.get("render_mode")
        self.reference_planner = reference_planner  # the expert's plan, for terms that compare to it
        self.cameras = CameraRenderer(self.rig) if ("cameras" in observations or render_mode) else None
        self.bev = BEVRenderer(bev_size) if ("bev" in observations or render_mode) else None
        self.world: World | None = None
        self.imagined = None  # the world-model backend's cameras
        self.world_model_warmup = int(world_model_warmup)
        if backend == "worldmodel":
            from envs.backends.world_model import ImaginedCameras

            frames = self.observation_space["cameras"].shape
            self.imagined = ImaginedCameras(
                world_model, frames[0], frames[1], self.decision_every, frames[2:4], noise_scale=world_model_noise
            )
        self._decisions = 0
        self._world_seed = 0

    # --- the backend's hooks ----------------------------------------------------------------------------
    def _start(self, scenario: Scenario, seed: int, options: dict[str, Any]) -> None:
        compiled = compile_scenario(scenario)
        if self.world is not None and self.world.compiled is compiled:
            self.world.reset(seed)
        else:
            self.world = World(scenario, seed, compiled)
        if "ego_offset" in options:  # a perturbed start (recovery data): (lateral m, heading rad)
            lateral, heading = (float(v) for v in options["ego_offset"])
            st = self.world.state
            st.x[0] -= lateral * math.sin(st.yaw[0])
            st.y[0] += lateral * math.cos(st.yaw[0])
            st.yaw[0] += heading
        if "ego_speed" in options:
            speed = float(options["ego_speed"])
            if not 0.0 <= speed <= 40.0:
                raise ValueError(f"reset option 'ego_speed' must be within [0, 40] m/s, got {speed}")
            self.world.state.speed[0] = speed
        self.history.reset(self.world)
        self._decisions, self._world_seed = 0, seed

    def _after_reset(self) -> None:
        if self.imagined is not None:
            self.imagined.start(self._frames, seed=self._world_seed)

    def _pose(self) -> tuple[float, float, float, float]:
        st = self.world.state
        return float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0])

    def _advance(self, accel: float, steer: float) -> list[Event]:
        events = self.world.step(accel, steer)
        self.history.push(self.world)
        return events

    def _imagining(self) -> bool:
        return self.imagined is not None and self._decisions >= self.world_model_warmup

    def _renders_cameras(self) -> bool:
        return not self._imagining()  # the world model draws this decision's frames afterwards

    def _capture(self, slot: int) -> None:
        self.cameras.render(self.world, self._frames[:, slot])

    def _after_decision(self, start: int) -> None:
        if self.imagined is not None:
            import time

            t0 = time.perf_counter()
            if self._imagining():
                from envs.backends.world_model import motion_from_track

                self._frames[:] = self.imagined.imagine(motion_from_track(self._ego_track, start, self.decision_every))
            else:
                self.imagined.observe(self._frames)
            self.render_seconds += time.perf_counter() - t0
        self._decisions += 1

    def _reference(self) -> np.ndarray:
        if self.reference_planner is None:
            from envs.driver import RouteFollower

            self.reference_planner = RouteFollower().plan
        return self.reference_planner(self.world)

    def _privileged_world(self) -> World:
        return self.world

    def ego_record(self) -> EgoState:
        return self.world.ego_record()

    def _ego_state_vector(self) -> np.ndarray:
        return obs_mod.ego_state(self.world)

    def _route_points(self) -> np.ndarray:
        return obs_mod.route_points(self.world)

    def _route_command(self) -> int:
        return obs_mod.route_command(self.world)

    def _observe(self) -> dict[str, Any]:
        out = super()._observe()
        if "bev" in self.observation_keys:
            out["bev"] = self.bev.render(self.world)
        if "state" in self.observation_keys:
            out["state"] = obs_mod.state_vector(self.world)
        return out

    def episode_log(self) -> EpisodeLog:
        """The episode so far as the metric suites read it."""
        w = self.world
        return EpisodeLog(
            events=[e for e in w.log if e.kind is not EventKind.TRIGGER],
            ego=list(self._ego_track),
            route_length=w.compiled.goal_distance,
            dt=DT,
            timed_out=w.state.route.timed_out,
            distance_outside_route_lanes=w.state.route.distance_outside_route_lanes,
        )

    # --- branching -------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The episode's full state at this decision, for :meth:`restore` (in-memory, not for files)."""
        if self.world is None:
            raise RuntimeError("call reset() before snapshot()")
        return {
            "world": self.world.snapshot(),
            "controller": copy.deepcopy(self.controller),
            "history": copy.deepcopy(self.history),
            "frames": None if self._frames is None else self._frames.copy(),
            "ego_track": list(self._ego_track),
            "returns": dict(self._returns),
            "done": self._done,
            "cut_decision": self._cut_decision,
            "scenario": self.scenario,
            "decisions": self._decisions,
            "imagined": None if self.imagined is None else self.imagined.state(),
        }

    def restore(self, snap: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Go back to a :meth:`snapshot` of this env (of any of its episodes); returns the observation and
        info there."""
        if self.world is None or snap["scenario"].id != self.scenario.id:
            scn = snap["scenario"]
            self.world, self.scenario = World(scn, 0, compile_scenario(scn)), scn
        self.world.restore(snap["world"])
        self.controller = copy.deepcopy(snap["controller"])
        self.history = copy.deepcopy(snap["history"])
        if self._frames is not None:
            self._frames[:] = snap["frames"]
        self._ego_track = list(snap["ego_track"])
        self._returns, self._done, self._cut_decision = dict(snap["returns"]), snap["done"], snap["cut_decision"]
        self._decisions = snap["decisions"]
        if self.imagined is not None:
            self.imagined.set_state(snap["imagined"])
        return self._observe(), self._info([], {})

    def move_actor(self, actor_id: str, metres: float) -> dict[str, Any]:
        """Move an actor ``metres`` forward now (:meth:`World.move_along`; negative: back) and return the
        observation with the cameras' newest frame rendered again. A branch: :meth:`restore` a snapshot to
        go on with the episode. With ``n_frames > 1`` refused: the older frames would show it where it was."""
        self._check_branch("move_actor", "the actor")
        self.world.move_along(actor_id, metres)
        return self._observe_moved()

    def shift_ego(self, lateral_m: float, heading_rad: float) -> dict[str, Any] | None:
        """Move the ego ``lateral_m`` to its left now (negative: right) and turn it ``heading_rad``
        (:meth:`World.shift_ego`), its history carried along, and return the observation there with the
        cameras' newest frame rendered again; None (the world left moved) where the moved ego would be off
        the road or touching another. A branch: :meth:`restore` a snapshot to go on with the episode. With
        ``n_frames > 1`` refused: the older frames would show the road where the ego was."""
        self._check_branch("shift_ego", "the ego")
        before = self._pose()[:3]
        if not self.world.shift_ego(lateral_m, heading_rad):
            return None
        self.history.carry(before, self._pose()[:3])
        self._ego_track[-1] = self.ego_record()
        return self._observe_moved()

    def _check_branch(self, method: str, moved: str) -> None:
        """A branch that moves something now needs a world, and frames that all show it now: one frame per
        camera, rendered by the simulator (not drawn by a world model)."""
        if self.world is None:
            raise RuntimeError(f"call reset() before {method}()")
        if self.n_frames > 1:
            raise ValueError(f"{method}: n_frames = {self.n_frames}; the older frames would show {moved} unmoved")
        if self.imagined is not None:
            raise ValueError(f"{method}: the world model draws this env's frames, not the moved world")

    def _observe_moved(self) -> dict[str, Any]:
        """The observation after a branch's move, the cameras' newest frame rendered again."""
        if self._frames is not None:
            self._timed_capture(self.frame_slots - 1)
        return self._observe()

    def run_out(self, driver: Callable[[dict[str, Any]], np.ndarray], steps: int) -> list[EgoState]:
        """The ego's poses for up to ``steps`` world steps (0.1 s) past the episode's end, ``driver``
        (observation -> trajectory) planning on, as in the episode: an episode ends at its goal or its
        time while the road and the traffic go on, and the decisions of its last 6.4 s have a driven
        future to learn only from there. Nothing is scored and nothing ends the run-out; afterwards the
        env is back at the episode's end. No poses after another end (a collision, the route left or
        abandoned), nor if the ego then causes a collision or leaves the road (not a demonstration), and
        none from the decision whose next steps would reach the route's end (where the road ends, often:
        a driver's plan beyond it holds nothing to learn)."""
        if not self._done:
            raise RuntimeError("run_out drives on after the episode has ended")
        if self.action_mode != "trajectory":
            raise RuntimeError("run_out needs action_mode='trajectory' (a driver that plans)")
        if not (self.world.state.route.route_completed or self._time_up()):
            return []
        end = self.snapshot()
        start = len(self._ego_track)
        # drive on a copy: the episode's poses a caller holds (``ego_track`` is the env's own list) must not
        # grow, or ``env.ego_track + env.run_out(...)`` holds the run-out twice
        self._ego_track = list(self._ego_track)
        self._done, self._running_out = False, True
        try:
            obs = self._observe()
            if self._cut_decision is not None:  # the end came within a decision: its plan is driven to its end
                plan, done_steps = self._cut_decision
                obs, _, _, _, info = self._decide(plan, None, None, first=done_steps)
                if _leaves_demonstration(info["events"]):
                    return []
            while len(self._ego_track) - start < steps:
                plan = np.asarray(driver(obs), np.float32)
                if _plan_length(plan[: self.decision_every + 1]) >= self._route_left() - 1.0:
                    break  # its next steps would run off the route's end (and the map's, often)
                obs, _, _, _, info = self.step(plan)
                if _leaves_demonstration(info["events"]):
                    return []
            return self._ego_track[start : start + steps]
        finally:
            self._running_out = False
            self.restore(end)

    def _route_left(self) -> float:
        """Metres of the route ahead of the ego."""
        return float(self.world.compiled.route_s[-1] - self.world.state.route_s)

    # --- rendering ---------------------------------------------------------------------------------------------
    def render(self):
        if self.render_mode != "rgb_array" or self.world is None:
            return None
        return compose_frame(self.world, self.cameras, self.bev, self._frames)

    def video_frame(self, caption: str | None = None) -> np.ndarray:
        """This 0.1 s step as a video frame (cameras freshly rendered, BEV, status, the caption)."""
        return compose_frame(self.world, self.cameras, self.bev, None, caption=caption)


def _leaves_demonstration(events: list[Event]) -> bool:
    """A collision the ego caused, or the ego off the road."""
    return any(e.kind is EventKind.OFFROAD or (e.kind is EventKind.COLLISION and e.at_fault) for e in events)


def _plan_length(plan: np.ndarray) -> float:
    """The path length of a plan's waypoints (ego frame, from the ego)."""
    return float(geo.arc_lengths(np.concatenate([np.zeros((1, 2)), plan[:, :2]]))[-1])


def compose_frame(
    world: World,
    cameras: CameraRenderer | None,
    bev: BEVRenderer | None,
    frames: np.ndarray | None = None,
    caption: str | None = None,
) -> np.ndarray:
    """Cameras (latest frame) tiled in a row above, the BEV on the right, a status line."""
    import cv2

    tiles = frames[:, -1] if frames is not None else cameras.render(world)
    grid = camera_grid(tiles, [c.name for c in cameras.cameras])
    side = cv2.resize(bev.render(world), (grid.shape[0], grid.shape[0]), interpolation=cv2.INTER_NEAREST)
    frame = np.concatenate([grid, side], 1)
    st = world.state
    status = (
        f"{world.scenario.id}  t={st.t:5.1f}s  v={st.speed[0] * 3.6:5.1f} km/h  "
        f"route {100 * world.route_completion:5.1f}%"
    )
    return np.concatenate([frame, status_bar(frame.shape[1], status, caption)], 0)


__all__ = ["BACKENDS", "LoopDriveEnv", "compose_frame"]
