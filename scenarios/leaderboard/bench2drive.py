"""Bench2Drive's own scenario types (its scenario_runner fork, read for facts): plain junction turns
(the Vanilla* types), a stretch of lane changes or a T junction to get through in time, and a left
turn into a road a flow of oncoming traffic turns into (*JunctionLeftTurnEnterFlow)."""

from __future__ import annotations

import math
from functools import partial

from scenarios.leaderboard.base import NotPlaced, Placed, Played, RouteFrame, scenario_type
from scenarios.leaderboard.junctions import HELD_S, THROUGH_M, Junction, junction_flow

FREEZE_S = 5.0  # seconds each light setting of a Vanilla turn lasts (Bench2Drive's green_light_delay)
DRIVE_THROUGH = 200.0  # metres T_Junction and SequentialLaneChange ask the ego to drive within their time-out


def _junction_turn(route: RouteFrame, sc: Placed, lights: tuple[str, str] | None) -> Played:
    """A turn at the next junction: with nothing added (``lights`` None), or with the junction's lights set
    as the ego reaches the trigger: the ego's ``lights[0]`` for 5 s then ``lights[1]`` (5 s, or until the
    ego is through the junction for a red-then-green), the other approaches red; then their own programs."""
    j = Junction(route, sc)
    if lights is None:
        return Played()
    mine, (_, every) = j.my_lights(), j.signals()
    first, then = lights
    then_s = FREEZE_S if then == "red" else HELD_S
    phases = {
        sid: [{"state": first, "duration": FREEZE_S}, {"state": then, "duration": then_s}]
        if sid in mine
        else [{"state": "red", "duration": FREEZE_S}, {"state": "red", "duration": then_s}]
        for sid in sorted(every)
    }
    return Played(signal_holds=[{"at": round(sc.s, 2), "until": round(j.exit_s + THROUGH_M, 2), "signals": phases}])


_VANILLA = (
    ("VanillaNonSignalizedTurn", "the ego turns at a junction without lights; nothing else happens", None, ""),
    (
        "VanillaNonSignalizedTurnEncounterStopsign",
        "the ego turns at a junction where its approach has a stop sign (the map's own); nothing else happens",
        None,
        "",
    ),
    (
        "VanillaSignalizedTurnEncounterGreenLight",
        "as the ego reaches the trigger its light turns green for 5 s, then red for 5 s (the other approaches red), "
        "then the junction's lights go back to their cycle",
        ("green", "red"),
        "",
    ),
    (
        "VanillaSignalizedTurnEncounterRedLight",
        "as the ego reaches the trigger its light turns red for 5 s, then green until it is through the junction "
        "(the other approaches red)",
        ("red", "green"),
        "",
    ),
)
for _name, _what, _lights, _differs in _VANILLA:
    for _suffix in ("", "Long"):  # (the Long variants differ only in the routes Bench2Drive gives them)
        scenario_type(_name + _suffix, _what, _differs, "Traffic Sign")(partial(_junction_turn, lights=_lights))


def _drive_through(route: RouteFrame, sc: Placed) -> Played:
    """Nothing is added: the route itself is the test (its lane changes, its T junction), and its window
    asks the ego to drive ``DRIVE_THROUGH`` m within the time-out."""
    if sc.s + DRIVE_THROUGH > route.length:
        raise NotPlaced(f"the route ends {route.length - sc.s:.0f} m after the trigger, short of {DRIVE_THROUGH:g} m")
    return Played()


scenario_type(
    "SequentialLaneChange",
    "the route changes lanes several times; the ego must drive 200 m from the trigger within 240 s",
    "",
    "Merging",
)(_drive_through)
scenario_type(
    "T_Junction",
    "the route goes through a T junction; the ego must drive 200 m from the trigger within 240 s",
    "",
    "Traffic Sign",
)(_drive_through)


def _left_turn_enter_flow(route: RouteFrame, sc: Placed, signalized: bool) -> Played:
    j = Junction(route, sc)
    exits = set(j.ego_lane.successors)
    into_mine = [
        ln
        for ln in j.others
        if exits & set(ln.successors) and math.cos(float(ln.heading[0]) - j.heading) < -math.cos(math.radians(35))
    ]
    if not into_mine:
        raise NotPlaced(f"no movement from the opposite approach of junction {j.id} into the ego's exit")
    speed = sc.value("flow_speed", 20.0, 1.0, 40.0)
    gap = sc.interval("source_dist_interval", (25.0, 50.0))
    lane = sorted(into_mine, key=lambda ln: ln.id)[0]
    return junction_flow(j, sc, lane, speed, gap, (4.0 * speed, 2.5 * speed), signalized)


for _name, _lights in (
    ("SignalizedJunctionLeftTurnEnterFlow", True),
    ("NonSignalizedJunctionLeftTurnEnterFlow", False),
):
    scenario_type(
        _name,
        "the ego turns left into a road that a flow of oncoming traffic (`flow_speed` m/s, `source_dist_interval` m "
        "apart) turns into as well; the flow does not give way",
        "the lights are held (ego and flow green) from the trigger until the ego is through (Bench2Drive: the "
        "ego's red for 5 s first)"
        if _lights
        else "",
        "Merging",
    )(partial(_left_turn_enter_flow, signalized=_lights))
