"""The reasoning-critic interface shared by every backend.

A critic scores a Chain-of-Causation text against what the car did (executed meta-actions) and
what was there (scene facts): ``behaviour`` (does the text describe the behaviour?) and
``grounding`` (are the causes it names present in the scene?), each in [0, 1].
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ConsistencyScore:
    behaviour: float
    grounding: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def overall(self) -> float:
        return 0.5 * (self.behaviour + self.grounding)

    def to_dict(self) -> dict[str, Any]:
        return {
            "behaviour": self.behaviour,
            "grounding": self.grounding,
            "overall": self.overall,
            "details": self.details,
        }


class Critic(Protocol):
    name: str

    def score(self, reasoning: str, meta_actions: set[str], causes: set[str]) -> ConsistencyScore: ...

    def score_batch(self, items: list[tuple[str, set[str], set[str]]]) -> list[ConsistencyScore]: ...


RUBRIC = (
    "You grade the reasoning of a self-driving car. Executed actions: {actions}. Scene facts: {causes}.\n"
    'Reasoning: "{reasoning}"\n'
    "Rate (a) behaviour consistency: does the reasoning describe the executed actions? and (b) causal "
    "grounding: are the causes it names present in the scene facts? Answer exactly as "
    "'behaviour: <0-10>, grounding: <0-10>'."
)

_SCORE = re.compile(r"(behaviou?r|grounding)\s*[:=]\s*(\d+(?:\.\d+)?)\s*(?:/\s*(10|100|1))?", re.IGNORECASE)


def rubric_prompt(reasoning: str, meta_actions: set[str], causes: set[str]) -> str:
    return RUBRIC.format(
        actions=", ".join(sorted(meta_actions)) or "none",
        causes=", ".join(sorted(causes)) or "none",
        reasoning=reasoning.replace('"', "'")[:2000],
    )


def parse_scores(text: str) -> tuple[float, float] | None:
    """``behaviour: 7, grounding: 9`` (any case, ``/10`` optional, 0-10 or 0-1 or 0-100) -> (0.7, 0.9)."""
    found: dict[str, float] = {}
    for name, value, scale in _SCORE.findall(text or ""):
        key = "behaviour" if name.lower().startswith("behav") else "grounding"
        v = float(value)
        top = float(scale) if scale else (1.0 if v <= 1.0 and "." in value else 100.0 if v > 10 else 10.0)
        found.setdefault(key, min(max(v / top, 0.0), 1.0))
    if len(found) < 2:
        return None
    return found["behaviour"], found["grounding"]


def scores_from_answers(
    items: list[tuple[str, set[str], set[str]]], answers: list[str], fallback: Critic
) -> list[ConsistencyScore]:
    """Parse LM answers into scores; an unparseable answer falls back to ``fallback`` (``parsed: False``)."""
    out = []
    for item, answer in zip(items, answers):
        parsed = parse_scores(answer)
        if parsed is None:
            base = fallback.score(*item)
            base.details.update({"parsed": False, "answer": answer[:200]})
            out.append(base)
        else:
            out.append(ConsistencyScore(parsed[0], parsed[1], {"parsed": True, "answer": answer[:200]}))
    return out
