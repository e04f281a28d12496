"""Something stands in the ego's lane and it must go around: through the lane beside (Accident,
ConstructionObstacle, ParkedObstacle, HazardAtSideLane) or, in the *TwoWays variants, through the
oncoming lane between the vehicles of an oncoming flow; and VehicleOpensDoorTwoWays, InvadingTurn.

Placement follows scenario_runner's: the obstacle ``distance`` metres on from the trigger along its lane (stopping
short of a junction), shifted towards ``direction`` by a share of the lane width; the actors appear
when the ego reaches the trigger and leave 50 m after it has passed the last of them. As the
Leaderboard's background manager does, background vehicles leave the ego's lane up to 20 m past the
obstacle, and in the *TwoWays variants the oncoming lane too, where the scenario's own flow runs.
"""

from __future__ import annotations

import math

import numpy as np

from scenarios.leaderboard.base import (
    BICYCLE,
    CAR,
    CONE,
    KMH,
    VAN,
    NotPlaced,
    Placed,
    Played,
    RouteFrame,
    on_lane,
    scenario_type,
    static_actor,
    stretch,
)
from scenarios.maps import Lane

END_DISTANCE = 50.0  # metres past the last actor after which the scenario's actors leave
TRIGGER_DISTANCE = 50.0  # the oncoming flow starts when the ego is this close to the obstacle


def _oncoming_lane(route: RouteFrame, sc: Placed, at: float) -> Lane:
    lane = route.oncoming(at)
    if lane is None:
        raise NotPlaced(f"no oncoming lane {at - sc.s:.0f} m after the trigger")
    return lane


def _flow_towards_ego(
    route: RouteFrame,
    sc: Placed,
    lane: Lane,
    source: float,
    gap: tuple[float, float],
    name: str = "oncoming",
    length: float = 250.0,
    max_speed: float = math.inf,
) -> dict:
    """A flow in the oncoming ``lane`` at its limit (at most ``max_speed``), entering where it passes
    route arc length ``source`` and following ``length`` metres of the lane and its successors."""
    x, y, _ = route.pose(min(source, route.length))
    return {
        "id": sc.id(name),
        "path": route.road_map.follow(lane.id, length),
        "s": round(on_lane(lane, np.array([x, y])), 2),
        "speed": round(min(lane.speed_limit, max_speed), 2),
        "gap": list(gap),
    }


def _oncoming_flow(route: RouteFrame, sc: Placed, first: float, last: float, gap: tuple[float, float]) -> dict:
    """The flow in the oncoming lane that the ego must find a gap in (scenario_runner's
    OppositeActorFlow): it enters 100 m beyond the obstacle and runs past it."""
    flow = _flow_towards_ego(route, sc, _oncoming_lane(route, sc, last), last + 100.0, gap)
    return flow | stretch(max(first - TRIGGER_DISTANCE, sc.s), last + END_DISTANCE)


def _room(sc: Placed, last: float, oncoming: bool = False) -> dict:
    """The background kept out of the ego's lane up to 20 m past the obstacle's ``last`` metre while
    the scenario runs (LeaveSpaceInFront) and, with ``oncoming``, out of the oncoming lanes, where the
    scenario's own flow runs instead (ChangeOppositeBehavior)."""
    return {"ahead_to": round(last + 20.0, 2), "oncoming": oncoming} | stretch(sc.s, last + END_DISTANCE)


def _two_ways(played: Played, route: RouteFrame, sc: Placed, first: float, last: float, gap) -> Played:
    """A one-way-each-way variant: the oncoming flow and the oncoming lanes cleared of background."""
    played.flows.append(_oncoming_flow(route, sc, first, last, gap))
    played.clear_background = [_room(sc, last, oncoming=True)]
    return played


def _obstacle(
    route: RouteFrame, sc: Placed, offsets: list[float], size, share: float, kind: str
) -> tuple[Played, float, float]:
    direction = sc.direction()
    first = route.forward(sc.s, sc.value("distance", 120.0, 5.0, 1000.0))
    played = Played()
    for k, ds in enumerate(offsets):
        s = min(first + ds, route.length - 1.0)
        lateral = route.side(direction) * share * route.width(s) / 2
        actor = static_actor(sc.id(f"{kind}{k}"), route.lane_pose(sc, s, lateral), size, "vehicle")
        played.actors.append(actor | stretch(sc.s, s + END_DISTANCE))
    played.clear_background.append(_room(sc, first + offsets[-1]))
    return played, first, first + offsets[-1]


@scenario_type(
    "Accident",
    "a police car and two crashed cars (10 m and 16 m on) block the lane `distance` m ahead, shifted "
    "towards `direction` by 0.3 lane widths; the ego changes lanes",
    "no warning sign at the roadside; background traffic keeps its speed (no `speed` cap)",
    "Overtaking",
)
def accident(route: RouteFrame, sc: Placed) -> Played:
    return _obstacle(route, sc, [0.0, 10.0, 16.0], CAR, 0.6, "accident")[0]


@scenario_type(
    "AccidentTwoWays",
    "Accident on a road with one lane each way: the ego passes through the oncoming lane, between the "
    "vehicles of an oncoming flow (`frequency` m apart)",
    "no warning sign; wrong-way driving around it is still counted as outside the route's lanes",
    "Overtaking",
)
def accident_two_ways(route: RouteFrame, sc: Placed) -> Played:
    played, first, last = _obstacle(route, sc, [0.0, 10.0, 16.0], CAR, 0.6, "accident")
    return _two_ways(played, route, sc, first, last, sc.interval("frequency", (20.0, 100.0)))


@scenario_type(
    "ParkedObstacle",
    "a car parked `distance` m ahead, 0.35 lane widths into the lane from `direction`; the ego changes lanes",
    "hazard lights are not drawn",
    "Overtaking",
)
def parked_obstacle(route: RouteFrame, sc: Placed) -> Played:
    return _obstacle(route, sc, [0.0], CAR, 0.7, "parked")[0]


@scenario_type(
    "ParkedObstacleTwoWays",
    "ParkedObstacle where the ego passes through the oncoming lane between the vehicles of an oncoming "
    "flow (`frequency` m apart)",
    "hazard lights are not drawn",
    "Overtaking",
)
def parked_obstacle_two_ways(route: RouteFrame, sc: Placed) -> Played:
    played, first, last = _obstacle(route, sc, [0.0], CAR, 0.7, "parked")
    return _two_ways(played, route, sc, first, last, sc.interval("frequency", (20.0, 100.0)))


def _construction(route: RouteFrame, sc: Placed) -> tuple[Played, float, float]:
    """A traffic-warning board across the lane with a taper of cones in front of it and cones along
    the lane behind it."""
    direction = sc.direction()
    first = route.forward(sc.s, sc.value("distance", 100.0, 5.0, 1000.0))
    side = route.side(direction)
    played = Played()
    half = route.width(first) / 2
    pieces = [(0.0, side * 0.1 * half, VAN, "board")]
    pieces += [(-8.0 + 2.0 * k, side * half * (1.0 - 0.25 * k), CONE, f"cone{k}") for k in range(4)]
    pieces += [(3.0 + 3.0 * k, side * 0.6 * half, CONE, f"cone{4 + k}") for k in range(4)]
    last = first + 12.0
    for ds, lateral, size, what in pieces:
        s = min(max(first + ds, sc.s), route.length - 1.0)
        actor = static_actor(sc.id(what), route.lane_pose(sc, s, lateral), size)
        played.actors.append(actor | stretch(sc.s, last + END_DISTANCE))
    played.clear_background.append(_room(sc, last))
    return played, first - 8.0, last


@scenario_type(
    "ConstructionObstacle",
    "a construction board `distance` m ahead with a taper of cones closes the lane; the ego changes lanes",
    "one board and eight cones (CARLA's set of props differs in detail)",
    "Overtaking",
)
def construction(route: RouteFrame, sc: Placed) -> Played:
    return _construction(route, sc)[0]


@scenario_type(
    "ConstructionObstacleTwoWays",
    "ConstructionObstacle passed through the oncoming lane, between the vehicles of an oncoming flow",
    "one board and eight cones",
    "Overtaking",
)
def construction_two_ways(route: RouteFrame, sc: Placed) -> Played:
    played, first, last = _construction(route, sc)
    return _two_ways(played, route, sc, first, last, sc.interval("frequency", (20.0, 100.0)))


def _bicycles(route: RouteFrame, sc: Placed) -> tuple[Played, float, float]:
    first = route.forward(sc.s, sc.value("distance", 100.0, 5.0, 1000.0))
    speed = sc.value("bicycle_speed", 10.0, 1.0, 60.0) * KMH
    drive = sc.value("bicycle_drive_distance", 50.0, 1.0, 5000.0)
    played = Played()
    for k, ds in enumerate((0.0, 9.0)):
        s = min(first + ds, route.length - 1.0)
        lane, s_on = route.lane_at(s)
        lateral = route.right * 0.55 * route.width(s) / 2  # at the kerb side of the lane
        path = route.lanes_from(s, drive + 5.0)
        played.actors.append(
            {
                "id": sc.id(f"bicycle{k}"),
                "kind": "cyclist",
                "lane": lane.id,
                "s": round(s_on, 2),
                "lateral": round(lateral, 3),
                "path": path,
                "speed": round(speed, 2),
                "length": BICYCLE[0],
                "width": BICYCLE[1],
                "height": BICYCLE[2],
                "behaviour": {"type": "idm", "desired_speed": round(speed, 2), "reacts_to_signals": False},
                **stretch(sc.s, s + drive + END_DISTANCE),
            }
        )
    played.clear_background.append(_room(sc, first + 9.0))
    return played, first, first + 9.0 + drive


@scenario_type(
    "HazardAtSideLane",
    "two bicycles 9 m apart ride slowly (`bicycle_speed` km/h) at the right edge of the lane "
    "`distance` m ahead for `bicycle_drive_distance` m; the ego overtakes them",
    "the bicycles leave the road where scenario_runner stops them",
    "Overtaking",
)
def hazard_at_side_lane(route: RouteFrame, sc: Placed) -> Played:
    return _bicycles(route, sc)[0]


@scenario_type(
    "HazardAtSideLaneTwoWays",
    "HazardAtSideLane overtaken through the oncoming lane, between the vehicles of an oncoming flow",
    "the bicycles leave the road where scenario_runner stops them",
    "Overtaking",
)
def hazard_at_side_lane_two_ways(route: RouteFrame, sc: Placed) -> Played:
    played, first, _ = _bicycles(route, sc)
    return _two_ways(played, route, sc, first, first + 30.0, sc.interval("frequency", (100.0, 100.0)))


@scenario_type(
    "VehicleOpensDoorTwoWays",
    "a car parked at the right edge `distance` m ahead opens its door into the lane as the ego comes "
    "within 30 m; the ego passes through the oncoming lane, between the vehicles of an oncoming flow",
    "the door is a thin box that appears (no swing)",
    "Overtaking",
)
def vehicle_opens_door(route: RouteFrame, sc: Placed) -> Played:
    first = route.forward(sc.s, sc.value("distance", 50.0, 5.0, 1000.0))
    side = route.side(sc.direction())
    half = route.width(first) / 2
    car_lateral = side * (half + 0.45)  # the car stands on the lane's edge, half a metre into the lane
    leave = first + END_DISTANCE
    played = Played()
    car = static_actor(sc.id("car"), route.lane_pose(sc, first, car_lateral), CAR, "vehicle")
    door_lateral = car_lateral - side * (CAR[1] / 2 + 0.45)
    door = static_actor(sc.id("door"), route.lane_pose(sc, first + 0.6, door_lateral), (0.25, 0.9, 1.2), "static")
    played.actors += [
        car | stretch(sc.s, leave),
        door | stretch(max(first - 30.0, sc.s), leave),
    ]
    return _two_ways(played, route, sc, first, first, sc.interval("frequency", (20.0, 100.0)))


@scenario_type(
    "InvadingTurn",
    "on a bend, oncoming vehicles cut into the ego's lane by `offset` lane widths; the ego keeps right",
    "a flow of oncoming vehicles 25-40 m apart while the ego drives the `distance` m after the trigger; "
    "background traffic leaves both lanes of the bend",
    "Emergency Brake",
)
def invading_turn(route: RouteFrame, sc: Placed) -> Played:
    distance = sc.value("distance", 100.0, 5.0, 1000.0)
    offset = sc.value("offset", 0.25, 0.0, 1.0)
    end = min(sc.s + distance, route.length - 1.0)
    lane = _oncoming_lane(route, sc, end)
    flow = _flow_towards_ego(route, sc, lane, end, (25.0, 40.0), "invading", distance + 100.0, max_speed=12.0)
    flow["lateral"] = round(min(offset * lane.width, 1.5), 3)
    return Played(flows=[flow | stretch(sc.s, end + 10.0)], clear_background=[_room(sc, end, oncoming=True)])
