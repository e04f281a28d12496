"""Our scenario families on CARLA's towns: where to drive, in what weather, with how much traffic.

A family maps to a town and a route shape on that town's topology (a straight run, a curve, a
junction turn, a highway on-ramp); the scenario's own parameters give traffic density, speed limit
and seed. The session picks the spawn point and goal by the route shape and plans the route with
:class:`envs.backends.carla_routes.RoadGraph`; the Traffic Manager drives the traffic, seeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopdrive.seeding import derive_seed
from scenarios import Scenario


@dataclass(frozen=True)
class CarlaSetup:
    town: str
    route: str  # "straight" | "curve" | "turn_left" | "turn_right" | "merge" | "any"
    min_route_m: float
    vehicles: int
    walkers: int
    weather: str  # a carla.WeatherParameters preset name
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


# family -> (town, route shape, traffic scale, walkers); vehicles = scale x density (ours: vehicles per
# 100 m of lane) x route length / 100
FAMILY_MAP: dict[str, tuple[str, str, float, int]] = {
    "straight": ("Town04", "straight", 3.0, 0),
    "curve": ("Town07", "curve", 1.0, 0),
    "s_bend": ("Town07", "curve", 1.0, 0),
    "signalized_intersection": ("Town10HD", "straight", 3.0, 10),
    "unprotected_left": ("Town03", "turn_left", 3.0, 5),
    "t_junction": ("Town02", "turn_right", 2.0, 5),
    "highway_merge": ("Town04", "merge", 4.0, 0),
    "overtake": ("Town04", "straight", 2.0, 0),
    "lead_brake": ("Town04", "straight", 3.0, 0),
    "cut_in": ("Town04", "straight", 4.0, 0),
    "pedestrian_crossing": ("Town10HD", "straight", 1.0, 30),
    "parked_blocking": ("Town03", "straight", 2.0, 5),
    "traffic_jam": ("Town05", "straight", 8.0, 0),
}
WEATHERS = ("ClearNoon", "CloudyNoon", "WetNoon", "ClearSunset", "HardRainNoon")


def carla_setup(scenario: Scenario, seed: int = 0) -> CarlaSetup:
    """The CARLA set-up of one of our scenarios (unknown families are an error naming them)."""
    if scenario.family not in FAMILY_MAP:
        raise ValueError(
            f"scenario {scenario.id!r}: family {scenario.family!r} has no CARLA mapping; known: {sorted(FAMILY_MAP)}"
        )
    town, route, per_100m, walkers = FAMILY_MAP[scenario.family]
    p = scenario.params
    length = float(p.get("length", 200.0))
    density = float(p.get("density", 1.0))
    weather = str(p.get("weather", WEATHERS[seed % len(WEATHERS)]))
    route_m = max(100.0, min(length, 400.0))
    return CarlaSetup(
        town=town,
        route=route,
        min_route_m=route_m,
        vehicles=int(round(per_100m * density * route_m / 100.0)),
        walkers=walkers,
        weather=weather,
        seed=derive_seed(int(scenario.seed), seed),
    )
