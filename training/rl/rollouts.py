"""Closed-loop rollouts of the VLA on Ray RLlib env runners, for GRPO.

``RolloutWorkers`` owns an RLlib ``EnvRunnerGroup`` (0 runners: one in-process runner; N: N Ray
actors, locally or on a cluster) whose env is :class:`training.rl.env.RLDriveEnv` and whose module
is :class:`training.rl.module.VLAModule`. A call hands every runner the latest trainable weights
and its share of the tasks, and gets back one :class:`Rollout` per task:

- episode level: the runner drives each (scenario, seed) task to the end with the Flow-SDE policy;
  the env computes every reward term and the metric suites at the end.
- step level: the runner drives the task deterministically to a decision step (or the last one
  before the episode ends, if it ends first), takes a ``snapshot()`` of the world, and scores G
  SDE-sampled decisions from there, each followed by ``branch_horizon`` - 1 deterministic decisions
  (a bandit over the same state).

A runner holds ``envs_per_runner`` envs and drives that many rollouts side by side, calling the
module once per decision for all of them: batched inference is where a small VLA's rollouts get
their speed (the model's per-call overhead is shared). The runner's RNG is consumed in the same
order for the same envs_per_runner, so the rollouts are deterministic for a given setting.

A runner that dies (its process crashes, its node goes) is restarted by RLlib's fault tolerance
(``restart_failed_env_runners``: Ray restarts the actor and retries the call on it); if a call still
comes back without its rollouts, those tasks are run again on the healthy runners, up to ``retries``
times (``reruns`` counts them).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from loopdrive.seeding import derive_seed
from rewards.events import INCIDENTS
from rewards.terms import standing_blocked
from training.rl.module import CHAIN, REASONING_IDS, SMASK, TEXT_LOGP, TRAJ_LOGP

log = logging.getLogger(__name__)


@dataclass
class Task:
    uid: int  # unique within an iteration
    group: int  # tasks of a group share scenario and seed (episode level) or a snapshot (step level)
    scenario: str
    seed: int
    branch_at: int = 0  # step level: the decision to branch at
    failure_lookback: int = 0  # step level, > 0: branch this many decisions before the plan's first infraction
    sampled_decisions: int = 1  # step level: decisions of a branch drawn from the SDE before the plan takes over
    stall_decisions: int = 0  # with failure_lookback: standing still this many decisions, nothing in the way, fails
    stall_noise_level: float | tuple[float, ...] | None = None  # SDE noise of a group branched at a stall


@dataclass
class Rollout:
    """What a learner needs from one episode or branch: per decision, and the totals."""

    uid: int
    group: int
    scenario: str
    observations: list[dict[str, np.ndarray]]
    chains: np.ndarray  # [T, steps + 1, 64, 2]
    smasks: np.ndarray  # [T, steps] bool
    logp: np.ndarray  # [T]
    rewards: np.ndarray  # [T] the env's composed reward per decision (a step-level branch: [1], its total)
    reward_terms: dict[str, float] = field(default_factory=dict)  # totals over the rollout
    metrics: dict[str, Any] | None = None  # the env's episode metrics (episode level)
    env_steps: int = 0
    reasoning_ids: np.ndarray | None = None  # [T, L] sampled Chain-of-Causation tokens (-1: padding)
    text_logp: np.ndarray | None = None  # [T] their log-prob under the sampling policy
    consistency: float | None = None  # mean reasoning-action consistency (the critic's overall score)
    example_reasoning: str | None = None
    branch: str = ""  # step level: where its group branched ("stall", "failure" or "point")
    noise_level: float | tuple[float, ...] | None = None  # the SDE noise it explored with (None: the recipe's)

    def score(self, kind: str) -> float:
        if kind == "driving_score" and self.metrics is not None:
            return float(self.metrics["leaderboard"]["score"]) / 100.0
        return float(self.rewards.sum())


def _drive_envs(runner) -> list:
    """The RLDriveEnvs inside the runner's vector env (through gymnasium's checker wrappers)."""
    from training.rl.env import RLDriveEnv

    out = []
    for env in runner.env.unwrapped.envs:
        while not isinstance(env, RLDriveEnv):
            env = env.env
        out.append(env)
    return out


def _load_weights(runner, weights: dict[str, np.ndarray] | None) -> None:
    """The trainer's latest weights, and (key ``__seed__``) this call's sampling seed for the runner."""
    weights = dict(weights or {})
    seed = weights.pop("__seed__", None)
    if seed is not None:
        runner.module.generator.manual_seed(derive_seed(int(seed), runner.worker_index))
    if weights:
        state = {k: torch.from_numpy(v) for k, v in weights.items()}
        runner.module.vla.load_state_dict(state, strict=False)


def _critic(runner, spec: str):
    """The runner's reasoning critic (built once: an HF model or an HTTP client is not free)."""
    cached = getattr(runner, "_loopdrive_critic", None)
    if cached is None or cached[0] != spec:
        from rewards.critics import make_critic

        runner._loopdrive_critic = (spec, make_critic(spec))
    return runner._loopdrive_critic[1]


def _add_reasoning(
    runner,
    rollout: Rollout,
    ids: np.ndarray,
    text_logp: np.ndarray,
    traj_logp: np.ndarray,
    plans: np.ndarray,
    infos: list[dict[str, Any]],
    critic: str | None,
) -> None:
    """Reasoning fields of a rollout, and its consistency score under the critic (on the runner)."""
    from rewards.consistency import consistency_score

    texts = runner.module.vla.decode_reasoning(ids)
    rollout.reasoning_ids, rollout.text_logp, rollout.logp = ids, text_logp, traj_logp
    rollout.example_reasoning = texts[0] if texts else None
    if critic and all("causes" in i for i in infos):
        c = _critic(runner, critic)
        scores = [
            consistency_score(t, p, set(i["causes"]), c, speed0=i["speed"]).overall
            for t, p, i in zip(texts, plans, infos)
        ]
        rollout.consistency = float(np.mean(scores)) if scores else None


def _batch(obs_list: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    from ray.rllib.core.columns import Columns

    return {Columns.OBS: {k: torch.from_numpy(np.stack([np.asarray(o[k]) for o in obs_list])) for k in obs_list[0]}}


def _plans(module, observations: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The deterministic plans of a batch of observations (one module call)."""
    from ray.rllib.core.columns import Columns

    with torch.no_grad():
        return list(module.forward_inference(_batch(observations))[Columns.ACTIONS].numpy())


def _waves(items: list, width: int) -> list[list]:
    """``items`` in consecutive slices of ``width``: what the runner's envs drive side by side."""
    return [items[i : i + width] for i in range(0, len(items), width)]


FAILURES = INCIDENTS  # collision, off-road, red light, stop sign, wrong way
BranchPoint = tuple[dict[str, Any], dict[str, np.ndarray], int, str]  # snapshot, observation, steps, why


@dataclass
class _Approach:
    """One env driving a task's deterministic plan towards its branch point (see :func:`_branch_points`)."""

    env: Any
    task: Task
    obs: dict[str, np.ndarray]
    points: list[tuple[dict[str, Any], dict[str, np.ndarray]]]  # (snapshot, observation) at every decision
    steps: int = 0
    standing: int = 0
    failed_at: int | None = None
    kind: str = "point"
    done: bool = False

    @property
    def driving(self) -> bool:
        return not self.done and (self.task.failure_lookback > 0 or self.steps < self.task.branch_at)

    def step(self, action: np.ndarray) -> None:
        task, env = self.task, self.env
        self.obs, _, term, trunc, info = env.step(action)
        self.steps += 1
        stalled = False
        if task.failure_lookback and task.stall_decisions:
            self.standing = self.standing + 1 if standing_blocked(env.unwrapped.world.ego_record()) else 0
            stalled = self.standing >= task.stall_decisions
        if task.failure_lookback and (stalled or any(e.kind in FAILURES for e in info["events"])):
            self.failed_at = self.steps - 1  # the decision whose step brought it
            self.kind, self.done = ("stall" if stalled else "failure"), True
        elif term or trunc:  # ended first: branch at the last decision before the end
            self.done = True
        else:
            self.points.append((env.snapshot(), self.obs))

    def branch_point(self) -> BranchPoint:
        if self.failed_at is not None:
            at = max(0, self.failed_at + 1 - self.task.failure_lookback)
        else:
            at = min(self.task.branch_at, len(self.points) - 1)
        snap, obs = self.points[at]
        return snap, obs, self.steps, self.kind


def _branch_points(envs: list, module, tasks: list[Task]) -> list[BranchPoint]:
    """Reset to each task and drive the deterministic plan to its branch point, ``len(envs)`` tasks side
    by side (one batched plan per decision): per task (snapshot, observation there, env steps driven,
    why there: "stall", "failure" or "point").

    ``branch_at``: that decision, or the last one before the episode ends if it ends first. With
    ``failure_lookback`` k > 0: k decisions before the decision whose step brought the plan's first
    infraction (a group then compares decisions that may avoid it); ``branch_at`` if none comes.
    With ``stall_decisions`` n > 0 a stall is a failure too: the plan standing still for n decisions
    with nothing in its way (a behaviour-cloned policy that copies its own standstill never restarts).
    """
    out = []
    for wave in _waves(tasks, len(envs)):
        approaches = []
        for env, task in zip(envs, wave):
            env.set_tasks([(task.scenario, task.seed)])
            obs, _ = env.reset()
            approaches.append(_Approach(env, task, obs, [(env.snapshot(), obs)]))
        while driving := [a for a in approaches if a.driving]:
            for a, action in zip(driving, _plans(module, [a.obs for a in driving])):
                a.step(action)
        out += [a.branch_point() for a in approaches]
    return out


def _branch_point(env, module, task: Task) -> BranchPoint:
    """:func:`_branch_points` of one task on one env."""
    return _branch_points([env], module, [task])[0]


@contextmanager
def _exploring_with(module, level: float | tuple[float, ...] | None):
    """The module samples with ``level`` inside the block (None: its own level)."""
    own = module.noise_level
    module.noise_level = own if level is None else level
    try:
        yield
    finally:
        module.noise_level = own


@dataclass
class _Lane:
    """One env driving one rollout: from a reset (episode level) or a restored snapshot (a branch), its
    first ``task.sampled_decisions`` decisions drawn from the SDE and the plan's after them, until the
    episode ends or ``horizon`` decisions are driven."""

    env: Any
    task: Task
    obs: dict[str, np.ndarray]
    info: dict[str, Any]
    horizon: int | None = None  # None: to the episode's end
    level: float | tuple[float, ...] | None = None  # the SDE's noise level (None: the module's)
    steps_before: int = 0  # env steps driven to reach the start
    decisions: list[tuple[dict[str, np.ndarray], dict[str, torch.Tensor], dict[str, Any]]] = field(
        default_factory=list
    )  # every sampled decision: its observation, module outputs and info
    rewards: list[float] = field(default_factory=list)
    terms: dict[str, float] = field(default_factory=dict)
    final: dict[str, Any] | None = None
    done: bool = False

    @property
    def samples_next(self) -> bool:
        return len(self.rewards) < self.task.sampled_decisions

    def step(self, action: np.ndarray) -> None:
        self.obs, r, term, trunc, self.info = self.env.step(action)
        self.rewards.append(float(r))
        for k, v in self.info.get("reward_terms", {}).items():
            self.terms[k] = self.terms.get(k, 0.0) + float(v)
        if term or trunc:
            self.final, self.done = self.info.get("metrics"), True
        elif self.horizon is not None and len(self.rewards) >= self.horizon:
            self.done = True


def _drive_lanes(module, lanes: list[_Lane]) -> None:
    """Drive every lane to its end side by side: each decision, one exploration call per noise level
    over the lanes that sample, and one plan call over the others."""
    from ray.rllib.core.columns import Columns

    while active := [lane for lane in lanes if not lane.done]:
        actions: dict[int, np.ndarray] = {}
        sampling = [lane for lane in active if lane.samples_next]
        for level in dict.fromkeys(lane.level for lane in sampling):  # in order of appearance
            group = [lane for lane in sampling if lane.level == level]
            with _exploring_with(module, level), torch.no_grad():
                out = module.forward_exploration(_batch([lane.obs for lane in group]))
            for i, lane in enumerate(group):
                sample = {k: v[i : i + 1] for k, v in out.items()}
                lane.decisions.append((lane.obs, sample, lane.info))
                actions[id(lane)] = sample[Columns.ACTIONS][0].numpy()
        planning = [lane for lane in active if not lane.samples_next]
        if planning:
            for lane, plan in zip(planning, _plans(module, [lane.obs for lane in planning])):
                actions[id(lane)] = plan
        for lane in active:
            lane.step(actions[id(lane)])


def _rollout_of(runner, lane: _Lane, critic: str | None, per_decision: bool) -> Rollout:
    """A finished lane as a rollout: per sampled decision its observation, chain, mask and log-prob; the
    rewards per decision (episode level) or their total (a branch: one score for its decisions)."""
    from ray.rllib.core.columns import Columns

    def stacked(key: str) -> np.ndarray:
        return np.concatenate([d[1][key].numpy() for d in lane.decisions])

    rollout = Rollout(
        uid=lane.task.uid,
        group=lane.task.group,
        scenario=lane.task.scenario,
        observations=[d[0] for d in lane.decisions],
        chains=stacked(CHAIN),
        smasks=stacked(SMASK) > 0.5,
        logp=stacked(Columns.ACTION_LOGP),
        rewards=np.asarray(lane.rewards if per_decision else [sum(lane.rewards)], np.float32),
        reward_terms=lane.terms,
        env_steps=len(lane.rewards) + lane.steps_before,
        metrics=lane.final,
    )
    if REASONING_IDS in lane.decisions[0][1]:
        _add_reasoning(
            runner,
            rollout,
            stacked(REASONING_IDS),
            stacked(TEXT_LOGP),
            stacked(TRAJ_LOGP),
            stacked(Columns.ACTIONS),
            [d[2] for d in lane.decisions],
            critic,
        )
    return rollout


def _episode_rollouts(runner, tasks: list[Task], critic: str | None = None) -> list[Rollout]:
    """Episode level: each task driven from its reset to the end with the SDE, ``len(envs)`` at a time."""
    envs, out = _drive_envs(runner), []
    for wave in _waves(tasks, len(envs)):
        lanes = []
        for env, task in zip(envs, wave):
            env.set_tasks([(task.scenario, task.seed)])
            obs, info = env.reset()
            lanes.append(_Lane(env, replace(task, sampled_decisions=math.inf), obs, info))
        _drive_lanes(runner.module, lanes)
        out += [_rollout_of(runner, lane, critic, per_decision=True) for lane in lanes]
    return out


def _branch_rollouts(runner, tasks: list[Task], horizon: int, critic: str | None = None) -> list[Rollout]:
    """Step level: one snapshot per group (the groups' approaches side by side), then every branch of
    every group from its snapshot, ``len(envs)`` at a time: ``sampled_decisions`` SDE decisions, then
    plan decisions, ``horizon`` in all. A group branched at a stall explores with the task's
    ``stall_noise_level`` where one is set."""
    envs = _drive_envs(runner)
    groups: dict[int, list[Task]] = {}
    for t in tasks:
        groups.setdefault(t.group, []).append(t)
    points = dict(zip(groups, _branch_points(envs, runner.module, [g[0] for g in groups.values()])))
    branches = [(task, points[task.group]) for group in groups.values() for task in group]
    out = []
    for wave in _waves(branches, len(envs)):
        lanes = []
        for env, (task, (snap, _, steps, kind)) in zip(envs, wave):
            obs, info = env.restore(snap)
            level = task.stall_noise_level if kind == "stall" else None
            lanes.append(_Lane(env, task, obs, info, horizon, level, steps))
        _drive_lanes(runner.module, lanes)
        for lane, (_, (_, _, _, kind)) in zip(lanes, wave):
            rollout = _rollout_of(runner, lane, critic, per_decision=False)
            rollout.branch, rollout.noise_level = kind, lane.level
            out.append(rollout)
    return out


def _run(
    runner, plan: dict[int, list[Task]], weights, level: str, horizon: int, critic: str | None
) -> tuple[list[Rollout], list[int]]:
    """A runner's share of the plan: its rollouts, and the uids of every task it finished."""
    tasks = plan.get(runner.worker_index, [])
    if not tasks:
        return [], []
    _load_weights(runner, weights)
    if level == "step":
        return _branch_rollouts(runner, tasks, horizon, critic), [t.uid for t in tasks]
    return _episode_rollouts(runner, tasks, critic), [t.uid for t in tasks]


def env_runner_config(
    env_config: dict[str, Any],
    module_spec,
    num_env_runners: int,
    seed: int,
    envs_per_runner: int = 1,
    hold: int = 0,
    route_shift: float = 0.0,
):
    """The RLlib config of our env runners: ``RLDriveEnv`` with trajectories passed through untouched
    (no action normalisation or clipping), whole episodes, ``envs_per_runner`` envs per runner (stepped
    side by side, the module called once per decision for all of them), the given module, and
    restarts of failed runners; with ``hold`` (decisions) each episode's held manoeuvre is read back into
    the module's batch (:mod:`training.rl.hold`), with ``route_shift`` (metres) its route drawn into the
    lane held (:mod:`training.rl.route_shift`). A ``PPOConfig``, because any new-stack config serves for
    the runners and PPO adds its training settings on top."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from envs.world import DT
    from training.rl.env import RLDriveEnv
    from training.rl.hold import HoldConnectors

    return (
        PPOConfig()
        .environment(
            RLDriveEnv, env_config=env_config, normalize_actions=False, clip_actions=False, disable_env_checking=True
        )
        .framework("torch")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=envs_per_runner,
            batch_mode="complete_episodes",
            num_cpus_per_env_runner=1,
            rollout_fragment_length="auto",
            env_to_module_connector=(
                HoldConnectors(hold, route_shift, env_config["decision_every"] * DT) if hold else None
            ),
        )
        .rl_module(rl_module_spec=module_spec)
        .fault_tolerance(restart_failed_env_runners=True)
        .debugging(seed=seed)
    )


class RolloutWorkers:
    def __init__(
        self,
        env_config: dict[str, Any],
        model_config: dict[str, Any],
        num_env_runners: int = 0,
        seed: int = 0,
        envs_per_runner: int = 1,
    ) -> None:
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec
        from ray.rllib.env.env_runner_group import EnvRunnerGroup

        from training.rl.module import VLAModule

        spec = RLModuleSpec(module_class=VLAModule, model_config=model_config)
        config = env_runner_config(env_config, spec, num_env_runners, seed, envs_per_runner)
        self.num_env_runners = num_env_runners
        self.group = EnvRunnerGroup(config=config, local_env_runner=num_env_runners == 0)
        self.restarts = 0
        self.reruns = 0

    def recover(self, wait_s: float = 180.0) -> None:
        """Bring restarted runners back into service; wait (up to ``wait_s``) while none is healthy."""
        if not self.num_env_runners:
            return
        deadline = time.monotonic() + wait_s
        while self.group.num_healthy_remote_env_runners() < self.num_env_runners:
            self.restarts += len(self.group.probe_unhealthy_env_runners(timeout_seconds=5.0))
            if self.group.num_healthy_remote_env_runners() > 0 and time.monotonic() > deadline - wait_s + 5:
                break  # some are back: go on with them, the others rejoin later
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)

    def nodes(self) -> int:
        """How many Ray nodes the env runners run on (1 when they run in this process): on a cluster,
        whether the rollouts spread over its machines."""
        if self.num_env_runners == 0:
            return 1
        import ray

        where = self.group.foreach_env_runner(
            lambda runner: ray.get_runtime_context().get_node_id(), local_env_runner=False
        )
        return len(set(where))

    def _runner_ids(self) -> list[int]:
        if self.num_env_runners == 0:
            return [0]
        return sorted(self.group.healthy_env_runner_ids())

    def run(
        self,
        tasks: list[Task],
        weights: dict[str, np.ndarray] | None,
        level: str = "episode",
        horizon: int = 6,
        retries: int = 2,
        critic: str | None = None,
    ) -> list[Rollout]:
        """Every task's rollout; tasks of a runner that failed are re-run on the restarted ones."""
        results: list[Rollout] = []
        todo = list(tasks)
        for attempt in range(retries + 1):
            self.recover()
            ids = self._runner_ids()
            if not ids:
                raise RuntimeError("no healthy env runner is left (none came back after a restart)")
            plan: dict[int, list[Task]] = {}
            # whole groups go to one runner in step mode (they share a snapshot)
            keys = sorted({t.group for t in todo}) if level == "step" else [t.uid for t in todo]
            owner = {k: ids[i % len(ids)] for i, k in enumerate(keys)}
            for t in todo:
                plan.setdefault(owner[t.group if level == "step" else t.uid], []).append(t)
            got = self.group.foreach_env_runner(
                lambda r, plan=plan: _run(r, plan, weights, level, horizon, critic),
                local_env_runner=self.num_env_runners == 0,
            )
            done: set[int] = set()
            for rollouts, finished in got:
                results.extend(rollouts)
                done.update(finished)
            todo = [t for t in todo if t.uid not in done]
            if not todo:
                break
            self.reruns += len(todo)
            log.warning(
                "%d rollouts were lost with a failed env runner; restarting it and running them again "
                "(attempt %d of %d)",
                len(todo),
                attempt + 1,
                retries,
            )
        if todo:
            raise RuntimeError(f"{len(todo)} rollouts failed {retries + 1} times (env runners keep dying)")
        return results

    def stop(self) -> None:
        self.group.stop()
