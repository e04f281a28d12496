"""A CARLA server session: the part of the CARLA backend that talks to a server (client 0.9.16).

It connects with a time-out, loads the scenario's town and weather, runs the server synchronously
at 20 Hz (``fixed_delta_seconds = 0.05``) with the Traffic Manager synchronous and seeded, builds
the road graph from the map's topology for our own route planner, spawns the ego with the rig's
cameras (mounted through :func:`carla_frames.camera_mount`) plus collision and lane-invasion
sensors, and spawns the traffic on autopilot. ``tick(throttle, brake, steer)`` applies a control,
advances one server frame and returns a :class:`FrameData`: the frame's camera images (matched by
frame id), the sensors' events, the ego, the driving lane under it, the traffic light governing it
and the actors within 60 m, all in our frame (``CarlaEpisode`` turns these into our events). ``close``
destroys every actor it spawned and gives the server back in asynchronous mode, so nothing leaks
between episodes. Connection failures surface as ``RuntimeError`` for
:func:`carla_connection.run_with_retries`.
"""

from __future__ import annotations

import math
import queue
from typing import Any

import numpy as np

from envs.backends.carla_episode import FrameData, TrafficLight
from envs.backends.carla_frames import camera_mount, from_carla_pose, from_carla_xy, from_carla_yaw_deg, to_carla_pose
from envs.backends.carla_routes import NoRouteError, RoadGraph
from envs.backends.carla_scenarios import CarlaSetup

FRAME_DT = 0.05  # s: the server's fixed step (20 Hz)
EGO_BLUEPRINT = "vehicle.lincoln.mkz_2020"
TOPOLOGY_STEP_M = 2.0
NEARBY_M = 60.0  # actors within this range are reported (for time-to-collision)


def _carla():
    try:
        import carla
    except ImportError as e:  # pragma: no cover - depends on the optional extra
        raise ImportError("the CARLA backend needs the client: pip install 'loopdrive[carla]' (carla==0.9.16)") from e
    return carla


class CarlaSession:
    def __init__(self, host: str = "localhost", port: int = 2000, tm_port: int = 8000, timeout_s: float = 20.0):
        self.host, self.port, self.tm_port, self.timeout_s = host, port, tm_port, timeout_s
        self.client = self.world = self.tm = None
        self.actors: list[Any] = []
        self.sensors: dict[str, Any] = {}
        self.queues: dict[str, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self.ego = None
        self.walker_controllers: list[Any] = []
        self.ego_size = (4.9, 2.1)
        self.max_steer_rad = math.radians(70.0)
        self.graphs: dict[str, RoadGraph] = {}
        self.stop_lines: dict[int, np.ndarray] = {}  # traffic light id -> its stop-line points (ours)
        self.stop_signs = np.zeros((0, 2))  # the town's stop signs: their trigger volumes' centres (ours)
        self.map = None
        self.connect()

    # --- connection ---------------------------------------------------------------------------------------
    def connect(self) -> None:
        carla = _carla()
        self.client = carla.Client(self.host, self.port)
        self.client.set_timeout(self.timeout_s)
        self.world = self.client.get_world()
        self.tm = self.client.get_trafficmanager(self.tm_port)

    def prepare(self, setup: CarlaSetup) -> None:
        carla = _carla()
        self.map = self.world.get_map()  # (get_map sends the whole map: once per episode, not per frame)
        if self.map.name.split("/")[-1] != setup.town:
            self.world = self.client.load_world(setup.town)
            self.map, self.stop_lines = self.world.get_map(), {}
        self.stop_signs = self._stop_signs()
        self.world.set_weather(getattr(carla.WeatherParameters, setup.weather))
        settings = self.world.get_settings()
        settings.synchronous_mode, settings.fixed_delta_seconds = True, FRAME_DT
        self.world.apply_settings(settings)
        self.tm.set_synchronous_mode(True)
        self.tm.set_random_device_seed(setup.seed)

    def _stop_signs(self) -> np.ndarray:
        """Where each stop sign asks cars to stop: the centre of its trigger volume, in our frame."""
        points = []
        for sign in self.world.get_actors().filter("traffic.stop"):
            p = sign.get_transform().transform(sign.trigger_volume.location)
            points.append((p.x, p.y))
        return from_carla_xy(np.array(points, float).reshape(-1, 2))

    # --- roads ----------------------------------------------------------------------------------------------
    def road_graph(self) -> RoadGraph:
        """Every lane segment of the map's topology, sampled every 2 m, in our frame (cached per town)."""
        town = self.map.name
        if town not in self.graphs:
            segments = []
            for entry, exit_ in self.map.get_topology():
                pts, wp = [entry.transform.location], entry
                end = exit_.transform.location
                while wp is not None and wp.transform.location.distance(end) > TOPOLOGY_STEP_M:
                    nxt = wp.next(TOPOLOGY_STEP_M)
                    wp = nxt[0] if nxt else None
                    if wp is not None:
                        pts.append(wp.transform.location)
                pts.append(end)
                line = from_carla_xy(np.array([[p.x, p.y] for p in pts]))
                if len(line) >= 2:
                    segments.append(line)
            self.graphs[town] = RoadGraph(segments)
        return self.graphs[town]

    def pick_route(self, setup: CarlaSetup, rng: np.random.Generator, tries: int = 200) -> np.ndarray:
        """A route of the set-up's shape between two spawn points, at least ``min_route_m`` long."""
        graph = self.road_graph()
        spawns = self.map.get_spawn_points()
        pts = np.array([from_carla_pose(s.location.x, s.location.y, s.rotation.yaw)[:2] for s in spawns])
        for _ in range(tries):
            a, b = rng.choice(len(pts), 2, replace=False)
            if not setup.min_route_m <= np.hypot(*(pts[b] - pts[a])) <= 2.5 * setup.min_route_m:
                continue
            try:
                route = graph.plan(pts[a], pts[b], spacing=1.0)
            except NoRouteError:
                continue
            if len(route) >= setup.min_route_m and route_shape_matches(route, setup.route):
                return route
        raise NoRouteError(f"no {setup.route!r} route of >= {setup.min_route_m:.0f} m found on {setup.town}")

    # --- actors ---------------------------------------------------------------------------------------------
    def spawn(self, route: np.ndarray, rig, setup: CarlaSetup) -> None:
        carla = _carla()
        lib = self.world.get_blueprint_library()
        heading = float(np.arctan2(*(route[5] - route[0])[::-1]))
        x, y, yaw = to_carla_pose(route[0][0], route[0][1], heading)
        start = carla.Transform(carla.Location(x=x, y=y, z=0.5), carla.Rotation(yaw=yaw))
        self.ego = self.world.spawn_actor(lib.find(EGO_BLUEPRINT), start)
        self.actors.append(self.ego)
        extent = self.ego.bounding_box.extent
        self.ego_size = (2.0 * extent.x, 2.0 * extent.y)
        self.max_steer_rad = math.radians(self.ego.get_physics_control().wheels[0].max_steer_angle)
        for cam in rig:
            m = camera_mount(cam)
            bp = lib.find("sensor.camera.rgb")
            for k, v in (("image_size_x", m["width"]), ("image_size_y", m["height"]), ("fov", m["fov"])):
                bp.set_attribute(k, str(v))
            where = carla.Transform(
                carla.Location(x=m["x"], y=m["y"], z=m["z"]), carla.Rotation(pitch=m["pitch"], yaw=m["yaw"])
            )
            self._attach(cam.name, self.world.spawn_actor(bp, where, attach_to=self.ego))
        for kind in ("collision", "lane_invasion"):
            sensor = self.world.spawn_actor(lib.find(f"sensor.other.{kind}"), carla.Transform(), attach_to=self.ego)
            sensor.listen(lambda e, kind=kind: self.events.put((e.frame, kind, e)))
            self.actors.append(sensor)
        cars = [b for b in lib.filter("vehicle.*") if int(b.get_attribute("number_of_wheels")) == 4]
        spawns = self.map.get_spawn_points()
        rng = np.random.default_rng(setup.seed)
        for i in rng.permutation(len(spawns))[: setup.vehicles]:
            npc = self.world.try_spawn_actor(cars[int(rng.integers(len(cars)))], spawns[int(i)])
            if npc is not None:
                npc.set_autopilot(True, self.tm_port)
                self.tm.update_vehicle_lights(npc, True)  # its brake lights show when it brakes, as in our world
                self.actors.append(npc)
        self._spawn_walkers(setup, rng)
        self.world.tick()

    def _spawn_walkers(self, setup: CarlaSetup, rng: np.random.Generator) -> None:
        """Pedestrians on the navigation mesh, each walked by an AI controller to a random place."""
        if setup.walkers <= 0:
            return
        carla = _carla()
        lib = self.world.get_blueprint_library()
        self.world.set_pedestrians_seed(setup.seed)
        people = list(lib.filter("walker.pedestrian.*"))
        controller_bp = lib.find("controller.ai.walker")
        for _ in range(setup.walkers):
            where = self.world.get_random_location_from_navigation()
            walker = (
                None
                if where is None
                else self.world.try_spawn_actor(people[int(rng.integers(len(people)))], carla.Transform(where))
            )
            if walker is None:
                continue
            controller = self.world.spawn_actor(controller_bp, carla.Transform(), attach_to=walker)
            self.actors += [walker, controller]
            self.walker_controllers.append(controller)
        self.world.tick()  # controllers need a tick before they take orders
        for controller in self.walker_controllers:
            controller.start()
            controller.go_to_location(self.world.get_random_location_from_navigation())
            controller.set_max_speed(float(1.0 + rng.random()))

    def _attach(self, name: str, sensor) -> None:
        q: queue.Queue = queue.Queue()
        sensor.listen(q.put)
        self.sensors[name], self.queues[name] = sensor, q
        self.actors.append(sensor)

    # --- stepping -------------------------------------------------------------------------------------------
    def tick(self, throttle: float, brake: float, steer: float, read: bool = True) -> FrameData:
        """Apply the control and advance one frame. ``read=False`` (a frame nobody reads the state of)
        skips converting the images and querying the ego, lane, light and nearby actors; the sensors'
        events are collected on every frame."""
        carla = _carla()
        self.ego.apply_control(carla.VehicleControl(throttle=float(throttle), brake=float(brake), steer=float(steer)))
        frame = self.world.tick(self.timeout_s)
        out = FrameData(frame)
        for name, q in self.queues.items():
            while True:  # frames arrive in order; drop stale ones, wait for this frame's
                try:
                    image = q.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise TimeoutError(f"camera {name!r}: no image for frame {frame} in {self.timeout_s:g} s") from None
                if image.frame >= frame:
                    break
            if not read:
                continue
            bgra = np.frombuffer(image.raw_data, np.uint8).reshape(image.height, image.width, 4)
            out.images[name] = bgra[:, :, 2::-1].copy()
        while not self.events.empty():
            f, kind, e = self.events.get_nowait()
            if kind == "collision":
                other = e.other_actor
                loc, v = other.get_location(), other.get_velocity()
                out.events.append(
                    {
                        "type": "collision",
                        "frame": f,
                        "other_id": other.id,
                        "other_type": other.type_id,
                        "other_xy": tuple(from_carla_xy(np.array([loc.x, loc.y]))),
                        "other_speed": float(np.hypot(v.x, v.y)),
                    }
                )
            else:
                out.events.append(
                    {
                        "type": "lane_invasion",
                        "frame": f,
                        "markings": sorted({str(m.type) for m in e.crossed_lane_markings}),
                    }
                )
        if not read:
            return out
        tf, v = self.ego.get_transform(), self.ego.get_velocity()
        x, y, yaw = from_carla_pose(tf.location.x, tf.location.y, tf.rotation.yaw)
        out.ego, out.ego_size = (x, y, yaw, float(np.hypot(v.x, v.y))), self.ego_size
        out.speed_limit = float(self.ego.get_speed_limit()) / 3.6
        lane = self.map.get_waypoint(tf.location, project_to_road=False, lane_type=carla.LaneType.Driving)
        out.on_road = lane is not None
        out.lane_yaw = None if lane is None else float(from_carla_yaw_deg(lane.transform.rotation.yaw))
        if self.ego.is_at_traffic_light():
            light = self.ego.get_traffic_light()
            if light.id not in self.stop_lines:  # a light's stop line never moves
                stops = [w.transform.location for w in light.get_stop_waypoints()]
                self.stop_lines[light.id] = from_carla_xy(np.array([[p.x, p.y] for p in stops]).reshape(-1, 2))
            out.light = TrafficLight(
                light.id, light.get_state() == carla.TrafficLightState.Red, self.stop_lines[light.id]
            )
        out.others = self._nearby(x, y)
        if len(self.stop_signs):
            near = np.hypot(*(self.stop_signs - (x, y)).T) < NEARBY_M
            out.stop_signs = self.stop_signs[near]
        return out

    def _nearby(self, x: float, y: float) -> np.ndarray:
        """Vehicles and walkers within NEARBY_M of (x, y): [M, 6] x, y, yaw, speed, length, width (ours)."""
        rows = []
        for actor in self.world.get_actors():
            if actor.id == self.ego.id or not actor.type_id.startswith(("vehicle.", "walker.")):
                continue
            tf = actor.get_transform()
            ax, ay, ayaw = from_carla_pose(tf.location.x, tf.location.y, tf.rotation.yaw)
            if math.hypot(ax - x, ay - y) > NEARBY_M:
                continue
            v, e = actor.get_velocity(), actor.bounding_box.extent
            rows.append((ax, ay, ayaw, math.hypot(v.x, v.y), 2.0 * e.x, 2.0 * e.y))
        return np.array(rows, float).reshape(-1, 6)

    def close(self) -> None:
        """Destroy everything this session spawned and hand the server back asynchronous."""
        carla = _carla()
        for s in self.sensors.values():
            s.stop()
        for controller in self.walker_controllers:
            controller.stop()
        if self.actors and self.client is not None:
            self.client.apply_batch_sync([carla.command.DestroyActor(a) for a in self.actors])
        self.actors, self.sensors, self.queues, self.ego, self.walker_controllers = [], {}, {}, None, []
        self.events = queue.Queue()
        if self.world is not None:
            settings = self.world.get_settings()
            settings.synchronous_mode, settings.fixed_delta_seconds = False, None
            self.world.apply_settings(settings)
            self.tm.set_synchronous_mode(False)


def route_shape_matches(route: np.ndarray, shape: str) -> bool:
    """Net heading change of a route: straight < 15 deg, a curve > 30 deg, turns 60-120 deg left/right."""
    d = np.diff(route[:: max(1, len(route) // 50)], axis=0)
    h = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
    net = float(np.degrees(h[-1] - h[0])) if len(h) > 1 else 0.0
    total = float(np.degrees(np.abs(np.diff(h)).sum())) if len(h) > 1 else 0.0
    return {
        "straight": total < 15.0,
        "curve": total > 30.0,
        "turn_left": 60.0 <= net <= 120.0,
        "turn_right": -120.0 <= net <= -60.0,
        "merge": total < 30.0,
        "any": True,
    }[shape]
