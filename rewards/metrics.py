"""Episode metrics and the metric suites people quote, all computed from one episode log.

An ``EpisodeLog`` is the world's event log plus the ego's state at every 0.1 s step. Every suite
score is on a 0-100 scale. Formulas and sources:

- ``leaderboard`` (CARLA Leaderboard 2.0, also Bench2Drive): score = RC x IP. RC = route completion
  (%). IP starts at 1 and is multiplied per infraction: collision with a pedestrian 0.50, a vehicle
  0.60, a static object 0.65, red light 0.70, stop sign 0.80, scenario timeout 0.70, failure to yield
  to an emergency vehicle 0.70; driving outside the route's lanes multiplies by (1 - pct / 100). With
  ``version="2.1"`` IP = 1 / (1 + sum w) with w = pedestrian 1.0, vehicle 0.7, static 0.6, red light
  0.4, stop sign 0.25, timeout 0.4, yield 0.4. The minimum-speed infraction (route files: the ego
  slower than the traffic around it over a quarter of the route) multiplies by
  1 - 0.3 (1 - pct / 100) in ``score_min_speed`` only: ``score`` leaves it out, as Bench2Drive does.
  Source: leaderboard.carla.org (scoring), the leaderboard's statistics manager, Leaderboard 2.1
  release notes.
- ``pdms`` (NAVSIM v1 PDM score, here over the closed-loop episode):
  NC * DAC * (5 TTC + 5 EP + 2 C) / 12; NC = 0 after an at-fault collision with a vehicle or
  pedestrian, 0.5 with a static object, else 1; DAC = 0 if the ego left the drivable area; TTC = 0
  if time to collision fell under 0.95 s; EP = ego progress (route completion, 0-1); C = 1 if all
  nuPlan comfort bounds held. Source: Dauner et al., NAVSIM (2024).
- ``alpasim`` (AlpaSim scene score): 0 after an at-fault collision or off-road, else
  min(progress_rel / 0.8, 1). Source: NVlabs/alpasim evaluation.
- ``comfort``: % of steps within all six nuPlan comfort bounds; ``success``: 100 if the route was
  completed with no infraction (a minimum-speed one aside, as Bench2Drive counts success);
  ``km_per_incident``: distance / incidents (inf without incidents).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loopdrive.plugins import Registry
from rewards.comfort import comfort_series
from rewards.events import INCIDENTS, INFRACTIONS, Event, EventKind
from rewards.transition import EgoState

LB20_COEFFICIENTS = {
    "pedestrian": 0.50,
    "vehicle": 0.60,
    "static": 0.65,
    "red_light": 0.70,
    "stop_sign": 0.80,
    "scenario_timeout": 0.70,
    "yield_emergency_vehicle": 0.70,
}
LB21_WEIGHTS = {
    "pedestrian": 1.0,
    "vehicle": 0.7,
    "static": 0.6,
    "red_light": 0.4,
    "stop_sign": 0.25,
    "scenario_timeout": 0.4,
    "yield_emergency_vehicle": 0.4,
}
MIN_SPEED_WEIGHT = 0.7  # the Leaderboard 2.0's min-speed factor at 0 % of the traffic's speed
TTC_THRESHOLD = 0.95  # s, nuPlan's time-to-collision bound
SUITES = ("leaderboard", "pdms", "alpasim", "comfort", "success")


@dataclass
class EpisodeLog:
    """Everything the suites need: events, the ego at every step, and route facts."""

    events: list[Event]
    ego: Sequence[EgoState] = field(default_factory=list)
    route_length: float = 0.0  # metres from start to goal
    dt: float = 0.1
    timed_out: bool = False  # a bank scenario's time ran out with the ego standing (a scenario timeout)
    distance_outside_route_lanes: float = 0.0

    @property
    def route_completion(self) -> float:
        return self.ego[-1].route_completion if self.ego else 0.0

    @property
    def distance(self) -> float:
        if len(self.ego) < 2:
            return 0.0
        xy = np.array([(e.x, e.y) for e in self.ego])
        return float(np.linalg.norm(np.diff(xy, axis=0), axis=1).sum())

    def infractions(self) -> list[dict[str, Any]]:
        """The events that count as infractions, as the journal stores them: ``{"type", "t", ...}``
        (collisions as ``collision_<actor kind>`` with the actor and whose fault it was)."""
        out = []
        for e in self.events:
            if e.kind is EventKind.COLLISION:
                out.append({"type": f"collision_{e.actor_kind}", "t": e.t, "actor": e.actor, "at_fault": e.at_fault})
            elif e.kind in INFRACTIONS:
                details = {"signal": e.signal, "scenario": e.scenario, "percentage": e.percentage}
                out.append({"type": e.kind.value, "t": e.t, **{k: v for k, v in details.items() if v is not None}})
        return out

    def count(self, kind: EventKind, **fields: Any) -> int:
        """Events of a kind (optionally with these field values, e.g. ``at_fault=True``)."""
        return sum(1 for e in self.events if e.matches(kind, **fields))


# event kinds with a fixed penalty (collisions are counted by the actor's kind)
_PENALISED = frozenset(
    {EventKind.RED_LIGHT, EventKind.STOP_SIGN, EventKind.SCENARIO_TIMEOUT, EventKind.YIELD_EMERGENCY_VEHICLE}
)


def _collisions(events: Iterable[Event], at_fault_only: bool = False) -> list[Event]:
    return [e for e in events if e.kind is EventKind.COLLISION and (e.at_fault or not at_fault_only)]


def leaderboard(log: EpisodeLog, version: str = "2.0") -> dict[str, float]:
    """CARLA Leaderboard route score: RC x IP (0-100), with RC, IP and infractions per km."""
    counts: dict[str, int] = {}
    for e in _collisions(log.events):
        counts[e.actor_kind] = counts.get(e.actor_kind, 0) + 1
    for e in log.events:
        if e.kind in _PENALISED:
            counts[e.kind.value] = counts.get(e.kind.value, 0) + 1
    if log.timed_out:
        counts["scenario_timeout"] = counts.get("scenario_timeout", 0) + 1
    if version == "2.0":
        ip = math.prod(LB20_COEFFICIENTS[k] ** n for k, n in counts.items())
    elif version == "2.1":
        ip = 1.0 / (1.0 + sum(LB21_WEIGHTS[k] * n for k, n in counts.items()))
    else:
        raise ValueError(f"unknown leaderboard version {version!r}: use '2.0' or '2.1'")
    outside_pct = min(100.0, 100.0 * log.distance_outside_route_lanes / max(log.route_length, 1e-6))
    ip *= 1.0 - outside_pct / 100.0
    rc = 100.0 * log.route_completion
    km = log.distance / 1000.0
    n_inf = sum(counts.values())
    min_speed = math.prod(
        1.0 - (1.0 - MIN_SPEED_WEIGHT) * (1.0 - min(e.percentage or 0.0, 100.0) / 100.0)
        for e in log.events
        if e.kind is EventKind.MIN_SPEED
    )
    return {
        "score": rc * ip,
        "route_completion": rc,
        "infraction_penalty": ip,
        "infractions": float(n_inf),
        "infractions_per_km": n_inf / km if km > 0 else 0.0,
        "outside_lanes_pct": outside_pct,
        "min_speed_penalty": min_speed,
        "score_min_speed": rc * ip * min_speed,
    }


def comfort(log: EpisodeLog) -> dict[str, float]:
    """% of steps within all six nuPlan comfort bounds, and the share of steps for each bound."""
    if len(log.ego) < 3:
        return {"score": 100.0, "all_bounds": 1.0}
    e = log.ego
    ok = comfort_series([s.speed for s in e], [s.accel for s in e], [s.yaw_rate for s in e], log.dt)
    names = ("lon_accel", "lat_accel", "jerk", "lon_jerk", "yaw_rate", "yaw_accel")
    out = {"score": 100.0 * float(ok.all(1).mean()), "all_bounds": float(ok.all())}
    out.update({f"{n}_ok": float(ok[:, i].mean()) for i, n in enumerate(names)})
    return out


def pdms(log: EpisodeLog) -> dict[str, float]:
    """NAVSIM PDM score over the closed-loop episode (0-100) and its sub-scores."""
    nc = 1.0
    for e in _collisions(log.events, at_fault_only=True):
        nc = min(nc, 0.5 if e.actor_kind == "static" else 0.0)
    dac = 0.0 if log.count(EventKind.OFFROAD) else 1.0
    ttc = 0.0 if any(s.ttc < TTC_THRESHOLD for s in log.ego) else 1.0
    ep = float(np.clip(log.route_completion, 0.0, 1.0))
    c = comfort(log)["all_bounds"]
    score = nc * dac * (5 * ttc + 5 * ep + 2 * c) / 12
    return {"score": 100.0 * score, "nc": nc, "dac": dac, "ttc": ttc, "ep": ep, "c": c}


def alpasim(log: EpisodeLog) -> dict[str, float]:
    """AlpaSim scene score (0-100): 0 after an at-fault collision or off-road, else min(progress / 0.8, 1)."""
    failed = bool(_collisions(log.events, at_fault_only=True)) or bool(log.count(EventKind.OFFROAD))
    return {"score": 0.0 if failed else 100.0 * min(log.route_completion / 0.8, 1.0)}


def success(log: EpisodeLog) -> dict[str, float]:
    """100 if the route was completed with no infraction (but the minimum-speed one), else 0."""
    done = bool(log.count(EventKind.ROUTE_COMPLETE))
    clean = all(i["type"] == EventKind.MIN_SPEED.value for i in log.infractions())
    return {"score": 100.0 if done and clean else 0.0}


def km_per_incident(log: EpisodeLog) -> float:
    incidents = sum(1 for e in log.events if e.kind in INCIDENTS)
    km = log.distance / 1000.0
    return km / incidents if incidents else math.inf


MetricFn = Callable[[EpisodeLog], dict[str, float]]
METRICS: Registry = Registry("metric")
for _fn in (pdms, alpasim, comfort, success):
    METRICS[_fn.__name__] = _fn


def register_metric(name: str | None = None):
    """Decorator: add an episode metric ``fn(log: EpisodeLog) -> {"score": 0-100, ...}`` to every
    ``compute_suites`` result (a user's metric can also be named by ``"module:function"``)."""
    return METRICS.register(name)


def compute_suites(
    log: EpisodeLog, leaderboard_version: str = "2.0", extra_metrics: Iterable[str] = ()
) -> dict[str, dict[str, float]]:
    """Every registered suite for one episode (plus ``extra_metrics`` by name or import path), and
    distance and km per incident under ``extra``."""
    out = {"leaderboard": leaderboard(log, leaderboard_version) | {"version": float(leaderboard_version)}}
    for name, fn in METRICS.items():
        out[name] = fn(log)
    for spec in extra_metrics:
        out[spec] = METRICS.resolve(spec)(log)
    out["extra"] = {"distance_m": log.distance, "km_per_incident": km_per_incident(log)}
    return out
