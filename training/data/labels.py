"""Auto-labelling, Alpamayo's recipe: meta-actions of the future trajectory -> a teacher writes the
reasoning from those meta-actions and the scene facts -> a critic filters out what disagrees.

``TemplateTeacher`` (the default) writes one Chain-of-Causation sentence: the most important cause
in the scene, then what the car does. ``LMTeacher`` asks a language model (any critic backend with
``complete(prompts)``: a local transformers model or an OpenAI-compatible endpoint) for the same.
``ConsistencyFilter`` keeps a sample when the critic's overall score reaches the threshold, and
counts every rejection by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agents.vla.manoeuvre import MANOEUVRE_FRAMES, MANOEUVRES, ManoeuvreFrame
from rewards.critics import RulesCritic
from rewards.meta_actions import DEFAULT_THRESHOLDS, detect_plan, dominant
from scenarios import geometry
from scenarios.roads import LANE_WIDTH

# causes in priority order, each with a sentence opening
CAUSE_TEXT = (
    ("red_light", "The traffic light ahead is red"),
    ("pedestrian", "A pedestrian is near my path"),
    ("stop_sign", "There is a stop sign ahead"),
    ("cut_in", "A vehicle is cutting in ahead"),
    ("stopped_vehicle", "A stopped vehicle is ahead in my lane"),
    ("blocked_lane", "A parked car is blocking my lane"),
    ("yellow_light", "The traffic light ahead is yellow"),
    ("lead_vehicle", "There is a lead vehicle ahead"),
    ("junction", "An intersection is ahead"),
    ("curve", "The road curves ahead"),
    ("green_light", "The traffic light ahead is green"),
)
LONGITUDINAL_TEXT = {
    "stop": "come to a stop",
    "decelerate": "slow down",
    "accelerate": "accelerate",
    "start_from_stop": "start moving again",
    "keep_speed": "keep the current speed",
}
LATERAL_TEXT = {
    "turn_left": "turn left",
    "turn_right": "turn right",
    "lane_change_left": "change lanes to the left",
    "lane_change_right": "change lanes to the right",
    "nudge_left": "nudge to the left",
    "nudge_right": "nudge to the right",
}
LONGITUDINAL_ORDER = ("stop", "start_from_stop", "decelerate", "accelerate", "keep_speed")


class Teacher(Protocol):
    def write(self, meta_actions: set[str], causes: set[str], facts: dict[str, Any]) -> str: ...


def label_meta_actions(target: np.ndarray, speed0: float, dt: float = 0.1) -> set[str]:
    """The dominant meta-actions of an ego-frame future trajectory ``[64, 3]``."""
    return dominant(detect_plan(np.asarray(target, float), speed0, dt))


class TemplateTeacher:
    """Deterministic reasoning from meta-actions and scene causes (no model needed).

    With ``standing`` (``teacher = "template_standing"``), a car already standing still
    (``facts["speed"]`` below the stop threshold) is not told to "come to a stop": its decision is
    whether it starts again within the horizon ("start moving again") or stays ("stay stopped").
    Told "come to a stop" there (462 of the 525 standing samples of ``core`` train), a VLA planning
    from its own reasoning stood at stop signs and junctions for good; plans without reasoning
    scored lower with the new texts in the runs so far, so it is not the default (docs/experiments/sft.md)."""

    def __init__(self, standing: bool = False) -> None:
        self.standing = standing

    def write(self, meta_actions: set[str], causes: set[str], facts: dict[str, Any] | None = None) -> str:
        cause = next((text for tag, text in CAUSE_TEXT if tag in causes), "The road ahead is clear")
        lon = next((LONGITUDINAL_TEXT[a] for a in LONGITUDINAL_ORDER if a in meta_actions), "keep the current speed")
        standing = self.standing and facts is not None and facts.get("speed", np.inf) < DEFAULT_THRESHOLDS.stop_speed
        if standing and "stop" in meta_actions:
            moves = {"start_from_stop", "accelerate"} & meta_actions
            lon = LONGITUDINAL_TEXT["start_from_stop"] if moves else "stay stopped"
        lat = [LATERAL_TEXT[a] for a in sorted(meta_actions) if a in LATERAL_TEXT]
        action = " and ".join([lon, *lat[:1]])
        if not lat and "keep_lane" in meta_actions:
            action += " in my lane"
        return f"{cause}, so {action}."


class LMTeacher:
    """Reasoning written by a language model through a critic backend's ``complete``."""

    PROMPT = (
        "You write the reasoning of a driving agent as one sentence: cause, then action.\n"
        "Actions the car takes: {actions}.\nScene facts: {causes}.\n"
        "Write the sentence, e.g. 'Red light ahead, so decelerate to stop at the stop line.'"
    )

    def __init__(self, backend: Any, fallback: Teacher | None = None) -> None:
        if not callable(getattr(backend, "complete", None)):
            raise TypeError(f"{type(backend).__name__} has no complete(prompts): it cannot be a teacher")
        self.backend, self.fallback = backend, fallback or TemplateTeacher()

    def write(self, meta_actions: set[str], causes: set[str], facts: dict[str, Any] | None = None) -> str:
        prompt = self.PROMPT.format(
            actions=", ".join(sorted(meta_actions)) or "none", causes=", ".join(sorted(causes)) or "none"
        )
        text = (self.backend.complete([prompt])[0] or "").strip().split("\n")[0]
        return text or self.fallback.write(meta_actions, causes, facts)


def make_teacher(spec: str = "template", **options: Any) -> Teacher:
    """``template``, ``template_standing`` (see :class:`TemplateTeacher`), or any critic spec
    (``hf:PATH``, ``http://...``) whose model writes the reasoning."""
    if spec in ("template", "template_standing"):
        return TemplateTeacher(standing=spec == "template_standing")
    from rewards.critics import make_critic

    return LMTeacher(make_critic(spec, **options))


@dataclass
class ConsistencyFilter:
    """Keep samples whose reasoning agrees with the labelled meta-actions and the scene."""

    threshold: float = 0.5
    critic: Any = field(default_factory=RulesCritic)
    kept: int = 0
    rejected: Counter = field(default_factory=Counter)

    def __call__(self, reasoning: str, meta_actions: set[str], causes: set[str]) -> tuple[bool, float]:
        score = self.critic.score(reasoning, meta_actions, causes)
        ok = score.overall >= self.threshold
        if ok:
            self.kept += 1
        else:
            self.rejected[_reason(score)] += 1
        return ok, score.overall

    def stats(self) -> dict[str, Any]:
        return {"kept": self.kept, "rejected": sum(self.rejected.values()), "rejected_by_reason": dict(self.rejected)}


def _reason(score: Any) -> str:
    d = score.details
    if d.get("contradictions"):
        return "contradicts_executed_action:" + ",".join(d["contradictions"])
    if d.get("hallucinated_causes"):
        return "cause_not_in_scene:" + ",".join(d["hallucinated_causes"])
    if d.get("claimed_actions") is not None and score.behaviour < 1.0:
        return "action_not_executed"
    return "low_score"


def manoeuvre_class(meta_actions: Iterable[str]) -> int:
    """The index in ``MANOEUVRES`` of a future's meta-actions (left first when a future has both sides)."""
    found = set(meta_actions)
    if found & {"lane_change_left", "nudge_left"}:
        return MANOEUVRES.index("change_left")
    if found & {"lane_change_right", "nudge_right"}:
        return MANOEUVRES.index("change_right")
    return MANOEUVRES.index("keep_lane")


def manoeuvre_under_way(
    manoeuvres: np.ndarray, targets: np.ndarray, by_s: float | None, offset: float = 0.5
) -> np.ndarray:
    """``manoeuvres`` with each lane change that has not moved its target ``offset`` m towards its side by
    ``by_s`` seconds read as ``keep_lane``: "change now", not "change at some time in the next 6.4 s"
    (None: ``manoeuvres`` as recorded, a lane change at any time in the 6.4 s).
    A plan told only that the future holds a lane change is told nothing of when, and its deterministic
    plan (the flow from the prior's centre) lands between the timings, hardly leaving the lane
    (docs/experiments/sft.md). ``targets`` ``[B, 64, 3]`` ego-frame futures at 10 Hz (y to the left)."""
    if by_s is None:
        return manoeuvres
    step = min(round(by_s * 10) - 1, targets.shape[1] - 1)
    side = np.where(manoeuvres == MANOEUVRES.index("change_left"), 1.0, -1.0)
    moved = side * targets[:, step, 1] >= offset
    return np.where(moved, manoeuvres, MANOEUVRES.index("keep_lane"))


ROUTE_TAIL_M = 10.0  # the route polyline is extended this far behind its first point (it starts 2 m ahead)


def stops_by(targets: np.ndarray, by_s: float | None, stop_speed: float = DEFAULT_THRESHOLDS.stop_speed) -> np.ndarray:
    """Whether each future ``[B, 64, 3]`` (ego frame, 10 Hz, its first point 0.1 s ahead) moves at its start and
    stands, below ``stop_speed``, within ``by_s`` seconds (None: within the 6.4 s): the car brakes to a stop.
    A car already standing is not stopping; whether it moves off is the plan's to say."""
    xy = np.concatenate([np.zeros_like(targets[:, :1, :2]), targets[:, :, :2]], 1)
    speeds = np.linalg.norm(np.diff(xy, axis=1), axis=-1) / 0.1  # [B, 64]: over each 0.1 s
    steps = targets.shape[1] if by_s is None else min(round(by_s * 10), targets.shape[1])
    return (speeds[:, 0] >= stop_speed) & (speeds[:, :steps].min(1) < stop_speed)


def manoeuvre_classes(
    manoeuvres: np.ndarray,
    targets: np.ndarray,
    by_s: float | None,
    frame: ManoeuvreFrame = "ego",
    routes: np.ndarray | None = None,
    stop: bool = False,
    stop_by_s: float | None = None,
) -> np.ndarray:
    """The manoeuvre classes as a head trained with ``manoeuvre_by_s = by_s`` and ``manoeuvre_frame = frame``
    knows them. ``ego``: :func:`manoeuvre_under_way`, the start of a lane change. Half-way through one the car
    already heads into the new lane, so its future moves no further to that side of its own heading, and the
    class reads ``keep_lane``. ``route``: the lane the future is in at ``by_s``, beside the route's lane (more
    than half a lane width out, :func:`route_laterals`) or, still in the route's lane, leaving it (the ego
    class's start, where the future ends further from the route's centre than the car is now); a lane change
    is named until the car drives back, and the way back from an offset is ``keep_lane``. ``route`` needs the
    ``routes`` ``[B, P, 2]`` (ego frame, as the observations give them). With ``stop`` (``[model]
    manoeuvre_stop``) a ``keep_lane`` future that stops within ``stop_by_s`` (None: ``by_s``; :func:`stops_by`)
    is ``stop``: a stop can be named earlier than a lane change, from where the expert starts braking."""
    if frame not in MANOEUVRE_FRAMES:
        raise ValueError(f"manoeuvre_frame must be one of {MANOEUVRE_FRAMES}, got {frame!r}")
    classes = _lane_classes(manoeuvres, targets, by_s, frame, routes)
    if not stop:
        return classes
    keep = MANOEUVRES.index("keep_lane")
    stopping = stops_by(targets, by_s if stop_by_s is None else stop_by_s)
    return np.where((classes == keep) & stopping, MANOEUVRES.index("stop"), classes)


def _lane_classes(
    manoeuvres: np.ndarray, targets: np.ndarray, by_s: float | None, frame: ManoeuvreFrame, routes: np.ndarray | None
) -> np.ndarray:
    """:func:`manoeuvre_classes` without the stop: the lane the future keeps or changes to."""
    starting = manoeuvre_under_way(manoeuvres, targets, by_s)
    if frame == "ego":
        return starting
    if by_s is None or routes is None:
        raise ValueError("manoeuvre_frame = route: the classes need manoeuvre_by_s and the routes")
    step = min(round(by_s * 10) - 1, targets.shape[1] - 1)
    now, then = route_laterals(routes, np.zeros((len(targets), 2))), route_laterals(routes, targets[:, step, :2])
    keep, left, right = (MANOEUVRES.index(name) for name in ("keep_lane", "change_left", "change_right"))
    beside = np.where(then >= LANE_WIDTH / 2, left, np.where(then <= -LANE_WIDTH / 2, right, keep))
    leaving = np.abs(then) > np.abs(now)
    return np.where(beside != keep, beside, np.where(leaving, starting, keep))


def route_laterals(routes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Signed offset (left positive) of each of ``points`` ``[B, 2]`` from its route ``[B, P, 2]`` (both in the
    ego frame), the route extended straight back ``ROUTE_TAIL_M`` from its first point, so a point beside
    the car projects onto it too."""
    out = np.empty(len(points))
    for i, (route, point) in enumerate(zip(np.asarray(routes, np.float64), np.asarray(points, np.float64))):
        ahead = route[1] - route[0]
        back = route[0] - ROUTE_TAIL_M * ahead / max(float(np.linalg.norm(ahead)), 1e-9)
        line = np.vstack([back, route])
        arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(line, axis=0), axis=1))])
        out[i] = geometry.project(line, arc, point)[1]
    return out
