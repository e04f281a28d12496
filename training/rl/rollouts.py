"""Closed-loop rollouts of the VLA on Ray RLlib env runners, for GRPO.

``RolloutWorkers`` owns an RLlib ``EnvRunnerGroup`` (0 runners: one in-process runner; N: N Ray
actors, locally or on a cluster) whose env is :class:`training.rl.env.RLDriveEnv` and whose module
is :class:`training.rl.module.VLAModule`. A call hands every runner the latest trainable weights
and its share of the tasks, and gets back one :class:`Rollout` per task:

- episode level: ``SingleAgentEnvRunner.sample(num_episodes=...)`` drives each (scenario, seed)
  task to the end, with the Flow-SDE policy; the env computes every reward term and the metric
  suites at the end.
- step level: the runner drives the task deterministically to a decision step (or the last one
  before the episode ends, if it ends first), takes a ``snapshot()`` of the world, and scores G
  SDE-sampled decisions from there, each followed by ``branch_horizon`` - 1 deterministic decisions
  (a bandit over the same state).

A runner that dies (its process crashes, its node goes) is restarted by RLlib's fault tolerance
(``restart_failed_env_runners``: Ray restarts the actor and retries the call on it); if a call still
comes back without its rollouts, those tasks are run again on the healthy runners, up to ``retries``
times (``reruns`` counts them).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
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


def _drive_env(runner):
    """The RLDriveEnv inside the runner's vector env (through gymnasium's checker wrappers)."""
    from training.rl.env import RLDriveEnv

    env = runner.env.unwrapped.envs[0]
    while not isinstance(env, RLDriveEnv):
        env = env.env
    return env


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


def _episode_rollouts(runner, tasks: list[Task], critic: str | None = None) -> list[Rollout]:
    runner.env.unwrapped.call("set_tasks", [(t.scenario, t.seed) for t in tasks])
    episodes = runner.sample(num_episodes=len(tasks), explore=True, force_reset=True)
    out = []
    for task, ep in zip(tasks, episodes):
        obs = ep.get_observations()
        n = len(ep)
        infos = ep.get_infos()
        terms: dict[str, float] = {}
        for info in infos[1:]:
            for k, v in info.get("reward_terms", {}).items():
                terms[k] = terms.get(k, 0.0) + float(v)
        rollout = Rollout(
            uid=task.uid,
            group=task.group,
            scenario=task.scenario,
            observations=[{k: v[i] for k, v in obs.items()} for i in range(n)],
            chains=np.asarray(ep.get_extra_model_outputs(CHAIN), np.float32),
            smasks=np.asarray(ep.get_extra_model_outputs(SMASK)) > 0.5,
            logp=np.asarray(ep.get_extra_model_outputs("action_logp"), np.float32),
            rewards=np.asarray(ep.get_rewards(), np.float32),
            reward_terms=terms,
            metrics=infos[-1].get("metrics"),
            env_steps=n,
        )
        if REASONING_IDS in ep.extra_model_outputs:
            _add_reasoning(
                runner,
                rollout,
                np.asarray(ep.get_extra_model_outputs(REASONING_IDS)),
                np.asarray(ep.get_extra_model_outputs(TEXT_LOGP), np.float32),
                np.asarray(ep.get_extra_model_outputs(TRAJ_LOGP), np.float32),
                np.asarray(ep.get_actions()),
                infos[:n],
                critic,
            )
        out.append(rollout)
    return out


def _batch(obs_list: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    from ray.rllib.core.columns import Columns

    return {Columns.OBS: {k: torch.from_numpy(np.stack([np.asarray(o[k]) for o in obs_list])) for k in obs_list[0]}}


FAILURES = INCIDENTS  # collision, off-road, red light, stop sign, wrong way


def _branch_point(env, module, task: Task) -> tuple[dict[str, Any], dict[str, np.ndarray], int, str]:
    """Reset to the task and drive the deterministic plan to its branch point: (snapshot, observation
    there, env steps driven, why there: "stall", "failure" or "point").

    ``branch_at``: that decision, or the last one before the episode ends if it ends first. With
    ``failure_lookback`` k > 0: k decisions before the decision whose step brought the plan's first
    infraction (a group then compares decisions that may avoid it); ``branch_at`` if none comes.
    With ``stall_decisions`` n > 0 a stall is a failure too: the plan standing still for n decisions
    with nothing in its way (a behaviour-cloned policy that copies its own standstill never restarts).
    """
    from ray.rllib.core.columns import Columns

    env.set_tasks([(task.scenario, task.seed)])
    obs, _ = env.reset()
    points = [(env.snapshot(), obs)]  # the state at every decision driven so far
    steps, failed_at, standing, kind = 0, None, 0, "point"
    last = None if task.failure_lookback else task.branch_at
    with torch.no_grad():
        while last is None or steps < last:
            action = module.forward_inference(_batch([obs]))[Columns.ACTIONS][0].numpy()
            obs, _, term, trunc, info = env.step(action)
            steps += 1
            stalled = False
            if task.failure_lookback and task.stall_decisions:
                standing = standing + 1 if standing_blocked(env.unwrapped.world.ego_record()) else 0
                stalled = standing >= task.stall_decisions
            if task.failure_lookback and (stalled or any(e.kind in FAILURES for e in info["events"])):
                failed_at = steps - 1  # the decision whose step brought it
                kind = "stall" if stalled else "failure"
                break
            if term or trunc:  # ended first: branch at the last decision before the end
                break
            points.append((env.snapshot(), obs))
    if failed_at is not None:
        at = max(0, failed_at + 1 - task.failure_lookback)
    else:
        at = min(task.branch_at, len(points) - 1)
    snap, obs = points[at]
    return snap, obs, steps, kind


@contextmanager
def _exploring_with(module, level: float | tuple[float, ...] | None):
    """The module samples with ``level`` inside the block (None: its own level)."""
    own = module.noise_level
    module.noise_level = own if level is None else level
    try:
        yield
    finally:
        module.noise_level = own


def _branch_rollouts(runner, tasks: list[Task], horizon: int, critic: str | None = None) -> list[Rollout]:
    """Step level: one snapshot per group, then per task ``sampled_decisions`` SDE decisions (the first
    one drawn for the whole group in one batch) and plan decisions up to ``horizon`` in all. A group
    branched at a stall explores with the task's ``stall_noise_level`` where one is set."""
    env, module = _drive_env(runner), runner.module
    out: list[Rollout] = []
    by_group: dict[int, list[Task]] = {}
    for t in tasks:
        by_group.setdefault(t.group, []).append(t)
    for group in by_group.values():
        snap, obs, steps, kind = _branch_point(env, module, group[0])
        level = group[0].stall_noise_level if kind == "stall" else None
        _, info_at_branch = env.restore(snap)
        with _exploring_with(module, level):
            with torch.no_grad():
                first = module.forward_exploration(_batch([obs] * len(group)))
            for i, task in enumerate(group):
                env.restore(snap)
                sample = {k: v[i : i + 1] for k, v in first.items()}
                rollout = _branch(runner, env, module, task, obs, sample, info_at_branch, horizon, steps, critic)
                rollout.branch, rollout.noise_level = kind, level
                out.append(rollout)
    return out


def _branch(
    runner,
    env,
    module,
    task: Task,
    obs,
    sample: dict[str, torch.Tensor],
    info: dict[str, Any],
    horizon: int,
    steps_before: int,
    critic: str | None,
) -> Rollout:
    """One branch from the restored snapshot, whose first decision is ``sample``."""
    from ray.rllib.core.columns import Columns

    decisions = [(obs, sample, info)]  # every sampled decision: its observation, module outputs and info
    action = sample[Columns.ACTIONS][0].numpy()
    rewards, terms, n, final = [], {}, 0, None
    for h in range(horizon):
        obs, r, term, trunc, info = env.step(action)
        rewards.append(r)
        n += 1
        for k, v in info["reward_terms"].items():
            terms[k] = terms.get(k, 0.0) + float(v)
        if term or trunc:
            final = info.get("metrics")
            break
        if h + 1 < horizon:
            with torch.no_grad():
                if h + 1 < task.sampled_decisions:
                    sample = module.forward_exploration(_batch([obs]))
                    decisions.append((obs, sample, info))
                    action = sample[Columns.ACTIONS][0].numpy()
                else:
                    action = module.forward_inference(_batch([obs]))[Columns.ACTIONS][0].numpy()

    def stacked(key: str) -> np.ndarray:
        return np.concatenate([d[1][key].numpy() for d in decisions])

    rollout = Rollout(
        uid=task.uid,
        group=task.group,
        scenario=task.scenario,
        observations=[d[0] for d in decisions],
        chains=stacked(CHAIN),
        smasks=stacked(SMASK) > 0.5,
        logp=stacked(Columns.ACTION_LOGP),
        rewards=np.asarray([sum(rewards)], np.float32),
        reward_terms=terms,
        env_steps=n + steps_before,
        metrics=final,
    )
    if REASONING_IDS in sample:
        _add_reasoning(
            runner,
            rollout,
            stacked(REASONING_IDS),
            stacked(TEXT_LOGP),
            stacked(TRAJ_LOGP),
            stacked(Columns.ACTIONS),
            [d[2] for d in decisions],
            critic,
        )
    return rollout


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


def env_runner_config(env_config: dict[str, Any], module_spec, num_env_runners: int, seed: int):
    """The RLlib config of our env runners: ``RLDriveEnv`` with trajectories passed through untouched
    (no action normalisation or clipping), whole episodes, one env per runner, the given module, and
    restarts of failed runners. A ``PPOConfig``, because any new-stack config serves for the runners and
    PPO adds its training settings on top."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from training.rl.env import RLDriveEnv

    return (
        PPOConfig()
        .environment(
            RLDriveEnv, env_config=env_config, normalize_actions=False, clip_actions=False, disable_env_checking=True
        )
        .framework("torch")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=1,
            batch_mode="complete_episodes",
            num_cpus_per_env_runner=1,
            rollout_fragment_length="auto",
        )
        .rl_module(rl_module_spec=module_spec)
        .fault_tolerance(restart_failed_env_runners=True)
        .debugging(seed=seed)
    )


class RolloutWorkers:
    def __init__(
        self, env_config: dict[str, Any], model_config: dict[str, Any], num_env_runners: int = 0, seed: int = 0
    ) -> None:
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec
        from ray.rllib.env.env_runner_group import EnvRunnerGroup

        from training.rl.module import VLAModule

        spec = RLModuleSpec(module_class=VLAModule, model_config=model_config)
        config = env_runner_config(env_config, spec, num_env_runners, seed)
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
