"""What a trainer can move in a policy, by name (shared by the project VLA and Alpamayo-R1)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn


class TrainableParts:
    """What a trainer can move, by name: ``PARTS`` maps "expert" (the trajectory head), "vlm", "both" and
    "none" to parameter-name prefixes (a mixin for ``nn.Module`` policies)."""

    PARTS: ClassVar[dict[str, tuple[str, ...]]]

    def trainable_names(self, part: str) -> list[str]:
        """Names of the parameters of ``part``."""
        if part not in self.PARTS:
            raise ValueError(f"unknown part {part!r}; choose {sorted(self.PARTS)}")
        prefixes = self.PARTS[part]
        return [n for n, _ in self.named_parameters() if prefixes and n.startswith(prefixes)]

    def set_trainable(self, part: str) -> list[nn.Parameter]:
        """Let gradients reach ``part`` only (the rest is frozen); returns its parameters."""
        names = set(self.trainable_names(part))
        for name, p in self.named_parameters():
            p.requires_grad_(name in names)
        return [p for name, p in self.named_parameters() if name in names]
