"""Supervised fine-tuning of the VLA on labelled driving data, read top to bottom.

Loss = ``text_weight`` x cross-entropy on the teacher's reasoning + ``flow_weight`` x flow matching
on the trajectory the car drove: both heads learn (a text-only SFT cannot fix a biased trajectory
head). ``parts`` limits what moves: ``parts = "vlm"`` with ``flow_weight = 0`` is the Cosmos
Cookbook's text-only post-training (the action expert stays bit-identical). ``two_stage`` follows
Alpamayo's public recipe: stage 1 trains the VLM on the text, stage 2 the action expert with the VLM
frozen. ``[dagger]`` rounds follow the steps on the expert's data: the policy drives, the expert labels
the states it reaches, and training goes on with both (:mod:`training.dagger`). With ``ema_decay``
the policy saved, evaluated and driven in those rounds is the average of the steps' weights
(:mod:`training.averaging`). Everything that decides the next step - weights (and their average), AdamW
moments, the data order and position (the DAgger rounds' too), the RNG of the flow noise - is in the
checkpoint, so a resumed run continues exactly where an uninterrupted one would be.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.alpamayo.model import AlpamayoR1
from agents.base import ObservationSetup
from agents.policy import load_policy
from agents.vla import VLA, action_space, route_prior
from agents.vla.config import VLAConfig
from agents.vla.manoeuvre import MANOEUVRES, manoeuvre_names
from agents.vla.model import state_features
from training import dagger
from training.averaging import WeightAverage
from training.checkpoints import Checkpointer, latest_checkpoint, load_trained_weights, restore_trainer
from training.data import DatasetError, DrivingDataset
from training.data.labels import manoeuvre_classes
from training.loop import learning_rate, perception_loss_weights, prepare_run
from training.metrics_log import MetricsLogger, progress_bar
from training.milestones import after_step, finish, last_step_of_this_run
from training.recipes import SFTRecipe, TrainSection


def build_model(recipe: SFTRecipe, dataset: DrivingDataset) -> VLA | AlpamayoR1:
    """The recipe's start: a saved VLA or Alpamayo-R1 checkpoint (``init_from``), or a fresh VLA (with
    the perception probe ``perception_weight`` trains, sized by the data, and the manoeuvre head
    ``manoeuvre_weight`` trains, built in)."""
    if recipe.init_from:
        return load_policy(recipe.init_from)
    config = recipe.model.model_copy()
    if recipe.train.perception_weight > 0:
        config.perception_targets = perception_width(dataset)
    if recipe.train.manoeuvre_weight > 0:
        config.manoeuvres = len(manoeuvre_names(config.manoeuvre_stop))
    torch.manual_seed(recipe.seed)
    return VLA(config)


def target_actions(
    dataset: DrivingDataset, lateral: action_space.LateralAction, idx: np.ndarray | slice = slice(None)
) -> tuple[np.ndarray, torch.Tensor]:
    """The targets ``[N, 64, 3]`` at ``idx`` and their (accel, lateral) actions ``[N, 64, 2]``, as the flow
    head learns them."""
    return dataset.arrays["target"][idx], torch.from_numpy(dataset.target_actions(lateral)[idx])


def action_statistics(
    dataset: DrivingDataset, lateral: action_space.LateralAction = "curvature", limit: int = 4096
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Mean and std of the (accel, lateral) targets, as the flow head will see them (std floored at
    0.1 m/s^2 and 1% of the lateral bound, so data that never brakes or never turns does not blow its
    standardisation up)."""
    idx = np.linspace(0, len(dataset) - 1, min(limit, len(dataset))).astype(int)
    flat = target_actions(dataset, lateral, idx)[1].reshape(-1, 2).double()
    floor = torch.tensor([0.1, action_space.bounds(lateral)[1] / 100], dtype=torch.float64)
    std = torch.maximum(flat.std(0), floor)
    mean, std = flat.mean(0).tolist(), std.tolist()
    return (mean[0], mean[1]), (std[0], std[1])


def manoeuvre_origins(dataset: DrivingDataset, config: VLAConfig) -> list[list[list[float]]]:
    """Each manoeuvre's mean plan in the data (the classes as ``config.manoeuvre_by_s`` reads them), in the
    flow head's normalised actions: where ``manoeuvre_origin`` starts a plan given that manoeuvre. With
    ``route_origin``, its mean residual from the route's own lateral actions (each plan starts from those
    plus the residual)."""
    targets, actions = target_actions(dataset, config.lateral_action)
    routes = dataset.arrays["route"] if config.manoeuvre_frame == "route" else None
    classes = manoeuvre_classes(
        dataset.manoeuvres,
        targets,
        config.manoeuvre_by_s,
        config.manoeuvre_frame,
        routes,
        config.manoeuvre_stop,
        config.manoeuvre_stop_by_s,
    )
    normalised = action_space.normalise(actions, config.action_mean, config.action_std, config.lateral_action)
    if config.route_origin:
        route = route_prior.route_origin(
            dataset.arrays["route"], dataset.initial_speeds, config.lateral_action, config.action_std
        )
        normalised[..., 1] -= torch.from_numpy(route).to(normalised.dtype)
    origins = []
    for k, name in enumerate(manoeuvre_names(config.manoeuvre_stop)):
        chosen = torch.from_numpy(classes == k)
        if name == "keep_lane" and config.keep_origin_with_stops:  # the start a head without the stop class has
            chosen |= torch.from_numpy(classes == MANOEUVRES.index("stop"))
        if not bool(chosen.any()):
            raise DatasetError(
                f"{dataset.path}: no sample of manoeuvre {name!r}; [model] manoeuvre_origin starts each manoeuvre's "
                "plans from its mean plan in the data: collect data with it, or set manoeuvre_origin = false"
            )
        origins.append(normalised[chosen].mean(0).tolist())
    return origins


def state_statistics(dataset: DrivingDataset, config: VLAConfig, limit: int = 4096) -> tuple[list[float], list[float]]:
    """Mean and std of the action expert's state-token features as ``config`` reads them (constant
    features, such as the ones it does not read, get std 1)."""
    idx = np.linspace(0, len(dataset) - 1, min(limit, len(dataset))).astype(int)
    observations = dataset.batch(idx).observations
    feats = np.stack([state_features(o, config.route_inputs, config.command_input) for o in observations])
    feats = feats.astype(np.float64)
    std = feats.std(0)
    return feats.mean(0).tolist(), np.where(std > 1e-3, std, 1.0).tolist()


def stage_of(step: int, cfg: TrainSection) -> int:
    """0: joint training; 1: VLM only; 2: action expert only (VLM frozen)."""
    if not cfg.two_stage:
        return 0
    return 1 if step < int(cfg.steps * cfg.stage1_fraction) else 2


STAGE_PARTS = {0: "both", 1: "vlm", 2: "expert"}  # what each stage trains
# [train] field -> (VLA.losses keyword, why an Alpamayo-R1 checkpoint has no such draws)
FLOW_DRAW_OPTIONS = {
    "flow_prompt_only": ("prompt_only", "an Alpamayo-R1 policy always plans after its reasoning"),
    "flow_unconditional": ("unconditional", "context guidance is a LoopDrive VLA option"),
    "flow_motion_dropout": ("motion_dropout", "the state token is a LoopDrive VLA part"),
    "flow_perception_truth": ("perception_truth", "the state token is a LoopDrive VLA part"),
}


def perception_width(dataset: DrivingDataset) -> int:
    """How many perception targets the data records, for the probe ``[train] perception_weight`` trains."""
    if "perception" not in dataset.arrays:
        raise DatasetError(
            f"{dataset.path}: no perception array (collected before 2026-11-27); train.perception_weight needs "
            "one: collect the data again into a new path, or set it to 0"
        )
    return dataset.arrays["perception"].shape[1]


def add_perception_probe(model: VLA | AlpamayoR1, dataset: DrivingDataset) -> None:
    """The perception probe ``[train] perception_weight`` trains (a checkpoint without one gets a fresh one)."""
    if isinstance(model, AlpamayoR1):
        raise ValueError("train.perception_weight: the perception probe is a LoopDrive VLA part; set it to 0")
    model.add_perception_probe(perception_width(dataset))


def observation_setup(dataset: DrivingDataset) -> ObservationSetup:
    """The observation set-up of a dataset's samples, as the model trained on them records it."""
    return ObservationSetup(**{k: dataset.card[k] for k in ObservationSetup.model_fields})


def train_sft(
    recipe: SFTRecipe, run_dir: str | Path, resume: bool = False, progress: bool | None = None, evaluate_fn=None
) -> dict[str, Any]:
    """Train; returns the last logged metrics (and the final evaluation's summary, if any)."""
    run_dir, cfg = Path(run_dir), recipe.train
    dataset = prepare_run(recipe.data, cfg, run_dir, progress)

    ckpt = latest_checkpoint(run_dir) if resume else None
    if ckpt is not None:
        model = load_policy(ckpt)
    else:
        model = build_model(recipe, dataset)
        if not recipe.init_from:  # a fresh flow head works on the data's standardised actions
            model.config.action_mean, model.config.action_std = action_statistics(dataset, model.config.lateral_action)
            model.config.state_mean, model.config.state_std = state_statistics(dataset, model.config)
        if isinstance(model.config, VLAConfig):  # an evaluation of the model renders what it learnt from
            model.config.observation = observation_setup(dataset)
    options = {}  # VLA.losses' keywords: the shares of flow draws it alters (and the batch's labels for the heads)
    for field, (keyword, why_not_alpamayo) in FLOW_DRAW_OPTIONS.items():
        if (share := getattr(cfg, field)) > 0:
            if isinstance(model, AlpamayoR1):
                raise ValueError(f"train.{field}: {why_not_alpamayo}; set it to 0")
            options[keyword] = share
    if cfg.flow_unconditional > 0:
        model.config.flow_unconditional = cfg.flow_unconditional  # its checkpoints can be guided
    if cfg.perception_weight > 0:
        add_perception_probe(model, dataset)
    if cfg.flow_perception_truth > 0 and not model.config.perception_in_state:
        raise ValueError("train.flow_perception_truth: the plan reads no probe; set [model] perception_in_state = true")
    if cfg.clearance_weight > 0:  # (an Alpamayo-R1 was refused with the probe it needs)
        if cfg.clearance_synthetic > 0 and not model.config.perception_in_state:
            raise ValueError(
                "train.clearance_synthetic: a synthetic car ahead reaches the plan through the state token; "
                "set [model] perception_in_state = true"
            )
        options["clearance_margin"] = cfg.clearance_margin_m
        options["clearance_synthetic"] = cfg.clearance_synthetic
    if cfg.manoeuvre_weight > 0:
        if isinstance(model, AlpamayoR1):
            raise ValueError("train.manoeuvre_weight: the manoeuvre head is a LoopDrive VLA part; set it to 0")
        model.add_manoeuvre_head(len(manoeuvre_names(model.config.manoeuvre_stop)))
    # the data's manoeuvres: what the head learns to choose, and what a plan given one is trained on
    give_manoeuvres = cfg.manoeuvre_weight > 0 or (isinstance(model, VLA) and model.plans_a_manoeuvre)
    if cfg.manoeuvre_by_s is not None:  # the classes' meaning travels with the checkpoint (RL's demonstrations)
        if not give_manoeuvres:
            raise ValueError("train.manoeuvre_by_s: no manoeuvre head to train or plan with (set manoeuvre_weight > 0)")
        model.config.manoeuvre_by_s = cfg.manoeuvre_by_s
    if cfg.manoeuvre_frame is not None:
        if not give_manoeuvres:
            raise ValueError(
                "train.manoeuvre_frame: no manoeuvre head to train or plan with (set manoeuvre_weight > 0)"
            )
        if model.config.manoeuvre_by_s is None:
            raise ValueError("train.manoeuvre_frame: the classes' frame needs their time (set train.manoeuvre_by_s)")
        if model.config.manoeuvre_origins is not None and model.config.manoeuvre_frame != cfg.manoeuvre_frame:
            raise ValueError(
                f"train.manoeuvre_frame = {cfg.manoeuvre_frame}: the init_from checkpoint's plans start from its "
                f"classes' mean plans as {model.config.manoeuvre_frame!r} reads them; train from scratch"
            )
        model.config.manoeuvre_frame = cfg.manoeuvre_frame
    if isinstance(model, VLA) and model.config.manoeuvre_origin and model.config.manoeuvre_origins is None:
        model.config.manoeuvre_origins = manoeuvre_origins(dataset, model.config)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device).train()
    # with ema_decay, the policy saved, evaluated and driven in the DAgger rounds (a checkpoint's model is it)
    average = WeightAverage(model, cfg.ema_decay) if cfg.ema_decay is not None else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    noise = torch.Generator(device=device).manual_seed(recipe.seed)
    # a VLA's batches come with their targets' actions, fitted once per dataset (Alpamayo-R1 fits its own)
    batches = dagger.MixedBatches(dataset, recipe, model.config.lateral_action if isinstance(model, VLA) else None)
    step = 0
    if ckpt is not None:
        state = restore_trainer(ckpt, optimizer, {"noise": noise})
        if average is not None:  # the weights it trains are beside the average
            average.updates = state.get("ema_updates", 0)
            model.load_state_dict(load_trained_weights(ckpt))
        batches.restore(state, run_dir)
        step = state["step"]
    logger = MetricsLogger(run_dir, resume_step=step)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda" and cfg.bf16)

    saver = Checkpointer(run_dir, recipe.checkpoint.keep_last)

    def checkpoint(at: int) -> Path:
        state = {**batches.state(), "samples": len(batches)}
        rng = {"noise": noise.get_state()}
        if average is None:
            return saver.save(at, model, optimizer, state, rng)
        state["ema_updates"] = average.updates
        return saver.save(at, average.policy, optimizer, state, rng, trained=model.state_dict())

    last: dict[str, Any] = {}
    total = dagger.total_steps(recipe)
    stop_at = last_step_of_this_run(total, step, cfg.max_steps_this_run)
    bar = progress_bar("sft", total, step, "step", progress)
    t0, seen = time.perf_counter(), 0
    while step < stop_at:
        round_ = dagger.round_starting_at(step, recipe)
        if round_ is not None and round_ not in batches.round_numbers:
            if round_ == 0:  # another driver's states, the expert's labels (DART)
                driver = recipe.dagger.round0_driver
            else:  # the policy of the moment drives, the expert labels
                driver = dagger.publish_policy(recipe, run_dir, round_, checkpoint(step))
            data = dagger.collect_round(recipe, run_dir, round_, driver, progress)
            batches.add_round(data, round_)
            checkpoint(step)  # again, with the round's data: a resume from here does not collect it again
            logger.log(step, {"dagger/round": round_, "dagger/samples": len(data), **_label_counts(data)})
        stage = stage_of(step, cfg)
        model.set_trainable(STAGE_PARTS[stage] if cfg.two_stage else cfg.parts)
        w_text = cfg.text_weight if stage in (0, 1) else 0.0
        w_flow = cfg.flow_weight if stage in (0, 2) else 0.0
        lr = learning_rate(step, cfg, total)
        for group in optimizer.param_groups:
            group["lr"] = lr
        weights = {"text": w_text, "flow": w_flow}
        if cfg.perception_weight > 0:  # the probe trains the VLM's image tokens, so only while the VLM does
            weights["perception"] = cfg.perception_weight if stage in (0, 1) else 0.0
        if cfg.clearance_weight > 0:  # a loss on the plan: the action expert's, as the flow loss
            weights["clearance"] = cfg.clearance_weight if stage in (0, 2) else 0.0
        if cfg.manoeuvre_weight > 0:  # as the probe
            weights["manoeuvre"] = cfg.manoeuvre_weight if stage in (0, 1) else 0.0
        sums = dict.fromkeys(weights, 0.0)
        for _ in range(cfg.grad_accum):
            batch = batches.next(cfg.batch_size)
            if "perception" in weights:  # only a VLA with a probe takes them (an Alpamayo-R1 was refused above)
                options["perception"] = torch.from_numpy(batch.perception)
                if (probe_weights := perception_loss_weights(batch.perception, cfg)) is not None:
                    options["perception_weights"] = torch.from_numpy(probe_weights)
            if batch.actions is not None:
                options["actions"] = torch.from_numpy(batch.actions)
            if give_manoeuvres:
                options["manoeuvres"] = torch.from_numpy(batch.manoeuvre_classes_for(model.config))
            with autocast:
                losses = model.losses(
                    batch.observations,
                    batch.reasoning,
                    torch.from_numpy(batch.targets).to(device),
                    generator=noise,
                    flow_samples=cfg.flow_samples,
                    **options,
                )
            loss = sum(w * losses[k] for k, w in weights.items()) / cfg.grad_accum
            loss.backward()
            for k in sums:
                sums[k] += float(losses[k].detach()) / cfg.grad_accum
            seen += len(batch.observations)
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if average is not None:
            average.update(model)
        step += 1
        bar.update(1)
        bar.set_postfix(text=f"{sums['text']:.3f}", flow=f"{sums['flow']:.3f}", refresh=False)
        if step % cfg.log_every == 0 or step == total:
            last = {
                **{f"loss/{k}": v for k, v in sums.items()},
                "lr": lr,
                "grad_norm": float(grad_norm),
                "stage": stage,
                "epoch": batches.sampler.epoch,
                "samples_per_s": seen / (time.perf_counter() - t0),
            }
            logger.log(step, last)
        after_step(step, total, recipe, checkpoint, evaluate_fn, logger, run_dir)
    bar.close()
    return finish(step, total, recipe, evaluate_fn, logger, run_dir, {"step": step, **last})


def _label_counts(data: DrivingDataset) -> dict[str, float]:
    """What a DAgger round's collection left out and how wrong the policy was, for the metrics log."""
    labels = data.card["labels"]
    counts = {f"dagger/{k}": float(labels.get(k, 0)) for k in ("episodes", "expert_failed", "short_future", "run_out")}
    if "plan" in data.arrays:  # how far the policy's plans were from the expert's labels (m, mean over 6.4 s)
        counts["dagger/disagreement_m"] = float(dagger.disagreement(data).mean())
    return counts
