"""The VLA's tokenizer: byte-level BPE trained on the project's reasoning corpus, plus special tokens.

Special tokens follow the Qwen-VL chat layout (``<|im_start|>``, ``<|vision_start|>``,
``<|image_pad|>`` ...) with Alpamayo's additions: reasoning start / end, 256 ego-history bins (the
48 history tokens are 16 steps x (dx, dy, dyaw) deltas binned) and route commands; plus 128 route
bins (16 tokens: the route centreline's lateral offset every 4 m up to 64 m ahead, on a square-root
scale, fine near zero where lane keeping needs it). A local
backbone's own tokenizer can be used instead (``from_pretrained`` on its folder).
"""

from __future__ import annotations

import itertools

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CHAT = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
COT_START, COT_END = "<|cot_start|>", "<|cot_end|>"
HISTORY_BINS = 256
HISTORY = [f"<|hist_{i}|>" for i in range(HISTORY_BINS)]
COMMANDS = ["<|cmd_follow|>", "<|cmd_left|>", "<|cmd_straight|>", "<|cmd_right|>"]
ROUTE_BINS = 128
ROUTE = [f"<|route_{i}|>" for i in range(ROUTE_BINS)]
ROUTE_Y_MAX = 32.0  # metres; lateral offsets of the route are binned on a square-root scale
SPECIAL = CHAT + [COT_START, COT_END] + HISTORY + COMMANDS + ROUTE
# per-step delta ranges binned uniformly (10 Hz): dx in [-0.5, 4] m, dy in [-0.5, 0.5] m, dyaw in [-0.1, 0.1] rad
DELTA_RANGES = np.array([[-0.5, 4.0], [-0.5, 0.5], [-0.1, 0.1]])


def reasoning_corpus() -> list[str]:
    """Sentences in the vocabulary of the expert's Chain-of-Causation, with numbers."""
    subjects = [
        "Red light",
        "Yellow light",
        "Stop sign",
        "Lead vehicle",
        "Pedestrian crossing",
        "Parked car",
        "Slow vehicle",
        "Oncoming traffic",
        "Cross traffic",
        "A curve",
        "The road ahead",
    ]
    actions = [
        "decelerate to stop at the stop line",
        "slow down to keep a safe gap",
        "keep the current speed",
        "accelerate to the speed limit",
        "change lanes to the left to pass it",
        "nudge left around it",
        "yield before entering the junction",
        "stop to let them cross",
        "return to my lane",
        "keep a safe following distance",
        "turn left",
        "turn right",
        "go straight",
    ]
    out = []
    for (subj, act), d in zip(itertools.product(subjects, actions), itertools.cycle(range(0, 60, 7))):
        out.append(f"{subj} ahead at {d} m, so {act}.")
    out += [
        "The road ahead is clear, so keep the current speed in my lane.",
        "Parked cars beside my lane could hide a pedestrian, so slow down.",
        "output the chain-of-thought reasoning of the driving process, then output the future trajectory",
        "You are a driving assistant.",
    ]
    return out


def build_tokenizer(vocab_size: int = 1024, corpus: list[str] | None = None) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator((corpus or reasoning_corpus()) * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL[1:]})
    return fast


def route_tokens(route: np.ndarray) -> list[str]:
    """16 tokens from the route ``[32, 2]`` (ego frame, every 2 m): lateral offsets of every 2nd point."""
    y = np.asarray(route, float)[1::2, 1]
    z = np.sign(y) * np.sqrt(np.minimum(np.abs(y), ROUTE_Y_MAX) / ROUTE_Y_MAX)  # [-1, 1]
    bins = np.clip(((z + 1) / 2 * (ROUTE_BINS - 1)).round(), 0, ROUTE_BINS - 1).astype(int)
    return [ROUTE[b] for b in bins]


def history_tokens(history: np.ndarray) -> list[str]:
    """48 tokens from an ego history ``[16, 4]`` (ego frame, oldest first): per-step deltas, binned."""
    h = np.asarray(history, float)
    deltas = np.diff(h[:, :3], axis=0, prepend=h[:1, :3])  # [16, 3]
    lo, hi = DELTA_RANGES[:, 0], DELTA_RANGES[:, 1]
    bins = np.clip(((deltas - lo) / (hi - lo) * (HISTORY_BINS - 1)).round(), 0, HISTORY_BINS - 1).astype(int)
    return [HISTORY[b] for b in bins.ravel()]
