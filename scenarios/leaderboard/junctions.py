"""At the next junction on the route: turning across or into a flow of traffic that has priority
(the Signalized / NonSignalized junction turns), a vehicle that runs its red light or takes the ego's
priority from the left or right, a car blocking the road the ego turns into, and PriorityAtJunction
(the ego's light held green). Lights a scenario sets are held from its trigger until the ego is
through the junction (scenario_runner's TrafficLightFreezer beside WaitEndIntersection), then run
their own programs again."""

from __future__ import annotations

import math
from functools import partial

from scenarios.leaderboard.base import CAR, NotPlaced, Placed, Played, RouteFrame, scenario_type, static_actor, stretch
from scenarios.maps import Lane

HELD_S = 300.0  # a light held for a scenario: the hold ends first, once the ego is through the junction
THROUGH_M = 10.0  # metres past the junction's exit at which the ego is through it
# seconds of a turn's flow upstream and downstream of the junction (scenario_runner: the source 4 x flow
# speed away for a left turn's oncoming flow, 5 x for a right turn's; the sink 2.5 x and 3 x)
FLOW_REACH_S = {"left": (4.0, 2.5), "right": (5.0, 3.0)}


class Junction:
    """The junction the route enters next after a trigger: the route's lanes into, through and out of
    it, and the other movements through it."""

    def __init__(self, route: RouteFrame, sc: Placed, within: float = 120.0) -> None:
        found = route.junction_after(sc.s, within)
        if found is None:
            raise NotPlaced(f"no junction within {within:g} m after the trigger")
        self.route, self.entry_s, self.exit_s, k = route, found[0], found[1], found[2]
        lanes = route.road_map.lanes
        self.ego_lane = lanes[route.lanes[k]]
        self.id = self.ego_lane.junction
        self.entry = lanes[route.lanes[k - 1]] if k > 0 else None
        self.heading = _heading(self.ego_lane, 0)
        self.others = [ln for ln in lanes.values() if ln.junction == self.id and ln.id != self.ego_lane.id]

    def straight_from(self, bearing: float) -> list[Lane]:
        """Junction lanes that go straight across and start heading ``bearing`` radians from the ego's
        entry heading (0 = the same way, pi = towards it, +pi/2 = from its right), read through the
        map's handedness (a mirrored town's right is the geometric left)."""
        bearing *= -self.route.right
        out = []
        for lane in self.others:
            turn = _wrap(_heading(lane, -1) - _heading(lane, 0))
            rel = _wrap(_heading(lane, 0) - self.heading)
            if abs(turn) < math.radians(30) and math.cos(rel - bearing) > math.cos(math.radians(35)):
                out.append(lane)
        return sorted(out, key=lambda ln: ln.id)

    def path_through(self, lane: Lane, upstream: float, downstream: float) -> tuple[list[str], float]:
        """Lanes from ``upstream`` metres before ``lane`` to ``downstream`` metres after it, and the arc
        length of the upstream start on them."""
        lanes = self.route.road_map.lanes
        back, total = [lane.id], 0.0
        while total < upstream:
            pred = [p for p in lanes[back[0]].predecessors if p in lanes]
            if not pred:
                break
            back.insert(0, sorted(pred)[0])
            total += lanes[back[0]].length
        path = back + self.route.road_map.follow(lane.id, lane.length + downstream)[1:]
        return path, max(total - upstream, 0.0)

    def signals(self) -> tuple[set[str], set[str]]:
        """(the signals governing the ego's entry, every signal of the junction)."""
        road = self.route.road_map
        into = {ln.id for ln in [self.ego_lane, *self.others]}
        feeding = into | {p for ln in [self.ego_lane, *self.others] for p in ln.predecessors}
        ego_in = {self.ego_lane.id} | ({self.entry.id} if self.entry is not None else set())
        mine = {sid for sid, sig in road.signals.items() if ego_in & set(sig.lanes)}
        every = {sid for sid, sig in road.signals.items() if feeding & set(sig.lanes)}
        return mine, every

    def hold_lights(self, sc: Placed, green: set[str]) -> dict:
        """A signal hold (schema ``SignalHold``): from the trigger until the ego is through the junction,
        the ``green`` lights green and the junction's others red."""
        _, every = self.signals()
        return {
            "at": round(sc.s, 2),
            "until": round(self.exit_s + THROUGH_M, 2),
            "signals": {
                sid: [{"state": "green" if sid in green else "red", "duration": HELD_S}] for sid in sorted(every)
            },
        }

    def room(self, sc: Placed, ego_entry: bool = True, entries: list[str] = ()) -> dict:
        """A ``ClearBackground`` zone from the trigger until the ego is through, as scenario_runner's
        HandleJunctionScenario makes room for a junction scenario: background vehicles leave the
        junction (clear_junction), the ego's lane up to the junction's exit (clear_ego_entry) and the
        ``entries`` lanes a scenario's flow comes in by (remove_entries)."""
        lanes = sorted({self.ego_lane.id, *(ln.id for ln in self.others), *entries})
        return {"ahead_to": round(self.exit_s if ego_entry else sc.s + 0.01, 2), "lanes": lanes} | stretch(
            sc.s, self.exit_s + THROUGH_M
        )

    def my_lights(self) -> set[str]:
        """The lights governing the ego's entry (refused if it has none)."""
        mine, _ = self.signals()
        if not mine:
            raise NotPlaced(f"junction {self.id} has no light for the ego's lane")
        return mine


def _heading(lane: Lane, at: int) -> float:
    return float(lane.heading[at])


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


def _turn_flow(route: RouteFrame, sc: Placed, bearing: float, signalized: bool) -> Played:
    j = Junction(route, sc)
    lanes = j.straight_from(bearing)
    if not lanes:
        raise NotPlaced(f"no straight movement through junction {j.id} from that side")
    speed = sc.value("flow_speed", 10.0, 1.0, 40.0)
    gap = sc.interval("source_dist_interval", (20.0, 50.0))
    upstream, downstream = FLOW_REACH_S["left" if bearing > 0 else "right"]
    return junction_flow(j, sc, lanes[0], speed, gap, (upstream * speed, downstream * speed), signalized)


def junction_flow(
    j: Junction,
    sc: Placed,
    lane: Lane,
    speed: float,
    gap: tuple[float, float],
    reach: tuple[float, float],
    signalized: bool,
) -> Played:
    """A flow through junction lane ``lane`` from ``reach[0]`` m before it to its sink ``reach[1]`` m
    after it, where its vehicles leave (scenario_runner's ActorFlow source and sink: not on to the end of
    the lane beyond, where a light may hold them), while the ego is between the trigger and 20 m past the
    junction; with ``signalized``, the junction's lights held: the ego's and the flow's green, the rest red."""
    path, s0 = j.path_through(lane, reach[0], reach[1] + 20.0)
    k = path.index(lane.id)
    entries = path[:k]  # the flow's lanes into the junction
    sink = sum(j.route.road_map.lanes[x].length for x in path[: k + 1]) + reach[1]
    played = Played(
        flows=[
            {
                "id": sc.id("flow"),
                "path": path,
                "s": round(s0, 2),
                "end_s": round(sink, 2),
                "speed": speed,
                "gap": list(gap),
                **stretch(sc.s, j.exit_s + 20.0),
            }
        ],
        clear_background=[j.room(sc, entries=entries)],
    )
    if signalized:
        theirs = {sid for sid, sig in j.route.road_map.signals.items() if set(path) & set(sig.lanes)}
        played.signal_holds = [j.hold_lights(sc, j.my_lights() | theirs)]
    return played


# (type, what is played, what differs, where the flow comes from, whether the junction has lights)
_TURNS = (
    (
        "SignalizedJunctionLeftTurn",
        "the ego turns left on green across a flow of oncoming traffic (`flow_speed` m/s, "
        "`source_dist_interval` m apart) that also has green",
        "the junction's lights are held (ego and oncoming green, the rest red) from the trigger until the ego "
        "is through",
        math.pi,
        True,
    ),
    (
        "SignalizedJunctionRightTurn",
        "the ego turns right on green into a road where a flow of traffic from its left passes (also on green)",
        "the junction's lights are held (ego and flow green) from the trigger until the ego is through",
        -math.pi / 2,
        True,
    ),
    (
        "NonSignalizedJunctionLeftTurn",
        "the ego turns left at a junction without lights across a flow of oncoming traffic that does not give way",
        "",
        math.pi,
        False,
    ),
    (
        "NonSignalizedJunctionRightTurn",
        "the ego turns right at a junction without lights into a flow of traffic from its left that does not give way",
        "",
        -math.pi / 2,
        False,
    ),
)
for _name, _what, _differs, _bearing, _lights in _TURNS:
    scenario_type(_name, _what, _differs, "Give Way")(partial(_turn_flow, bearing=_bearing, signalized=_lights))


def _crossing_vehicle(route: RouteFrame, sc: Placed, signalized: bool) -> Played:
    j = Junction(route, sc)
    side = sc.direction()
    lanes = j.straight_from(math.pi / 2 if side == "right" else -math.pi / 2)
    if not lanes:
        raise NotPlaced(f"no straight movement through junction {j.id} from the {side}")
    entry_lane = j.entry or j.ego_lane
    ego_speed = min(entry_lane.speed_limit, 10.0)
    speed = min(lanes[0].speed_limit, 12.0)
    ahead = 35.0  # the ego's distance to the junction when the adversary sets off
    path, s0 = j.path_through(lanes[0], ahead / ego_speed * speed, 100.0)
    played = Played(
        actors=[
            {
                "id": sc.id("adversary"),
                "lane": path[0],
                "s": round(s0, 2),
                "speed": round(speed, 2),
                "path": path,
                "behaviour": {"type": "idm", "desired_speed": round(speed, 2), "reacts_to_signals": False},
                **stretch(max(j.entry_s - ahead, sc.s), j.exit_s + 60.0),
            }
        ]
    )
    if signalized:
        played.signal_holds = [j.hold_lights(sc, j.my_lights())]
    return played


@scenario_type(
    "OppositeVehicleRunningRedLight",
    "as the ego crosses on green, a vehicle from the `direction` runs its red light across the ego's path, "
    "timed to arrive with it",
    "timed for an ego at its lane's limit (at most 10 m/s)",
    "Emergency Brake",
)
def opposite_vehicle_running_red_light(route: RouteFrame, sc: Placed) -> Played:
    return _crossing_vehicle(route, sc, signalized=True)


@scenario_type(
    "OppositeVehicleTakingPriority",
    "at a junction without lights, a vehicle from the `direction` crosses without giving way, timed to arrive "
    "with the ego",
    "timed for an ego at its lane's limit (at most 10 m/s)",
    "Emergency Brake",
)
def opposite_vehicle_taking_priority(route: RouteFrame, sc: Placed) -> Played:
    return _crossing_vehicle(route, sc, signalized=False)


@scenario_type(
    "BlockedIntersection",
    "a car stands 5 m into the road the ego takes out of the junction; it leaves 10 s after the ego comes within 13 m",
    "",
    "Emergency Brake",
)
def blocked_intersection(route: RouteFrame, sc: Placed) -> Played:
    j = Junction(route, sc)
    s = min(j.exit_s + 5.0, route.length - 1.0)
    blocker = static_actor(sc.id("blocker"), route.pose(s), CAR, "vehicle")
    blocker["behaviour"] = {"type": "static", "trigger": {"ego_distance": 13.0}, "remove_after": 10.0}
    return Played(actors=[blocker | stretch(sc.s, s + 60.0)], clear_background=[j.room(sc, ego_entry=False)])


@scenario_type(
    "PriorityAtJunction",
    "the ego's light at the next junction is green (the other approaches red) as it drives through",
    "",
    "Traffic Sign",
)
def priority_at_junction(route: RouteFrame, sc: Placed) -> Played:
    j = Junction(route, sc)
    return Played(signal_holds=[j.hold_lights(sc, j.my_lights())])
