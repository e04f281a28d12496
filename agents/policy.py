"""The trainable policies by folder: a project VLA (``vla_config.json``) or an Alpamayo-R1 checkpoint in the
release's layout (``config.json`` with model_type ``alpamayo_r1``). Both offer the same training hooks
(``losses``, ``sample_with_log_prob``, ``chain_log_prob``, ``joint_log_prob``, ``set_trainable``,
``save_pretrained``, ``camera_size``, ``max_reasoning_tokens``), so SFT, GRPO and PPO take either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from agents.vla.checkpoint import CheckpointError

if TYPE_CHECKING:
    from agents.alpamayo.model import AlpamayoR1
    from agents.vla.model import VLA


def policy_kind(path: str | Path) -> str:
    """``vla`` or ``alpamayo``; anything else is a ``CheckpointError`` saying what the folder lacks."""
    path = Path(path)
    if (path / "vla_config.json").is_file():
        return "vla"
    config = path / "config.json"
    if config.is_file():
        try:
            if json.loads(config.read_text()).get("model_type") == "alpamayo_r1":
                return "alpamayo"
        except (ValueError, UnicodeDecodeError, AttributeError):
            raise CheckpointError(f"{config}: not a JSON object") from None
    raise CheckpointError(
        f"{path}: neither a saved VLA (vla_config.json) nor an Alpamayo-R1 checkpoint (config.json, alpamayo_r1)"
    )


def load_policy(path: str | Path, device: str = "cpu") -> VLA | AlpamayoR1:
    """The policy saved in ``path``, checked as it is read."""
    if policy_kind(path) == "vla":
        from agents.vla.model import VLA

        return VLA.from_pretrained(path, device)
    from agents.alpamayo.model import AlpamayoR1

    return AlpamayoR1.from_pretrained(path, device=device)
