"""Small drivers for tests: open-loop plans along the route, and episode runners."""

from __future__ import annotations

import math

import numpy as np

from envs import TrajectoryController, World
from scenarios import geometry as geo


def route_plan(world: World, speed: float, lateral: float = 0.0) -> np.ndarray:
    """64 waypoints along the route centreline (shifted ``lateral`` m left) at constant speed."""
    st, c = world.state, world.compiled
    s = st.route_s + speed * 0.1 * np.arange(1, 65)
    pts, hs = geo.interpolate(c.route_xy, c.route_s, s)
    pts = pts + lateral * np.stack([-np.sin(hs), np.cos(hs)], 1)
    x, y, yaw = float(st.x[0]), float(st.y[0]), float(st.yaw[0])
    cy, sy = math.cos(yaw), math.sin(yaw)
    d = pts - [x, y]
    return np.stack([cy * d[:, 0] + sy * d[:, 1], -sy * d[:, 0] + cy * d[:, 1], geo.wrap_angle(hs - yaw)], 1)


def drive_world(world: World, plan_fn, seconds: float, every: int = 5) -> list[dict]:
    """Closed loop on the bare world: replan every ``every`` steps, track with the controller."""
    ctl = TrajectoryController()
    events = []
    for k in range(int(round(seconds / 0.1))):
        st = world.state
        if k % every == 0:
            ctl.set_plan(plan_fn(world), float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0]))
        events += world.step(*ctl.control(float(st.x[0]), float(st.y[0]), float(st.yaw[0]), float(st.speed[0])))
    return events


def drive_to_the_end(env, agent, scenario: str | None = None, snapshots: list | None = None, obs=None) -> dict:
    """An env episode driven by ``agent`` (reset on it) to its end, from a reset to ``scenario`` or from
    ``obs`` where the env stands (restored); its snapshot before each decision appended to ``snapshots``;
    the last step's info."""
    if scenario is not None:
        obs, _ = env.reset(seed=0, options={"scenario": scenario})
    agent.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    done, info = False, {}
    while not done:
        if snapshots is not None:
            snapshots.append(env.snapshot())
        obs, _, terminated, truncated, info = env.step(agent.act(obs).trajectory)
        done = terminated or truncated
    return info
