"""Other vehicles act on the ego's lane: cut in from a stopped queue, a parking spot or an on-ramp
(StaticCutIn, ParkingCutIn, HighwayCutIn), brake hard in front of it (HardBreakRoute), or come up
from behind with a siren (YieldToEmergencyVehicle)."""

from __future__ import annotations

import numpy as np

from scenarios.leaderboard.base import (
    CAR,
    NotPlaced,
    Placed,
    Played,
    RouteFrame,
    on_lane,
    scenario_type,
    static_actor,
    stretch,
)
from scenarios.leaderboard.crossings import nearest_lane
from scenarios.towns import route_between

END_DISTANCE = 50.0
EMERGENCY_EXTRA_SPEED = 15.0  # m/s over the lane's limit (scenario_runner: 25 km/h over the ego's speed, adapting)


def _cut_in(
    aid: str, lane_id: str, s_on: float, lateral: float, path: list[str], target: str, trigger_m: float, speed: float
) -> dict:
    return {
        "id": aid,
        "lane": lane_id,
        "s": round(s_on, 2),
        "lateral": round(lateral, 3),
        "path": path,
        "behaviour": {
            "type": "lane_change",
            "target_lane": target,
            "trigger": {"ego_distance": trigger_m},
            "desired_speed": round(speed, 2),
            "duration": 2.5,
            "starts_parked": True,
            "reacts_to_signals": False,
        },
    }


@scenario_type(
    "StaticCutIn",
    "a queue of three cars stands in the lane beside (`direction`) `distance` m ahead; the last of them "
    "pulls into the ego's lane as the ego comes within 20 m",
    "the queue is parked cars rather than stopped traffic",
    "Merging",
)
def static_cut_in(route: RouteFrame, sc: Placed) -> Played:
    s = route.forward(sc.s, sc.value("distance", 100.0, 5.0, 1000.0))
    side = sc.direction()
    beside = route.beside(s, side)
    if beside is None:
        raise NotPlaced(f"no driving lane on the {side} of the route {s - sc.s:.0f} m after the trigger")
    x, y, _ = route.pose(s)
    s_b = on_lane(beside, np.array([x, y]))
    leave = s + 3 * 7.0 + END_DISTANCE
    played = Played()
    for k in range(1, 3):  # the queue ahead of the car that cuts in
        xy, h = beside.pose_at(min(s_b + 7.0 * k, beside.length))
        car = static_actor(sc.id(f"queue{k}"), (float(xy[0]), float(xy[1]), float(h)), CAR, "vehicle")
        played.actors.append(car | stretch(sc.s, leave))
    target, _ = route.lane_at(s)
    path = route.road_map.follow(beside.id, 200.0)
    speed = sc.value("speed", 8.0, 1.0, 40.0)  # m/s (the files give 17)
    actor = _cut_in(sc.id("cut_in"), beside.id, s_b, 0.0, path, target.id, 20.0, speed)
    played.actors.append(actor | stretch(sc.s, leave + 100.0))
    return played


@scenario_type(
    "ParkingCutIn",
    "a car parked at the `direction` edge of the lane, between two parked cars, pulls out in front of "
    "the ego as it comes within 15 m",
    "the parked cars stand on the lane's edge (towns without parking lanes keep the same geometry)",
    "Merging",
)
def parking_cut_in(route: RouteFrame, sc: Placed) -> Played:
    side = route.side(sc.direction())
    s = route.forward(sc.s, 30.0)
    lane, s_on = route.lane_at(s)
    lateral = side * (route.width(s) / 2 + CAR[1] / 2 + 0.15)  # on the kerb side, clear of the lane
    played = Played()
    leave = s + END_DISTANCE
    blocker = static_actor(sc.id("parked"), route.pose(s + 7.0, lateral), CAR, "vehicle")
    played.actors.append(blocker | stretch(sc.s, leave))
    path = route.lanes_from(s, 200.0)
    actor = _cut_in(sc.id("cut_in"), lane.id, s_on, lateral, path, lane.id, 15.0, 8.0)
    played.actors.append(actor | stretch(sc.s, leave + 150.0))
    return played


@scenario_type(
    "HighwayCutIn",
    "a car from the on-ramp at `other_actor_location` merges into the ego's lane ahead of it",
    "it drives the ramp at its lane's limit from when the ego reaches the trigger, not synchronised to the ego",
    "Merging",
)
def highway_cut_in(route: RouteFrame, sc: Placed) -> Played:
    where = sc.location("other_actor_location")
    lane, s_on = nearest_lane(route, where, ("driving",))
    j = route.junction_after(sc.s, within=300.0)
    goal_s = (j[1] if j is not None else sc.s + 150.0) + 20.0
    goal, _ = route.lane_at(min(goal_s, route.length - 1.0))
    path = route_between(route.road_map, lane.id, goal.id)
    if path is None:
        raise NotPlaced(f"the on-ramp lane {lane.id} does not lead into the route's lane {goal.id}")
    path = path + route.road_map.follow(goal.id, 200.0)[1:]
    speed = min(lane.speed_limit, 20.0)
    return Played(
        actors=[
            {
                "id": sc.id("merging"),
                "lane": lane.id,
                "s": round(s_on, 2),
                "speed": round(speed, 2),
                "path": path,
                "behaviour": {"type": "idm", "desired_speed": round(speed, 2), "reacts_to_signals": False},
                **stretch(sc.s, goal_s + 200.0),
            }
        ]
    )


@scenario_type(
    "HardBreakRoute",
    "the vehicles in front of the ego (up to 60 m, on its route) brake hard to a stop, stand 5 s and drive on",
    "",
    "Emergency Brake",
)
def hard_break_route(route: RouteFrame, sc: Placed) -> Played:
    return Played(front_brakes=[{"at": round(sc.s, 2), "ahead": 60.0}])


@scenario_type(
    "YieldToEmergencyVehicle",
    "an emergency vehicle comes up from `distance` m behind the trigger, 15 m/s faster than the traffic, "
    "the background traffic leaving the route's lane; the ego should move to another lane to let it by "
    "within 10 s of the vehicle coming within 50 m (failing to: an infraction)",
    "its speed is the lane's limit + 15 m/s (scenario_runner: the ego's speed + 25 km/h, adapting); it "
    "drives IDM and stays behind the ego if not let by",
    "Give Way",
)
def yield_to_emergency_vehicle(route: RouteFrame, sc: Placed) -> Played:
    distance = sc.value("distance", 15.0, 5.0, 1000.0)
    behind = sc.s - distance
    if behind < 0:
        raise NotPlaced(
            f"the trigger lies {sc.s:.0f} m along the route's lanes, less than the {distance:.0f} m needed behind"
        )
    lane, s_on = route.lane_at(behind)
    speed = min(lane.speed_limit + EMERGENCY_EXTRA_SPEED, 55.0)
    return Played(
        actors=[
            {
                "id": sc.id("emergency"),
                "lane": lane.id,
                "s": round(s_on, 2),
                "speed": round(speed, 2),
                "path": route.lanes_from(behind, distance + 600.0),
                "length": 5.5,
                "width": 2.1,
                "height": 2.3,
                "behaviour": {
                    "type": "idm",
                    "desired_speed": round(speed, 2),
                    "reacts_to_signals": False,
                    "time_headway": 0.8,
                    "max_accel": 4.0,
                },
                **stretch(sc.s, sc.s + 600.0),
            }
        ],
        # scenario_runner's RemoveRoadLane: the background traffic leaves the lane the vehicle comes along
        clear_background=[
            {"ahead_to": round(sc.s + 1.0, 2), "lanes": route.lanes_from(behind, distance + 300.0)}
            | stretch(sc.s, sc.s + 600.0)
        ],
    )
