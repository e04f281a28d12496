"""GRPO on the flow-matching trajectory head (and optionally the VLM), read top to bottom.

One iteration:
  1. plan ``groups_per_iter`` groups of ``group_size`` tasks: the same scenario and seed G times
     (episode level) or G branches from one snapshot at a random decision, or a few decisions before
     the deterministic plan's first infraction (step level);
  2. run them on RLlib env runners with the Flow-SDE policy (:mod:`training.rl.rollouts`): every
     decision keeps its denoising chain and Gaussian log-prob;
  3. score each rollout (the episode's Driving Score, or the summed reward), normalise within its
     group -> the advantage of each of its decisions (DAPO: drop groups whose scores are all equal
     and sample more);
  4. ``epochs`` passes of minibatch updates of the clipped objective (:mod:`training.rl.losses`)
     with the chains' log-probs under the current weights; optionally a k3 KL to the start, a
     clipped term on the reasoning tokens, and a behaviour-cloning anchor on the SFT data;
  5. log, checkpoint, evaluate in closed loop (deterministic plan) every ``eval.every`` iterations.

Resume is exact with in-process rollouts: the task plan, the runners' sampling noise and the
minibatch order are all seeded by (seed, iteration), and the optimiser state is in the checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.policy import load_policy
from loopdrive.seeding import derive_seed
from loopdrive.seeding import rng as seeded_rng
from training.checkpoints import Checkpointer, load_trainer_state
from training.metrics_log import MetricsLogger, ending_shares, progress_bar
from training.milestones import after_step, before_first_step, finish, last_step_of_this_run
from training.recipes import GRPORecipe, GRPOSection, RecipeError
from training.rl.demonstrations import Demonstrations, demonstration_args
from training.rl.losses import ClipConfig, group_advantages, informative_groups, policy_loss
from training.rl.module import as_noise_level
from training.rl.rollouts import Rollout, RolloutWorkers, Task
from training.rl.setup import connect_ray, env_config, module_config, starting_point

DECISIONS_TO_BRANCH = 0.7  # step level: branch points fall in the first 70% of a scenario


def scenario_pool(recipe: GRPORecipe) -> list[tuple[str, float]]:
    from scenarios import load_bank

    bank = load_bank(recipe.rl.bank, split=recipe.rl.split)
    pool = [(s.id, s.duration_s) for s in bank.scenarios]
    if recipe.rl.scenarios:
        known = {sid for sid, _ in pool}
        missing = [s for s in recipe.rl.scenarios if s not in known]
        if missing:
            raise RecipeError(f"rl.scenarios: {missing} are not in bank {recipe.rl.bank!r} split {recipe.rl.split!r}")
        pool = [p for p in pool if p[0] in recipe.rl.scenarios]
    return pool


def plan_tasks(recipe: GRPORecipe, pool: list[tuple[str, float]], iteration: int, rnd: int = 0) -> list[Task]:
    """``groups_per_iter`` groups of ``group_size`` tasks, seeded by (seed, iteration, round)."""
    rl = recipe.rl
    rng = seeded_rng("tasks", recipe.seed, iteration, rnd)
    picks = rng.choice(len(pool), size=rl.groups_per_iter, replace=len(pool) < rl.groups_per_iter)
    decision_s = 0.1 * recipe.data.decision_every
    stall_level = None if rl.stall_noise_level is None else as_noise_level(rl.stall_noise_level)
    tasks, uid = [], 0
    for g, i in enumerate(picks):
        scenario, duration = pool[int(i)]
        seed = int(rng.integers(2**31 - 1))
        last = max(1, int(DECISIONS_TO_BRANCH * duration / decision_s))
        branch_at = int(rng.integers(0, last)) if rl.level == "step" else 0
        lookback = 0
        if rl.level == "step" and rl.branch == "before_failure":
            lookback = int(rng.integers(1, rl.failure_lookback + 1))
        for _ in range(rl.group_size):
            tasks.append(
                Task(
                    uid=uid,
                    group=g + 1000 * rnd,
                    scenario=scenario,
                    seed=seed,
                    branch_at=branch_at,
                    failure_lookback=lookback,
                    sampled_decisions=rl.sampled_decisions,
                    stall_decisions=rl.stall_decisions,
                    stall_noise_level=stall_level,
                )
            )
            uid += 1
    return tasks


def score_of(rollout: Rollout, rl: GRPOSection) -> float:
    """What a rollout is worth to GRPO: its Driving Score (/100) or summed reward (``rl.score``), plus
    ``consistency_weight`` x its reasoning consistency."""
    score = rollout.score(rl.score)
    if rollout.consistency is not None:
        score += rl.consistency_weight * rollout.consistency
    return score


def branch_length(rl: GRPOSection) -> int:
    """Decisions a step-level branch runs: the horizon, or to the episode's end to score its Driving Score."""
    return rl.branch_horizon if rl.score == "return" else 100_000


def shipped_weights(model, part: str) -> dict[str, np.ndarray]:
    """The weights the env runners need after an update: only what the gradient moves."""
    names = set(model.trainable_names(part))
    return {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items() if k in names}


def samples_of(
    rollouts: list[Rollout], advantages: torch.Tensor, noise_level: float | list[float] | None = None
) -> dict[str, Any]:
    """Flatten rollouts into decision samples, each carrying its rollout's advantage. Where a rollout
    explored with its own noise level, ``noise`` [N, 2] holds each sample's (``noise_level``, the
    recipe's, for the others): its log-prob must be taken under the density it was drawn from."""
    obs, chains, smasks, logp, adv, seq, ids, text_logp = [], [], [], [], [], [], [], []
    for r, a in zip(rollouts, advantages.tolist()):
        obs += r.observations
        chains.append(r.chains)
        smasks.append(r.smasks)
        logp.append(r.logp)
        adv += [a] * len(r.logp)
        seq += [r.uid] * len(r.logp)
        if r.reasoning_ids is not None:
            ids.append(r.reasoning_ids)
            text_logp.append(r.text_logp)
    optional = {}  # the reasoning's tokens and log-probs, the samples' own noise levels
    if ids and len(ids) == len(rollouts):
        optional = {
            "ids": torch.from_numpy(np.concatenate(ids)),
            "text_logp_old": torch.from_numpy(np.concatenate(text_logp)),
        }
    if any(r.noise_level is not None for r in rollouts):
        per = [
            np.broadcast_to(
                np.asarray(r.noise_level if r.noise_level is not None else noise_level, np.float32),
                (len(r.logp), r.chains.shape[-1]),
            )
            for r in rollouts
        ]
        optional["noise"] = torch.from_numpy(np.concatenate(per))
    return optional | {
        "obs": obs,
        "chain": torch.from_numpy(np.concatenate(chains)),  # [N, steps + 1, 64, 2]
        "smask": torch.from_numpy(np.concatenate(smasks)),
        "logp_old": torch.from_numpy(np.concatenate(logp)),
        "adv": torch.tensor(adv, dtype=torch.float32),
        "seq": torch.tensor(seq),
    }


def rollout_metrics(rollouts: list[Rollout], scores: torch.Tensor, groups: torch.Tensor) -> dict[str, float]:
    out = {"reward/score": float(scores.mean())}
    stds = [float(scores[groups == g].std()) for g in torch.unique(groups) if int((groups == g).sum()) > 1]
    out["reward/score_std_in_group"] = float(np.mean(stds)) if stds else 0.0
    terms: dict[str, list[float]] = {}
    for r in rollouts:
        for k, v in r.reward_terms.items():
            terms.setdefault(k, []).append(v)
    out |= {f"reward_terms/{k}": float(np.mean(v)) for k, v in terms.items()}
    done = [r.metrics for r in rollouts if r.metrics is not None]
    if done:
        out["episode/driving_score"] = float(np.mean([m["leaderboard"]["score"] for m in done]))
        out["episode/route_completion"] = float(np.mean([m["leaderboard"]["route_completion"] for m in done]))
        out["episode/at_fault_collisions"] = float(np.mean([m["at_fault_collisions"] for m in done]))
        out |= ending_shares([m["ending"] for m in done if m.get("ending")])
    out["episode/decisions"] = float(np.mean([len(r.logp) for r in rollouts]))
    branched = list({r.group: r.branch for r in rollouts if r.branch}.values())  # step level: where groups branched
    if branched:
        out |= {f"groups/at_{kind}": float(branched.count(kind)) for kind in ("stall", "failure", "point")}
    consistency = [r.consistency for r in rollouts if r.consistency is not None]
    if consistency:
        out["reward/consistency"] = float(np.mean(consistency))
    return out


def update(
    policy, reference, optimizer, params, batch: dict[str, Any], recipe: GRPORecipe, iteration: int, demos=None
) -> dict[str, float]:
    """``epochs`` passes of minibatch gradient steps on the GRPO objective (plus, with ``demos`` and
    ``bc_weight``, the SFT loss on a batch of demonstrations per step, anchoring the policy to its data)."""
    rl = recipe.rl
    clip = ClipConfig(rl.eps_low, rl.eps_high, rl.dual_clip, rl.rho_max)
    n = len(batch["obs"])
    device = policy.device
    stats: dict[str, list[float]] = {}
    for epoch in range(rl.epochs):
        shuffle = torch.Generator().manual_seed(derive_seed("minibatches", recipe.seed, iteration, epoch))
        order = torch.randperm(n, generator=shuffle)
        for start in range(0, n, rl.minibatch):
            idx = order[start : start + rl.minibatch]
            obs = [batch["obs"][i] for i in idx.tolist()]
            chain = batch["chain"][idx].transpose(0, 1).to(device)
            smask = batch["smask"][idx]
            adv, seq = batch["adv"][idx].to(device), batch["seq"][idx]
            level = batch["noise"][idx] if "noise" in batch else rl.noise_level
            text_logp = text_ref = None
            if "ids" in batch:  # one pass gives the reasoning's token log-probs and the chain's
                text_logp, logp = policy.joint_log_prob(
                    obs, batch["ids"][idx], chain, smask, level, rl.temperature, train_vlm=rl.train != "expert"
                )
            else:
                logp = policy.chain_log_prob(obs, chain, smask, level, train_vlm=rl.train != "expert")
            logp_ref = None
            if reference is not None and rl.kl_coef > 0:
                with torch.no_grad():
                    if "ids" in batch:
                        text_ref, logp_ref = reference.joint_log_prob(
                            obs, batch["ids"][idx], chain, smask, level, rl.temperature
                        )
                    else:
                        logp_ref = reference.chain_log_prob(obs, chain, smask, level)
            loss, st = policy_loss(
                logp, batch["logp_old"][idx].to(device), adv, clip, rl.variant, seq, logp_ref, rl.kl_coef
            )
            if text_logp is not None and rl.reasoning_weight > 0 and rl.train != "expert":
                text_loss, text_st = policy_loss(
                    text_logp, batch["text_logp_old"][idx].to(device), adv, clip, rl.variant, seq, text_ref, rl.kl_coef
                )
                loss = loss + rl.reasoning_weight * text_loss
                st |= {f"reasoning/{k}": v for k, v in text_st.items()}
            if demos is not None and rl.bc_weight > 0:
                bc = demos.loss(policy, iteration * 1000 + epoch * 100 + start // rl.minibatch)
                loss = loss + rl.bc_weight * bc
                st["loss/bc"] = float(bc.detach())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, rl.grad_clip)
            optimizer.step()
            st |= {"loss/policy": float(loss.detach()), "grad_norm": float(grad_norm)}
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in stats.items()}


def train_grpo(
    recipe: GRPORecipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None, evaluate_fn=None
) -> dict[str, Any]:
    run_dir = Path(run_dir)
    rl = recipe.rl
    ckpt, start_path = starting_point(recipe, run_dir, resume)
    policy = load_policy(start_path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    policy = policy.to(device).train()
    params = policy.set_trainable(rl.train)
    reference = None
    if rl.kl_coef > 0:
        reference = load_policy(recipe.init_from).to(device).eval()
    optimizer = torch.optim.AdamW(params, lr=rl.lr, weight_decay=rl.weight_decay)
    iteration = 0
    if ckpt is not None:
        state, optim_state, _ = load_trainer_state(ckpt)
        optimizer.load_state_dict(optim_state)
        iteration = state["step"]

    connect_ray(rl, recipe.eval.workers)
    model_config = module_config(recipe, start_path)
    scene_facts = rl.reasoning and rl.consistency_weight > 0
    env = env_config(recipe, policy.camera_size, scene_facts)
    workers = RolloutWorkers(env, model_config, rl.env_runners, recipe.seed, rl.envs_per_runner)
    nodes = workers.nodes()
    bc = demonstration_args(recipe)
    demos = Demonstrations(**bc) if bc else None
    pool = scenario_pool(recipe)
    logger = MetricsLogger(run_dir, resume_step=iteration)
    before_first_step(recipe, start_path, evaluate_fn, logger, run_dir)

    saver = Checkpointer(run_dir, recipe.checkpoint.keep_last)

    def checkpoint(at: int) -> Path:
        return saver.save(at, policy, optimizer, {"iteration": at}, {"torch": torch.get_rng_state()})

    stop_at = last_step_of_this_run(rl.iterations, iteration, rl.max_iterations_this_run)
    bar = progress_bar(f"grpo ({rl.level} level)", rl.iterations, iteration, "iter", progress)
    last: dict[str, Any] = {}
    try:
        while iteration < stop_at:
            t0 = time.perf_counter()
            weights = shipped_weights(policy, rl.train)
            rollouts, rounds = [], 0
            while True:  # DAPO samples more groups until enough are informative (at most 3 rounds)
                tasks = plan_tasks(recipe, pool, iteration, rounds)
                seed = derive_seed("rollouts", recipe.seed, iteration, rounds)
                critic = rl.critic if rl.reasoning and rl.consistency_weight > 0 else None
                rollouts += workers.run(
                    tasks, weights | {"__seed__": np.array(seed)}, rl.level, branch_length(rl), rl.retries, critic
                )
                rounds += 1
                groups = torch.tensor([r.group for r in rollouts])
                scores = torch.tensor([score_of(r, rl) for r in rollouts])
                keep = informative_groups(scores, groups)
                n_informative = len(torch.unique(groups[keep])) if keep.any() else 0
                if rl.variant != "dapo" or n_informative >= rl.groups_per_iter or rounds >= 3:
                    break
            t_rollout = time.perf_counter() - t0
            metrics = rollout_metrics(rollouts, scores, groups)
            adv = group_advantages(scores, groups, rl.normalise)
            if rl.variant == "dapo":
                rollouts = [r for r, k in zip(rollouts, keep.tolist()) if k]
                adv = adv[keep]
            metrics["groups/informative"] = float(n_informative)
            t1 = time.perf_counter()
            if rollouts:
                batch = samples_of(rollouts, adv, rl.noise_level)
                metrics |= update(policy, reference, optimizer, params, batch, recipe, iteration, demos)
            iteration += 1
            env_steps = sum(r.env_steps for r in rollouts)
            metrics |= {
                "time/rollout_s": t_rollout,
                "time/update_s": time.perf_counter() - t1,
                "env_steps_per_s": env_steps / max(t_rollout, 1e-9),
                "lr": rl.lr,
                "env_runner_nodes": float(nodes),
                "env_runner_restarts": float(workers.restarts),
                "rollout_reruns": float(workers.reruns),
            }
            if iteration % rl.log_every == 0 or iteration == rl.iterations:
                logger.log(iteration, metrics)
            last = metrics
            bar.update(1)
            bar.set_postfix(
                score=f"{metrics['reward/score']:.3f}", clip=f"{metrics.get('clip_fraction', 0):.2f}", refresh=False
            )
            after_step(iteration, rl.iterations, recipe, checkpoint, evaluate_fn, logger, run_dir)
    finally:
        bar.close()
        workers.stop()
    return finish(iteration, rl.iterations, recipe, evaluate_fn, logger, run_dir, {"iteration": iteration, **last})
