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

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

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
from envs.drive_env import DriveEnv
from envs.interface import DEFAULT_OBSERVATIONS
from envs.sensors.video import camera_grid, status_bar
from envs.world import DT
from envs.world.kernels import route_points_ego
from rewards import EgoState, EpisodeLog, Event
from scenarios import Scenario

FRAMES_PER_STEP = round(DT / FRAME_DT)  # server frames per 0.1 s world step
SETTLE_FRAMES = 10  # frames with the brake held after spawning (the car drops onto the road, sensors start)
UNSUPPORTED_OBSERVATIONS = ("bev", "state")  # privileged views of the embedded world


def open_session(host: str, port: int, tm_port: int, timeout_s: float):
    """A real server session (a test passes its own ``session_factory`` instead)."""
    from envs.backends.carla_session import CarlaSession

    return CarlaSession(host, port, tm_port, timeout_s)


class CarlaDriveEnv(DriveEnv):
    """``LoopDrive-v0`` with a CARLA server as the world (see the module docstring); the spaces, reward
    terms, events and metric suites are :class:`envs.drive_env.DriveEnv`'s, as on the embedded world."""

    def __init__(
        self,
        backend: str = "carla",
        carla_host: str = "localhost",
        carla_port: int = 2000,
        carla_tm_port: int = 8000,
        carla_timeout_s: float = 20.0,
        carla_retry: RetryPolicy | Mapping[str, Any] | None = None,
        carla_container: str | None = None,
        session_factory: Callable[[str, int, int, float], Any] | None = None,
        **options: Any,
    ) -> None:
        """``options``: :class:`envs.drive_env.DriveEnv`'s (bank, scenario, rig, rewards, ...)."""
        if backend != "carla":
            raise ValueError(f"CarlaDriveEnv is the 'carla' backend, got backend={backend!r}")
        privileged = [o for o in options.get("observations", ()) if o in UNSUPPORTED_OBSERVATIONS]
        if privileged:
            raise ValueError(
                f"observations {privileged} read the embedded world and do not exist on CARLA; "
                f"use {list(DEFAULT_OBSERVATIONS)}"
            )
        super().__init__(**options)
        if self.composer.needs_reference:
            raise ValueError(
                "reward terms that compare with the privileged expert's plan (e.g. ade_expert) need "
                "the embedded world; drop them for backend='carla'"
            )
        if self._frames is None:  # the server's images are the video too
            h, w = self.rig[0].height, self.rig[0].width
            self._frames = np.zeros((len(self.rig), self.frame_slots, h, w, 3), np.uint8)
        self.address = (carla_host, int(carla_port), int(carla_tm_port), float(carla_timeout_s))
        self.retry = carla_retry if isinstance(carla_retry, RetryPolicy) else RetryPolicy(**(carla_retry or {}))
        self.restart = docker_restart(carla_container) if carla_container else None
        self.session_factory = session_factory or open_session
        self.session = None
        self.world: CarlaEpisode | None = None  # what evaluation reads as the env's world (``t``, the log)
        self.pedals = PedalController()
        self._frame: FrameData | None = None  # the last server frame read

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

    # --- the backend's hooks ----------------------------------------------------------------------------------
    def _start(self, scenario: Scenario, seed: int, options: dict[str, Any]) -> None:
        for option in ("ego_offset", "ego_speed"):
            if option in options:
                raise ValueError(f"reset option {option!r} (changed starts) exists on the embedded backend only")
        setup = carla_setup(scenario, seed=seed)

        def start() -> tuple[np.ndarray, FrameData]:
            session = self._connected()
            session.close()  # whatever a previous (or failed) episode left behind
            session.prepare(setup)
            route = session.pick_route(setup, np.random.default_rng(seed))
            session.spawn(route, self.rig, setup)
            for i in range(SETTLE_FRAMES):
                frame = session.tick(0.0, 1.0, 0.0, read=i == SETTLE_FRAMES - 1)
            return route, frame

        route, first = run_with_retries(start, self.retry, reconnect=self._drop_session, restart=self.restart)
        self.setup = setup
        self.world = CarlaEpisode(route, first, leaderboard_rules=scenario.rules == "leaderboard")
        self.pedals = PedalController(self.session.max_steer_rad)
        self.history.fill(*first.ego)
        self._frame = first

    def _pose(self) -> tuple[float, float, float, float]:
        return self.world.frame.ego

    def _advance(self, accel: float, steer: float) -> list[Event]:
        ep = self.world
        pedals = self.pedals(accel, steer, ep.frame.ego[3], ep.accel, DT)
        sensor_events: list[dict[str, Any]] = []
        for j in range(FRAMES_PER_STEP):  # the state is read at the step's last frame, events at every one
            frame = self.session.tick(*pedals, read=j == FRAMES_PER_STEP - 1)
            sensor_events += frame.events
        self._frame = frame
        events = ep.advance(frame, sensor_events, steer)
        self.history.push_pose(*frame.ego)
        return events

    def _capture(self, slot: int) -> None:
        frame = self._frame
        for i, cam in enumerate(self.rig):
            if cam.name not in frame.images:
                raise RuntimeError(f"CARLA frame {frame.frame} has no image from camera {cam.name!r}")
            self._frames[i, slot] = frame.images[cam.name]

    def ego_record(self) -> EgoState:
        return self.world.ego_record()

    def episode_log(self) -> EpisodeLog:
        return self.world.episode_log(self._ego_track)

    def _ego_state_vector(self) -> np.ndarray:
        ep = self.world
        speed = ep.frame.ego[3]
        values = (speed, ep.accel, ep.yaw_rate, ep.steer, ep.frame.speed_limit, ep.lateral, ep.heading_error)
        return np.array(values, np.float32)

    def _route_points(self) -> np.ndarray:
        ep = self.world
        x, y, yaw, _ = ep.frame.ego
        return route_points_ego(
            ep.route_xy, ep.route_s, ep.route_s_now, obs_mod.ROUTE_SPACING, obs_mod.ROUTE_POINTS, x, y, yaw
        )

    def _route_command(self) -> int:
        ep = self.world
        return obs_mod.route_command_from_geometry(ep.route_xy, ep.route_s, ep.route_s_now)

    # --- episode ------------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError("a CARLA episode cannot be branched; step-level GRPO needs backend='embedded'")

    def restore(self, snap: dict[str, Any]):
        raise NotImplementedError("a CARLA episode cannot be branched; step-level GRPO needs backend='embedded'")

    def step(self, action):
        try:
            return super().step(action)
        except Exception as e:
            if not is_connection_error(e):
                raise
            self._drop_session()
            raise CarlaUnavailable(f"lost the CARLA server mid-episode at t={self.world.t:.1f} s: {e}") from e

    def _info(self, events: list[Event], terms: dict[str, float]) -> dict[str, Any]:
        return super()._info(events, terms) | {"carla": self.setup.to_dict()}

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
