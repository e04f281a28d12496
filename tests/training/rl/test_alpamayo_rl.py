"""RL of an Alpamayo-R1 trajectory head with the project's machinery: Flow-SDE samples and their log-probs
on env observations, and closed-loop rollouts on an RLlib env runner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from agents.alpamayo import AlpamayoR1

CHECKPOINT = Path(__file__).parents[2] / "data" / "alpamayo_r1_reference" / "checkpoint"


def _observations(size: tuple[int, int]) -> list[dict]:
    from envs.gym_env import LoopDriveEnv

    env = LoopDriveEnv(bank="smoke", camera_size=size)
    return [env.reset(seed=i, options={"scenario": s})[0] for i, s in enumerate(("curve-000", "lead_brake-000"))]


def test_sampled_reasoning_and_chain_log_probs_are_recomputed_exactly():
    model = AlpamayoR1.from_pretrained(CHECKPOINT)
    model.max_reasoning_tokens = 10
    obs = _observations(model.camera_size)
    plans, chain, smask, logp, ids, text_logp = model.sample_with_log_prob(
        obs, generator=torch.Generator().manual_seed(0), reasoning=True, temperature=0.9
    )
    assert plans.shape == (2, 64, 3) and chain.shape == (11, 2, 64, 2) and text_logp.shape == (2,)
    with torch.no_grad():
        text_again, traj_again = model.joint_log_prob(obs, ids, chain, smask.expand(2, -1), temperature=0.9)
    torch.testing.assert_close(text_again, text_logp, atol=1e-4, rtol=1e-5)  # ratio 1 for the unchanged policy
    torch.testing.assert_close(traj_again, logp, atol=1e-4, rtol=1e-5)
    # reasoning off: the prompt alone, the same log-prob from the stored chain
    plans, chain, smask, logp = model.sample_with_log_prob(obs, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.chain_log_prob(obs, chain, smask), logp, atol=1e-4, rtol=1e-5)


def test_rollouts_of_an_alpamayo_checkpoint_on_an_env_runner(ray_local):
    from training.rl.rollouts import RolloutWorkers, Task

    size = list(AlpamayoR1.from_pretrained(CHECKPOINT).camera_size)
    workers = RolloutWorkers({"bank": "smoke", "n_frames": 4, "image_size": size}, {"path": str(CHECKPOINT)}, 0)
    try:
        tasks = [Task(uid=i, group=0, scenario="curve-000", seed=1) for i in range(2)]
        rollouts = workers.run(tasks, None, "episode", horizon=3)
    finally:
        workers.stop()
    assert len(rollouts) == 2
    for r in rollouts:
        assert len(r.observations) == len(r.logp) == len(r.chains) > 0
        assert np.isfinite(np.asarray(r.logp, dtype=np.float64)).all()


def _moved_head_only(before: AlpamayoR1, final: Path) -> None:
    after = AlpamayoR1.from_pretrained(final)
    b, a = before.state_dict(), after.state_dict()
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], b[k]) for k in a if k.startswith(("expert.", "action_")))  # the head learned
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("vlm."))  # alone


def test_grpo_and_ppo_train_the_trajectory_head_of_an_alpamayo_checkpoint(ray_local, tmp_path):
    from tests.training.rl.test_algorithms import _rl_recipe
    from training.run import train

    before = AlpamayoR1.from_pretrained(CHECKPOINT)
    grpo = train(_rl_recipe("grpo", CHECKPOINT), tmp_path / "grpo", progress=False)
    assert grpo["iteration"] == 1
    _moved_head_only(before, Path(grpo["final"]))
    ppo = train(_rl_recipe("ppo", CHECKPOINT), tmp_path / "ppo", progress=False)
    assert ppo["iteration"] == 1 and (Path(ppo["final"]) / "value_head.safetensors").exists()
    _moved_head_only(before, Path(ppo["final"]))
