"""``sb3:PATH``: a stable-baselines3 policy saved with ``model.save(PATH)``, loaded without pickle.

An SB3 zip stores its Python objects (spaces, policy class, schedules) with cloudpickle, which runs
arbitrary code on load. This adapter never unpickles: it reads the human-readable copies SB3 writes
beside them (the policy class name, the spaces' shapes and bounds, JSON policy kwargs), rebuilds
the policy from an allow-list of SB3 policy classes, and loads ``policy.pth`` with
``torch.load(weights_only=True)``. A file whose policy cannot be rebuilt that way (custom classes,
non-JSON ``policy_kwargs`` such as ``activation_fn``) gets an error saying so.

Policies that output a trajectory (``Box(64, 3)``) drive directly. Control policies (``Box(2,)``,
normalised acceleration and steering, as ``LoopDriveControl-v0``) are turned into a trajectory by
rolling the ego's kinematic bicycle forward under the held command; evaluate them with
``decision_every=1`` so the command is renewed every 0.1 s, as in training.
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import math
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agents.base import AgentOutput, BaseAgent
from agents.baselines import speed_and_yaw_rate

POLICY_MODULES = {
    "ActorCriticPolicy": "stable_baselines3.common.policies",
    "MultiInputActorCriticPolicy": "stable_baselines3.common.policies",
    "ActorCriticCnnPolicy": "stable_baselines3.common.policies",
    "SACPolicy": "stable_baselines3.sac.policies",
    "MultiInputPolicy": "stable_baselines3.sac.policies",
    "TD3Policy": "stable_baselines3.td3.policies",
}
HORIZON_STEPS, DT = 64, 0.1


class SB3FormatError(ValueError):
    pass


def _box_from_readable(d: dict[str, Any], where: str) -> spaces.Box:
    try:
        shape = tuple(json.loads(d["_shape"]) if isinstance(d["_shape"], str) else d["_shape"])
        low = np.array(_floats(d["low"]), dtype=d["dtype"]).reshape(shape)
        high = np.array(_floats(d["high"]), dtype=d["dtype"]).reshape(shape)
    except (KeyError, ValueError, TypeError) as e:
        raise SB3FormatError(f"{where}: cannot read the Box space ({e})") from None
    return spaces.Box(low, high, shape, np.dtype(d["dtype"]).type)


def _floats(text: Any) -> list[float]:
    """numpy's printed array ('[-1. -1.]', with inf / nan) as numbers."""
    if isinstance(text, list):
        return [float(x) for x in text]
    return [float(tok) for tok in re.findall(r"-?inf|nan|-?[\d.]+(?:e[-+]?\d+)?", str(text))]


_BOX_REPR = re.compile(r"'(\w+)': Box\(([^,]+), ([^,]+), \(([\d, ]*)\), (\w+)\)")


def _dict_from_readable(d: dict[str, Any], where: str) -> spaces.Dict:
    """Dict spaces are stored only as a repr: "{'state': Box(-inf, inf, (106,), float32)}"."""
    found = _BOX_REPR.findall(str(d.get("spaces", "")))
    if not found:
        raise SB3FormatError(f"{where}: cannot read the Dict observation space {d.get('spaces')!r}")
    out = {}
    for key, low, high, shape, dtype in found:
        shp = tuple(int(s) for s in shape.replace(" ", "").split(",") if s)
        out[key] = spaces.Box(float(low), float(high), shp, np.dtype(dtype).type)
    return spaces.Dict(out)


def read_sb3_zip(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """The rebuilt policy (eval mode, on CPU) and a description of its spaces."""
    import torch

    path = Path(path)
    where = str(path)
    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
            weights = z.read("policy.pth")
    except FileNotFoundError:
        raise SB3FormatError(f"{where}: no such file") from None
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as e:
        raise SB3FormatError(f"{where}: not a stable-baselines3 save ({e})") from None
    init = str(data.get("policy_class", {}).get("__init__", ""))
    m = re.match(r"<function (\w+)\.__init__", init)
    if not m or m.group(1) not in POLICY_MODULES:
        raise SB3FormatError(
            f"{where}: policy class {m.group(1) if m else '?'} is not one LoopDrive can rebuild "
            f"without pickle; supported: {sorted(POLICY_MODULES)}"
        )
    cls = getattr(importlib.import_module(POLICY_MODULES[m.group(1)]), m.group(1))
    kwargs = data.get("policy_kwargs", {})
    if not isinstance(kwargs, dict) or ":serialized:" in kwargs:
        raise SB3FormatError(
            f"{where}: policy_kwargs hold Python objects that only pickle can restore; "
            "save with JSON-able policy_kwargs (net_arch, ...)"
        )
    kwargs = {k: (ast.literal_eval(v) if isinstance(v, str) and v[:1] in "[{(" else v) for k, v in kwargs.items()}
    obs_d, act_d = data.get("observation_space", {}), data.get("action_space", {})
    obs_space = (
        _dict_from_readable(obs_d, f"{where}: observation_space")
        if "Dict" in obs_d.get(":type:", "")
        else _box_from_readable(obs_d, f"{where}: observation_space")
    )
    act_space = _box_from_readable(act_d, f"{where}: action_space")
    policy = cls(obs_space, act_space, lambda _: 0.0, **kwargs)
    try:
        state = torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True)
        policy.load_state_dict(state)
    except (RuntimeError, ValueError) as e:
        raise SB3FormatError(f"{where}: policy.pth does not fit {m.group(1)} with {kwargs}: {e}") from None
    policy.set_training_mode(False)
    return policy, {"observation_space": obs_space, "action_space": act_space, "policy_class": m.group(1)}


class SB3Agent(BaseAgent):
    name = "sb3"

    def __init__(self, path: str | Path) -> None:
        self.policy, info = read_sb3_zip(path)
        self.observation_space, self.action_space = info["observation_space"], info["action_space"]
        if isinstance(self.observation_space, spaces.Dict):
            self.keys: tuple[str, ...] | None = tuple(self.observation_space.spaces)
        else:
            self.keys = None  # a flat Box: the env's compact `state` vector
        shape = self.action_space.shape
        if shape not in ((2,), (HORIZON_STEPS, 3)):
            raise SB3FormatError(f"{path}: action space {shape} is neither control (2,) nor a trajectory (64, 3)")
        self.control = shape == (2,)
        self.observations = tuple(sorted({*(self.keys or ("state",)), "ego_state"}))

    def act(self, observation: dict[str, Any]) -> AgentOutput:
        obs = {k: observation[k] for k in self.keys} if self.keys else observation["state"]
        action, _ = self.policy.predict(obs, deterministic=True)
        action = np.asarray(action, np.float32)
        if not self.control:
            return AgentOutput(action)
        speed, _ = speed_and_yaw_rate(observation)
        traj = control_rollout(speed, float(action[0]), float(action[1]))
        return AgentOutput(traj, extras={"control": action})


def control_rollout(speed: float, u_accel: float, u_steer: float) -> np.ndarray:
    """Ego-frame (x, y, yaw) over 6.4 s of a kinematic bicycle holding a normalised command."""
    from envs.world import ACCEL_LIMITS, MAX_SPEED, MAX_STEER, WHEELBASE

    u_accel, u_steer = float(np.clip(u_accel, -1, 1)), float(np.clip(u_steer, -1, 1))
    accel = u_accel * (ACCEL_LIMITS[1] if u_accel > 0 else -ACCEL_LIMITS[0])
    beta = math.atan(0.5 * math.tan(u_steer * MAX_STEER))
    out = np.zeros((HORIZON_STEPS, 3), np.float32)
    x = y = yaw = 0.0
    v = speed
    for i in range(HORIZON_STEPS):
        v1 = min(max(v + accel * DT, 0.0), MAX_SPEED)
        vm = 0.5 * (v + v1)
        x += vm * math.cos(yaw + beta) * DT
        y += vm * math.sin(yaw + beta) * DT
        yaw += vm / (0.5 * WHEELBASE) * math.sin(beta) * DT
        v = v1
        out[i] = (x, y, yaw)
    return out
