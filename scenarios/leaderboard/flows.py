"""The ego joins, crosses or leaves a stream of traffic given by the route file's
``start_actor_flow`` / ``end_actor_flow`` locations (EnterActorFlow, MergerIntoSlowTraffic,
InterurbanActorFlow, InterurbanAdvancedActorFlow, HighwayExit and their V2s): vehicles enter at the
start every `source_dist_interval` metres at `flow_speed` and leave at the end."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from scenarios import geometry as geo
from scenarios.leaderboard.base import NotPlaced, Placed, Played, RouteFrame, on_lane, scenario_type, stretch
from scenarios.leaderboard.crossings import nearest_lane
from scenarios.maps import Lane
from scenarios.towns import route_between


def actor_flow(route: RouteFrame, sc: Placed, clears: Clears, both_ways: bool = False) -> Played:
    start, end = sc.location("start_actor_flow"), sc.location("end_actor_flow")
    src, s0 = nearest_lane(route, start, ("driving",))
    dst, s1 = nearest_lane(route, end, ("driving",))
    path, end_s = _flow_path(route, src.id, s0, dst.id, s1)
    near_end, _, _ = geo.project(route.line, route.s_line, end)  # where the ego leaves the flow's reach
    leave = max(float(near_end), sc.s + 60.0) + 40.0
    speed = sc.value("flow_speed", 10.0, 1.0, 40.0)
    gap = list(sc.interval("source_dist_interval", (20.0, 50.0)))
    flows = [{"id": sc.id("flow"), "path": path, "s": round(s0, 2), "end_s": round(end_s, 2)}]
    if both_ways:
        # InterurbanAdvancedActorFlow's second flow: from the lane left of the first one's end to the lane
        # left of its start (scenario_runner's get_left_lane: the next lane in, or the oncoming one)
        back_src, back_dst = _left_of(route, dst), _left_of(route, src)
        back_s0, back_s1 = on_lane(back_src, end), on_lane(back_dst, start)
        back, back_end = _flow_path(route, back_src.id, back_s0, back_dst.id, back_s1)
        flows.append({"id": sc.id("flow_back"), "path": back, "s": round(back_s0, 2), "end_s": round(back_end, 2)})
    # scenario_runner's HandleJunctionScenario: background vehicles leave the ego's lane up to where it
    # meets the flow (its next junction), the lanes the flows come in by (remove_entries) and, by type,
    # the junction itself (clear_junction) and every other way into and out of it (remove_entries/exits)
    junction = route.junction_after(sc.s, 200.0)
    ahead_to = junction[1] if junction is not None else sc.s + 60.0
    cleared: set[str] = set()
    for f in flows:
        into = next((k for k, x in enumerate(f["path"]) if route.road_map.lanes[x].junction is not None), None)
        cleared |= set(f["path"][:into])
    if junction is not None:
        cleared |= clears.lanes(route, junction[2])
    room = {"ahead_to": round(ahead_to, 2), "lanes": sorted(cleared)} | stretch(sc.s, leave)
    common = {"speed": speed, "gap": gap, **stretch(sc.s, leave), "max_actors": 16}
    return Played(clear_background=[room], flows=[f | common for f in flows])


def _flow_path(route: RouteFrame, src: str, s0: float, dst: str, s1: float) -> tuple[list[str], float]:
    """The lanes a flow drives from arc length ``s0`` on ``src`` to ``s1`` on ``dst``, and its end's arc
    length on them."""
    path = [src] if src == dst else route_between(route.road_map, src, dst)
    if path is None:
        raise NotPlaced(f"no lane path from the flow's start ({src}) to its end ({dst})")
    starts = np.cumsum([0.0] + [route.road_map.lanes[k].length for k in path[:-1]])
    end_s = float(starts[-1] + s1)
    if end_s <= s0 + 10.0:
        raise NotPlaced(f"the flow's end is not down the lanes from its start ({src} -> {dst})")
    return path, end_s


def _left_of(route: RouteFrame, lane: Lane) -> Lane:
    """The driving lane left of ``lane``: its same-direction neighbour, or else the oncoming one."""
    other = lane.left or lane.opposite
    if other is None or other not in route.road_map.lanes or route.road_map.lanes[other].kind != "driving":
        raise NotPlaced(f"no driving lane left of {lane.id} for the second flow")
    return route.road_map.lanes[other]


@dataclass(frozen=True)
class Clears:
    """What scenario_runner's HandleJunctionScenario clears of background traffic for a flow type, besides
    the ego's lane and the flow's way in."""

    junction: bool = False  # clear_junction: the junction the route crosses the flow at
    every_way: bool = False  # remove_entries / remove_exits: every other lane into and out of it

    def lanes(self, route: RouteFrame, slot: int) -> set[str]:
        """Map lanes cleared at the junction whose first route lane is ``route.lanes[slot]``."""
        lanes = route.road_map.lanes
        jid = lanes[route.lanes[slot]].junction
        inside = [lane for lane in lanes.values() if lane.junction == jid] if self.junction or self.every_way else []
        out = {lane.id for lane in inside} if self.junction else set()
        if self.every_way:
            mine = {route.lanes[slot - 1] if slot > 0 else None}
            mine |= {route.lanes[e] for e in range(slot, len(route.lanes)) if lanes[route.lanes[e]].junction is None}
            ways = {k for lane in inside for k in (*lane.predecessors, *lane.successors)}
            out |= {k for k in ways if k in lanes and lanes[k].junction is None} - mine
        return out


# type: (what the ego does, what scenario_runner clears, what it plays that we do not)
_FLOWS = {
    "EnterActorFlow": (
        "the ego merges from a ramp into a flow of traffic on the highway",
        Clears(junction=True),
        "one flow, in the lane of `start_actor_flow` (scenario_runner: one in each lane its way)",
    ),
    "EnterActorFlowV2": ("EnterActorFlow where the ramp joins the highway without a merging lane", Clears(), ""),
    "MergerIntoSlowTraffic": ("the ego merges into a slow, dense flow of traffic", Clears(junction=True), ""),
    "MergerIntoSlowTrafficV2": ("MergerIntoSlowTraffic where the ego's ramp ends in the flow's lane", Clears(), ""),
    "InterurbanActorFlow": (
        "the ego turns left across a fast flow of oncoming traffic on an interurban road",
        Clears(),
        "",
    ),
    "InterurbanAdvancedActorFlow": (
        "the ego crosses one flow and merges into another going the other way on an interurban road",
        Clears(junction=True, every_way=True),
        "",
    ),
    "HighwayExit": ("the ego crosses a flow of traffic in the exit lane to leave the highway", Clears(), ""),
}
for _name, (_what, _clears, _missing) in _FLOWS.items():
    scenario_type(
        _name,
        f"{_what} (`flow_speed` m/s, `source_dist_interval` m apart, from `start_actor_flow` to `end_actor_flow`)",
        (f"{_missing}; " if _missing else "")
        + "background traffic leaves the ego's lane up to the next junction and the flow's lanes into it"
        + (", the junction" if _clears.junction else "")
        + (" and every other lane into and out of it" if _clears.every_way else ""),
        "Merging",
    )(partial(actor_flow, clears=_clears, both_ways=_name == "InterurbanAdvancedActorFlow"))
