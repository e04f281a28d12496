"""What every ``LoopDrive-v0`` backend shares: construction, the decision loop, observations, the summary.

:class:`DriveEnv` is the one base of the backends (HighwayEnv's pattern: one env with hooks). It owns
the scenarios, the spaces, the reward composer, the trajectory controller, the ego history and the
camera-frame buffer, and runs a decision: check the action, anchor the plan, then for each of the
``decision_every`` world steps of 0.1 s ask the controller for (accel, steer), advance the backend's
world, compose the step's reward from the transition, keep the cameras' frames (``n_frames`` of them,
``frame_every`` steps apart, the newest at the decision), and stop on a terminal event or at the
scenario's time limit.

A backend implements the world: ``_start`` (a new episode of a scenario), ``_pose`` (the ego's x, y,
yaw, speed and wheel angle), ``_advance`` (one 0.1 s step under an (accel, steer) command, returning
its events), ``_capture`` (the cameras' images into a frame slot), ``ego_record``, ``episode_log``,
and the observation pieces it can give. Its ``world`` attribute has ``t``, ``log`` (the event log)
and ``stats()``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from envs import interface
from envs.controller import TrajectoryController
from envs.interface import DEFAULT_OBSERVATIONS, InvalidActionError
from envs.observations import EgoHistory
from envs.sensors import make_rig
from envs.world import DT
from rewards import (
    DEFAULT_REWARDS,
    EgoState,
    EpisodeLog,
    Event,
    EventKind,
    RewardComposer,
    Transition,
    episode_ending,
)
from scenarios import Scenario


class DriveEnv(gym.Env):
    """The shared body of ``LoopDrive-v0``'s backends (see the module docstring for the hooks)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}
    world: Any  # the backend's world: ``t``, ``log``, ``stats()``

    def __init__(
        self,
        bank: str = "smoke",
        scenario: str | Scenario | None = None,
        split: str | None = None,
        rig: str | Sequence[Mapping[str, Any]] = "alpamayo4",
        rewards: Mapping[str, float] | None = None,
        action_mode: str = "trajectory",
        observations: Sequence[str] = DEFAULT_OBSERVATIONS,
        camera_size: tuple[int, int] = (128, 256),
        n_frames: int = 4,
        decision_every: int | None = None,
        frame_every: int = 1,
        invalid_action: str = "raise",
        terminate_on_collision: bool = True,
        leaderboard_version: str = "2.0",
        render_mode: str | None = None,
        bev_size: int = 0,
    ) -> None:
        interface.check_options(action_mode, invalid_action, observations, render_mode, n_frames, frame_every)
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
        self.n_frames, self.frame_every = n_frames, frame_every
        # the frames are kept in slots of ``_slot_steps`` world steps (each decision ends on one), the last
        # ``frame_slots``; an observation takes every ``_slots_apart``-th of them, newest last
        self._slot_steps = math.gcd(frame_every, self.decision_every)
        self._slots_apart = frame_every // self._slot_steps
        self.frame_slots = (n_frames - 1) * self._slots_apart + 1
        h, w = camera_size
        self.rig = make_rig(rig, h, w)
        self.observation_space = interface.observation_space(observations, len(self.rig), n_frames, (h, w), bev_size)
        self.action_space = interface.action_space(action_mode)
        self.controller = TrajectoryController()
        self.history = EgoHistory()
        self.step_hooks: list[Callable[[DriveEnv], None]] = []  # run after every 0.1 s world step
        self.render_seconds = 0.0  # time spent producing camera images (a profiler splits a step with it)
        self.world = None
        self.scenario: Scenario | None = None
        self._frames: np.ndarray | None = None
        if "cameras" in observations or render_mode:
            self._frames = np.zeros((len(self.rig), self.frame_slots, h, w, 3), np.uint8)
        self._ego_track: list[EgoState] = []
        self._returns: dict[str, float] = {}
        self._done = False
        self._running_out = False  # driving on past the episode's end (LoopDriveEnv.run_out): nothing ends it
        self._cut_decision: tuple[Any, int] | None = None  # the last decision's plan and its world steps done,
        # when the episode's end cut it short

    # --- the backend's hooks ---------------------------------------------------------------------------
    def _start(self, scenario: Scenario, seed: int, options: dict[str, Any]) -> None:
        """Begin an episode of ``scenario`` (``seed``: the episode's randomness) and fill the history."""
        raise NotImplementedError

    def _pose(self) -> tuple[float, float, float, float]:
        """The ego's x, y, yaw and speed."""
        raise NotImplementedError

    def _advance(self, accel: float, steer: float) -> list[Event]:
        """One 0.1 s world step under the command; the step's events."""
        raise NotImplementedError

    def _capture(self, slot: int) -> None:
        """The cameras' images of now into ``self._frames[:, slot]``."""
        raise NotImplementedError

    def _renders_cameras(self) -> bool:
        """Whether this decision's steps capture camera images (a learned camera model may draw them)."""
        return True

    def ego_record(self) -> EgoState:
        raise NotImplementedError

    def episode_log(self) -> EpisodeLog:
        """The episode so far as the metric suites read it."""
        raise NotImplementedError

    def _reference(self) -> np.ndarray | None:
        """The privileged expert's plan, for reward terms that compare with it (None where there is none)."""
        return None

    def _privileged_world(self) -> Any:
        """What ``Transition.world`` gives privileged reward terms (None where there is nothing to read)."""
        return None

    def _after_reset(self) -> None:
        """After the episode's first observation is ready (frames captured)."""

    def _after_decision(self, start: int) -> None:
        """After a decision's world steps (``start``: its first entry in the ego track)."""

    def _ego_state_vector(self) -> np.ndarray:
        raise NotImplementedError

    def _route_points(self) -> np.ndarray:
        raise NotImplementedError

    def _route_command(self) -> int:
        raise NotImplementedError

    def route_ahead(self) -> np.ndarray:
        """The route's next points in the ego frame (what the ``route`` observation holds), whatever
        the agent observes: evaluation measures steering against it."""
        return self._route_points()

    @property
    def decision_s(self) -> float:
        """Seconds between decisions: the period an agent that tracks what it sees divides by."""
        return self.decision_every * DT

    @property
    def ego_track(self) -> list[EgoState]:
        """The ego's record at every 0.1 s of the episode so far (read-only use)."""
        return self._ego_track

    # --- episode -------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        scenario = interface.pick_scenario(self.scenarios, options.get("scenario"), self.np_random, self.bank_name)
        episode_seed = int(self.np_random.integers(2**31 - 1))
        self._start(scenario, episode_seed, options)
        self.scenario = scenario
        self.controller = TrajectoryController()
        self._ego_track = [self.ego_record()]
        self._returns = dict.fromkeys(self.composer.terms, 0.0)
        self._done, self._cut_decision = False, None
        if self._frames is not None:  # until there is a past, every frame slot shows now
            self._timed_capture(-1)
            self._frames[:, :-1] = self._frames[:, -1:]
        self._after_reset()
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
            return self._end_on_invalid_action(e)
        reference = self._reference() if control is None and self.composer.needs_reference else None
        if control is None:
            x, y, yaw, speed = self._pose()
            self.controller.set_plan(action, x, y, yaw, speed)
        return self._decide(action, control, reference)

    def _decide(self, action, control: tuple[float, float] | None, reference: np.ndarray | None, first: int = 0):
        """The world steps of one decision, from its ``first`` on (a decision the episode's end cut short
        is finished by ``LoopDriveEnv.run_out``), and what ``step`` returns."""
        events: list[Event] = []
        terms = dict.fromkeys(self.composer.terms, 0.0)
        reward = 0.0
        terminated = truncated = False
        ended_by: Event | None = None
        n, every, slots = self.decision_every, self._slot_steps, self.frame_slots
        shift = n // every  # slots a decision moves the kept frames by
        start = len(self._ego_track) - 1
        capture = self._frames is not None and self._renders_cameras()
        if first == 0 and self._frames is not None and shift < slots:  # keep the older frames, newest last
            self._frames[:, :-shift] = self._frames[:, shift:].copy()
        for k in range(first, n):
            if control is None:
                accel, steer = self.controller.control(*self._pose())
            else:
                accel, steer = control
            new_events = self._advance(accel, steer)
            ego = self.ego_record()
            transition = Transition(
                self._ego_track[-1],
                action,
                ego,
                new_events,
                DT,
                self._privileged_world(),
                reference if k == 0 else None,
            )
            r, values = self.composer(transition)
            self._ego_track.append(ego)
            reward += r
            for key, v in values.items():
                terms[key] += v
            events.extend(new_events)
            back = n - 1 - k  # world steps from this one to the decision's last
            if capture and back % every == 0 and back // every < slots:
                self._timed_capture(slots - 1 - back // every)
            for hook in self.step_hooks:
                hook(self)
            ended_by = interface.terminal_event(new_events, self.terminate_on_collision)
            terminated = ended_by is not None
            truncated = self._time_up()
            if (terminated or truncated) and not self._running_out:
                self._cut_decision = (action, k + 1) if k + 1 < n else None
                break
        self._after_decision(start)
        for key, v in terms.items():
            self._returns[key] += v
        info = self._info(events, terms)
        if (terminated or truncated) and not self._running_out:
            self._done = True
            info["metrics"] = self.episode_metrics()
            info["metrics"]["ending"] = episode_ending(ended_by, self._ego_track).value
        return self._observe(), float(reward), terminated, truncated, info

    def _time_up(self) -> bool:
        """The scenario's time has run out (the episode is truncated)."""
        return self.world.t >= self.scenario.duration_s - 1e-9

    def _end_on_invalid_action(self, error: InvalidActionError):
        """``invalid_action="terminate"``: the episode ends here with an ``invalid_action`` event."""
        self._done = True
        event = Event(EventKind.INVALID_ACTION, self.world.t, reason=str(error))
        self.world.log.append(event)
        info = self._info([event], dict.fromkeys(self.composer.terms, 0.0))
        info["metrics"] = self.episode_metrics() | {"ending": episode_ending(event, self._ego_track).value}
        return self._observe(), 0.0, True, False, info

    def _timed_capture(self, slot: int) -> None:
        t0 = time.perf_counter()
        self._capture(slot)
        self.render_seconds += time.perf_counter() - t0

    # --- observation, info, summary -------------------------------------------------------------------------
    def _observe(self) -> dict[str, Any]:
        keys = self.observation_keys
        out: dict[str, Any] = {}
        if "cameras" in keys:
            out["cameras"] = self._frames[:, :: self._slots_apart].copy()
        if "ego_history" in keys:
            x, y, yaw, _ = self._pose()
            out["ego_history"] = self.history.observe_from(x, y, yaw)
        if "ego_state" in keys:
            out["ego_state"] = self._ego_state_vector()
        if "route" in keys:
            out["route"] = self._route_points()
        if "command" in keys:
            out["command"] = self._route_command()
        return out

    def _info(self, events: list[Event], terms: dict[str, float]) -> dict[str, Any]:
        return {
            "scenario": self.scenario.id,
            "family": self.scenario.family,
            "t": self.world.t,
            "reward_terms": terms,
            "events": events,
        }

    def episode_metrics(self) -> dict[str, Any]:
        """Summary of the episode so far: statistics, infractions, every metric suite."""
        return interface.summarise_episode(
            self.episode_log(), self.world.stats(), self._returns, self.leaderboard_version
        )
