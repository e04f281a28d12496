"""The default critic: parse the text into claimed actions and causes, compare with the facts.

Phrases map to the meta-action vocabulary (``decelerate``, ``stop``, ``lane_change_left`` ...) and
the cause vocabulary of ``SceneFacts.causes`` (``red_light``, ``pedestrian``, ``lead_vehicle`` ...).
Negated mentions ("no pedestrians", "the light is not red") are not claims.
"""

from __future__ import annotations

import re

from rewards.critics.base import ConsistencyScore

ACTION_PATTERNS = {
    "stop": r"\b(come to a (full )?stop|stop(ping)?|halt|wait(ing)?|remain stopped|stay stopped)\b",
    "decelerate": r"\b(slow(ing)? down|decelerat\w*|brak\w*|reduc\w* (my |the )?speed|yield\w*|ease off)\b",
    "accelerate": r"\b(accelerat\w*|speed(ing)? up|pick(ing)? up speed|increas\w* (my |the )?speed)\b",
    "keep_speed": r"\b(maintain\w*|keep(ing)? (my |the |a )?(current |steady )?speed|cruis\w*|continu\w* at)\b",
    "start_from_stop": (
        r"\b(start(ing)? (to move|moving|from (a |the )?stop)|pull(ing)? away|proceed\w*"
        r"|go(ing)? again)\b"
    ),
    "turn_left": r"\bturn(ing)? left|left turn\b",
    "turn_right": r"\bturn(ing)? right|right turn\b",
    "lane_change_left": (
        r"\b(chang\w* (lanes? )?(in)?to the left|lane change (to the )?left|merg\w* left"
        r"|move into the left lane)\b"
    ),
    "lane_change_right": (
        r"\b(chang\w* (lanes? )?(in)?to the right|lane change (to the )?right|merg\w* right"
        r"|move into the right lane)\b"
    ),
    "nudge_left": r"\b(nudg\w* (to the )?left|shift\w* (slightly )?left|steer\w* (slightly )?left|go around .* left)\b",
    "nudge_right": r"\b(nudg\w* (to the )?right|shift\w* (slightly )?right|steer\w* (slightly )?right)\b",
    "keep_lane": r"\b(keep(ing)? (in |to )?(my |the )?lane|stay(ing)? in (my |the )?lane|follow(ing)? the lane)\b",
}
CAUSE_PATTERNS = {
    "red_light": r"\bred (light|signal|traffic light)|(light|signal) (is|turns?|turned) red\b",
    "yellow_light": r"\b(yellow|amber) (light|signal)|(light|signal) (is|turns?|turned) (yellow|amber)\b",
    "green_light": r"\bgreen (light|signal)|(light|signal) (is|turns?|turned) green\b",
    "pedestrian": r"\b(pedestrians?|person|people|jaywalk\w*|walker)\b",
    "lead_vehicle": r"\b(lead (vehicle|car)|(vehicle|car|truck) (ahead|in front)|car in front|preceding vehicle)\b",
    "stopped_vehicle": r"\b(stopped|stationary|braking) (vehicle|car|truck)\b",
    "stop_sign": r"\bstop sign\b",
    "cut_in": r"\bcut(s|ting)? in|cut-in|merg\w* into my lane\b",
    "blocked_lane": r"\b(parked|blocked|blocking|obstacle|obstruct\w*)\b",
    "oncoming_traffic": r"\boncoming\b",
    "curve": r"\b(curve|bend|corner)\b",
    "junction": r"\b(intersection|junction|crossing)\b",
}
COMPATIBLE = {  # a claim is also satisfied by these executed actions
    "decelerate": {"decelerate", "stop"},
    "stop": {"stop"},
    "keep_speed": {"keep_speed"},
    "start_from_stop": {"start_from_stop", "accelerate"},
    "accelerate": {"accelerate", "start_from_stop"},
    "nudge_left": {"nudge_left", "lane_change_left"},
    "nudge_right": {"nudge_right", "lane_change_right"},
}
CONTRADICTS = {
    "accelerate": {"stop", "decelerate"},
    "decelerate": {"accelerate"},
    "stop": {"accelerate", "keep_speed"},
    "keep_speed": {"stop"},
    "turn_left": {"turn_right"},
    "turn_right": {"turn_left"},
    "lane_change_left": {"lane_change_right"},
    "lane_change_right": {"lane_change_left"},
}
_NEGATION = re.compile(r"\b(no|not|without|nor|never|isn't|aren't|there is no|there are no)\b[^.,;]{0,25}$", re.I)
_CLEAR = re.compile(r"^\W*(\w+\W+){0,2}(is|are)\s+(clear|empty|free|gone)\b", re.I)  # "oncoming lane is clear"


def _claims(text: str, patterns: dict[str, str]) -> set[str]:
    out = set()
    for name, pat in patterns.items():
        for m in re.finditer(pat, text, flags=re.IGNORECASE):
            before, after = text[max(0, m.start() - 30) : m.start()], text[m.end() : m.end() + 30]
            if not _NEGATION.search(before) and not _CLEAR.search(after):
                out.add(name)
                break
    return out


def claimed_actions(text: str) -> set[str]:
    return _claims(text, ACTION_PATTERNS)


def claimed_causes(text: str) -> set[str]:
    return _claims(text, CAUSE_PATTERNS)


class RulesCritic:
    name = "rules"

    def score(self, reasoning: str, meta_actions: set[str], causes: set[str]) -> ConsistencyScore:
        actions, named = claimed_actions(reasoning), claimed_causes(reasoning)
        executed = set(meta_actions)
        if actions:
            hits = sum(1 for a in actions if COMPATIBLE.get(a, {a}) & executed)
            contradictions = sorted(
                a for a in actions if CONTRADICTS.get(a, set()) & executed and not COMPATIBLE.get(a, {a}) & executed
            )
            behaviour = hits / len(actions) * (0.5 if contradictions else 1.0)
        else:
            contradictions, behaviour = [], 0.5  # says nothing checkable about what it did
        if named:
            present = causes | ({"traffic_light"} if causes & {"red_light", "yellow_light", "green_light"} else set())
            grounded = sorted(named & present)
            grounding = len(grounded) / len(named)
        else:
            grounded, grounding = [], 0.5
        return ConsistencyScore(
            behaviour,
            grounding,
            {
                "claimed_actions": sorted(actions),
                "claimed_causes": sorted(named),
                "contradictions": contradictions,
                "grounded_causes": grounded,
                "hallucinated_causes": sorted(named - set(grounded)),
            },
        )

    def score_batch(self, items):
        return [self.score(*it) for it in items]
