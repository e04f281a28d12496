"""The environment as RLlib builds it: ``LoopDriveEnv`` from one ``env_config`` dict, with a task queue.

RLlib constructs an env class with a single ``EnvContext`` argument and resets it without options
(also on auto-reset), so GRPO cannot ask for "scenario X with seed S" through ``reset``. Instead
the trainer hands every env runner its tasks with ``set_tasks`` and each reset takes the next one;
G copies of a task make a group (same scenario, same seed, same traffic). With an empty queue a
reset draws a scenario from the bank like ``LoopDriveEnv`` does.

Cameras are resized to the VLA's input size here (``image_size``), with the same OpenCV area filter
the model applies, so rollouts store and ship 5x fewer bytes without changing what the model sees.
``single_observation`` with one observation key returns that array instead of a dict.
With ``scene_facts`` every info carries the scene's causes and the ego speed at that observation,
which the reasoning-consistency reward needs at each decision. With ``standing_starts`` (a share,
PPO's ``rl.standing_starts``) that share of the episodes start with the ego standing, drawn per reset
from ``standing_starts_seed`` and the seed of the env's last seeded reset (RLlib seeds each env once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.gym_env import LoopDriveEnv
from envs.sensors.resize import resize_frames

Task = tuple[str, int]  # (scenario id, reset seed)


class RLDriveEnv(gym.Wrapper):
    """``LoopDriveEnv(**config)``; extra keys: ``image_size`` (H, W) for the cameras, ``tasks``."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        cfg = dict(config or {})
        cfg.pop("num_envs", None)  # added by RLlib's vector entry point
        image_size = cfg.pop("image_size", None)
        tasks = cfg.pop("tasks", ())
        self.scene_facts = bool(cfg.pop("scene_facts", False))
        self.standing_starts = float(cfg.pop("standing_starts", 0.0))
        self._starts_seed = int(cfg.pop("standing_starts_seed", 0))
        self._starts = np.random.default_rng(self._starts_seed)
        single = bool(cfg.pop("single_observation", False))
        for key in ("camera_size", "observations"):
            if key in cfg and isinstance(cfg[key], list):
                cfg[key] = tuple(cfg[key])
        super().__init__(LoopDriveEnv(**cfg))
        self.image_size = tuple(image_size) if image_size else None
        self.observation_space = self.env.observation_space
        if self.image_size and "cameras" in self.observation_space.spaces:
            n_cams, n_frames = self.observation_space["cameras"].shape[:2]
            shape = (n_cams, n_frames, *self.image_size, 3)
            self.observation_space = spaces.Dict(
                {**self.observation_space.spaces, "cameras": spaces.Box(0, 255, shape, np.uint8)}
            )
        self.single = None  # with one observation: that array itself (what RLlib's default modules take)
        if single and len(self.observation_space.spaces) == 1:
            (self.single,) = self.observation_space.spaces
            space = self.observation_space[self.single]
            if space.dtype == np.uint8:  # images as floats in [0, 1] for a CNN
                space = spaces.Box(0.0, 1.0, space.shape, np.float32)
            self.observation_space = space
        self.tasks: deque[Task] = deque()
        self.set_tasks(tasks)
        self.current_task: Task | None = None

    def set_tasks(self, tasks: Sequence[Task]) -> None:
        """Replace the queue: each following reset drives the next (scenario, seed)."""
        self.tasks = deque((str(s), int(seed)) for s, seed in tasks)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.tasks:
            scenario, seed = self.tasks.popleft()
            options = {**(options or {}), "scenario": scenario}
        if seed is not None:  # (RLlib seeds each of its envs once, each with its own seed)
            self._starts = np.random.default_rng((self._starts_seed, seed))
        if self.standing_starts and self._starts.random() < self.standing_starts:
            options = {**(options or {}), "ego_speed": 0.0}
        obs, info = self.env.reset(seed=seed, options=options)
        self.current_task = (info["scenario"], seed)
        info["task"] = self.current_task
        return self._resize(obs), self._facts(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._resize(obs), reward, terminated, truncated, self._facts(info)

    def _facts(self, info: dict[str, Any]) -> dict[str, Any]:
        if self.scene_facts:
            from rewards.scene import scene_facts

            world = self.env.unwrapped.world
            info["causes"] = sorted(scene_facts(world).causes)
            info["speed"] = float(world.state.speed[0])
        return info

    def snapshot(self) -> dict[str, Any]:
        return self.env.unwrapped.snapshot()

    def restore(self, snap: dict[str, Any]):
        obs, info = self.env.unwrapped.restore(snap)
        return self._resize(obs), self._facts(info)

    def _resize(self, obs: dict[str, Any]) -> dict[str, Any]:
        if self.single is not None:
            x = obs[self.single]
            return x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x
        if self.image_size is None or "cameras" not in obs:
            return obs
        h, w = self.image_size
        cams = obs["cameras"]
        if cams.shape[2:4] == (h, w):
            return obs
        return {**obs, "cameras": resize_frames(cams, (h, w))}
