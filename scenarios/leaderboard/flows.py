"""The ego joins, crosses or leaves a stream of traffic given by the route file's
``start_actor_flow`` / ``end_actor_flow`` locations (EnterActorFlow, MergerIntoSlowTraffic,
InterurbanActorFlow, InterurbanAdvancedActorFlow, HighwayExit and their V2s): vehicles enter at the
start every `source_dist_interval` metres at `flow_speed` and leave at the end."""

from __future__ import annotations

import numpy as np

from scenarios import geometry as geo
from scenarios.leaderboard.base import NotPlaced, Placed, Played, RouteFrame, scenario_type, stretch
from scenarios.leaderboard.crossings import nearest_lane
from scenarios.towns import route_between


def actor_flow(route: RouteFrame, sc: Placed, default_speed: float = 10.0) -> Played:
    start, end = sc.location("start_actor_flow"), sc.location("end_actor_flow")
    src, s0 = nearest_lane(route, start, ("driving",))
    dst, s1 = nearest_lane(route, end, ("driving",))
    path = [src.id] if src.id == dst.id else route_between(route.road_map, src.id, dst.id)
    if path is None:
        raise NotPlaced(f"no lane path from the flow's start ({src.id}) to its end ({dst.id})")
    starts = np.cumsum([0.0] + [route.road_map.lanes[k].length for k in path[:-1]])
    end_s = float(starts[-1] + s1)
    if end_s <= s0 + 10.0:
        raise NotPlaced("the flow's end is not down the lanes from its start")
    near_end, _, _ = geo.project(route.line, route.s_line, end)  # where the ego leaves the flow's reach
    leave = max(float(near_end), sc.s + 60.0) + 40.0
    # scenario_runner's HandleJunctionScenario: background vehicles leave the ego's lane up to where it
    # meets the flow (its next junction) and the lanes the flow comes in by (remove_entries)
    junction = route.junction_after(sc.s, 200.0)
    ahead_to = junction[1] if junction is not None else sc.s + 60.0
    into = next((k for k, lane in enumerate(path) if route.road_map.lanes[lane].junction is not None), len(path))
    room = {"ahead_to": round(ahead_to, 2), "lanes": sorted(set(path[:into]))} | stretch(sc.s, leave)
    return Played(
        clear_background=[room],
        flows=[
            {
                "id": sc.id("flow"),
                "path": path,
                "s": round(s0, 2),
                "end_s": round(end_s, 2),
                "speed": sc.value("flow_speed", default_speed, 1.0, 40.0),
                "gap": list(sc.interval("source_dist_interval", (20.0, 50.0))),
                **stretch(sc.s, leave),
                "max_actors": 16,
            }
        ],
    )


_FLOWS = {
    "EnterActorFlow": "the ego merges from a ramp into a flow of traffic on the highway",
    "EnterActorFlowV2": "EnterActorFlow where the ramp joins the highway without a merging lane",
    "MergerIntoSlowTraffic": "the ego merges into a slow, dense flow of traffic",
    "MergerIntoSlowTrafficV2": "MergerIntoSlowTraffic where the ego's ramp ends in the flow's lane",
    "InterurbanActorFlow": "the ego turns left across a fast flow of oncoming traffic on an interurban road",
    "InterurbanAdvancedActorFlow": "the ego crosses one flow and merges into another on an interurban road",
    "HighwayExit": "the ego crosses a flow of traffic in the exit lane to leave the highway",
}
for _name, _what in _FLOWS.items():
    scenario_type(
        _name,
        f"{_what} (`flow_speed` m/s, `source_dist_interval` m apart, from `start_actor_flow` to `end_actor_flow`)",
        "one flow (InterurbanAdvancedActorFlow plays the route file's one of its two); background traffic "
        "leaves the ego's lane up to the next junction and the flow's lanes into it (the junction itself "
        "is not cleared)",
        "Merging",
    )(actor_flow)
