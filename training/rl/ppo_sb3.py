"""A classic RL reference: stable-baselines3 PPO on ``LoopDriveControl-v0`` (``state`` vector, control).

The same scenarios and reward terms as the VLA's RL, with an MLP policy that renews a normalised
(acceleration, steering) command every 0.1 s. Checkpoints are SB3 zips; the final one runs as the
agent ``sb3:RUN/checkpoints/final.zip`` (loaded without unpickling, see :mod:`agents.sb3`). A
resumed run rebuilds PPO and loads the latest zip's tensors (``set_parameters``: weights and Adam
state, ``torch.load(weights_only=True)``), then trains the remaining timesteps.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from training.metrics_log import MetricsLogger
from training.recipes import SB3PPORecipe

STATE = "sb3_state.json"


def make_env(recipe: SB3PPORecipe):
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    rl = recipe.rl
    kwargs: dict[str, Any] = {"bank": rl.bank, "split": rl.split}
    if rl.rewards is not None:
        kwargs["rewards"] = dict(rl.rewards)
    if rl.scenarios:
        kwargs["scenario"] = rl.scenarios[0] if len(rl.scenarios) == 1 else None
    return Monitor(gym.make("LoopDriveControl-v0", **kwargs))


def _latest(ckpt_dir: Path) -> tuple[Path | None, int]:
    state = ckpt_dir / STATE
    if not state.exists():
        return None, 0
    s = json.loads(state.read_text())
    return ckpt_dir / s["latest"], int(s["timesteps"])


def train_ppo_sb3(
    recipe: SB3PPORecipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None
) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    run_dir = Path(run_dir)
    cfg, ckpt_dir = recipe.sb3, run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    vec = make_vec_env(lambda: make_env(recipe), n_envs=cfg.n_envs, seed=recipe.seed)
    model = PPO(
        "MultiInputPolicy",
        vec,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        seed=recipe.seed,
        device="cpu",
        policy_kwargs={"net_arch": list(cfg.net_arch)},
        verbose=0,
    )
    latest, done = _latest(ckpt_dir) if resume else (None, 0)
    if latest is not None:
        model.set_parameters(str(latest), exact_match=True)
        model.num_timesteps = done
    logger = MetricsLogger(run_dir, resume_step=done)

    class Log(BaseCallback):
        """Episode returns and lengths to metrics.jsonl / TensorBoard after every rollout; a checkpoint too."""

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            eps = list(self.model.ep_info_buffer)
            if eps:
                logger.log(
                    self.num_timesteps,
                    {
                        "reward/return": sum(e["r"] for e in eps) / len(eps),
                        "episode/length": sum(e["l"] for e in eps) / len(eps),
                    },
                )
            save(self.num_timesteps)

    def save(at: int) -> Path:
        name = f"step_{at:09d}.zip"
        tmp = ckpt_dir / f".tmp-{name}"
        model.save(tmp)  # SB3 writes the zip; os.replace makes it appear whole
        os.replace(tmp, ckpt_dir / name)
        (ckpt_dir / f".{STATE}").write_text(json.dumps({"latest": name, "timesteps": at}))
        os.replace(ckpt_dir / f".{STATE}", ckpt_dir / STATE)
        for old in sorted(ckpt_dir.glob("step_*.zip"))[: -recipe.checkpoint.keep_last]:
            old.unlink()
        return ckpt_dir / name

    remaining = cfg.timesteps - done
    if remaining > 0:
        model.learn(remaining, callback=Log(), reset_num_timesteps=False, progress_bar=bool(progress))
    last = save(model.num_timesteps)
    final = ckpt_dir / "final.zip"
    shutil.copyfile(last, final)
    logger.plot()
    logger.close()
    vec.close()
    return {"timesteps": model.num_timesteps, "final": str(final), "agent": f"sb3:{final}"}
