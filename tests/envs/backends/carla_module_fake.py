"""A stand-in for the ``carla`` client module, so that :class:`CarlaSession` itself runs in tests.

It implements only the calls the session makes, on one straight 600 m road along CARLA's x axis
(spawn points every 50 m). This checks the session's own code (frames, queues, clean-up), not
CARLA's API; tests/envs/backends/test_carla_server.py does that against a real server.
"""

from __future__ import annotations

import fnmatch
import math
import types
from dataclasses import dataclass, field

import numpy as np

ROAD_M = 600.0


@dataclass
class Location:
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0

    def distance(self, other: Location) -> float:
        return math.dist((self.x, self.y, self.z), (other.x, other.y, other.z))


@dataclass
class Rotation:
    pitch: float = 0.0
    yaw: float = 0.0
    roll: float = 0.0


@dataclass
class Transform:
    location: Location = field(default_factory=Location)
    rotation: Rotation = field(default_factory=Rotation)

    def transform(self, point: Location) -> Location:
        """Local -> world (this stand-in's actors are never rotated)."""
        return Location(self.location.x + point.x, self.location.y + point.y, self.location.z + point.z)


class ActorList(list):
    def filter(self, pattern: str) -> ActorList:
        return ActorList(a for a in self if fnmatch.fnmatch(a.type_id, pattern))


@dataclass
class VehicleControl:
    throttle: float = 0.0
    brake: float = 0.0
    steer: float = 0.0


class Waypoint:
    def __init__(self, x: float) -> None:
        self.transform = Transform(Location(x, 0.0), Rotation(yaw=0.0))

    def next(self, d: float) -> list[Waypoint]:
        x = self.transform.location.x + d
        return [Waypoint(x)] if x <= ROAD_M else []


class Map:
    name = "Carla/Maps/Town04"

    def get_topology(self):
        return [(Waypoint(a), Waypoint(a + 50.0)) for a in np.arange(0.0, ROAD_M, 50.0)]

    def get_spawn_points(self):
        return [Transform(Location(float(x), 0.0, 0.5)) for x in np.arange(0.0, ROAD_M, 50.0)]

    def get_waypoint(self, location, project_to_road=True, lane_type=None):
        return Waypoint(location.x) if abs(location.y) < 2.0 and 0 <= location.x <= ROAD_M else None

    def to_opendrive(self) -> str:
        """The straight road as OpenDRIVE: a lane each way, 3.5 m wide, along x."""
        lane = '<lane id="{}" type="driving" level="false"><width sOffset="0" a="3.5" b="0" c="0" d="0"/></lane>'
        return (
            '<?xml version="1.0"?><OpenDRIVE><header revMajor="1" revMinor="4" name="fake"/>'
            f'<road name="r" length="{ROAD_M}" id="1" junction="-1"><planView>'
            f'<geometry s="0" x="0" y="0" hdg="0" length="{ROAD_M}"><line/></geometry></planView>'
            '<lanes><laneSection s="0"><left>' + lane.format(1) + '</left><center><lane id="0" type="none"/>'
            "</center><right>" + lane.format(-1) + "</right></laneSection></lanes></road></OpenDRIVE>"
        )


class Blueprint:
    def __init__(self, bp_id: str) -> None:
        self.id, self.attributes = bp_id, {"number_of_wheels": "4"}

    def set_attribute(self, key: str, value: str) -> None:
        self.attributes[key] = value

    def get_attribute(self, key: str) -> str:
        return self.attributes[key]


class Library:
    def find(self, bp_id: str) -> Blueprint:
        return Blueprint(bp_id)

    def filter(self, pattern: str) -> list[Blueprint]:
        return [Blueprint(pattern.replace("*", "model"))]


class Actor:
    def __init__(self, world: World, bp: Blueprint, transform: Transform, parent: Actor | None) -> None:
        world.next_id += 1
        self.id, self.type_id, self.world, self.bp, self.parent = world.next_id, bp.id, world, bp, parent
        self.transform, self.speed, self.control, self.callback = transform, 0.0, VehicleControl(), None
        self.bounding_box = types.SimpleNamespace(extent=Location(2.45, 1.05, 0.8))

    # vehicles
    def get_physics_control(self):
        return types.SimpleNamespace(wheels=[types.SimpleNamespace(max_steer_angle=70.0)])

    def apply_control(self, control: VehicleControl) -> None:
        self.control = control

    def set_autopilot(self, on: bool, port: int) -> None:
        self.autopilot = on

    def get_transform(self) -> Transform:
        return self.transform

    def get_location(self) -> Location:
        return self.transform.location

    def get_velocity(self) -> Location:
        return Location(self.speed, 0.0)

    def get_speed_limit(self) -> float:
        return 50.0

    def is_at_traffic_light(self) -> bool:
        return False

    # sensors
    def listen(self, callback) -> None:
        self.callback = callback

    def stop(self) -> None:
        self.callback = None


class World:
    def __init__(self) -> None:
        self.map, self.actors, self.next_id, self.frame = Map(), {}, 0, 0
        self.settings = types.SimpleNamespace(synchronous_mode=False, fixed_delta_seconds=None)
        sign = self.spawn_actor(Blueprint("traffic.stop"), Transform(Location(300.0, 3.0)))  # part of the map
        sign.trigger_volume = types.SimpleNamespace(location=Location(0.0, -3.0))  # its lane's stop area

    def get_map(self) -> Map:
        return self.map

    def get_settings(self):
        return types.SimpleNamespace(**vars(self.settings))

    def apply_settings(self, settings) -> None:
        self.settings = settings

    def set_weather(self, weather) -> None:
        pass

    def get_blueprint_library(self) -> Library:
        return Library()

    def spawn_actor(self, bp, transform, attach_to=None) -> Actor:
        actor = Actor(self, bp, transform, attach_to)
        self.actors[actor.id] = actor
        return actor

    def try_spawn_actor(self, bp, transform):
        return self.spawn_actor(bp, transform)

    def get_actors(self) -> ActorList:
        return ActorList(self.actors.values())

    def tick(self, timeout: float = 10.0) -> int:
        """One 0.05 s frame: vehicles follow their pedals along x; cameras deliver this frame's image."""
        assert self.settings.synchronous_mode, "tick() in asynchronous mode"
        self.frame += 1
        for actor in list(self.actors.values()):
            if actor.type_id.startswith("vehicle.") and actor.parent is None:
                c = actor.control
                actor.speed = max(actor.speed + (3.5 * c.throttle - 8.0 * c.brake) * 0.05, 0.0)
                actor.transform.location.x += actor.speed * 0.05
        for actor in list(self.actors.values()):
            if actor.callback is not None and actor.type_id == "sensor.camera.rgb":
                w, h = int(actor.bp.attributes["image_size_x"]), int(actor.bp.attributes["image_size_y"])
                raw = np.full((h, w, 4), self.frame % 256, np.uint8).tobytes()
                actor.callback(types.SimpleNamespace(frame=self.frame, raw_data=raw, height=h, width=w))
        return self.frame


class Client:
    world = World()  # one server for every client, as in CARLA

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def set_timeout(self, seconds: float) -> None:
        pass

    def get_world(self) -> World:
        return self.world

    def get_trafficmanager(self, port: int):
        def update_vehicle_lights(actor: Actor, on: bool) -> None:
            actor.lights_by_traffic_manager = on

        return types.SimpleNamespace(
            set_synchronous_mode=lambda on: None,
            set_random_device_seed=lambda s: None,
            update_vehicle_lights=update_vehicle_lights,
        )

    def load_world(self, town: str) -> World:
        return self.world

    def apply_batch_sync(self, commands) -> list:
        for cmd in commands:
            self.world.actors.pop(cmd.actor.id, None)
        return []


def module() -> types.ModuleType:
    """A fresh fake ``carla`` module (and a fresh server)."""
    carla = types.ModuleType("carla")
    Client.world = World()
    carla.Client, carla.Transform, carla.Location, carla.Rotation = Client, Transform, Location, Rotation
    carla.VehicleControl = VehicleControl
    carla.WeatherParameters = types.SimpleNamespace(ClearNoon=0, CloudyNoon=1, WetNoon=2, ClearSunset=3, HardRainNoon=4)
    carla.LaneType = types.SimpleNamespace(Driving=1)
    carla.TrafficLightState = types.SimpleNamespace(Red=0, Yellow=1, Green=2)
    carla.command = types.SimpleNamespace(DestroyActor=lambda actor: types.SimpleNamespace(actor=actor))
    return carla
