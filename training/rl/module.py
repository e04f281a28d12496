"""The VLA as an RLlib ``RLModule``: what env runners call to act, and what learners call to score.

- ``forward_exploration`` samples the trajectory with the flow turned into an SDE (Flow-GRPO) and
  returns, besides the action, the denoising ``chain``, its stochastic-step mask ``smask`` and the
  Gaussian log-prob (``action_logp``): RLlib stores them in the episode, so a learner can compute
  the same chain's log-prob under newer weights.
- ``forward_inference`` is the deterministic plan (the ODE from ``eval_noise`` x the prior's sample).
- ``forward_train`` recomputes ``action_logp`` of the stored chains (with grad).
- ``compute_values``: a small MLP on the action expert's state features (ego state, route, command),
  the critic for PPO's GAE; with ``value_inputs = "privileged"`` also on the simulator's state vector
  (route points, the 8 nearest actors, the next stop line: the ``state`` observation), an asymmetric
  actor-critic: the critic only trains, so it may see what the cameras show the policy only as pixels.

``model_config``: ``path`` (a saved VLA folder, readable where the module is built), ``noise_level``,
``stochastic`` ("one" | "all"), ``eval_noise``, ``train`` ("expert" freezes the VLM), ``seed``,
``threads`` (torch threads on a runner), ``value_inputs`` ("policy" | "privileged"), ``init_noise``
(scale of the flow's starting noise when exploring; 0 explores around the deterministic plan),
``flow_steps`` (denoising steps of acting and exploring; None: the model's own, which the saved
checkpoint keeps), ``reasoning`` and ``temperature``: sample the Chain-of-Causation before the
trajectory; the action's log-prob is then the joint one (reasoning
tokens + chain), and ``reasoning_ids`` (padded with -1), ``text_logp`` and ``traj_logp`` are kept.
``hold`` (decisions, 0: none): a lane change the manoeuvre head chooses is planned for that many
decisions of its episode, as ``vla:PATH?hold=N`` evaluates (:mod:`training.rl.hold` reads each episode's
last decision back into the batch). ``route_shift`` (metres, with a hold): the route the plan reads is
drawn into the lane of the change held, as ``vla:PATH?route_shift=M`` evaluates (the env runner's
:class:`training.rl.route_shift.ShiftedRoutes` moves the episode's observation and says where, in
``shift_side``), and a change on a route drawn for it is planned as ``keep_lane``.

For a VLA whose plan is given a manoeuvre, every decision also keeps the class it was planned with
(``manoeuvre``), the class its hold keeps (``hold_class``: the change itself where the route carries it)
and the decisions that hold has left (``hold_left``): the learner scores each chain given the class it
was sampled with, not the head's choice at that state (the two differ under a hold).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from agents.policy import load_policy
from agents.vla.manoeuvre import hold_manoeuvres, why_nothing_to_hold
from agents.vla.model import STATE_FEATURES, state_features
from agents.vla.route_shift import planned_on_route
from envs.observations import EGO_STATE_DIM, STATE_DIM

CHAIN, SMASK = "chain", "smask"
REASONING_IDS, TEXT_LOGP, TRAJ_LOGP = "reasoning_ids", "text_logp", "traj_logp"
# per decision: the class planned, the class its hold keeps, and the decisions that hold has left
MANOEUVRE, HOLD_CLASS, HOLD_LEFT = "manoeuvre", "hold_class", "hold_left"
HELD, HELD_FOR = "held", "held_for"  # an episode's last decision's hold, as the next decision's input
SHIFT_SIDE = "shift_side"  # the side the episode's route is drawn a lane to (+1 left, -1 right, 0: none)


def observations_from_batch(obs: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """RLlib's batched observation dict (tensors [B, ...]) back to one dict per sample."""
    arrays = {k: (v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)) for k, v in obs.items()}
    n = len(next(iter(arrays.values())))
    return [{k: a[i] for k, a in arrays.items()} for i in range(n)]


def as_noise_level(level: float | list[float]) -> float | tuple[float, ...]:
    """A noise level as the module samples with it: one float, or a tuple per action dimension."""
    return float(level) if isinstance(level, int | float) else tuple(float(v) for v in level)


PRIVILEGED = "state"  # the observation an asymmetric critic reads besides the policy's state features


def value_features(obs: dict[str, Any], privileged: bool) -> np.ndarray:
    """The critic's input: the action expert's state features (the route even when the policy does not
    read it), and with ``privileged`` the state vector past its (unscaled) ego part."""
    feats = state_features(obs)
    return np.concatenate([feats, np.asarray(obs[PRIVILEGED], np.float32)[EGO_STATE_DIM:]]) if privileged else feats


class ValueHead(nn.Module):
    def __init__(self, inputs: int = STATE_FEATURES, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).squeeze(-1)


class VLAModule(TorchRLModule, ValueFunctionAPI):
    def setup(self) -> None:
        mc = dict(self.model_config or {})
        if "path" not in mc:
            raise ValueError("VLAModule needs model_config['path']: a saved VLA folder")
        if mc.get("threads"):
            torch.set_num_threads(int(mc["threads"]))
        self.vla = load_policy(mc["path"])
        self.noise_level = as_noise_level(mc.get("noise_level", 0.5))
        self.stochastic = str(mc.get("stochastic", "one"))
        self.eval_noise = float(mc.get("eval_noise", 0.0))
        self.reasoning = bool(mc.get("reasoning", False))
        self.temperature = float(mc.get("temperature", 1.0))
        self.init_noise = float(mc.get("init_noise", 1.0))
        self.flow_steps = int(mc["flow_steps"]) if mc.get("flow_steps") else None
        self.vla.set_trainable(str(mc.get("train", "both")))  # what the policy gradient moves (+ the value head)
        self.privileged_critic = mc.get("value_inputs", "policy") == "privileged"
        extra = STATE_DIM - EGO_STATE_DIM if self.privileged_critic else 0
        self.value_head = ValueHead(STATE_FEATURES + extra)
        self.generator = torch.Generator().manual_seed(int(mc.get("seed", 0)))
        self.hold = int(mc.get("hold", 0))
        self.route_shift = float(mc.get("route_shift", 0.0))
        self.plans_a_manoeuvre = why_nothing_to_hold(self.vla) is None  # Alpamayo's: no manoeuvre head
        if self.hold and not self.plans_a_manoeuvre:
            raise ValueError(
                f"hold = {self.hold}: the VLA at {mc['path']} cannot hold a manoeuvre: {why_nothing_to_hold(self.vla)}"
            )
        if self.route_shift and not self.vla.config.route_inputs:
            raise ValueError(f"route_shift: the VLA at {mc['path']} reads no route (route_inputs = false)")

    # --- acting (env runners) ------------------------------------------------------------------------------
    def _manoeuvre_choice(self, batch: dict[str, Any], planned: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The VLA's ``choose`` for this call, as keyword arguments (none where its plan is given no
        manoeuvre): with a hold, one step of it from each episode's last decision (``held``,
        ``held_for``), with the route shift ``keep_lane`` where the route is drawn for the change held
        (``shift_side``); writes the classes planned, the classes held and the decisions their hold has
        left into ``planned``."""
        if not self.plans_a_manoeuvre:
            return {}
        for needed, columns, piece in (
            (self.hold, (HELD, HELD_FOR), "training.rl.hold.HeldManoeuvres"),
            (self.route_shift, (SHIFT_SIDE,), "training.rl.route_shift.ShiftedRoutes"),
        ):
            if needed and any(column not in batch for column in columns):
                raise ValueError(f"the batch carries no {columns} (the env runner's {piece} adds them)")

        def choose(chosen: torch.Tensor) -> torch.Tensor:
            if self.hold:
                held, held_for = (torch.as_tensor(batch[k]).to(chosen) for k in (HELD, HELD_FOR))
                kept, left = hold_manoeuvres(chosen, held, held_for, self.hold)
            else:
                kept, left = chosen, torch.zeros_like(chosen)
            manoeuvres = planned_on_route(kept, torch.as_tensor(batch[SHIFT_SIDE])) if self.route_shift else kept
            planned[MANOEUVRE], planned[HOLD_CLASS], planned[HOLD_LEFT] = manoeuvres.cpu(), kept.cpu(), left.cpu()
            return manoeuvres

        return {"choose": choose}

    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = observations_from_batch(batch[Columns.OBS])
        planned: dict[str, torch.Tensor] = {}
        out = self.vla.act_batch(
            obs,
            reasoning=False,
            generator=self.generator,
            noise_scale=self.eval_noise,
            steps=self.flow_steps,
            **self._manoeuvre_choice(batch, planned),
        )
        return {Columns.ACTIONS: torch.from_numpy(np.stack([o["trajectory"] for o in out]))} | planned

    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = observations_from_batch(batch[Columns.OBS])
        n = len(obs)
        planned: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            sampled = self.vla.sample_with_log_prob(
                obs,
                self.noise_level,
                self.stochastic,
                self.generator,
                reasoning=self.reasoning,
                temperature=self.temperature,
                init_noise=self.init_noise,
                steps=self.flow_steps,
                **self._manoeuvre_choice(batch, planned),
            )
        traj, chain, smask, logp = sampled[:4]
        out = {
            Columns.ACTIONS: traj.float(),
            Columns.ACTION_LOGP: logp.float(),
            CHAIN: chain.transpose(0, 1).float(),  # [B, steps + 1, 64, 2]
            SMASK: smask.expand(n, -1).float(),  # [B, steps]
        } | planned
        if self.reasoning:
            ids, text_logp = sampled[4], sampled[5]
            padded = torch.full((n, self.vla.max_reasoning_tokens), -1, dtype=torch.long)
            padded[:, : ids.shape[1]] = ids  # a fixed width, so RLlib can stack the decisions of an episode
            out |= {
                REASONING_IDS: padded,
                TEXT_LOGP: text_logp.float(),
                TRAJ_LOGP: logp.float(),
                Columns.ACTION_LOGP: (logp + text_logp).float(),
            }
        return out

    # --- learning -------------------------------------------------------------------------------------------
    critic_only = False  # set by the trainer while only the critic learns (rl.critic_warmup)

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        if self.critic_only:  # no policy loss: the chains' log-probs would cost a learner pass for nothing
            return {}
        return {Columns.ACTION_LOGP: self.log_prob_under(self.vla, batch)}

    def log_prob_under(self, policy: Any, batch: dict[str, Any]) -> torch.Tensor:
        """The stored samples' log-prob under ``policy`` (this module's VLA, or a frozen reference of it),
        each plan given the manoeuvre it was sampled with where the batch keeps it."""
        obs = observations_from_batch(batch[Columns.OBS])
        chain = torch.as_tensor(batch[CHAIN]).transpose(0, 1).to(policy.device)
        smask = torch.as_tensor(batch[SMASK]).bool()
        given = {"manoeuvres": torch.as_tensor(batch[MANOEUVRE]).long()} if MANOEUVRE in batch else {}
        if self.reasoning:
            text, traj = policy.joint_log_prob(
                obs,
                torch.as_tensor(batch[REASONING_IDS]),
                chain,
                smask,
                self.noise_level,
                self.temperature,
                **given,
            )
            return text + traj
        return policy.chain_log_prob(obs, chain, smask, self.noise_level, **given)

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.value_head(self.critic_inputs(batch))

    def critic_inputs(self, batch: dict[str, Any]) -> torch.Tensor:
        """The value head's input for each sample of ``batch`` (:func:`value_features`), [B, features]."""
        obs = observations_from_batch(batch[Columns.OBS])
        feats = np.stack([value_features(o, self.privileged_critic) for o in obs])
        return torch.from_numpy(feats).to(self.vla.device)
