"""Check an Alpamayo-R1 implementation against tensors computed by NVIDIA's own code.

A reference folder holds ``checkpoint/`` (the release's layout), ``base_vlm/`` and ``goldens.safetensors``
(inputs and the release's outputs, described in ``goldens.json``). :func:`check_reference` feeds the
inputs through :class:`AlpamayoR1` and returns the largest error per golden; :data:`TOLERANCES` holds
the acceptance the fixture's README states for an independent float32 implementation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file

from agents.alpamayo.action_space import yaw_of
from agents.alpamayo.model import AlpamayoR1
from agents.alpamayo.prompt import encode_prompts, history_token_ids

# golden -> acceptance (max abs error; ids, grids and positions exact; train_loss relative)
TOLERANCES: dict[str, float] = {
    "fused_input_ids": 0.0,
    "hist_token_ids": 0.0,
    "mm_token_type_ids": 0.0,
    "image_grid_thw": 0.0,
    "pixel_values": 1e-6,
    "t0_v": 1e-5,
    "traj_to_action": 5e-4,
    "traj_to_action_v": 5e-4,
    "traj_to_action_theta": 5e-4,
    "action_to_traj_synthetic_xyz": 1e-3,
    "action_to_traj_synthetic_rot": 1e-3,
    "action_to_traj_roundtrip_xyz": 1e-3,
    "tf_position_ids": 0.0,
    "rope_deltas": 0.0,
    "expert_position_ids": 0.0,
    "tf_logits_gen": 1e-4,
    "prefix_cache_keys": 1e-4,
    "prefix_cache_values": 1e-4,
    "action_in_proj_out_t_a": 1e-4,
    "expert_hidden_t_a": 1e-4,
    "velocity_t_a": 1e-4,
    "velocity_t_b": 1e-4,
    "euler_steps": 2e-4,
    "euler_final_action": 2e-4,
    "pred_xyz": 2e-3,
    "pred_rot": 2e-3,
    "train_noisy_x": 1e-4,
    "train_x": 5e-4,
    "train_pred_velocity": 1e-4,
    "train_loss": 1e-4,  # relative
    "generated_prefix_velocity_t_a": 1e-4,  # the incremental (generate) cache, not the one-pass prefill
}


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if not a.is_floating_point():
        return float((a != b).sum())  # exact goldens: the number of differing entries
    return float((a.float() - b.float()).abs().max())


@contextmanager
def _float32_arithmetic() -> Iterator[None]:
    """The goldens were computed in float32: a GPU's TF32 matmuls and convolutions miss them by ~1e-3
    (measured on an H100), so the check turns TF32 off while it runs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@torch.no_grad()
@_float32_arithmetic()
def check_reference(folder: str | Path, model: AlpamayoR1 | None = None) -> dict[str, float]:
    """Max error per golden of ``folder`` (a fixture made by the release's code); see :data:`TOLERANCES`.
    ``model``: an already-loaded model (default: ``folder/checkpoint`` through ``alpamayo:``'s loader)."""
    folder = Path(folder)
    g = load_file(folder / "goldens.safetensors")
    m = model or AlpamayoR1.from_pretrained(folder / "checkpoint", base=folder / "base_vlm")
    m = m.float().eval()
    dev = m.device
    g = {k: v.to(dev) for k, v in g.items()}
    hist_xyz, hist_rot = g["ego_history_xyz"][:, 0], g["ego_history_rot"][:, 0]
    frames = g["image_frames"].permute(0, 1, 3, 4, 2).flatten(0, 1).cpu().numpy()  # camera-major, HWC
    batch = encode_prompts(m.tokenizer, m.processor, m.config, [frames], hist_xyz.cpu())
    batch = {k: v.to(dev) for k, v in batch.items()}
    batch["history_xyz"], batch["history_rot"] = hist_xyz, hist_rot
    e: dict[str, float] = {}
    for key in ("mm_token_type_ids", "image_grid_thw", "pixel_values"):
        e[key] = _err(batch[key], g[key])
    e["fused_input_ids"] = _err(batch["input_ids"], g["fused_input_ids"])
    e["hist_token_ids"] = _err(history_token_ids(hist_xyz, m.config)[0], g["hist_token_ids"])

    space = m.action_space
    e["t0_v"] = _err(space.initial_speed(hist_xyz, hist_rot), g["t0_v"])
    fit = space.trajectory_to_action(
        g["ego_history_xyz"], g["ego_history_rot"], g["ego_future_xyz"], g["ego_future_rot"]
    )
    e["traj_to_action"] = _err(fit["action"], g["traj_to_action"])
    e["traj_to_action_v"] = _err(fit["v"], g["traj_to_action_v"])
    e["traj_to_action_theta"] = _err(fit["theta"], g["traj_to_action_theta"])
    v0, z0 = space.initial_speed(hist_xyz, hist_rot), hist_xyz[:, -1, 2]
    xyz, yaw = space.action_to_trajectory(g["synthetic_action"], v0, z0)
    e["action_to_traj_synthetic_xyz"] = _err(xyz, g["action_to_traj_synthetic_xyz"])
    e["action_to_traj_synthetic_rot"] = _err(yaw, yaw_of(g["action_to_traj_synthetic_rot"]))
    xyz, _ = space.action_to_trajectory(g["traj_to_action"][:, 0], v0, z0)
    e["action_to_traj_roundtrip_xyz"] = _err(xyz, g["action_to_traj_roundtrip_xyz"])

    prefix, logits = m.teacher_forced_prefix(batch, g["coc_token_ids"])
    P = batch["input_ids"].shape[1]
    ids = torch.cat([batch["input_ids"], g["coc_token_ids"]], 1)
    positions, deltas = m.vlm.model.get_rope_index(
        ids, torch.cat([batch["mm_token_type_ids"], torch.zeros_like(g["coc_token_ids"])], 1), batch["image_grid_thw"]
    )
    e["tf_position_ids"] = _err(positions, g["tf_position_ids"])
    e["rope_deltas"] = _err(deltas.reshape(-1, 1), g["rope_deltas"])
    starts = prefix.start[:, None] + torch.arange(m.n_waypoints, device=dev)
    e["expert_position_ids"] = _err(starts.unsqueeze(0).expand(3, -1, -1), g["expert_position_ids"])
    e["tf_logits_gen"] = _err(logits[:, P - 1 :], g["tf_logits_gen"])
    e["prefix_cache_keys"] = _err(torch.stack([k for k, _ in prefix.cache]), g["prefix_cache_keys"])
    e["prefix_cache_values"] = _err(torch.stack([v for _, v in prefix.cache]), g["prefix_cache_values"])

    e["action_in_proj_out_t_a"] = _err(m.action_in_proj(g["x_t"], g["flow_t_a"]), g["action_in_proj_out_t_a"])
    e["expert_hidden_t_a"] = _err(m.expert_hidden(g["x_t"], g["flow_t_a"], prefix), g["expert_hidden_t_a"])
    e["velocity_t_a"] = _err(m.velocity(g["x_t"], g["flow_t_a"], prefix), g["velocity_t_a"])
    e["velocity_t_b"] = _err(m.velocity(g["x_t"], g["flow_t_b"], prefix), g["velocity_t_b"])
    states = m.euler(prefix, g["euler_x0"])
    e["euler_steps"] = _err(states, g["euler_steps"])
    e["euler_final_action"] = _err(states[:, -1], g["euler_final_action"])
    xyz, yaw = m.to_trajectory(states[:, -1], batch)
    e["pred_xyz"] = _err(xyz, g["pred_xyz"][:, 0, 0])
    e["pred_rot"] = _err(yaw, yaw_of(g["pred_rot"][:, 0, 0]))

    x = fit["action"][:, 0]
    t, noise = g["train_t"], g["train_noise"]
    e["train_x"] = _err(x, g["train_x"])
    noisy = t * g["train_x"] + (1 - t) * noise
    e["train_noisy_x"] = _err(noisy, g["train_noisy_x"])
    e["train_pred_velocity"] = _err(m.velocity(noisy, t, prefix), g["train_pred_velocity"])
    loss = m.flow_loss(prefix, g["train_x"], t, noise)
    e["train_loss"] = abs(float(loss) - float(g["train_loss"])) / abs(float(g["train_loss"]))

    _, generated, _ = m.generate_reasoning(batch, forced=g["coc_token_ids"][0])
    e["generated_prefix_velocity_t_a"] = _err(m.velocity(g["x_t"], g["flow_t_a"], generated), g["velocity_t_a"])
    return e


def failures(errors: dict[str, float]) -> dict[str, tuple[float, float]]:
    """The goldens outside :data:`TOLERANCES`: name -> (error, tolerance)."""
    return {k: (v, TOLERANCES[k]) for k, v in errors.items() if k in TOLERANCES and not v <= TOLERANCES[k]}
