"""``LoopDrive-v0``: a scenario bank as a Gymnasium environment.

One ``step`` is one agent decision: the trajectory (or control) action is held for
``decision_every`` world steps of 0.1 s (5 by default, 2 Hz; 1 = AlpaSim's 10 Hz), the controller
tracks it, cameras are rendered for the last ``n_frames`` of those steps, and reward terms and
events are accumulated over them. ``info["reward_terms"]`` holds every term's total for the step,
``info["events"]`` the step's events, ``info["metrics"]`` the episode summary at the end.

``reset(options={"scenario": id, "ego_offset": (lateral_m, heading_rad)})`` picks the scenario and
optionally perturbs the ego's start (recovery data for imitation learning).
``snapshot()`` / ``restore(snap)`` branch an episode: the world (with its RNG), the controller's plan,
the ego history, camera frames and the accumulated returns (step-level GRPO scores G continuations
from one snapshot).
``backend="worldmodel", world_model=PATH``: the agent sees camera frames a learned world model
generates (warm-started from the scenario's real frames, ``world_model_warmup`` more real decisions)
while the embedded world keeps the state the metrics read (``envs.backends.world_model``).
``step_hooks`` (callables ``hook(env)``) run after every 0.1 s world step (an evaluation's video
recorder uses it); ``render_seconds`` accumulates the time spent rendering cameras, so a profiler
can split a step into simulation and rendering.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from envs import interface
from envs import observations as obs_mod
from envs.controller import TrajectoryController
from envs.interface import DEFAULT_OBSERVATIONS, InvalidActionError
from envs.sensors import BEVRenderer, CameraRenderer, make_rig
from envs.sensors.video import camera_grid, status_bar
from envs.world import DT, World, compile_scenario
from rewards import DEFAULT_REWARDS, EgoState, EpisodeLog, Event, EventKind, RewardComposer, Transition
from scenarios import Scenario

BACKENDS = ("embedded", "worldmodel")  # what this class runs; envs.make_env also takes "carla"


class LoopDriveEnv(gym.Env):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        bank: str = "smoke",
        scenario: str | Scenario | None = None,
        split: str | None = None,
        rig: str | Sequence[Mapping[str, Any]] = "alpamayo4",
        rewards: Mapping[str, float] | None = None,
        action_mode: str = "trajectory",
        backend: str = "embedded",
        observations: Sequence[str] = DEFAULT_OBSERVATIONS,
        camera_size: tuple[int, int] = (128, 256),
        n_frames: int = 4,
        decision_every: int | None = None,
        bev_size: int = 128,
        invalid_action: str = "raise",
        terminate_on_collision: bool = True,
        leaderboard_version: str = "2.0",
        reference_planner: Callable[[World], np.ndarray] | None = None,
        render_mode: str | None = None,
        world_model: str | None = None,
        world_model_noise: float = 0.0,
        world_model_warmup: int = 0,
    ) -> None:
        if backend not in BACKENDS:
            hint = "; CARLA's env comes from gym.make('LoopDrive-v0', backend='carla')" if backend == "carla" else ""
            raise ValueError(f"unknown backend {backend!r} for LoopDriveEnv; available: {list(BACKENDS)}{hint}")
        interface.check_options(action_mode, invalid_action, observations, render_mode, n_frames)
        if backend == "worldmodel" and (world_model is None or "cameras" not in observations):
            raise ValueError(
                "backend='worldmodel' needs world_model=PATH (a saved world model) and the 'cameras' observation"
            )

        self.scenarios, self.bank_name, self.bank_version = interface.load_scenarios(bank, scenario, split)
        self.action_mode = action_mode
        self.decision_every = interface.decision_period(decision_every, action_mode)
        self.observation_keys = tuple(observations)
        self.invalid_action = invalid_action
        self.terminate_on_collision = terminate_on_collision
        self.render_mode = render_mode
        self.reward_weights = dict(DEFAULT_REWARDS if rewards is None else rewards)
        self.composer = RewardComposer(self.reward_weights)
        self.leaderboard_version = leaderboard_version
        self.reference_planner = reference_planner  # the expert's plan, for terms that compare to it
        self.n_frames = n_frames
        h, w = camera_size
        self.rig = make_rig(rig, h, w)
        self.cameras = CameraRenderer(self.rig) if ("cameras" in observations or render_mode) else None
        self.bev = BEVRenderer(bev_size) if ("bev" in observations or render_mode) else None
        self.controller = TrajectoryController()
        self.history = obs_mod.EgoHistory()

        self.observation_space = interface.observation_space(observations, len(self.rig), n_frames, (h, w), bev_size)
        self.action_space = interface.action_space(action_mode)

        self.world: World | None = None
        self.step_hooks: list[Callable[[LoopDriveEnv], None]] = []
        self.render_seconds = 0.0
        self._frames = None
        if self.cameras is not None:
            self._frames = np.zeros((len(self.rig), n_frames, h, w, 3), np.uint8)
        self.imagined = None  # the world-model backend's cameras
        self.world_model_warmup = int(world_model_warmup)
        if backend == "worldmodel":
            from envs.backends.world_model import ImaginedCameras

            self.imagined = ImaginedCameras(
                world_model, len(self.rig), n_frames, self.decision_every, (h, w), noise_scale=world_model_noise
            )
        self._decisions = 0

    # --- episode ---------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        scn = interface.pick_scenario(self.scenarios, options.get("scenario"), self.np_random, self.bank_name)
        world_seed = int(self.np_random.integers(2**31 - 1))
        compiled = compile_scenario(scn)
        if self.world is not None and self.world.compiled is compiled:
            self.world.reset(world_seed)
        else:
            self.world = World(scn, world_seed, compiled)
        if "ego_offset" in options:  # a perturbed start (recovery data): (lateral m, heading rad)
            lateral, heading = (float(v) for v in options["ego_offset"])
            st = self.world.state
            st.x[0] -= lateral * math.sin(st.yaw[0])
            st.y[0] += lateral * math.cos(st.yaw[0])
            st.yaw[0] += heading
        self.scenario = scn
        self.controller = TrajectoryController()
        self.history.reset(self.world)
        self._ego_prev = self._ego_record()
        self._ego_track = [self._ego_prev]
        self._returns: dict[str, float] = dict.fromkeys(self.composer.terms, 0.0)
        self._done = False
        if self._frames is not None:
            t0 = time.perf_counter()
            self.cameras.render(self.world, self._frames[:, -1])
            self.render_seconds += time.perf_counter() - t0
            self._frames[:, :-1] = self._frames[:, -1:]
        self._decisions = 0
        if self.imagined is not None:
            self.imagined.start(self._frames, seed=world_seed)
        return self._observe(), self._info([], {})

    def snapshot(self) -> dict[str, Any]:
        """The episode's full state at this decision, for :meth:`restore` (in-memory, not for files)."""
        if self.world is None:
            raise RuntimeError("call reset() before snapshot()")
        return {
            "world": self.world.snapshot(),
            "controller": copy.deepcopy(self.controller),
            "history": copy.deepcopy(self.history),
            "frames": None if self._frames is None else self._frames.copy(),
            "ego_prev": self._ego_prev,
            "ego_track": list(self._ego_track),
            "returns": dict(self._returns),
            "done": self._done,
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
        self._ego_prev, self._ego_track = snap["ego_prev"], list(snap["ego_track"])
        self._returns, self._done = dict(snap["returns"]), snap["done"]
        self._decisions = snap["decisions"]
        if self.imagined is not None:
            self.imagined.set_state(snap["imagined"])
        return self._observe(), self._info([], {})

    def step(self, action):
        if self.world is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode has ended; call reset()")
        try:
            control = interface.check_action(action, self.action_space, self.action_mode)
        except InvalidActionError as e:
            if self.invalid_action == "raise":
                raise
            self._done = True
            event = Event(EventKind.INVALID_ACTION, self.world.t, reason=str(e))
            self.world.log.append(event)
            info = self._info([event], dict.fromkeys(self.composer.terms, 0.0))
            info["metrics"] = self.episode_metrics()
            return self._observe(), 0.0, True, False, info

        w = self.world
        reference = None
        if control is None and self.composer.needs_reference:
            planner = self.reference_planner or self._default_reference()
            reference = planner(w)
        if control is None:
            self.controller.set_plan(
                action, float(w.state.x[0]), float(w.state.y[0]), float(w.state.yaw[0]), float(w.state.speed[0])
            )
        events: list[dict[str, Any]] = []
        terms = dict.fromkeys(self.composer.terms, 0.0)
        reward = 0.0
        terminated = truncated = False
        n = self.decision_every
        render_from = n - min(self.n_frames, n)
        imagine = self.imagined is not None and self._decisions >= self.world_model_warmup
        start = len(self._ego_track) - 1
        if self._frames is not None and n < self.n_frames:
            self._frames[:, :-n] = self._frames[:, n:].copy()
        for k in range(n):
            st = w.state
            if control is None:
                accel, steer = self.controller.control(
                    float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0]), st.steer
                )
            else:
                accel, steer = control
            new_events = w.step(accel, steer)
            self.history.push(w)
            ego = self._ego_record()
            r, values = self.composer(
                Transition(self._ego_prev, action, ego, new_events, DT, w, reference if k == 0 else None)
            )
            self._ego_prev = ego
            self._ego_track.append(ego)
            reward += r
            for key, v in values.items():
                terms[key] += v
            events.extend(new_events)
            if self._frames is not None and k >= render_from and not imagine:
                t0 = time.perf_counter()
                self.cameras.render(w, self._frames[:, self.n_frames - (n - k)])
                self.render_seconds += time.perf_counter() - t0
            for hook in self.step_hooks:
                hook(self)
            terminated = interface.is_terminal(new_events, self.terminate_on_collision)
            truncated = w.t >= self.scenario.duration_s - 1e-9
            if terminated or truncated:
                break
        if self.imagined is not None:
            t0 = time.perf_counter()
            if imagine:
                from envs.backends.world_model import motion_from_track

                self._frames[:] = self.imagined.imagine(motion_from_track(self._ego_track, start, n))
            else:
                self.imagined.observe(self._frames)
            self.render_seconds += time.perf_counter() - t0
        self._decisions += 1
        for key, v in terms.items():
            self._returns[key] += v
        info = self._info(events, terms)
        if terminated or truncated:
            self._done = True
            info["metrics"] = self.episode_metrics()
        return self._observe(), float(reward), terminated, truncated, info

    # --- observation and info ------------------------------------------------------------------------------------
    def _ego_record(self) -> EgoState:
        return self.world.ego_record()

    def _observe(self) -> dict[str, Any]:
        w, keys = self.world, self.observation_keys
        out: dict[str, Any] = {}
        if "cameras" in keys:
            out["cameras"] = self._frames.copy()
        if "ego_history" in keys:
            out["ego_history"] = self.history.observe(w)
        if "ego_state" in keys:
            out["ego_state"] = obs_mod.ego_state(w)
        if "route" in keys:
            out["route"] = obs_mod.route_points(w)
        if "command" in keys:
            out["command"] = obs_mod.route_command(w)
        if "bev" in keys:
            out["bev"] = self.bev.render(w)
        if "state" in keys:
            out["state"] = obs_mod.state_vector(w)
        return out

    def _info(self, events: list[dict[str, Any]], terms: dict[str, float]) -> dict[str, Any]:
        return {
            "scenario": self.scenario.id,
            "family": self.scenario.family,
            "t": self.world.t,
            "reward_terms": terms,
            "events": events,
        }

    def episode_log(self) -> EpisodeLog:
        """The episode so far as the metric suites read it."""
        w = self.world
        return EpisodeLog(
            events=[e for e in w.log if e.kind is not EventKind.TRIGGER],
            ego=list(self._ego_track),
            route_length=w.compiled.goal_distance,
            dt=DT,
            timed_out=w.state.route.blocked,
            distance_outside_route_lanes=w.state.route.distance_outside_route_lanes,
        )

    def episode_metrics(self) -> dict[str, Any]:
        """Summary of the episode so far: world statistics, infractions, every metric suite."""
        return interface.summarise_episode(
            self.episode_log(), self.world.stats(), self._returns, self.leaderboard_version
        )

    def _default_reference(self) -> Callable[[World], np.ndarray]:
        from envs.driver import RouteFollower

        self.reference_planner = RouteFollower().plan
        return self.reference_planner

    # --- rendering ---------------------------------------------------------------------------------------------
    def render(self):
        if self.render_mode != "rgb_array" or self.world is None:
            return None
        return compose_frame(self.world, self.cameras, self.bev, self._frames)

    def video_frame(self, caption: str | None = None) -> np.ndarray:
        """This 0.1 s step as a video frame (cameras freshly rendered, BEV, status, the caption)."""
        return compose_frame(self.world, self.cameras, self.bev, None, caption=caption)


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
