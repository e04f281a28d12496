"""Rollouts on env runners: episodes, snapshot branches, branch points, log-probs, runner faults."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rewards.events import Event, EventKind

# --- snapshot branching --------------------------------------------------------------------------------------------


def test_step_level_branching_gives_distinct_continuations_from_one_snapshot(tmp_path):
    from ray.rllib.core.columns import Columns

    from agents.vla.model import VLA, VLAConfig
    from training.rl.env import RLDriveEnv
    from training.rl.module import CHAIN, VLAModule

    VLA(VLAConfig(size="tiny")).save_pretrained(tmp_path / "vla")
    env = RLDriveEnv({"bank": "smoke", "n_frames": 1, "image_size": [56, 112]})
    env.set_tasks([("lead_brake-000", 5)])
    obs, info = env.reset()
    assert info["task"] == ("lead_brake-000", 5) and obs["cameras"].shape == (4, 1, 56, 112, 3)
    straight = np.zeros((64, 3), np.float32)
    straight[:, 0] = np.arange(1, 65) * 0.8
    for _ in range(3):
        obs, *_ = env.step(straight)
    snap = env.snapshot()
    module = VLAModule(
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"path": str(tmp_path / "vla"), "noise_level": 0.8},
    )
    batch = {Columns.OBS: {k: torch.from_numpy(np.stack([np.asarray(obs[k])] * 3)) for k in obs}}
    out = module.forward_exploration(batch)
    ends, firsts = [], []
    for g in range(3):
        again, _ = env.restore(snap)
        for k in obs:  # the restored observation is the snapshot's, bit for bit
            np.testing.assert_array_equal(again[k], obs[k])
        _, r, *_ = env.step(out[Columns.ACTIONS][g].numpy())
        firsts.append(r)
        for _ in range(2):
            env.step(straight)
        ends.append(env.unwrapped.world.state.x[0])
    assert len({round(float(e), 6) for e in ends}) == 3  # G distinct continuations
    assert not torch.equal(out[CHAIN][0], out[CHAIN][1])
    # a branch replayed with the same action is the same continuation
    env.restore(snap)
    _, r_again, *_ = env.step(out[Columns.ACTIONS][2].numpy())
    assert r_again == firsts[2]


def test_sampled_reasoning_and_chain_log_probs_are_recomputed_exactly(tiny_vla):
    from agents.vla.model import VLA
    from envs.gym_env import LoopDriveEnv

    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(56, 112))
    obs = [env.reset(seed=i, options={"scenario": s})[0] for i, s in enumerate(("curve-000", "lead_brake-000"))]
    model = VLA.from_pretrained(tiny_vla)
    model.config.max_reasoning_tokens = 12
    traj, chain, smask, logp, ids, text_logp = model.sample_with_log_prob(
        obs, generator=torch.Generator().manual_seed(0), reasoning=True, temperature=0.9
    )
    assert traj.shape == (2, 64, 3) and ids.shape[0] == 2 and text_logp.shape == (2,)
    with torch.no_grad():
        text_again, traj_again = model.joint_log_prob(obs, ids, chain, smask.expand(2, -1), temperature=0.9)
    torch.testing.assert_close(text_again, text_logp, atol=1e-4, rtol=1e-5)  # ratio 1 for the unchanged policy
    torch.testing.assert_close(traj_again, logp, atol=1e-4, rtol=1e-5)
    assert all(isinstance(t, str) for t in model.decode_reasoning(ids))


def test_rollouts_with_fewer_denoising_steps_store_chains_whose_log_probs_the_learner_recomputes(tiny_vla):
    from ray.rllib.core.columns import Columns

    from envs.gym_env import LoopDriveEnv
    from training.rl.module import CHAIN, SMASK, VLAModule

    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(56, 112))
    obs = [env.reset(seed=i, options={"scenario": s})[0] for i, s in enumerate(("curve-000", "lead_brake-000"))]
    batch = {Columns.OBS: {k: torch.from_numpy(np.stack([np.asarray(o[k]) for o in obs])) for k in obs[0]}}
    config = {"path": str(tiny_vla), "noise_level": 0.5, "stochastic": "all", "init_noise": 0.0}
    fewer = VLAModule(model_config=config | {"flow_steps": 4})
    default = VLAModule(model_config=config)
    out = fewer.forward_exploration(batch)
    assert out[CHAIN].shape == (2, 5, 64, 2) and out[SMASK].shape == (2, 4)  # 4 steps, not the model's 10
    assert default.forward_exploration(batch)[CHAIN].shape == (2, 11, 64, 2)
    with torch.no_grad():
        again = fewer.forward_train(batch | {CHAIN: out[CHAIN], SMASK: out[SMASK]})[Columns.ACTION_LOGP]
    torch.testing.assert_close(again, out[Columns.ACTION_LOGP], atol=1e-4, rtol=1e-5)  # ratio 1, unchanged policy
    # the deterministic plan too: 4 Euler steps give another plan than the model's 10
    plan4 = fewer.forward_inference(batch)[Columns.ACTIONS]
    plan10 = default.forward_inference(batch)[Columns.ACTIONS]
    assert plan4.shape == plan10.shape and not torch.allclose(plan4, plan10)
    assert fewer.vla.config.flow_steps == 10  # what a checkpoint of it would save


def test_a_killed_env_runner_is_restarted_and_its_rollouts_redone(ray_local, tiny_vla):
    import os
    import signal
    import threading
    import time

    from training.rl.rollouts import RolloutWorkers, Task

    env_config = {"bank": "smoke", "n_frames": 1, "image_size": [56, 112]}
    workers = RolloutWorkers(env_config, {"path": str(tiny_vla), "threads": 1}, num_env_runners=1)
    try:
        (pid,) = workers.group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)
        tasks = [Task(uid=i, group=i, scenario="lead_brake-000", seed=i) for i in range(12)]  # ~10 s of work
        killer = threading.Timer(2.5, os.kill, (pid, signal.SIGKILL))  # mid-rollout
        killer.start()
        t0 = time.perf_counter()
        rollouts = workers.run(tasks, None, retries=2)
        killer.join()
        assert time.perf_counter() - t0 > 2.5  # the kill happened during the call
        # nothing lost: Ray restarted the actor and retried the call on it, or RolloutWorkers re-ran the tasks
        assert sorted(r.uid for r in rollouts) == list(range(12))
        pids: list[int] = []
        for _ in range(60):
            workers.recover()
            pids = workers.group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)
            if pids:
                break
            time.sleep(1)
        assert pids and pids[0] != pid
    finally:
        workers.stop()


def test_step_level_branches_scored_by_the_driving_score_run_to_the_episode_end(ray_local, tiny_vla):
    from training.recipes import recipe_from_dict
    from training.rl.grpo import branch_length, score_of
    from training.rl.rollouts import RolloutWorkers, Task

    rl = recipe_from_dict({"algorithm": "grpo", "rl": {"level": "step", "score": "driving_score"}}).rl
    assert branch_length(rl) > 1000 and branch_length(rl.model_copy(update={"score": "return"})) == rl.branch_horizon
    workers = RolloutWorkers({"bank": "smoke", "n_frames": 1, "image_size": [56, 112]}, {"path": str(tiny_vla)}, 0)
    try:
        tasks = [Task(uid=i, group=0, scenario="lead_brake-000", seed=2, branch_at=2) for i in range(2)]
        rollouts = workers.run(tasks, None, "step", branch_length(rl))
    finally:
        workers.stop()
    assert len(rollouts) == 2
    for r in rollouts:
        assert r.metrics is not None  # the branch reached the episode's end
        assert score_of(r, rl) == pytest.approx(r.metrics["leaderboard"]["score"] / 100.0)


def test_step_level_branch_samples_its_first_decisions_and_keeps_each_one(ray_local, tiny_vla):
    from training.rl.grpo import samples_of
    from training.rl.rollouts import RolloutWorkers, Task

    workers = RolloutWorkers({"bank": "smoke", "n_frames": 1, "image_size": [56, 112]}, {"path": str(tiny_vla)}, 0)
    try:
        tasks = [
            Task(uid=i, group=0, scenario="lead_brake-000", seed=2, branch_at=1, sampled_decisions=3) for i in range(2)
        ]
        rollouts = workers.run(tasks, {"__seed__": np.array(5)}, "step", horizon=5)
    finally:
        workers.stop()
    for r in rollouts:
        assert len(r.observations) == len(r.logp) == len(r.chains) == len(r.smasks) == 3
        assert r.rewards.shape == (1,)  # one score for the branch, shared by its sampled decisions
    # branches share their first observation (the snapshot) and part ways after their sampled first decision
    a, b = rollouts
    assert np.array_equal(a.observations[0]["ego_state"], b.observations[0]["ego_state"])
    assert not np.array_equal(a.observations[1]["ego_state"], b.observations[1]["ego_state"])
    batch = samples_of(rollouts, torch.tensor([1.0, -1.0]))
    assert batch["adv"].tolist() == [1.0] * 3 + [-1.0] * 3 and batch["chain"].shape[0] == 6


class _ScriptedEnv:
    """A stand-in env for :func:`_branch_point`: decision t's snapshot is ``{"t": t}``; the step out of
    decision ``fail_at`` reports a collision; from the step out of decision ``stall_from`` on, the ego
    stands still with nothing in its way; the episode ends after ``length`` steps."""

    def __init__(self, fail_at: int | None, length: int = 8, stall_from: int | None = None) -> None:
        self.fail_at, self.length, self.stall_from, self.t = fail_at, length, stall_from, 0
        self.unwrapped = self.world = self  # env.unwrapped.world.ego_record(), as LoopDriveEnv has it

    def ego_record(self):
        from types import SimpleNamespace

        standing = self.stall_from is not None and self.t > self.stall_from
        return SimpleNamespace(speed=0.0 if standing else 5.0, lead_gap=float("inf"), stop_ahead=float("inf"))

    def set_tasks(self, tasks) -> None:
        pass

    def reset(self):
        self.t = 0
        return {"t": np.array(0)}, {}

    def snapshot(self) -> dict:
        return {"t": self.t}

    def step(self, action):
        kind = EventKind.COLLISION if self.t == self.fail_at else EventKind.LANE_INVASION
        events = [Event(kind, 0.1 * self.t)]
        self.t += 1
        return {"t": np.array(self.t)}, 0.0, self.t >= self.length, False, {"events": events}


class _ConstantPlan:
    def forward_inference(self, batch):
        from ray.rllib.core.columns import Columns

        return {Columns.ACTIONS: torch.zeros(1, 2)}


@pytest.mark.parametrize(
    ("fail_at", "lookback", "branch_at", "expected", "kind"),
    [
        (5, 2, 0, 4, "failure"),  # 2 decisions before the step that collided: decisions 4 and 5 lead into it
        (5, 1, 0, 5, "failure"),  # the decision whose step collided
        (1, 4, 0, 0, "failure"),  # not before the start
        (None, 3, 2, 2, "point"),  # no infraction: the uniform branch point
        (None, 3, 50, 7, "point"),  # ... or the last decision before the end
        (5, 0, 3, 3, "point"),  # lookback 0: the uniform point, even though the plan fails later
    ],
)
def test_branch_point_before_the_plans_first_infraction(fail_at, lookback, branch_at, expected, kind):
    from training.rl.rollouts import Task, _branch_point

    task = Task(uid=0, group=0, scenario="s", seed=0, branch_at=branch_at, failure_lookback=lookback)
    snap, obs, _, why = _branch_point(_ScriptedEnv(fail_at), _ConstantPlan(), task)
    assert snap == {"t": expected} and int(obs["t"]) == expected and why == kind


@pytest.mark.parametrize(
    ("stall_from", "stall_decisions", "lookback", "fail_at", "expected", "kind"),
    [
        (3, 2, 1, None, 4, "stall"),  # standing after decisions 3 and 4: the stall is complete at 4
        (3, 2, 2, None, 3, "stall"),  # ... 2 back: the decision the ego stopped in
        (3, 2, 1, 2, 2, "failure"),  # an infraction first wins
        (3, 0, 1, None, 1, "point"),  # stall_decisions 0: a stall is no failure (the uniform point)
        (6, 3, 1, None, 1, "point"),  # the episode ends before the stall is complete: the uniform point
    ],
)
def test_branch_point_at_a_stall(stall_from, stall_decisions, lookback, fail_at, expected, kind):
    from training.rl.rollouts import Task, _branch_point

    task = Task(
        uid=0, group=0, scenario="s", seed=0, branch_at=1, failure_lookback=lookback, stall_decisions=stall_decisions
    )
    snap, _, _, why = _branch_point(_ScriptedEnv(fail_at, stall_from=stall_from), _ConstantPlan(), task)
    assert snap == {"t": expected} and why == kind


class _RecordingPlan(_ConstantPlan):
    """A module that notes the noise level each of its exploration calls sampled with."""

    def __init__(self) -> None:
        self.noise_level, self.explored_with = (0.0, 0.5), []

    def forward_exploration(self, batch):
        from ray.rllib.core.columns import Columns

        from training.rl.module import CHAIN, SMASK

        n = len(next(iter(batch[Columns.OBS].values())))
        self.explored_with.append(self.noise_level)
        return {
            Columns.ACTIONS: torch.zeros(n, 2),
            CHAIN: torch.zeros(n, 3, 64, 2),
            SMASK: torch.ones(n, 2),
            Columns.ACTION_LOGP: torch.zeros(n),
        }


class _BranchingEnv(_ScriptedEnv):
    def restore(self, snap):
        self.t = snap["t"]
        return {"t": np.array(self.t)}, {}

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, term, trunc, info | {"reward_terms": {"progress": 1.0}}


@pytest.mark.parametrize(("stall_from", "fail_at", "kind"), [(2, None, "stall"), (None, 3, "failure")])
def test_a_group_branched_at_a_stall_explores_with_the_stall_noise_level(monkeypatch, stall_from, fail_at, kind):
    from types import SimpleNamespace

    from training.rl import rollouts as ro
    from training.rl.grpo import samples_of

    env, plan = _BranchingEnv(fail_at, length=12, stall_from=stall_from), _RecordingPlan()
    monkeypatch.setattr(ro, "_drive_envs", lambda runner: [env])
    tasks = [
        ro.Task(
            uid=i,
            group=0,
            scenario="s",
            seed=0,
            failure_lookback=1,
            sampled_decisions=2,
            stall_decisions=2,
            stall_noise_level=(1.0, 0.5),
        )
        for i in range(3)
    ]
    out = ro._branch_rollouts(SimpleNamespace(module=plan), tasks, horizon=4)
    stalled = kind == "stall"
    assert [r.branch for r in out] == [kind] * 3
    assert [r.noise_level for r in out] == [(1.0, 0.5) if stalled else None] * 3
    assert set(plan.explored_with) == {(1.0, 0.5) if stalled else (0.0, 0.5)}  # every sampled decision
    assert plan.noise_level == (0.0, 0.5)  # and the module's own level is back
    batch = samples_of(out, torch.zeros(3), noise_level=[0.0, 0.5])
    if stalled:  # the learner takes each sample's log-prob under the level it was drawn with
        assert batch["noise"].tolist() == [[1.0, 0.5]] * 6
        out[0].noise_level = None  # a rollout that explored with the recipe's level, in the same batch
        assert samples_of(out, torch.zeros(3), noise_level=[0.0, 0.5])["noise"].tolist()[:3] == [
            [0.0, 0.5],
            [0.0, 0.5],
            [1.0, 0.5],
        ]
    else:
        assert "noise" not in batch


def test_before_failure_tasks_draw_a_lookback_per_group():
    from training.recipes import recipe_from_dict
    from training.rl.grpo import plan_tasks

    recipe = recipe_from_dict(
        {
            "algorithm": "grpo",
            "rl": {
                "level": "step",
                "branch": "before_failure",
                "failure_lookback": 3,
                "groups_per_iter": 20,
                "group_size": 4,
                "stall_decisions": 4,
            },
        }
    )
    tasks = plan_tasks(recipe, [("a-000", 20.0), ("b-000", 30.0)], iteration=0)
    assert {t.stall_decisions for t in tasks} == {4}
    by_group: dict[int, set[int]] = {}
    for t in tasks:
        by_group.setdefault(t.group, set()).add(t.failure_lookback)
    assert all(len(v) == 1 for v in by_group.values())  # a group shares its branch point
    assert {v.pop() for v in by_group.values()} == {1, 2, 3}
    uniform = plan_tasks(
        recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"branch": "uniform"})}),
        [("a-000", 20.0), ("b-000", 30.0)],
        iteration=0,
    )
    assert all(t.failure_lookback == 0 for t in uniform)


# --- envs side by side ------------------------------------------------------------------------------------------------


class _BatchCountingPlan(_RecordingPlan):
    """Notes the batch size of every module call."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[str, int]] = []

    def forward_inference(self, batch):
        from ray.rllib.core.columns import Columns

        n = len(next(iter(batch[Columns.OBS].values())))
        self.batches.append(("plan", n))
        return {Columns.ACTIONS: torch.zeros(n, 2)}

    def forward_exploration(self, batch):
        from ray.rllib.core.columns import Columns

        self.batches.append(("sample", len(next(iter(batch[Columns.OBS].values())))))
        return super().forward_exploration(batch)


def test_branch_points_side_by_side_equal_one_at_a_time():
    from training.rl.rollouts import Task, _branch_point, _branch_points

    tasks = [
        Task(uid=i, group=i, scenario="s", seed=0, branch_at=b, failure_lookback=lb)
        for i, (b, lb) in enumerate([(2, 0), (50, 0), (0, 2), (3, 1), (1, 0)])
    ]
    fails = [None, None, 5, 2, None]
    alone = [_branch_point(_ScriptedEnv(f), _ConstantPlan(), t) for f, t in zip(fails, tasks)]
    # three envs side by side: waves of 3 and 2 tasks (each env replays the failure of the task it drives)
    envs = [_ScriptedEnv(None) for _ in range(3)]
    for env in envs:
        env.set_tasks = lambda tasks, env=env: setattr(env, "fail_at", fails[int(tasks[0][0])])
    renamed = [
        Task(
            uid=t.uid,
            group=t.group,
            scenario=str(i),
            seed=0,
            branch_at=t.branch_at,
            failure_lookback=t.failure_lookback,
        )
        for i, t in enumerate(tasks)
    ]
    plan = _BatchCountingPlan()
    together = _branch_points(envs, plan, renamed)
    assert [(s, int(o["t"]), n, k) for s, o, n, k in together] == [(s, int(o["t"]), n, k) for s, o, n, k in alone]
    assert max(n for _, n in plan.batches) == 3  # one call for the wave's plans at each decision


def test_branches_of_several_groups_are_driven_side_by_side(monkeypatch):
    """Six branches of two groups on three envs: two waves of three, every decision one module call per
    kind (the sampled first decisions, then the plans), each branch from its own group's snapshot."""
    from types import SimpleNamespace

    from training.rl import rollouts as ro

    envs = [_BranchingEnv(None, length=30) for _ in range(3)]
    monkeypatch.setattr(ro, "_drive_envs", lambda runner: envs)
    tasks = [
        ro.Task(uid=i, group=i // 3, scenario="s", seed=0, branch_at=2 + 3 * (i // 3), sampled_decisions=2)
        for i in range(6)
    ]
    plan = _BatchCountingPlan()
    out = ro._branch_rollouts(SimpleNamespace(module=plan), tasks, horizon=4)
    assert [r.uid for r in out] == list(range(6))
    assert [int(r.observations[0]["t"]) for r in out] == [2, 2, 2, 5, 5, 5]  # the groups' branch points
    assert all(len(r.observations) == 2 and r.rewards.shape == (1,) for r in out)
    assert all(r.env_steps == 4 + s for r, s in zip(out, [2, 2, 2, 5, 5, 5]))
    branch_calls = plan.batches[-8:]  # after the approaches: 2 waves x (2 sampled + 2 planned decisions)
    assert branch_calls == [("sample", 3), ("sample", 3), ("plan", 3), ("plan", 3)] * 2


# --- standing starts (PPO's rl.standing_starts) ---------------------------------------------------------------------


def test_standing_starts_start_that_share_of_episodes_with_the_ego_at_rest():
    from training.rl.env import RLDriveEnv

    def starts(share: float, first_seed: int = 1, resets: int = 40) -> list[bool]:
        config = {"bank": "smoke", "observations": ["state"], "standing_starts": share, "standing_starts_seed": 3}
        env = RLDriveEnv(config)
        standing = []
        for k in range(resets):  # seeded once, as RLlib resets its envs
            env.reset(seed=first_seed if k == 0 else None)
            world = env.unwrapped.world
            standing.append(world.state.speed[0] == 0.0)
            assert env.unwrapped.ego_track[0].speed == world.state.speed[0]  # the episode's record starts there too
        return standing

    assert not any(starts(0.0)) and all(starts(1.0, resets=5))
    mixed = starts(0.5)
    assert 10 <= sum(mixed) <= 30 and mixed == starts(0.5)  # about half, the same draws again
    assert mixed != starts(0.5, first_seed=2)  # each env (seeded with its own seed) draws its own


def test_a_standing_start_holds_the_ego_and_its_history_at_rest():
    import gymnasium as gym

    env = gym.make("LoopDrive-v0", observations=("state", "ego_history"), scenario="straight-000")
    moving, _ = env.reset(seed=0)
    assert env.unwrapped.world.state.speed[0] > 5.0
    standing, _ = env.reset(seed=0, options={"ego_speed": 0.0})
    assert env.unwrapped.world.state.speed[0] == 0.0
    assert np.ptp(standing["ego_history"][..., :2], axis=0).max() < 1e-6  # it has stood there
    assert np.ptp(moving["ego_history"][..., :2], axis=0).max() > 1.0
    with pytest.raises(ValueError, match="'ego_speed' must be within"):
        env.reset(seed=0, options={"ego_speed": -1.0})
