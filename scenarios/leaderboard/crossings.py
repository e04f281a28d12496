"""Someone crosses the ego's path: a pedestrian from behind a prop or a parked car
(DynamicObjectCrossing, ParkingCrossingPedestrian), a group at the junction's crosswalk
(PedestrianCrossing), a bicycle or pedestrian on the road the ego turns into (VehicleTurningRoute,
VehicleTurningRoutePedestrian), a flow of bicycles across its path (CrossingBicycleFlow)."""

from __future__ import annotations

import math

import numpy as np

from scenarios.leaderboard.base import (
    BICYCLE,
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
from scenarios.leaderboard.junctions import Junction
from scenarios.maps import Lane

WALKER = {"kind": "pedestrian", "length": 0.5, "width": 0.6, "height": 1.8}
END_DISTANCE = 50.0
# scenario_runner's blocker props (static.prop.*): (length along the road, width, height)
PROPS = {
    "advertisement": (1.0, 2.2, 2.5),
    "busstoplb": (4.0, 1.6, 2.8),
    "busstop": (4.0, 1.6, 2.8),
    "container": (2.0, 1.4, 1.6),
    "foodcart": (2.6, 1.6, 2.2),
    "haybalelb": (1.4, 1.4, 1.4),
    "vendingmachine": (1.0, 1.0, 2.0),
    "streetbarrier": (2.0, 0.5, 1.0),
    "warningaccident": (1.2, 0.6, 1.5),
}


def _walk(
    aid: str, start: np.ndarray, end: np.ndarray, speed: float, trigger_m: float, appear: float, leave: float, size=None
) -> dict:
    actor = {
        "id": aid,
        **(size or WALKER),
        "behaviour": {
            "type": "walk",
            "path": [[round(float(v), 3) for v in start], [round(float(v), 3) for v in end]],
            "speed": speed,
            "trigger": {"ego_distance": trigger_m},
        },
        **stretch(appear, leave),
    }
    return actor


def _across(
    route: RouteFrame, s: float, from_lateral: float, to_lateral: float, angle_deg: float
) -> tuple[np.ndarray, np.ndarray]:
    """A straight walk across the route at ``s`` from one lateral offset to another, turned
    ``angle_deg`` from square-on towards the ego's direction of travel."""
    x0, y0, h = route.pose(s, from_lateral)
    x1, y1, _ = route.pose(s, to_lateral)
    span = abs(to_lateral - from_lateral)
    shift = span * math.tan(math.radians(angle_deg))
    return np.array([x0, y0]), np.array([x1 + shift * math.cos(h), y1 + shift * math.sin(h)])


def _sidewalk_offset(route: RouteFrame, s: float, kerb: bool) -> float:
    """Lateral offset (left +) of a point 1.5 m beyond the road's edge: on the kerb side (the driver's
    right), past the lanes that way; or on the far side, past the oncoming lanes."""
    lane, _ = route.lane_at(s)
    lanes = route.road_map.lanes
    extra = 0.0
    if kerb:
        while lane.right is not None and lane.right in lanes:
            lane = lanes[lane.right]
            extra += lane.width
    else:
        while lane.left is not None and lane.left in lanes:
            lane = lanes[lane.left]
            extra += lane.width
        opposite = route.oncoming(s)
        while opposite is not None:
            extra += opposite.width
            opposite = lanes.get(opposite.right) if opposite.right is not None else None
    sign = route.right if kerb else -route.right
    return sign * (route.width(s) / 2 + extra + 1.5)


def _crossing_behind(route: RouteFrame, sc: Placed, blocker_size, blocker_kind: str, default_distance: float) -> Played:
    distance = sc.value("distance", default_distance, 3.0, 500.0)
    angle = sc.value("crossing_angle", 0.0, -60.0, 60.0)
    kerb = sc.direction() == "right"
    s = route.forward(sc.s, distance)
    edge = _sidewalk_offset(route, s, kerb)
    leave = s + END_DISTANCE
    blocker = static_actor(sc.id("blocker"), route.pose(s, edge), blocker_size, blocker_kind)
    far = _sidewalk_offset(route, s, not kerb)  # it crosses the whole road, to the far kerb
    start, end = _across(route, s + blocker_size[0] / 2 + 1.0, edge, far, angle)
    # it steps out when the ego is about 2 s away at a town speed (scenario_runner times it to the ego)
    walker = _walk(sc.id("walker"), start, end, 2.0, max(12.0, min(distance, 25.0)), sc.s, leave)
    return Played(actors=[blocker | stretch(sc.s, leave), walker])


@scenario_type(
    "DynamicObjectCrossing",
    "a pedestrian steps out from behind a roadside prop (`blocker_model`) `distance` m ahead on "
    "`direction`'s side and crosses at `crossing_angle` at 2 m/s as the ego comes near",
    "the walker starts at a fixed distance from the ego (25 m or `distance`), not at a computed time to collision",
    "Emergency Brake",
)
def dynamic_object_crossing(route: RouteFrame, sc: Placed) -> Played:
    model = str(sc.params.get("blocker_model", "static.prop.vendingmachine")).rsplit(".", 1)[-1]
    return _crossing_behind(route, sc, PROPS.get(model, (2.0, 1.5, 2.0)), "static", 12.0)


@scenario_type(
    "ParkingCrossingPedestrian",
    "a pedestrian crosses from between parked cars `distance` m ahead on `direction`'s side",
    "one parked car hides the pedestrian",
    "Emergency Brake",
)
def parking_crossing_pedestrian(route: RouteFrame, sc: Placed) -> Played:
    return _crossing_behind(route, sc, CAR, "vehicle", 12.0)


def _exit_road(route: RouteFrame, sc: Placed) -> tuple[float, float, float]:
    j = route.junction_after(sc.s, within=120.0)
    if j is None:
        raise NotPlaced("no junction within 120 m after the trigger")
    return j


@scenario_type(
    "PedestrianCrossing",
    "three pedestrians cross the road the ego enters at the next junction, from the right, as it comes near",
    "they cross just past the junction's exit, where a crosswalk usually lies",
    "Emergency Brake",
)
def pedestrian_crossing(route: RouteFrame, sc: Placed) -> Played:
    _, exit_s, _ = _exit_road(route, sc)
    s = min(exit_s + 3.0, route.length - 1.0)
    edge = _sidewalk_offset(route, s, kerb=True)
    far = _sidewalk_offset(route, s, kerb=False)
    actors = []
    for k in range(3):
        start, end = _across(route, s + 1.0 * k, edge - 0.6 * k, far, 0.0)
        actors.append(_walk(sc.id(f"walker{k}"), start, end, 1.4 + 0.2 * k, 30.0, sc.s, s + END_DISTANCE))
    return Played(actors=actors)


def _turning(route: RouteFrame, sc: Placed, cyclist: bool) -> Played:
    entry, exit_s, _ = _exit_road(route, sc)
    s = min(exit_s + 8.0, route.length - 1.0)
    edge = _sidewalk_offset(route, s, kerb=cyclist)
    start, end = _across(route, s, edge, -edge, 0.0)
    size = {"kind": "cyclist", "length": BICYCLE[0], "width": BICYCLE[1], "height": BICYCLE[2]} if cyclist else None
    speed = 4.0 if cyclist else 1.8
    # it sets off as the ego enters the junction
    trigger = float(np.hypot(*(start - np.array(route.pose(entry)[:2])))) + 2.0
    return Played(actors=[_walk(sc.id("crossing"), start, end, speed, trigger, sc.s, s + END_DISTANCE, size)])


@scenario_type(
    "VehicleTurningRoute",
    "as the ego turns at a junction, a bicycle crosses the road it turns into, 8 m past the junction",
    "the bicycle follows a straight line at 4 m/s (no lane); it does not react",
    "Emergency Brake",
)
def vehicle_turning_route(route: RouteFrame, sc: Placed) -> Played:
    return _turning(route, sc, cyclist=True)


@scenario_type(
    "VehicleTurningRoutePedestrian",
    "as the ego turns at a junction, a pedestrian crosses the road it turns into, 8 m past the junction",
    "",
    "Emergency Brake",
)
def vehicle_turning_route_pedestrian(route: RouteFrame, sc: Placed) -> Played:
    return _turning(route, sc, cyclist=False)


def nearest_lane(route: RouteFrame, xy: np.ndarray, kinds: tuple[str, ...], within: float = 4.0) -> tuple[Lane, float]:
    """The lane of ``kinds`` nearest ``xy`` (and the arc length there), within ``within`` metres."""
    best: tuple[float, Lane | None, float] = (within, None, 0.0)
    for lane in route.road_map.lanes.values():
        if lane.kind not in kinds:
            continue
        lo, hi = lane.centerline.min(0) - within, lane.centerline.max(0) + within
        if (xy < lo).any() or (xy > hi).any():
            continue
        s = on_lane(lane, xy)
        d = float(np.hypot(*(lane.pose_at(s)[0] - xy)))
        if d < best[0]:
            best = (d, lane, s)
    if best[1] is None:
        raise NotPlaced(f"no {'/'.join(kinds)} lane within {within:g} m of ({xy[0]:.1f}, {xy[1]:.1f})")
    return best[1], best[2]


@scenario_type(
    "CrossingBicycleFlow",
    "a flow of bicycles (`flow_speed` m/s, `source_dist_interval` m apart) from `start_actor_flow` along "
    "its lane crosses the ego's path at a junction; the junction and the ego's lane into it are cleared of "
    "background traffic, and at lights the ego's are held green and the others red, until it is through",
    "the bicycles follow the lane under `start_actor_flow` (a bike lane where the town has one) for 150 m; "
    "the ego's light is green from the trigger (scenario_runner holds it red for its first 5 s)",
    "Give Way",
)
def crossing_bicycle_flow(route: RouteFrame, sc: Placed) -> Played:
    start = sc.location("start_actor_flow")
    lane, s_on = nearest_lane(route, start, ("biking", "driving"))
    try:
        j = Junction(route, sc, within=150.0)
    except NotPlaced:
        j = None
    leave = (j.exit_s if j is not None else sc.s + 100.0) + 20.0
    played = Played(
        flows=[
            {
                "id": sc.id("bicycles"),
                "path": route.road_map.follow(lane.id, 150.0 + s_on),
                "s": round(s_on, 2),
                "speed": sc.value("flow_speed", 10.0, 0.5, 20.0),
                "gap": list(sc.interval("source_dist_interval", (20.0, 50.0))),
                "kind": "cyclist",
                "reacts_to_signals": False,
                **stretch(sc.s, leave),
            }
        ]
    )
    if j is not None:  # scenario_runner's HandleJunctionScenario(clear_junction, clear_ego_entry), lights held
        played.clear_background = [j.room(sc)]
        mine, _ = j.signals()
        if mine:
            played.signal_holds = [j.hold_lights(sc, mine)]
    return played
