"""``LoopDrive-v0`` on a CARLA server: ``gym.make("LoopDrive-v0", backend="carla", carla_host=...)``.

The same observation and action spaces, reward terms, events and metric suites as the embedded
world (``envs.interface``); only the world differs. A scenario becomes a CARLA set-up (town, route
shape, traffic, walkers, weather, seed: ``carla_scenarios``); the session plans a route on the town's
topology, spawns the ego with the rig's cameras and the traffic, and runs the server synchronously
at 20 Hz. One env step is one decision: ``decision_every`` steps of 0.1 s, each two server frames,
with our trajectory controller's (accel, steer) turned into pedals and steer (``carla_control``).
Cameras are the server's images of the last ``n_frames`` steps; events and the ego's record come
from :class:`carla_episode.CarlaEpisode`.

Connection failures: ``reset`` runs under the retry policy (reconnect, ``docker restart`` of
``carla_container`` after repeated failures, :class:`CarlaUnavailable` at the end). A connection lost
mid-episode raises :class:`CarlaUnavailable`; the evaluation records the episode as ``infra_error``,
rebuilds the env and runs it again. Every reset first destroys what the previous episode spawned.
What the embedded world offers and CARLA cannot: ``bev`` / ``state`` observations, reward terms that
need the privileged expert's plan, ``snapshot`` / ``restore`` (step-level GRPO), the expert agent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from envs import interface
from envs import observations as obs_mod
from envs.backends.carla_connection import (
    CarlaUnavailable,
    RetryPolicy,
    docker_restart,
    is_connection_error,
    run_with_retries,
)
from envs.backends.carla_control import PedalController
from envs.backends.carla_episode import CarlaEpisode, FrameData
from envs.backends.carla_scenarios import carla_setup
from envs.backends.carla_session import FRAME_DT
from envs.controller import TrajectoryController
from envs.interface import DEFAULT_OBSERVATIONS, InvalidActionError
from envs.sensors import make_rig
from envs.sensors.video import camera_grid, status_bar
from envs.world import DT
from envs.world.kernels import route_points_ego
from rewards import DEFAULT_REWARDS, Event, EventKind, RewardComposer, Transition
from scenarios import Scenario

FRAMES_PER_STEP = round(DT / FRAME_DT)  # server frames per 0.1 s world step
SETTLE_FRAMES = 10  # frames with the brake held after spawning (the car drops onto the road, sensors start)
UNSUPPORTED_OBSERVATIONS = ("bev", "state")  # privileged views of the embedded world


def open_session(host: str, port: int, tm_port: int, timeout_s: float):
    """A real server session (a test passes its own ``session_factory`` instead)."""
    from envs.backends.carla_session import CarlaSession

    return CarlaSession(host, port, tm_port, timeout_s)


class CarlaDriveEnv(gym.Env):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        bank: str = "smoke",
        scenario: str | Scenario | None = None,
        split: str | None = None,
        rig: str | Sequence[Mapping[str, Any]] = "alpamayo4",
        rewards: Mapping[str, float] | None = None,
        action_mode: str = "trajectory",
        backend: str = "carla",
        observations: Sequence[str] = DEFAULT_OBSERVATIONS,
        camera_size: tuple[int, int] = (128, 256),
        n_frames: int = 4,
        decision_every: int | None = None,
        invalid_action: str = "raise",
        terminate_on_collision: bool = True,
        leaderboard_version: str = "2.0",
        render_mode: str | None = None,
        carla_host: str = "localhost",
        carla_port: int = 2000,
        carla_tm_port: int = 8000,
        carla_timeout_s: float = 20.0,
        carla_retry: RetryPolicy | Mapping[str, Any] | None = None,
        carla_container: str | None = None,
        session_factory: Callable[[str, int, int, float], Any] | None = None,
    ) -> None:
        if backend != "carla":
            raise ValueError(f"CarlaDriveEnv is the 'carla' backend, got backend={backend!r}")
        interface.check_options(action_mode, invalid_action, observations, render_mode, n_frames)
        privileged = [o for o in observations if o in UNSUPPORTED_OBSERVATIONS]
        if privileged:
            raise ValueError(
                f"observations {privileged} read the embedded world and do not exist on CARLA; "
                f"use {list(DEFAULT_OBSERVATIONS)}"
            )
        self.scenarios, self.bank_name, self.bank_version = interface.load_scenarios(bank, scenario, split)
        self.action_mode = action_mode
        self.decision_every = interface.decision_period(decision_every, action_mode)
        self.observation_keys = tuple(observations)
        self.invalid_action = invalid_action
        self.terminate_on_collision = terminate_on_collision
        self.render_mode = render_mode
        self.composer = RewardComposer(dict(DEFAULT_REWARDS if rewards is None else rewards))
        if self.composer.needs_reference:
            raise ValueError(
                "reward terms that compare with the privileged expert's plan (e.g. ade_expert) need "
                "the embedded world; drop them for backend='carla'"
            )
        self.leaderboard_version = leaderboard_version
        self.n_frames = n_frames
        h, w = camera_size
        self.rig = make_rig(rig, h, w)
        self.observation_space = interface.observation_space(observations, len(self.rig), n_frames, (h, w), 0)
        self.action_space = interface.action_space(action_mode)

        self.address = (carla_host, int(carla_port), int(carla_tm_port), float(carla_timeout_s))
        self.retry = carla_retry if isinstance(carla_retry, RetryPolicy) else RetryPolicy(**(carla_retry or {}))
        self.restart = docker_restart(carla_container) if carla_container else None
        self.session_factory = session_factory or open_session
        self.session = None
        self.world: CarlaEpisode | None = None  # what evaluation reads as the env's world (``t``, the log)
        self.scenario: Scenario | None = None
        self.controller = TrajectoryController()
        self.pedals = PedalController()
        self.history = obs_mod.EgoHistory()
        self.step_hooks: list[Callable[[CarlaDriveEnv], None]] = []
        self.render_seconds = 0.0
        self._frames = np.zeros((len(self.rig), n_frames, h, w, 3), np.uint8)
        self._done = False

    # --- the server -----------------------------------------------------------------------------------------
    def _connected(self):
        if self.session is None:
            self.session = self.session_factory(*self.address)
        return self.session

    def _drop_session(self) -> None:
        """Forget a session whose server stopped answering (its actors die with the server or the next
        session's reset)."""
        session, self.session = self.session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # the server is gone; nothing more to clean here
                pass

    def close(self) -> None:
        self._drop_session()
        self.world = None

    # --- episode ------------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "ego_offset" in options:
            raise ValueError("reset option 'ego_offset' (perturbed starts) exists on the embedded backend only")
        scn = interface.pick_scenario(self.scenarios, options.get("scenario"), self.np_random, self.bank_name)
        episode_seed = int(self.np_random.integers(2**31 - 1))
        setup = carla_setup(scn, seed=episode_seed)

        def start() -> tuple[np.ndarray, FrameData]:
            session = self._connected()
            session.close()  # whatever a previous (or failed) episode left behind
            session.prepare(setup)
            route = session.pick_route(setup, np.random.default_rng(episode_seed))
            session.spawn(route, self.rig, setup)
            for i in range(SETTLE_FRAMES):
                frame = session.tick(0.0, 1.0, 0.0, read=i == SETTLE_FRAMES - 1)
            return route, frame

        route, first = run_with_retries(start, self.retry, reconnect=self._drop_session, restart=self.restart)
        self.scenario, self.setup = scn, setup
        self.world = CarlaEpisode(route, first)
        self.controller = TrajectoryController()
        self.pedals = PedalController(self.session.max_steer_rad)
        self.history.fill(*first.ego)
        self._ego_track = [self.world.ego_record()]
        self._returns: dict[str, float] = dict.fromkeys(self.composer.terms, 0.0)
        self._done = False
        self._store_images(first, slice(None))
        return self._observe(), self._info([], {})

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError("a CARLA episode cannot be branched; step-level GRPO needs backend='embedded'")

    def restore(self, snap: dict[str, Any]):
        raise NotImplementedError("a CARLA episode cannot be branched; step-level GRPO needs backend='embedded'")

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
        try:
            return self._drive(action, control)
        except Exception as e:
            if not is_connection_error(e):
                raise
            self._drop_session()
            raise CarlaUnavailable(f"lost the CARLA server mid-episode at t={self.world.t:.1f} s: {e}") from e

    def _drive(self, action, control: tuple[float, float] | None):
        ep, session = self.world, self.session
        if control is None:
            self.controller.set_plan(action, *ep.frame.ego)
        events: list[dict[str, Any]] = []
        terms = dict.fromkeys(self.composer.terms, 0.0)
        reward = 0.0
        terminated = truncated = False
        n = self.decision_every
        render_from = n - min(self.n_frames, n)
        if n < self.n_frames:
            self._frames[:, :-n] = self._frames[:, n:].copy()
        for k in range(n):
            x, y, yaw, speed = ep.frame.ego
            accel, steer = control if control is not None else self.controller.control(x, y, yaw, speed, ep.steer)
            pedals = self.pedals(accel, steer, speed, ep.accel, DT)
            sensor_events: list[dict[str, Any]] = []
            for j in range(FRAMES_PER_STEP):  # the state is read at the step's last frame, events at every one
                frame = session.tick(*pedals, read=j == FRAMES_PER_STEP - 1)
                sensor_events += frame.events
            new_events = ep.advance(frame, sensor_events, steer)
            self.history.push_pose(*frame.ego)
            ego = ep.ego_record()
            r, values = self.composer(Transition(self._ego_track[-1], action, ego, new_events, DT, None, None))
            self._ego_track.append(ego)
            reward += r
            for key, v in values.items():
                terms[key] += v
            events.extend(new_events)
            if k >= render_from:
                self._store_images(frame, self.n_frames - (n - k))
            for hook in self.step_hooks:
                hook(self)
            terminated = interface.is_terminal(new_events, self.terminate_on_collision)
            truncated = ep.t >= self.scenario.duration_s - 1e-9
            if terminated or truncated:
                break
        for key, v in terms.items():
            self._returns[key] += v
        info = self._info(events, terms)
        if terminated or truncated:
            self._done = True
            info["metrics"] = self.episode_metrics()
        return self._observe(), float(reward), terminated, truncated, info

    def _store_images(self, frame: FrameData, slot) -> None:
        t0 = time.perf_counter()
        for i, cam in enumerate(self.rig):
            if cam.name not in frame.images:
                raise RuntimeError(f"CARLA frame {frame.frame} has no image from camera {cam.name!r}")
            self._frames[i, slot] = frame.images[cam.name]
        self.render_seconds += time.perf_counter() - t0

    # --- observation and info ---------------------------------------------------------------------------------
    def _observe(self) -> dict[str, Any]:
        ep, keys = self.world, self.observation_keys
        x, y, yaw, speed = ep.frame.ego
        out: dict[str, Any] = {}
        if "cameras" in keys:
            out["cameras"] = self._frames.copy()
        if "ego_history" in keys:
            out["ego_history"] = self.history.observe_from(x, y, yaw)
        if "ego_state" in keys:
            out["ego_state"] = np.array(
                [speed, ep.accel, ep.yaw_rate, ep.steer, ep.frame.speed_limit, ep.lateral, ep.heading_error], np.float32
            )
        if "route" in keys:
            out["route"] = route_points_ego(
                ep.route_xy, ep.route_s, ep.route_s_now, obs_mod.ROUTE_SPACING, obs_mod.ROUTE_POINTS, x, y, yaw
            )
        if "command" in keys:
            out["command"] = obs_mod.route_command_from_geometry(ep.route_xy, ep.route_s, ep.route_s_now)
        return out

    def _info(self, events: list[dict[str, Any]], terms: dict[str, float]) -> dict[str, Any]:
        return {
            "scenario": self.scenario.id,
            "family": self.scenario.family,
            "t": self.world.t,
            "reward_terms": terms,
            "events": events,
            "carla": self.setup.to_dict(),
        }

    def episode_metrics(self) -> dict[str, Any]:
        """Summary of the episode so far: statistics, infractions, every metric suite."""
        return interface.summarise_episode(
            self.world.episode_log(self._ego_track), self.world.stats(), self._returns, self.leaderboard_version
        )

    # --- rendering ----------------------------------------------------------------------------------------------
    def render(self):
        if self.render_mode != "rgb_array" or self.world is None:
            return None
        return self.video_frame()

    def video_frame(self, caption: str | None = None) -> np.ndarray:
        """The cameras' latest images with a status line (CARLA has no BEV of ours)."""
        grid = camera_grid(self._frames[:, -1], [c.name for c in self.rig])
        ep = self.world
        status = (
            f"{self.scenario.id} on {self.setup.town}  t={ep.t:5.1f}s  v={ep.frame.ego[3] * 3.6:5.1f} km/h  "
            f"route {100 * ep.route_completion:5.1f}%"
        )
        return np.concatenate([grid, status_bar(grid.shape[1], status, caption)], 0)
