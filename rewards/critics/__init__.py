"""Reasoning-consistency critics behind one interface: ``rules`` (default), ``hf`` (a local
transformers model) and ``http`` (any OpenAI-compatible chat endpoint)."""

from __future__ import annotations

from rewards.critics.base import ConsistencyScore, Critic, parse_scores, rubric_prompt
from rewards.critics.rules import RulesCritic, claimed_actions, claimed_causes


def make_critic(spec: str = "rules", **options) -> Critic:
    """``"rules"``, ``"hf:/local/model/path"`` or ``"http://host:port"`` (options passed through)."""
    if spec == "rules":
        return RulesCritic()
    if spec.startswith("hf:"):
        from rewards.critics.hf import HFCritic

        return HFCritic(spec[3:], **options)
    if spec.startswith(("http://", "https://")):
        from rewards.critics.http import HTTPCritic

        return HTTPCritic(spec, **options)
    raise ValueError(f"unknown critic {spec!r}: use 'rules', 'hf:/path/to/model' or an http(s):// URL")


__all__ = [
    "ConsistencyScore",
    "Critic",
    "RulesCritic",
    "claimed_actions",
    "claimed_causes",
    "make_critic",
    "parse_scores",
    "rubric_prompt",
]
