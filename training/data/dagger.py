"""DAgger's labels: what the expert does from a state the policy drove into.

A behaviour-cloned policy only ever saw the expert's states; its own small errors lead it to states
it never saw. DAgger lets the policy drive and labels the states it reaches with the expert's answer.
Here the answer is a driven future, like every other target in the data: the world's snapshot at
the policy's decision is restored in a second env that renders no cameras, a fresh expert drives
from there, and the label is the 64 poses it drove (6.4 s in the ego frame at the decision).
``collect`` with ``target = "expert"`` records such samples; the SFT recipe's ``[dagger]`` rounds
collect them with the policy of the moment and train on them mixed with the expert's own data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rewards import EventKind
from training.data.record import HORIZON, future_in_ego_frame


@dataclass(frozen=True)
class ExpertLabel:
    """The expert's driven future from one snapshot, or why there is none.

    ``target`` is None when the branch ended before 6.4 s (the route done, the scenario's time up) and
    could not be driven on past that end (``run_out``: the route ran out too). ``failed``: the expert caused
    a collision there, or left the road it started on: no demonstration. ``ran_out``: the future reaches
    past the branch's end.
    """

    target: np.ndarray | None
    failed: bool
    ran_out: bool = False


class ExpertLabeller:
    """Labels snapshots of an env of the same bank with the expert's driven future.

    Its own env observes no cameras (a label needs none), so a label costs the expert's planning and
    the world's steps only. Restoring into it gives the same world, controller and ego history as the
    episode had at the snapshot: the expert's future here is bit for bit the one it would drive in
    the episode's own env from that snapshot (tested).
    """

    def __init__(
        self, bank: str, split: str | None, decision_every: int, expert: str = "expert", run_out: bool = False
    ) -> None:
        from agents import load_agent
        from envs import LoopDriveEnv

        self.env = LoopDriveEnv(bank=bank, split=split, decision_every=decision_every, observations=("ego_state",))
        self.expert = load_agent(expert)
        self.run_out = run_out

    def plans_as(self, snapshot: dict[str, Any], plan: np.ndarray, seed: int = 0) -> bool:
        """Whether a fresh expert at ``snapshot`` plans ``plan`` (within 1 cm at every pose): then its label
        from a branch of that state continues the demonstration. A fresh expert knows nothing of a
        manoeuvre under way (an overtake half done, a stop already made): it decides anew, and a branch
        labelled there teaches another decision than the driver's."""
        obs, _ = self.env.restore(snapshot)
        self.expert.reset({"scenario": self.env.scenario, "world": self.env.world, "seed": seed})
        own = np.asarray(self.expert.act(obs).trajectory)[:, :2]
        return bool(np.abs(own - np.asarray(plan)[:, :2]).max() <= 0.01)

    def label(self, snapshot: dict[str, Any], seed: int = 0) -> ExpertLabel:
        """Restore ``snapshot`` (from any env of this bank), let a fresh expert drive 6.4 s, return it."""
        env = self.env
        obs, _ = env.restore(snapshot)
        k = len(env.ego_track) - 1
        world = env.world
        started_off_road = bool(world.state.offroad)
        self.expert.reset({"scenario": env.scenario, "world": world, "seed": seed})
        failed = done = False
        while not done and len(env.ego_track) - 1 <= k + HORIZON:
            obs, _, terminated, truncated, info = env.step(self.expert.act(obs).trajectory)
            done = terminated or truncated
            for e in info["events"]:
                crashed = e.kind is EventKind.COLLISION and e.at_fault
                failed |= crashed or (e.kind is EventKind.OFFROAD and not started_off_road)
        track, missing = env.ego_track, k + HORIZON + 1 - len(env.ego_track)
        if missing > 0 and done and not failed and self.run_out:  # the branch ended first: drive on past it
            track = track + env.run_out(lambda o: self.expert.act(o).trajectory, missing)
        return ExpertLabel(future_in_ego_frame(track, k), failed, ran_out=missing > 0)
