"""PPO on the VLA with RLlib's PPO algorithm: its env runners, GAE connector and learner loop.

What is ours: the module (:class:`training.rl.module.VLAModule`: Flow-SDE actions, chain
log-probs, a value head on the state features) and the loss (:class:`FlowPPOLearner`), because
RLlib's PPO loss reads log-probs from an action distribution, and a flow policy has none: the
log-prob is that of the stored denoising chain. The loss is the clipped surrogate with the
optional dual-clip (:func:`training.rl.losses.clipped_loss`) plus the clipped value loss; there is
no entropy bonus (the flow has no closed-form entropy; exploration is the SDE's noise level).
Two optional anchors: a k3 KL to the start on the sampled chains (``rl.kl_coef``) and the SFT loss on
a batch of the recipe's demonstrations per minibatch (``rl.bc_weight``, :mod:`training.rl.demonstrations`).

``rl.policy = "mlp_state"`` or ``"cnn_bev"`` trains RLlib's default MLP / CNN module instead, on
the state vector or the BEV image with (accel, steer) control: a classic reference beside the VLA.

Checkpoints are the VLA folder (``save_pretrained``) plus ``value_head.safetensors``; a resumed run
restarts from the latest one with fresh optimiser moments (RLlib keeps those in its own state).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.evaluation.postprocessing import Postprocessing
from safetensors.torch import load_file, save_file

from agents.policy import load_policy
from agents.vla.manoeuvre import why_nothing_to_hold
from training.checkpoints import save_checkpoint
from training.metrics_log import MetricsLogger, ending_shares, progress_bar
from training.milestones import after_step, before_first_step, finish, last_step_of_this_run
from training.recipes import PPORecipe, RecipeError
from training.rl.demonstrations import Demonstrations, demonstration_args
from training.rl.losses import ClipConfig, clipped_loss, k3_kl, log_ratio
from training.rl.setup import connect_ray, env_config, module_config, starting_point

VALUE_HEAD = "value_head.safetensors"


class EpisodeTermsCallback(RLlibCallback):
    """On the env runner, at each episode's end: every reward term's total, the Driving Score and how the
    episode ended, logged as windowed means (they arrive in the result under ``env_runners``)."""

    def on_episode_end(self, *, episode, metrics_logger=None, **kwargs) -> None:
        infos = episode.get_infos()
        totals: dict[str, float] = {}
        for info in infos[1:]:
            for k, v in info.get("reward_terms", {}).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        for k, v in totals.items():
            metrics_logger.log_value(f"reward_terms/{k}", v, reduce="mean", window=100)
        final = infos[-1].get("metrics") if infos else None
        if final:
            metrics_logger.log_value("episode/driving_score", final["leaderboard"]["score"], reduce="mean", window=100)
            metrics_logger.log_value(
                "episode/route_completion", final["leaderboard"]["route_completion"], reduce="mean", window=100
            )
            for k, v in ending_shares([final["ending"]] if final.get("ending") else []).items():
                metrics_logger.log_value(k, v, reduce="mean", window=100)


class FlowPPOLearner(PPOTorchLearner):
    """PPO's loss with the dual-clip option. The new log-prob is the module's ``action_logp`` (the VLA:
    the stored chain's) or, for RLlib's default modules, that of their action distribution.

    The VLA's critic has its own optimiser: a fresh value head needs a far larger step than the
    pretrained policy (``rl.vf_lr`` against ``rl.lr``), and each optimiser clips its own gradient
    norm, so the critic's gradient never scales the policy's down."""

    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        module = self._module[module_id].unwrapped()
        if not hasattr(module, "value_head"):  # RLlib's default modules: one optimiser, as RLlib makes it
            return super().configure_optimizers_for_module(module_id, config)
        critic = list(module.value_head.parameters())
        in_critic = {id(p) for p in critic}
        policy = [p for p in self.get_parameters(module) if p.requires_grad and id(p) not in in_critic]
        for name, params, lr in (
            ("policy", policy, config.lr),
            ("critic", critic, config.learner_config_dict["vf_lr"]),
        ):
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=torch.optim.Adam(params),
                params=params,
                lr_or_lr_schedule=lr,
            )

    def reference_policy(self, config) -> Any:
        """The frozen starting policy (``rl.kl_coef``), read once from ``init_from``."""
        if getattr(self, "_reference", None) is None:
            self._reference = load_policy(config.learner_config_dict["reference"]).eval().requires_grad_(False)
        return self._reference

    def demonstrations(self, config) -> Demonstrations | None:
        """The behaviour-cloning anchor's data (``rl.bc_weight``), opened once; None without one."""
        bc = config.learner_config_dict.get("bc")
        if bc is None:
            return None
        if getattr(self, "_demonstrations", None) is None:
            self._demonstrations = Demonstrations(**bc)
            self._bc_steps = 0
        return self._demonstrations

    def compute_loss_for_module(self, *, module_id, config, batch: dict[str, Any], fwd_out: dict[str, Any]):
        module = self.module[module_id].unwrapped()
        mask = batch.get(Columns.LOSS_MASK)

        def mean(x: torch.Tensor) -> torch.Tensor:
            return masked_mean(x, mask)

        critic_loss = self.critic_loss(module_id, module, config, batch, mask)
        if getattr(module, "critic_only", False):  # rl.critic_warmup: the policy stays where it is
            return config.vf_loss_coeff * critic_loss
        logp = fwd_out.get(Columns.ACTION_LOGP)
        if logp is None:
            dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
            logp = dist.logp(batch[Columns.ACTIONS])
        ratio = torch.exp(log_ratio(logp, batch[Columns.ACTION_LOGP]))
        dual = config.learner_config_dict.get("dual_clip")
        policy, clipped = clipped_loss(
            ratio, batch[Postprocessing.ADVANTAGES], ClipConfig(config.clip_param, config.clip_param, dual)
        )
        total = mean(policy) + config.vf_loss_coeff * critic_loss
        kl_coef = config.learner_config_dict.get("kl_coef", 0.0)
        if kl_coef > 0:  # an anchor to the start, where the clip only bounds each iteration's step
            with torch.no_grad():
                logp_ref = module.log_prob_under(self.reference_policy(config), batch)
            kl = mean(k3_kl(logp, logp_ref))
            total = total + kl_coef * kl
            self.metrics.log_dict({"kl_ref": kl}, key=module_id, window=1)
        demos = self.demonstrations(config)
        if demos is not None:  # the SFT loss on a batch of demonstrations, once per minibatch
            bc = demos.loss(module.vla, self._bc_steps)
            self._bc_steps += 1
            total = total + config.learner_config_dict["bc_weight"] * bc
            self.metrics.log_dict({"bc_loss": bc}, key=module_id, window=1)
        self.metrics.log_dict(
            {
                POLICY_LOSS_KEY: mean(policy),
                "clip_fraction": mean(clipped.float()),
                "ratio_mean": mean(ratio),
                "approx_kl_old": mean(batch[Columns.ACTION_LOGP] - logp),
            },
            key=module_id,
            window=1,
        )
        return total

    def critic_loss(self, module_id, module, config, batch: dict[str, Any], mask) -> torch.Tensor:
        """The mean clipped squared error of the values against GAE's targets; logs it, and on an
        iteration's first minibatch the share of the targets' variance the critic explains (1: exact,
        0: no better than their mean) before this iteration moved it. Where the critic has its own
        fitting epochs (``rl.vf_fit_epochs``) its inputs and targets are kept for them."""
        targets = batch[Postprocessing.VALUE_TARGETS]
        if not hasattr(module, "critic_inputs"):  # RLlib's default modules
            values = module.compute_values(batch)
        else:
            inputs = module.critic_inputs(batch)
            values = module.value_head(inputs)
            if config.learner_config_dict.get("vf_fit_epochs", 0) > 0:
                keep = mask if mask is not None else slice(None)
                self._critic_data = getattr(self, "_critic_data", []) + [(inputs[keep], targets[keep].detach())]
        vf = masked_mean(clipped_value_error(values, targets, config.vf_clip_param), mask)
        self.metrics.log_dict({VF_LOSS_KEY: vf}, key=module_id, window=1)
        if not getattr(self, "_critic_scored", False):  # the first minibatch: the critic the advantages came from
            ev = explained_variance(values.detach(), targets)
            self.metrics.log_dict({"vf_explained_var": ev}, key=module_id, window=1)
            self._critic_scored = True
        return vf

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        """After PPO's epochs, ``rl.vf_fit_epochs`` more epochs of the critic alone on this iteration's
        inputs and targets (the next iteration's advantages come from the fitted critic)."""
        super().after_gradient_based_update(timesteps=timesteps)
        self._critic_scored = False
        data, self._critic_data = getattr(self, "_critic_data", []), []
        if not data:
            return
        extra = self.config.learner_config_dict
        module_id = "default_policy"
        module = self.module[module_id].unwrapped()
        inputs, targets = torch.cat([x for x, _ in data]), torch.cat([y for _, y in data])
        if getattr(self, "_critic_generator", None) is None:
            self._critic_generator = torch.Generator().manual_seed(int(extra.get("seed", 0)))
        optimizer = self.get_optimizer(module_id, "critic")
        params = list(module.value_head.parameters())
        for _ in range(extra["vf_fit_epochs"]):
            for idx in torch.randperm(len(targets), generator=self._critic_generator).split(self.config.minibatch_size):
                loss = clipped_value_error(module.value_head(inputs[idx]), targets[idx], self.config.vf_clip_param)
                optimizer.zero_grad()
                loss.mean().backward()
                torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
                optimizer.step()
        with torch.no_grad():
            fitted = explained_variance(module.value_head(inputs), targets)
        self.metrics.log_dict({"vf_explained_var_fitted": fitted}, key=module_id, window=1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean over the samples the loss mask keeps (all of them without one)."""
    return x[mask].sum() / mask.sum() if mask is not None else x.mean()


def clipped_value_error(values: torch.Tensor, targets: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's value loss per sample: the squared error, clipped at ``clip`` so one surprising return
    cannot swamp the critic's step."""
    return torch.clamp((values - targets) ** 2, 0, clip)


def explained_variance(values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """1 - Var(targets - values) / Var(targets): how much of the returns' spread the critic predicts."""
    return 1 - torch.var(targets - values) / torch.var(targets).clamp_min(1e-8)


def build_algorithm(recipe: PPORecipe, model_path: Path, image_size: tuple[int, int]):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from training.rl.module import PRIVILEGED, VLAModule
    from training.rl.rollouts import env_runner_config

    rl = recipe.rl
    if rl.policy == "vla":
        model_config = module_config(recipe, model_path) | {
            "train": rl.train,
            "seed": recipe.seed,
            "value_inputs": rl.value_inputs,
            "hold": rl.hold,
            "route_shift": rl.route_shift,
        }
        env_cfg = env_config(recipe, image_size)
        if rl.value_inputs == "privileged":  # the critic's extra observation (the policy never reads it)
            env_cfg["observations"].append(PRIVILEGED)
        spec = RLModuleSpec(module_class=VLAModule, model_config=model_config)
    else:  # a classic baseline: RLlib's default MLP (state) or CNN (BEV) module, with (accel, steer) control
        spec, env_cfg = RLModuleSpec(model_config=BASELINE_MODELS[rl.policy]), baseline_env_config(recipe)
    config = (
        env_runner_config(
            env_cfg, spec, rl.env_runners, recipe.seed, rl.envs_per_runner, hold=rl.hold, route_shift=rl.route_shift
        )
        .training(
            lr=rl.lr,
            gamma=rl.gamma,
            lambda_=rl.gae_lambda,
            clip_param=rl.clip,
            vf_clip_param=rl.vf_clip,
            vf_loss_coeff=rl.vf_coef,
            entropy_coeff=0.0,
            use_kl_loss=False,
            train_batch_size_per_learner=rl.batch_steps,
            minibatch_size=rl.minibatch,
            num_epochs=rl.epochs,
            grad_clip=rl.grad_clip,
        )
        .learners(
            num_learners=0,
            learner_class=FlowPPOLearner,
            learner_config_dict={
                "dual_clip": rl.dual_clip,
                "vf_lr": rl.vf_lr,
                "kl_coef": rl.kl_coef,
                "reference": str(Path(recipe.init_from).resolve()) if recipe.init_from else None,
                "bc": demonstration_args(recipe),
                "bc_weight": rl.bc_weight,
                "vf_fit_epochs": rl.vf_fit_epochs,
                "seed": recipe.seed,
            },
        )
        .callbacks(EpisodeTermsCallback)
    )
    return config.build_algo()


BASELINE_MODELS = {
    "mlp_state": {"fcnet_hiddens": [128, 128], "fcnet_activation": "tanh"},
    "cnn_bev": {"conv_filters": [[16, [8, 8], 4], [32, [4, 4], 2], [64, [4, 4], 2]], "head_fcnet_hiddens": [128]},
}


def baseline_env_config(recipe: PPORecipe) -> dict[str, Any]:
    """The env of a baseline module: one observation (the state vector or the BEV image), control actions
    renewed every world step (0.1 s)."""
    rl = recipe.rl
    cfg = {
        "bank": rl.bank,
        "split": rl.split,
        "observations": ["state" if rl.policy == "mlp_state" else "bev"],
        "action_mode": "control",
        "single_observation": True,
    }
    if rl.rewards is not None:
        cfg["rewards"] = dict(rl.rewards)
    return cfg


def learner_module(algo):
    """The module the (local) learner trains: the VLA with its value head, or a baseline's."""
    return algo.learner_group._learner.module["default_policy"].unwrapped()


def train_ppo(
    recipe: PPORecipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None, evaluate_fn=None
) -> dict[str, Any]:
    run_dir = Path(run_dir)
    rl = recipe.rl
    if rl.kl_coef > 0 and (rl.policy != "vla" or not recipe.init_from):
        raise RecipeError('rl.kl_coef anchors a VLA to its start: it needs policy = "vla" and init_from')
    if rl.bc_weight > 0 and rl.policy != "vla":
        raise RecipeError('rl.bc_weight anchors a VLA to its SFT data: it needs policy = "vla"')
    if (rl.vf_fit_epochs or rl.critic_warmup) and rl.policy != "vla":
        raise RecipeError('rl.vf_fit_epochs and rl.critic_warmup train the VLA\'s critic: they need policy = "vla"')
    if rl.hold and rl.policy != "vla":
        raise RecipeError('rl.hold holds the VLA\'s lane change: it needs policy = "vla"')
    if rl.critic_warmup >= rl.iterations:
        raise RecipeError(
            f"rl.critic_warmup ({rl.critic_warmup}) must leave the policy iterations: "
            f"make it < rl.iterations ({rl.iterations})"
        )
    if rl.policy != "vla":
        return _train_baseline(recipe, run_dir, resume, progress)
    ckpt, start = starting_point(recipe, run_dir, resume)
    policy = load_policy(start)
    if rl.hold and (why := why_nothing_to_hold(policy)):
        raise RecipeError(f"rl.hold = {rl.hold}: the policy at {start} cannot hold a manoeuvre: {why}")
    image_size = policy.camera_size
    del policy  # the learner and every runner build their own
    connect_ray(rl, recipe.eval.workers)
    threads = torch.get_num_threads()
    algo = build_algorithm(recipe, start, image_size)
    torch.set_num_threads(threads)  # the learner's module was built here with the runners' 1 thread
    module = learner_module(algo)
    iteration = 0
    if ckpt is not None:
        module.value_head.load_state_dict(load_file(ckpt / VALUE_HEAD))
        algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)
        iteration = _iteration_of(ckpt)
    logger = MetricsLogger(run_dir, resume_step=iteration)
    before_first_step(recipe, start, evaluate_fn, logger, run_dir)

    def checkpoint(at: int) -> Path:
        path = save_checkpoint(run_dir, at, module.vla, None, {"iteration": at}, {}, recipe.checkpoint.keep_last)
        save_file({k: v.contiguous() for k, v in module.value_head.state_dict().items()}, path / VALUE_HEAD)
        return path

    stop_at = last_step_of_this_run(rl.iterations, iteration, rl.max_iterations_this_run)
    bar = progress_bar("ppo", rl.iterations, iteration, "iter", progress)
    last: dict[str, Any] = {}
    try:
        while iteration < stop_at:
            t0 = time.perf_counter()
            module.critic_only = iteration < rl.critic_warmup
            result = algo.train()
            iteration += 1
            last = _flatten_result(result) | {"time/iteration_s": time.perf_counter() - t0}
            last["learner/critic_only"] = float(module.critic_only)
            logger.log(iteration, last)
            bar.update(1)
            after_step(iteration, rl.iterations, recipe, checkpoint, evaluate_fn, logger, run_dir)
    finally:
        bar.close()
        algo.stop()
    return finish(iteration, rl.iterations, recipe, evaluate_fn, logger, run_dir, {"iteration": iteration, **last})


def _train_baseline(recipe: PPORecipe, run_dir: Path, resume: bool, progress: bool | None) -> dict[str, Any]:
    """RLlib PPO on a baseline module; checkpoints are the module's weights (safetensors) per iteration."""
    import json

    rl = recipe.rl
    connect_ray(rl, 0)
    algo = build_algorithm(recipe, Path("."), (0, 0))
    module = learner_module(algo)
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    iteration = 0
    state_file = ckpt_dir / "baseline_state.json"
    if resume and state_file.exists():
        iteration = json.loads(state_file.read_text())["iteration"]
        module.load_state_dict(load_file(ckpt_dir / "module.safetensors"))
        algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)
    logger = MetricsLogger(run_dir, resume_step=iteration)
    last: dict[str, Any] = {}
    try:
        bar = progress_bar(f"ppo ({rl.policy})", rl.iterations, iteration, "iter", progress)
        while iteration < rl.iterations:
            last = _flatten_result(algo.train())
            iteration += 1
            bar.update(1)
            logger.log(iteration, last)
            save_file({k: v.contiguous() for k, v in module.state_dict().items()}, ckpt_dir / ".module.safetensors")
            os.replace(ckpt_dir / ".module.safetensors", ckpt_dir / "module.safetensors")
            state_file.write_text(json.dumps({"iteration": iteration, "policy": rl.policy}))
    finally:
        algo.stop()
    logger.plot()
    logger.close()
    return {"iteration": iteration, "final": str(ckpt_dir / "module.safetensors"), **last}


def _iteration_of(ckpt: Path) -> int:
    import json

    return int(json.loads((ckpt / "trainer_state.json").read_text())["iteration"])


def _flatten_result(result: dict[str, Any]) -> dict[str, float]:
    """The scalars worth a curve from RLlib's result dict: episode returns, learner losses, throughput."""
    out: dict[str, float] = {}
    env = result.get("env_runners", {})
    for key, name in (
        ("episode_return_mean", "reward/return"),
        ("episode_len_mean", "episode/decisions"),
        ("num_env_steps_sampled", "env_steps"),
        ("num_episodes", "episodes"),
    ):
        if key in env:
            out[name] = float(env[key])
    out |= {k: float(v) for k, v in env.items() if k.startswith(("reward_terms/", "episode/"))}
    timers = result.get("timers", {})  # RLlib's (smoothed) seconds per iteration: where the time goes
    for key, name in (("env_runner_sampling_timer", "sampling_s"), ("learner_update_timer", "learner_s")):
        if isinstance(timers.get(key), int | float):
            out[f"time/{name}"] = float(timers[key])
    learner = result.get("learners", {}).get("default_policy", {})
    keys = ("policy_loss", "vf_loss", "vf_explained_var", "vf_explained_var_fitted", "clip_fraction", "ratio_mean")
    keys += ("approx_kl_old", "kl_ref", "bc_loss")
    for key in learner:
        if key in keys or (key.startswith("gradients_") and key.endswith("_global_norm")):
            out[f"learner/{key}"] = float(learner[key])
    return out
