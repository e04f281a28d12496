"""Closed-loop rollouts of the VLA on Ray RLlib env runners, for GRPO.

``RolloutWorkers`` owns an RLlib ``EnvRunnerGroup`` (0 runners: one in-process runner; N: N Ray
actors, locally or on a cluster) whose env is :class:`training.rl_env.RLDriveEnv` and whose module
is :class:`training.rl_module.VLAModule`. A call hands every runner the latest trainable weights
and its share of the tasks, and gets back one :class:`Rollout` per task:

- episode level: ``SingleAgentEnvRunner.sample(num_episodes=...)`` drives each (scenario, seed)
  task to the end, with the Flow-SDE policy; the env computes every reward term and the metric
  suites at the end.
- step level: the runner drives the task deterministically to a decision step, takes a
  ``snapshot()`` of the world, and scores G SDE-sampled decisions from there, each followed by
  ``branch_horizon`` deterministic decisions (a bandit over the same state).

A runner that dies (its process crashes, its node goes) is restarted by RLlib's fault tolerance
(``restart_failed_env_runners``) and the tasks it held are run again, up to ``retries`` times.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from training.rl_module import CHAIN, SMASK

log = logging.getLogger(__name__)


@dataclass
class Task:
    uid: int  # unique within an iteration
    group: int  # tasks of a group share scenario and seed (episode level) or a snapshot (step level)
    scenario: str
    seed: int
    branch_at: int = 0  # step level: the decision to branch at


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
    rewards: np.ndarray  # [T] the env's composed reward per decision
    reward_terms: dict[str, float] = field(default_factory=dict)  # totals over the rollout
    metrics: dict[str, Any] | None = None  # the env's episode metrics (episode level)
    env_steps: int = 0

    def score(self, kind: str) -> float:
        if kind == "driving_score" and self.metrics is not None:
            return float(self.metrics["leaderboard"]["score"]) / 100.0
        return float(self.rewards.sum())


def _drive_env(runner):
    """The RLDriveEnv inside the runner's vector env (through gymnasium's checker wrappers)."""
    from training.rl_env import RLDriveEnv

    env = runner.env.unwrapped.envs[0]
    while not isinstance(env, RLDriveEnv):
        env = env.env
    return env


def _load_weights(runner, weights: dict[str, np.ndarray] | None) -> None:
    """The trainer's latest weights, and (key ``__seed__``) this call's sampling seed for the runner."""
    weights = dict(weights or {})
    seed = weights.pop("__seed__", None)
    if seed is not None:
        runner.module.generator.manual_seed(int(seed) * 1009 + runner.worker_index)
    if weights:
        state = {k: torch.from_numpy(v) for k, v in weights.items()}
        runner.module.vla.load_state_dict(state, strict=False)


def _episode_rollouts(runner, tasks: list[Task]) -> list[Rollout]:
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
        out.append(Rollout(
            uid=task.uid, group=task.group, scenario=task.scenario,
            observations=[{k: v[i] for k, v in obs.items()} for i in range(n)],
            chains=np.asarray(ep.get_extra_model_outputs(CHAIN), np.float32),
            smasks=np.asarray(ep.get_extra_model_outputs(SMASK)) > 0.5,
            logp=np.asarray(ep.get_extra_model_outputs("action_logp"), np.float32),
            rewards=np.asarray(ep.get_rewards(), np.float32), reward_terms=terms,
            metrics=infos[-1].get("metrics"), env_steps=n,
        ))  # fmt: skip
    return out


def _batch(obs_list: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    from ray.rllib.core.columns import Columns

    return {Columns.OBS: {k: torch.from_numpy(np.stack([np.asarray(o[k]) for o in obs_list])) for k in obs_list[0]}}


def _branch_rollouts(runner, tasks: list[Task], horizon: int) -> list[Rollout]:
    """Step level: one snapshot per group, one SDE decision per task, then ``horizon`` - 1 plan steps."""
    from ray.rllib.core.columns import Columns

    env, module = _drive_env(runner), runner.module
    out: list[Rollout] = []
    by_group: dict[int, list[Task]] = {}
    for t in tasks:
        by_group.setdefault(t.group, []).append(t)
    for group in by_group.values():
        first = group[0]
        env.set_tasks([(first.scenario, first.seed)])
        obs, _ = env.reset()
        done, steps = False, 0
        with torch.no_grad():
            for _ in range(first.branch_at):  # drive there with the deterministic plan
                action = module.forward_inference(_batch([obs]))[Columns.ACTIONS][0].numpy()
                obs, _, term, trunc, _ = env.step(action)
                steps += 1
                if term or trunc:
                    done = True
                    break
        if done:  # the episode ended before the branch point: nothing to learn from here
            continue
        snap = env.snapshot()
        with torch.no_grad():
            sampled = module.forward_exploration(_batch([obs] * len(group)))
        for i, task in enumerate(group):
            obs_i, _ = env.restore(snap)
            action = sampled[Columns.ACTIONS][i].numpy()
            rewards, terms, n = [], {}, 0
            for h in range(horizon):
                obs_i, r, term, trunc, info = env.step(action)
                rewards.append(r)
                n += 1
                for k, v in info["reward_terms"].items():
                    terms[k] = terms.get(k, 0.0) + float(v)
                if term or trunc:
                    break
                if h + 1 < horizon:
                    with torch.no_grad():
                        action = module.forward_inference(_batch([obs_i]))[Columns.ACTIONS][0].numpy()
            out.append(Rollout(
                uid=task.uid, group=task.group, scenario=task.scenario, observations=[obs],
                chains=sampled[CHAIN][i : i + 1].numpy(), smasks=sampled[SMASK][i : i + 1].numpy() > 0.5,
                logp=sampled[Columns.ACTION_LOGP][i : i + 1].numpy(),
                rewards=np.asarray([sum(rewards)], np.float32), reward_terms=terms, env_steps=n + steps,
            ))  # fmt: skip
    return out


def _run(runner, plan: dict[int, list[Task]], weights, level: str, horizon: int) -> tuple[list[Rollout], list[int]]:
    """A runner's share of the plan: its rollouts, and the uids of every task it finished (a step-level
    group whose episode ends before the branch point finishes without rollouts)."""
    tasks = plan.get(runner.worker_index, [])
    if not tasks:
        return [], []
    _load_weights(runner, weights)
    if level == "step":
        return _branch_rollouts(runner, tasks, horizon), [t.uid for t in tasks]
    return _episode_rollouts(runner, tasks), [t.uid for t in tasks]


class RolloutWorkers:
    def __init__(self, env_config: dict[str, Any], model_config: dict[str, Any], num_env_runners: int = 0,
                 seed: int = 0) -> None:  # fmt: skip
        from ray.rllib.algorithms.ppo import PPOConfig  # any new-stack config: only its env-runner part is used
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec
        from ray.rllib.env.env_runner_group import EnvRunnerGroup

        from training.rl_env import RLDriveEnv
        from training.rl_module import VLAModule

        config = (
            PPOConfig()
            .environment(
                RLDriveEnv,
                env_config=env_config,
                normalize_actions=False,
                clip_actions=False,
                disable_env_checking=True,
            )
            .framework("torch")
            .env_runners(
                num_env_runners=num_env_runners,
                num_envs_per_env_runner=1,
                batch_mode="complete_episodes",
                num_cpus_per_env_runner=1,
            )
            .rl_module(rl_module_spec=RLModuleSpec(module_class=VLAModule, model_config=model_config))
            .fault_tolerance(restart_failed_env_runners=True)
            .debugging(seed=seed)
        )
        self.num_env_runners = num_env_runners
        self.group = EnvRunnerGroup(config=config, local_env_runner=num_env_runners == 0)
        self.restarts = 0

    def _runner_ids(self) -> list[int]:
        if self.num_env_runners == 0:
            return [0]
        return sorted(self.group.healthy_env_runner_ids())

    def run(self, tasks: list[Task], weights: dict[str, np.ndarray] | None, level: str = "episode",
            horizon: int = 6, retries: int = 2) -> list[Rollout]:  # fmt: skip
        """Every task's rollout; tasks of a runner that failed are re-run on the restarted ones."""
        results: list[Rollout] = []
        todo = list(tasks)
        for attempt in range(retries + 1):
            ids = self._runner_ids()
            if not ids:
                raise RuntimeError("no healthy env runner is left")
            plan: dict[int, list[Task]] = {}
            # whole groups go to one runner in step mode (they share a snapshot)
            keys = sorted({t.group for t in todo}) if level == "step" else [t.uid for t in todo]
            owner = {k: ids[i % len(ids)] for i, k in enumerate(keys)}
            for t in todo:
                plan.setdefault(owner[t.group if level == "step" else t.uid], []).append(t)
            got = self.group.foreach_env_runner(
                lambda r, plan=plan: _run(r, plan, weights, level, horizon),
                local_env_runner=self.num_env_runners == 0,
            )
            done: set[int] = set()
            for rollouts, finished in got:
                results.extend(rollouts)
                done.update(finished)
            todo = [t for t in todo if t.uid not in done]
            if not todo:
                break
            log.warning("%d rollouts were lost with a failed env runner; restarting it and running them again "
                        "(attempt %d of %d)", len(todo), attempt + 1, retries)  # fmt: skip
            self.restarts += len(self.group.probe_unhealthy_env_runners())
        if todo:
            raise RuntimeError(f"{len(todo)} rollouts failed {retries + 1} times (env runners keep dying)")
        return results

    def stop(self) -> None:
        self.group.stop()
