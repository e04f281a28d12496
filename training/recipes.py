"""Recipes: one TOML file per run, validated, with ``--set a.b=value`` overrides.

A recipe names its ``algorithm``, and each algorithm has its own recipe type with exactly the sections
it reads (an unknown section or key is an error naming the file and the dotted key):

| algorithm | sections |
|---|---|
| ``sft`` | ``[data]`` (what to collect or read), ``[model]`` (the VLA), ``[train]``, ``[dagger]`` |
| ``grpo`` | ``[data]`` (the observation set-up; the behaviour-cloning anchor), ``[rl]`` |
| ``ppo`` | ``[data]``, ``[rl]`` (with PPO's critic and GAE settings) |
| ``ppo_sb3`` | ``[rl]`` (bank and rewards), ``[sb3]`` |
| ``world_model`` | ``[data]``, ``[train]``, ``[world]`` |
| ``ddrl`` | ``[data]``, ``[train]``, ``[world]``, ``[ddrl]`` |

Every recipe also has ``seed``, ``init_from``, ``[eval]`` (closed-loop evaluation) and ``[checkpoint]``.
The sections embed the settings of the parts they configure rather than copying them: ``[data]`` is
:class:`training.data.CollectSettings` plus where the data lives, ``[model]`` is the VLA's own
:class:`agents.vla.VLAConfig`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from agents.vla.config import VLAConfig
from agents.vla.manoeuvre import ManoeuvreFrame
from evaluation.config import read_toml
from rewards.meta_actions import LATERAL, LONGITUDINAL
from training.data.settings import CollectSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


META_ACTIONS = LONGITUDINAL + LATERAL


class RecipeError(ValueError):
    """A bad recipe or override: the message names the file (or --set) and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("split", mode="before", check_fields=False)
    @classmethod
    def _whole_bank(cls, v: Any) -> Any:
        """TOML has no null: ``split = "all"`` means the whole bank (banks without splits, like smoke)."""
        return None if v == "all" else v


class DataSection(CollectSettings):
    """The recipe's driving data: collected into ``path`` (when ``collect``) with these settings."""

    path: str = "data/train.zarr"  # collected here when missing (or incomplete)
    collect: bool = True
    max_gb: float = 8.0  # the in-memory loader refuses larger datasets

    def settings(self) -> CollectSettings:
        """The collection settings alone (what ``collect`` and the dataset's attributes hold)."""
        return CollectSettings.model_validate(self.model_dump(include=set(CollectSettings.model_fields)))


class TrainSection(_Section):
    """Optimisation of a supervised trainer (SFT, the world model)."""

    steps: int = Field(200, ge=1)
    batch_size: int = Field(8, ge=1)
    grad_accum: int = Field(1, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = 0.01
    warmup_steps: int = Field(20, ge=0)
    grad_clip: float = 1.0
    # save (and evaluate, and let the DAgger rounds drive) an exponential moving average of the weights with
    # this decay per step (training.averaging); None: the weights of the last step
    ema_decay: float | None = Field(None, gt=0, lt=1)
    text_weight: float = Field(1.0, ge=0)
    flow_weight: float = Field(1.0, ge=0)
    flow_samples: int = Field(1, ge=1)  # (time, noise) draws per sample for the flow loss, from one VLM pass
    # the share of those draws whose context is the prompt alone, as plans without reasoning see it
    flow_prompt_only: float = Field(0.0, ge=0, le=1)
    # the share of those draws that see only the state token: what context guidance needs
    flow_unconditional: float = Field(0.0, ge=0, le=1)
    # the share of those draws whose state token hides the ego motion (speed, acceleration, yaw rate, steering),
    # which the context still carries (ego history, cameras): against a head that leans on its speed input
    flow_motion_dropout: float = Field(0.0, ge=0, le=1)
    # the share of those draws whose state token (with [model] perception_in_state) is given the data's
    # perception targets where the probe's reading goes: the plan learns from a reading that is right from the
    # first step (the probe's own is random at first and misreads the policy's states later)
    flow_perception_truth: float = Field(0.0, ge=0, le=1)
    # weight of the clearance loss (agents/vla/clearance.py): the plan each flow draw's prediction points at is
    # scored by how far it drives past the data's car ahead less clearance_margin_m; it needs the perception
    # targets (perception_weight > 0). The flow loss alone leaves a plan that hardly slows for a car 3 m ahead
    clearance_weight: float = Field(0.0, ge=0)
    clearance_margin_m: float = Field(2.0, ge=0)
    # the share of the lane-keeping flow draws asked again with a synthetic car ahead (nearer than the recorded
    # one, stopped or slower) in the state token ([model] perception_in_state): states the expert's data lacks
    clearance_synthetic: float = Field(0.0, ge=0, le=1)
    # draw a sample whose target shows one of these meta-actions that many times as often as the others
    # (the largest weight it has): the expert's lane changes are 6% of its samples, and a plan that never
    # leaves its lane is what most samples teach
    meta_action_weights: dict[str, float] = Field(default_factory=dict)
    # draw a sample whose car ahead is under hazard_ttc_s seconds away at its closing speed that many times as
    # often (the largest of this and its meta-action weight): the expert brakes early, so the states where a
    # braking car ahead comes close fast are 3% of its data; they need the data's perception targets
    hazard_weight: float = Field(1.0, ge=1)
    hazard_ttc_s: float = Field(4.0, gt=0)  # (the states perception_hazard_weight weights, too)
    # a sample's draw weight is also multiplied by its scenario family's weight here (1 for a family not
    # named): the families' shares of the batches, which otherwise follow how many samples each has
    family_weights: dict[str, float] = Field(default_factory=dict)
    # weight of the perception probe's loss: the image tokens regress what is ahead (the car in the lane, its
    # gap and closing speed, a red light; agents/vla/perception.py), recorded with the data. 0: no probe
    perception_weight: float = Field(0.0, ge=0)
    # the probe's loss on a sample under hazard_ttc_s seconds from the car ahead counts that many times (the
    # draws unchanged, so the plan's data is too): the probe reads a car close ahead where it trained on such
    # frames often and misreads the policy's own, drawn well under once each in the DAgger rounds
    perception_hazard_weight: float = Field(1.0, ge=1)
    # weight of the manoeuvre head's loss: which way the future leaves the lane (keep, change left, change
    # right; agents/vla/manoeuvre.py), from the data's meta-actions; [model] manoeuvre_in_state plans its choice
    manoeuvre_weight: float = Field(0.0, ge=0)
    # a lane change counts as the manoeuvre only once its future has moved 0.5 m that way by this many seconds
    # (training.data.labels.manoeuvre_under_way: "change now"); None: any lane change within the 6.4 s, or as
    # the init_from checkpoint was trained (saved in its config, which RL's demonstrations read too)
    manoeuvre_by_s: float | None = Field(None, gt=0, le=6.4)
    # what a lane change class names (training.data.labels.manoeuvre_classes): "ego", its start (half-way through
    # it the car heads into the new lane and the class reads keep_lane); "route", the lane the future is in at
    # manoeuvre_by_s beside the route's, so a lane change is named until the car drives back. None: "ego", or as
    # the init_from checkpoint was trained. Needs manoeuvre_by_s
    manoeuvre_frame: ManoeuvreFrame | None = None
    # the weights that move: "vlm" with flow_weight = 0 is text-only post-training (the action expert frozen)
    parts: Literal["both", "vlm", "expert"] = "both"
    two_stage: bool = False  # stage 1: VLM (text); stage 2: action expert with the VLM frozen
    stage1_fraction: float = Field(0.5, gt=0, lt=1)

    @property
    def weights_draws(self) -> bool:
        """Whether some samples are drawn more often than others (else each once per epoch)."""
        return bool(self.meta_action_weights) or self.hazard_weight != 1.0 or bool(self.family_weights)

    @model_validator(mode="after")
    def _something_learns(self) -> TrainSection:
        if self.two_stage and self.parts != "both":
            raise ValueError(
                f'two_stage sets the parts of each stage itself; leave parts = "both" (got {self.parts!r})'
            )
        if self.text_weight == 0 and self.flow_weight == 0:
            raise ValueError("text_weight and flow_weight are both 0: nothing would be learned")
        for name, weight in self.meta_action_weights.items():
            if name not in META_ACTIONS:
                known = ", ".join(META_ACTIONS)
                raise ValueError(f"meta_action_weights: {name!r} is not a meta-action (one of {known})")
            if not weight > 0:
                raise ValueError(f"meta_action_weights.{name}: {weight} must be > 0")
        for name, weight in self.family_weights.items():
            if not weight > 0:
                raise ValueError(f"family_weights.{name}: {weight} must be > 0")
        if self.flow_perception_truth > 0 and self.perception_weight == 0:
            raise ValueError("flow_perception_truth gives the plan the probe's targets; set perception_weight > 0")
        if self.clearance_weight > 0 and self.perception_weight == 0:
            raise ValueError("clearance_weight scores the plan against the data's car ahead; set perception_weight > 0")
        if self.clearance_synthetic > 0 and self.clearance_weight == 0:
            raise ValueError("clearance_synthetic gives the clearance loss synthetic cars; set clearance_weight > 0")
        if self.perception_hazard_weight != 1.0 and self.perception_weight == 0:
            raise ValueError("perception_hazard_weight weights the perception probe's loss; set perception_weight > 0")
        return self

    bf16: bool = True  # on CUDA only
    threads: int | None = None
    log_every: int = Field(10, ge=1)
    max_steps_this_run: int | None = None  # stop early (as a kill would) - for resume tests


class DaggerSection(_Section):
    """DAgger rounds after the ``[train]`` steps on the expert's data: at the start of a round the policy
    of the moment drives ``episodes`` scenarios of the data's bank and split (a seeded draw per round),
    the expert labels every ``label_every``-th state it reaches with its own driven future, and
    ``steps`` more steps train on batches that take ``expert_fraction`` of their samples from the
    expert's data and the rest from every round's data so far: each of those samples equally often
    (``focus = "uniform"``), or half of them in proportion to how far the policy's plan was from the
    expert's label there (``"disagreement"``: the states where the policy was wrong come back more).

    ``round0_driver``: before the first step another driver (an agent spec, e.g. a close follower
    ``"expert?time_headway=0.6&min_gap=2"``) drives ``episodes`` scenarios and the expert labels the
    states it reaches, as in DART: states beside the expert's own (a car braking close ahead of an ego
    at speed) that the expert avoids and the policy does not; round 0's data is in the rounds' share of
    every batch from the first step.

    ``closer_lead``: at that share of the labelled decisions with a car ahead, a second sample with the car
    moved back along its lane to a gap drawn between 2 m and its own (at most 20 m), the cameras rendered
    there and the expert's label from there (``collect``'s ``closer_lead``): near cars at speed, which the expert's data
    lacks and the policy drives into (needs ``[data] n_frames = 1``).

    ``offset_ego``: at that share of the labelled decisions, a second sample with the ego moved sideways and
    turned (within ``[data] offset_ego_lateral_m`` and ``offset_ego_heading_deg``), rendered there and labelled
    with the expert's way back (``collect``'s ``offset_ego``; needs ``[data] n_frames = 1``)."""

    rounds: int = Field(0, ge=0)
    round0_driver: str | None = None
    episodes: int | None = Field(None, ge=1)  # policy episodes per round (None: the whole split)
    steps: int = Field(500, ge=1)  # training steps per round
    expert_fraction: float = Field(0.5, ge=0, le=1)
    label_every: int = Field(1, ge=1)
    focus: Literal["uniform", "disagreement"] = "uniform"
    closer_lead: float = Field(0.0, ge=0, le=1)
    offset_ego: float = Field(0.0, ge=0, le=1)

    @field_validator("round0_driver")
    @classmethod
    def _a_driver(cls, spec: str | None) -> str | None:
        """A wrong spec is refused when the recipe is read, not after the run has started (a saved VLA's
        folder is checked when its round starts: loading it here would cost as much as the round)."""
        if spec is not None and not spec.startswith(("vla:", "alpamayo:")):
            from agents import load_agent

            load_agent(spec)  # AgentSpecError is a ValueError: the recipe error names the field
        return spec


class EvalSection(_Section):
    every: int = Field(0, ge=0)  # steps between closed-loop evaluations (0: only at the end, if final)
    final: bool = True
    bank: str = "core"
    split: str | None = "val"
    scenarios: int | None = Field(8, ge=1)  # first N of the split (None: all)
    reasoning: bool = False  # trajectory-only decisions are much faster on CPU
    noise: float = Field(1.0, ge=0)  # the flow's initial-noise scale (0: the deterministic plan)
    guidance: list[float] | None = Field(None, min_length=1, max_length=2)  # context guidance (accel[, lateral])
    hold: int = Field(0, ge=0)  # decisions a lane change the manoeuvre head chooses is planned for (0: none)
    # metres the route the plan reads moves into the lane a held change goes to (agents.vla.route_shift;
    # 0: none; needs hold)
    route_shift: float = Field(0.0, ge=0)
    workers: int = 0
    # a split (e.g. "val") for model selection: the periodic evaluations run there and ``final`` is the
    # checkpoint that scored best (for RL, the starting policy is a candidate too); None: final = the last
    select_on: str | None = None

    def agent_options(self) -> str:
        """The options of the policy's agent spec (``vla:PATH?...``) that drive these evaluations."""
        options = f"reasoning={int(self.reasoning)}&noise={self.noise:g}"
        if self.guidance is not None:
            options += "&guidance=" + ",".join(f"{w:g}" for w in self.guidance)
        if self.hold:
            options += f"&hold={self.hold}"
        if self.route_shift:
            options += f"&route_shift={self.route_shift:g}"
        return options


class CheckpointSection(_Section):
    every: int = Field(100, ge=1)
    keep_last: int = Field(2, ge=1)


NoiseLevels = float | list[float]


class RLSection(_Section):
    """Closed-loop RL: where rollouts come from, what the policy samples with, the optimiser."""

    @field_validator("noise_level")
    @classmethod
    def _levels(cls, v: NoiseLevels | None) -> NoiseLevels | None:
        return check_noise_levels(v)

    iterations: int = Field(40, ge=1)
    bank: str = "core"
    split: str | None = "train"
    scenarios: list[str] | None = None  # default: every scenario of the split
    rewards: dict[str, float] | None = None  # the env's reward terms (None: the env's defaults)
    train: Literal["expert", "vlm", "both"] = "expert"  # which weights the policy gradient moves
    # Flow-SDE noise level a, or one per action dimension [accel, curvature] ([0, a]: explore steering only)
    noise_level: NoiseLevels = 0.5
    stochastic: Literal["one", "all"] = "one"  # denoising steps that are stochastic
    init_noise: float = Field(1.0, ge=0)  # scale of the flow's starting noise (0: around the deterministic plan)
    # Euler steps of the flow in rollouts, sampled and deterministic decisions alike (None: the model's
    # flow_steps); the log-probs follow the stored chains, the checkpoints keep the model's own steps
    flow_steps: int | None = Field(None, ge=1)
    reasoning: bool = False  # sample the Chain-of-Causation too; its token log-probs join the objective
    temperature: float = Field(1.0, gt=0)  # of the reasoning's sampling (and of its log-probs)
    dual_clip: float | None = Field(10.0, gt=1)  # dual-clip c for negative advantages (None: off)
    kl_coef: float = Field(0.0, ge=0)  # k3 KL to the frozen starting policy (init_from), on the sampled chains
    bc_weight: float = Field(0.0, ge=0)  # + w x SFT loss on the recipe's [data] per learner step (BC anchor)
    bc_batch: int = Field(16, ge=1)  # demonstrations per learner step
    epochs: int = Field(1, ge=1)
    minibatch: int = Field(32, ge=1)
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    # where rollouts run
    env_runners: int = Field(0, ge=0)  # 0: in-process
    envs_per_runner: int = Field(1, ge=1)  # envs a runner steps side by side, one batched module call per decision
    ray_address: str | None = None  # join a running cluster ("auto", "ray://host:10001")
    retries: int = Field(2, ge=0)  # re-runs of the episodes of a failed env runner
    threads: int | None = None  # torch threads of the trainer
    log_every: int = Field(1, ge=1)
    max_iterations_this_run: int | None = None  # stop early (as a kill would) - for resume tests


def check_noise_levels(v: NoiseLevels | None) -> NoiseLevels | None:
    """One noise level, or two ([accel, curvature]); all >= 0, at least one > 0."""
    if v is None:
        return v
    levels = [v] if isinstance(v, float | int) else v
    if isinstance(v, list) and len(v) != 2:
        raise ValueError(f"give one noise level, or two: [accel, curvature]; got {len(v)}")
    if any(x < 0 for x in levels) or not any(x > 0 for x in levels):
        raise ValueError(f"noise levels must be >= 0 and at least one > 0; got {v}")
    return v


class GRPOSection(RLSection):
    """GRPO: groups of rollouts scored against each other."""

    @field_validator("normalise", mode="before")
    @classmethod
    def _normalise_flag(cls, v: Any) -> Any:
        """``normalise = true / false`` (the older boolean) still reads as "group" / "none"."""
        return ("group" if v else "none") if isinstance(v, bool) else v

    @field_validator("stall_noise_level")
    @classmethod
    def _stall_levels(cls, v: NoiseLevels | None) -> NoiseLevels | None:
        return check_noise_levels(v)

    @model_validator(mode="after")
    def _stall_noise_needs_stalls(self) -> GRPOSection:
        if self.stall_noise_level is not None and (self.branch != "before_failure" or not self.stall_decisions):
            raise ValueError('stall_noise_level needs branch = "before_failure" and stall_decisions > 0')
        return self

    # groups: G rollouts of one (scenario, seed), or G branches from one snapshot
    level: Literal["episode", "step"] = "episode"
    groups_per_iter: int = Field(4, ge=1)
    group_size: int = Field(8, ge=1)
    branch_horizon: int = Field(6, ge=1)  # step level: decisions scored after the branch
    # what a rollout is worth: the episode's Driving Score or summed reward; at step level, "return" sums
    # the reward over the branch horizon and "driving_score" drives each branch to the episode's end
    score: Literal["driving_score", "return"] = "driving_score"
    # advantage = r - group mean, divided by the group's std ("group"), the batch's ("batch") or nothing
    normalise: Literal["group", "batch", "none"] = "group"
    # step level: where a group branches: a uniform decision in the first 70% of the scenario, or
    # "before_failure": 1..failure_lookback decisions before the deterministic plan's first infraction
    # (collision, off-road, red light, stop sign, wrong way); uniform where it drives without one.
    # stall_decisions n > 0: standing still n decisions with nothing in the way is a failure too
    branch: Literal["uniform", "before_failure"] = "uniform"
    failure_lookback: int = Field(4, ge=1)
    stall_decisions: int = Field(0, ge=0)
    sampled_decisions: int = Field(1, ge=1)  # step level: a branch's first decisions drawn from the SDE
    # ... and the noise level of the groups that branch at a stall (None: noise_level)
    stall_noise_level: NoiseLevels | None = None
    variant: Literal["grpo", "dapo", "gspo", "aipo"] = "grpo"
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    rho_max: float = Field(2.0, gt=0)
    reasoning_weight: float = Field(1.0, ge=0)  # weight of the reasoning tokens' clipped objective
    consistency_weight: float = Field(0.0, ge=0)  # + w x mean reasoning-action consistency in the score
    critic: str = "rules"  # "rules", "hf:/local/model", "http://host:port" (OpenAI-compatible)


class PPOSection(RLSection):
    """PPO on RLlib: a critic, GAE, the clipped surrogate (on the VLA or a classic baseline module)."""

    policy: Literal["vla", "mlp_state", "cnn_bev"] = "vla"
    gamma: float = Field(0.99, gt=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip: float = Field(0.2, gt=0)
    vf_coef: float = Field(0.5, ge=0)
    vf_clip: float = Field(10.0, gt=0)
    vf_lr: float = Field(1e-3, gt=0)  # the VLA's value head: its own optimiser (a fresh head needs larger steps)
    # what the VLA's critic reads: the policy's state features, or those and the simulator's privileged
    # state (the nearest actors, the next stop line): an asymmetric actor-critic
    value_inputs: Literal["policy", "privileged"] = "policy"
    # after each PPO update the critic alone fits the iteration's value targets this many more epochs:
    # a small MLP on cached features, where the PPO epochs give it only a handful of Adam steps
    vf_fit_epochs: int = Field(0, ge=0)
    # the first iterations (counted in `iterations`) move only the critic: it learns the start's returns
    # before its advantages steer the policy
    critic_warmup: int = Field(0, ge=0)
    batch_steps: int = Field(400, ge=1)  # decisions per PPO iteration (whole episodes)
    # a lane change the manoeuvre head chooses is planned for this many decisions of its rollout (0: none),
    # as [eval] hold plans it when the checkpoint is evaluated: the rollouts then drive the policy evaluated
    hold: int = Field(0, ge=0)
    # metres the route the plan reads moves into the lane a held change goes to, as [eval] route_shift draws
    # it (agents.vla.route_shift; 0: none; needs hold)
    route_shift: float = Field(0.0, ge=0)
    # this share of the rollouts' episodes start with the ego standing: the exploration noise moves a car
    # at rest whatever the plan's mean, so without them the rollouts rarely meet a plan that stays standing
    standing_starts: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _route_shift_needs_hold(self) -> PPOSection:
        if self.route_shift and not self.hold:
            raise ValueError("route_shift draws the lane change held into the route: it needs hold > 0")
        return self


class SB3Section(_Section):
    """stable-baselines3 PPO on the ``state`` observation with ``action_mode="control"``."""

    timesteps: int = Field(20000, ge=1)
    n_steps: int = Field(512, ge=8)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(3e-4, gt=0)
    n_envs: int = Field(2, ge=1)
    net_arch: list[int] = Field(default_factory=lambda: [64, 64])


class WorldSection(_Section):
    """The world model: an action-conditioned flow-matching model of the camera stream, trained on the
    recipe's ``[data]`` with the ``[train]`` schedule."""

    context: int = Field(2, ge=1)  # past decisions it sees
    channels: list[int] = Field(default_factory=lambda: [32, 64, 128])  # U-Net width per level
    patch: int = Field(2, ge=1)  # the U-Net works on patch x patch pixel blocks
    mask: bool = True  # a per-pixel compositing mask gates the predicted change
    flow_steps: int = Field(2, ge=1)  # Euler steps of predict(): 2 scored best on held-out PSNR (docs)
    relative_loss: float | None = Field(0.1, gt=0)  # eps of the per-image relative loss (None: plain MSE)
    val_fraction: float = Field(0.1, gt=0, lt=1)  # scenarios held out (by id) for the evaluation
    horizons: int = Field(4, ge=1)  # decisions predicted autoregressively in the evaluation
    eval_sequences: int = Field(64, ge=1)  # held-out sequences scored
    eval_noise: float = Field(0.0, ge=0)  # the flow's starting-noise scale there (0: the deterministic prediction)
    video_sequences: int = Field(3, ge=0)  # predicted-vs-true sequences in eval.mp4


class DDRLSection(_Section):
    """Data-regularised diffusion RL of the world model (REFERENCE.md section 4): groups of SDE samples
    per real context, rewards from ``rewards.frames``, the clipped per-step policy gradient with shaped
    advantages, plus ``data_beta`` x the flow loss on real data."""

    iterations: int = Field(40, ge=1)
    contexts: int = Field(4, ge=1)  # real contexts (all the rig's cameras) per iteration
    group_size: int = Field(8, ge=2)
    rewards: dict[str, float] = Field(default_factory=lambda: {"psnr": 1.0})  # rewards.frames names or paths
    shaping: Literal["exp", "none"] = "exp"  # lambda(A) = -exp(-A) on the group-normalised advantage
    clip: float = Field(1e-4, gt=0)  # of each step's probability ratio
    kl_coef: float = Field(0.0, ge=0)  # KL to the frozen starting model (closed form per Gaussian step)
    data_beta: float = Field(1.0, ge=0)  # weight of the flow-matching loss on real data
    rl_weight: float = Field(1.0, ge=0)  # weight of the policy-gradient surrogate (0: the data-only ablation)
    data_batch: int = Field(8, ge=1)  # real samples (x the rig's cameras) for that loss per iteration
    noise_level: float = Field(0.7, gt=0)  # the SDE's noise level a
    sde_steps: int = Field(8, ge=1)  # denoising steps of the sampled chain (all stochastic)
    noise_scale: float = Field(1.0, ge=0)  # the starting noise's scale
    lr: float = Field(2e-5, gt=0)
    grad_clip: float = 1.0
    eval_contexts: int = Field(16, ge=1)  # held-out contexts for the reward / data-loss probes
    eval_every: int = Field(5, ge=1)
    max_iterations_this_run: int | None = None


# --- the recipes ------------------------------------------------------------------------------------------
class _Recipe(_Section):
    seed: int = 0
    init_from: str | None = None  # a saved VLA (or, for ddrl, world model) folder to start from
    eval: EvalSection = Field(default_factory=EvalSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)


class _OnData(_Recipe):
    data: DataSection = Field(default_factory=DataSection)


class SFTRecipe(_OnData):
    """Supervised fine-tuning of the VLA on collected data."""

    algorithm: Literal["sft"] = "sft"
    model: VLAConfig = Field(default_factory=VLAConfig)
    train: TrainSection = Field(default_factory=TrainSection)
    dagger: DaggerSection = Field(default_factory=DaggerSection)

    @model_validator(mode="after")
    def _dagger_after_one_schedule(self) -> SFTRecipe:
        if self.dagger.rounds and self.train.two_stage:
            raise ValueError("dagger: rounds after a two_stage schedule are not supported (set one of them)")
        for name in ("closer_lead", "offset_ego"):
            if getattr(self.dagger, name) and self.data.n_frames > 1:
                raise ValueError(
                    f"dagger.{name} needs data.n_frames = 1 (it is {self.data.n_frames}): older frames would show "
                    "the world unmoved"
                )
        return self

    @model_validator(mode="before")
    @classmethod
    def _model_follows_recipe(cls, data: Any) -> Any:
        """The model's seed is the recipe's, and the data is stored at the model's image size,
        unless a section says otherwise."""
        if isinstance(data, dict):
            model = dict(data.get("model") or {})
            model.setdefault("seed", data.get("seed", 0))
            data = {**data, "model": model}
            section = dict(data.get("data") or {})
            if "image_size" in model:
                if "image_size" in section and list(section["image_size"]) != list(model["image_size"]):
                    raise ValueError("data.image_size and model.image_size differ: the VLA reads the stored images")
                section["image_size"] = model["image_size"]
            data["data"] = section
        return data


class GRPORecipe(_OnData):
    """GRPO on the flow-matching head of a trained VLA (``init_from``); ``data``: the observation
    set-up it was trained with, and the behaviour-cloning anchor's data."""

    algorithm: Literal["grpo"]
    rl: GRPOSection = Field(default_factory=GRPOSection)


class PPORecipe(_OnData):
    """PPO on RLlib: the VLA's flow head with a critic, or a classic baseline module (``rl.policy``)."""

    algorithm: Literal["ppo"]
    rl: PPOSection = Field(default_factory=PPOSection)


class SB3PPORecipe(_Recipe):
    """stable-baselines3 PPO on the state vector with (accel, steer) control: a classic reference."""

    algorithm: Literal["ppo_sb3"]
    rl: RLSection = Field(default_factory=RLSection)
    sb3: SB3Section = Field(default_factory=SB3Section)


class WorldModelRecipe(_OnData):
    """The world model of the camera stream, trained on collected data."""

    algorithm: Literal["world_model"]
    train: TrainSection = Field(default_factory=TrainSection)
    world: WorldSection = Field(default_factory=WorldSection)

    @model_validator(mode="after")
    def _saves_its_last_step(self) -> WorldModelRecipe:
        if self.train.ema_decay is not None:
            raise ValueError("train.ema_decay: the world model saves its last step (SFT averages); leave it unset")
        return self


class DDRLRecipe(WorldModelRecipe):
    """DDRL of a trained world model (``init_from``) on the same data."""

    algorithm: Literal["ddrl"]  # type: ignore[assignment]
    ddrl: DDRLSection = Field(default_factory=DDRLSection)


Recipe = Annotated[
    SFTRecipe | GRPORecipe | PPORecipe | SB3PPORecipe | WorldModelRecipe | DDRLRecipe,
    Field(discriminator="algorithm"),
]
ALGORITHMS = ("sft", "grpo", "ppo", "ppo_sb3", "world_model", "ddrl")
_RECIPE = TypeAdapter(Recipe)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value``: the value is read as TOML (numbers, booleans, strings, arrays), else a string."""
    if "=" not in item:
        raise RecipeError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def load_recipe(path: str | Path | None, overrides: list[str] = ()) -> Recipe:
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml(path, "recipe", RecipeError)
    return recipe_from_dict(data, overrides, str(path) if path else "defaults")


def recipe_from_dict(data: dict[str, Any], overrides: list[str] = (), where: str = "recipe") -> Recipe:
    """Validate a recipe after applying ``--set`` overrides (``a.b=value``); ``algorithm`` defaults to sft."""
    data = json.loads(json.dumps(data))  # a deep copy
    for item in overrides:
        keys, value = parse_override(item)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise RecipeError(f"--set {item!r}: {k!r} is not a section")
        node[keys[-1]] = value
    data.setdefault("algorithm", "sft")
    if data["algorithm"] not in ALGORITHMS:
        raise RecipeError(f"{where}: algorithm {data['algorithm']!r} is not one of {list(ALGORITHMS)}")
    try:
        return _RECIPE.validate_python(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'][1:])) or '?'}: {err['msg']}" for err in e.errors()
        )  # loc[0] is the recipe type (the algorithm)
        raise RecipeError(f"{where}{' (with --set)' if overrides else ''}: {problems}") from None
