"""The release's inputs: its tokenizer, prompt, history tokens and image preprocessing.

The tokenizer is the base VLM's (a local folder; nothing is downloaded) with the trajectory tokens
``<i0>``..``<iN-1>`` added as ordinary tokens and then the release's 29 special tokens, in this order,
so the ids match the checkpoint's embedding rows. The prompt is the base VLM's chat template applied
to three messages: the system line, the user turn (16 images camera-major, then 48 history
placeholders and the instruction) and the assistant turn left open after ``<|cot_start|>``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessorPil

from agents.alpamayo.config import ReleaseConfig
from agents.vla.checkpoint import CheckpointError

SYSTEM = "You are a driving assistant that generates safe and accurate actions."
INSTRUCTION = "output the chain-of-thought reasoning of the driving process, then output the future trajectory."

SPECIAL_TOKENS = (
    "<|prompt_start|>",
    "<|prompt_end|>",
    "<|image_start|>",
    "<|image_pre_tkn|>",
    "<|image_end|>",
    "<|traj_history_start|>",
    "<|traj_history_pre_tkn|>",
    "<|traj_history_end|>",
    "<|cot_start|>",
    "<|cot_end|>",
    "<|meta_action_start|>",
    "<|meta_action_end|>",
    "<|traj_future_start|>",
    "<|traj_future_pre_tkn|>",
    "<|traj_future_end|>",
    "<|traj_history|>",
    "<|traj_future|>",
    "<|image_pad|>",
    "<|vectorized_wm|>",
    "<|vectorized_wm_start|>",
    "<|vectorized_wm_end|>",
    "<|vectorized_wm_pre_tkn|>",
    "<|route_start|>",
    "<|route_pad|>",
    "<|route_end|>",
    "<|question_start|>",
    "<|question_end|>",
    "<|answer_start|>",
    "<|answer_end|>",
)

# the release's four cameras, in the order its data loader sorts them (by camera index 0, 1, 2, 6)
CAMERA_ORDER = ("cross_left_120fov", "front_wide_120fov", "cross_right_120fov", "front_tele_30fov")
HISTORY_POSES = 16


def build_tokenizer(base: Path, config: ReleaseConfig) -> PreTrainedTokenizerFast:
    """The base VLM's tokenizer grown as the release grows it; a mismatch with the checkpoint's
    vocabulary or token ids is a ``CheckpointError`` (the embedding rows would mean other tokens)."""
    if not (base / "tokenizer.json").is_file():
        raise CheckpointError(f"{base}: no tokenizer.json (the base VLM folder holds the tokenizer and processor)")
    try:
        tok = PreTrainedTokenizerFast.from_pretrained(base, local_files_only=True)
    except Exception as e:  # tokenizers raises many types for a damaged file
        raise CheckpointError(f"{base}: not a readable tokenizer ({type(e).__name__}: {str(e)[:200]})") from None
    if tok.chat_template is None:
        raise CheckpointError(f"{base}: no chat template (chat_template.jinja)")
    base_len = len(tok)
    tok.add_tokens([f"<i{i}>" for i in range(config.traj_vocab_size)])
    tok.add_tokens(list(SPECIAL_TOKENS), special_tokens=True)
    problems = []
    if base_len != config.traj_token_start_idx:
        start = config.traj_token_start_idx
        problems.append(f"the base tokenizer has {base_len} tokens, traj_token_start_idx is {start}")
    if len(tok) != config.vocab_size:
        problems.append(f"the grown tokenizer has {len(tok)} tokens, vocab_size is {config.vocab_size}")
    for key, token_id in config.traj_token_ids.model_dump().items():
        token = f"<|traj_{key}|>"
        if tok.convert_tokens_to_ids(token) != token_id:
            problems.append(f"traj_token_ids.{key} = {token_id} but {token} is {tok.convert_tokens_to_ids(token)}")
    if problems:
        raise CheckpointError(f"{base}: this base VLM does not fit the checkpoint: " + "; ".join(problems))
    return tok


def image_processor(base: Path, config: ReleaseConfig) -> Qwen2VLImageProcessorPil:
    """The base VLM's image processor (PIL backend), with the checkpoint's pixel budget when it sets one."""
    if not (base / "preprocessor_config.json").is_file():
        raise CheckpointError(f"{base}: no preprocessor_config.json")
    proc = Qwen2VLImageProcessorPil.from_pretrained(base, local_files_only=True)
    if config.min_pixels and config.max_pixels:
        proc.size = {"shortest_edge": config.min_pixels, "longest_edge": config.max_pixels}
    return proc


def history_token_ids(history_xyz: torch.Tensor, config: ReleaseConfig) -> torch.Tensor:
    """``[B, 16, 3]`` poses in the t0 frame -> ``[B, 48]`` ids: per pose the (x, y, z) change from the
    previous one (the first from the origin), binned uniformly between the tokenizer's bounds."""
    h = config.hist_traj_tokenizer_cfg
    lo, hi = history_xyz.new_tensor(h.ego_xyz_min), history_xyz.new_tensor(h.ego_xyz_max)
    delta = torch.diff(history_xyz, dim=-2, prepend=torch.zeros_like(history_xyz[..., :1, :]))
    bins = torch.round((delta - lo) / (hi - lo) * (h.num_bins - 1)).clamp(0, h.num_bins - 1).long()
    return (config.hist_token_start_idx + bins).flatten(-2)


def prompt_text(tok: PreTrainedTokenizerFast, n_images: int) -> str:
    """The chat template rendered for ``n_images`` images, one ``<|image_pad|>`` each (expanded later)."""
    history = "<|traj_history_start|>" + "<|traj_history|>" * 3 * HISTORY_POSES + "<|traj_history_end|>"
    messages = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
        {"role": "user", "content": [{"type": "image"}] * n_images + [{"type": "text", "text": history + INSTRUCTION}]},
        {"role": "assistant", "content": [{"type": "text", "text": "<|cot_start|>"}]},
    ]
    return tok.apply_chat_template(messages, tokenize=False, continue_final_message=True)


def encode_prompts(
    tok: PreTrainedTokenizerFast,
    proc: Qwen2VLImageProcessorPil,
    config: ReleaseConfig,
    images: list[np.ndarray],
    history_xyz: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Model inputs for B samples: ``images`` holds each sample's frames, uint8 ``[n_images, H, W, 3]``
    camera-major (oldest frame first); ``history_xyz`` ``[B, 16, 3]``. Prompts are left-padded."""
    flat = [frame for sample in images for frame in sample]
    pixels = proc(images=flat, return_tensors="pt")
    grid = pixels["image_grid_thw"]
    merge = proc.merge_size**2
    pads = (grid.prod(-1) // merge).tolist()
    per_sample = len(images[0])
    texts = []
    for i in range(len(images)):
        text = prompt_text(tok, per_sample)
        parts = text.split("<|image_pad|>")
        counts = pads[i * per_sample : (i + 1) * per_sample]
        texts.append(parts[0] + "".join("<|image_pad|>" * n + part for n, part in zip(counts, parts[1:])))
    tok.padding_side = "left"
    enc = tok(texts, return_tensors="pt", padding=True)
    ids = enc["input_ids"]
    placeholder = ids == config.traj_token_ids.history
    hist = history_token_ids(history_xyz, config)
    ids = ids.masked_scatter(placeholder, hist.to(ids.dtype))
    image_token = tok.convert_tokens_to_ids("<|image_pad|>")
    return {
        "input_ids": ids,
        "attention_mask": enc["attention_mask"],
        "mm_token_type_ids": (ids == image_token).long(),
        "pixel_values": pixels["pixel_values"],
        "image_grid_thw": grid,
    }
