"""What a person sees: curves, intersections, red lights and pedestrians in the front camera; BEV; video."""

import cv2
import numpy as np
import pytest

from envs import World
from envs.sensors import BEVRenderer, CameraRenderer, VideoRecorder, make_rig
from envs.sensors.camera import BRAKE_OFF, BRAKE_ON, LIGHT_ON
from envs.world import RED, Mode
from scenarios import FAMILIES, make_scenario

FRONT = make_rig("front_only")


def _front(world) -> np.ndarray:
    return CameraRenderer(FRONT).render(world)[0]


def _with(scn, **update):
    return scn.model_validate({**scn.model_dump(mode="json"), **update})


def _advance(world, metres):
    """Teleport the ego along its route (keeps the test about rendering, not driving)."""
    from scenarios import geometry as geo

    s = world.state.route_s + metres
    xy, h = geo.interpolate(world.compiled.route_xy, world.compiled.route_s, s)
    world.state.x[0], world.state.y[0], world.state.yaw[0] = xy[0], xy[1], float(h)
    world._update_route(full=True)


def _curve(direction):
    p = {"radius": 40.0, "angle": 120.0, "direction": direction, "speed_limit": 13.9, "density": 0.0}
    w = World(make_scenario("curve", p, 0, f"c_{direction}"))
    _advance(w, 45.0)  # 5 m before the bend
    return w


def test_a_curve_bends_the_road_in_the_picture():
    def road_centre_near_horizon(img):
        asphalt = np.abs(img.astype(int) - [70, 70, 74]).sum(2) < 25
        rows = asphalt[64:72]  # just below the horizon: the far road
        cols = np.nonzero(rows)[1]
        return cols.mean()

    left, right = _front(_curve("left")), _front(_curve("right"))
    assert road_centre_near_horizon(left) < 128 - 15 < 128 + 15 < road_centre_near_horizon(right)


def _junction(light):
    fam = FAMILIES["signalized_intersection"]
    params = fam.sample_params(np.random.default_rng(0)) | {"maneuver": "straight", "lanes": 1}
    scn = make_scenario("signalized_intersection", params, 0, "j")
    prog = {"phases": [{"state": light, "duration": 100.0}], "offset": 0.0}
    return _with(scn, actors=[], signals={k: prog for k in scn.signals})


def _lamp_pixels(img, state):
    return int((np.abs(img.astype(int) - LIGHT_ON[state]).sum(2) < 40).sum())


def test_red_and_green_lights_are_visible_ahead():
    red = World(_junction("red"))
    green = World(_junction("green"))
    for w in (red, green):
        _advance(w, w.compiled.route_stop_s[0] - w.state.route_s - 15.0)  # 15 m before the stop line
    img_red, img_green = _front(red), _front(green)
    assert _lamp_pixels(img_red, RED) >= 2 and _lamp_pixels(img_green, RED) == 0
    assert _lamp_pixels(img_green, 0) >= 2


def test_a_car_ahead_shows_its_brake_lights_while_it_brakes(smoke):
    def lamp_pixels(img, colour):
        return int((np.abs(img.astype(int) - colour).sum(2) < 40).sum())

    w = World(smoke.get("lead_brake-000"))
    tele = CameraRenderer(make_rig("front_tele"))
    lead = w.compiled.actors.index("lead")
    cruising = tele.render(w)[0]
    while w.state.mode[lead] != Mode.BRAKING:
        w.step(0.0, 0.0)
    w.step(0.0, 0.0)
    braking = tele.render(w)[0]
    assert lamp_pixels(cruising, BRAKE_OFF) >= 4 and lamp_pixels(cruising, BRAKE_ON) == 0
    assert lamp_pixels(braking, BRAKE_ON) >= 4 and lamp_pixels(braking, BRAKE_OFF) == 0


def test_an_intersection_shows_crosswalks_and_a_wide_junction():
    j = World(_junction("green"))
    _advance(j, j.compiled.route_stop_s[0] - j.state.route_s - 4.0)  # the zebra crossing just ahead
    plain = World(make_scenario("straight", {"lanes": 1, "length": 300.0, "speed_limit": 13.9, "density": 0.0}, 0, "s"))
    white = lambda img: int((img.min(2) > 215).sum())  # noqa: E731
    asphalt = lambda img: int((np.abs(img[64:72].astype(int) - [70, 70, 74]).sum(2) < 25).sum())  # noqa: E731
    img_j, img_p = _front(j), _front(plain)
    assert white(img_j) > 3 * white(img_p)  # zebra stripes and stop line
    assert asphalt(img_j) > 1.5 * asphalt(img_p)  # the cross street spans the view


def test_a_pedestrian_ahead_is_visible():
    base = make_scenario("straight", {"lanes": 1, "length": 300.0, "speed_limit": 13.9, "density": 0.0}, 0, "s")
    x = base.ego.s + 15.0
    ped = {
        "id": "ped",
        "kind": "pedestrian",
        "length": 0.5,
        "width": 0.6,
        "height": 1.8,
        "position": [x, -1.75, 1.57],
        "behaviour": {"type": "static"},
    }
    with_ped, without = World(_with(base, actors=[ped])), World(base)
    a, b = _front(with_ped), _front(without)
    changed = np.abs(a.astype(int) - b.astype(int)).sum(2) > 30
    assert changed.sum() > 25
    mean = a[changed].mean(0)
    assert mean[0] > mean[1] and mean[2] > mean[1]  # magenta-ish figure


def test_renderer_handles_any_rig_and_resolution():
    w = World(make_scenario("traffic_jam", FAMILIES["traffic_jam"].sample_params(np.random.default_rng(0)), 0, "t"))
    for rig in ("alpamayo4", "front_tele", "surround6"):
        cams = make_rig(rig, 48, 80)
        imgs = CameraRenderer(cams).render(w)
        assert imgs.shape == (len(cams), 48, 80, 3) and imgs.std() > 5


def test_bev_is_ego_centred_and_aligned():
    w = World(make_scenario("straight", {"lanes": 2, "length": 300.0, "speed_limit": 13.9, "density": 0.0}, 0, "s"))
    bev = BEVRenderer(size=128, resolution=0.4).render(w)
    assert bev.shape == (128, 128, 3)
    assert (bev[int(128 * 0.7), 64] == 255).all()  # the ego (white) sits at the anchor pixel
    # the route (blue) runs straight up from the ego
    assert bev[20, 62:67, 2].max() > 200


def test_video_recorder_writes_a_readable_mp4(tmp_path):
    path = tmp_path / "clip.mp4"
    with VideoRecorder(path) as rec:
        for k in range(12):
            rec.add(np.full((64, 96, 3), k * 20, np.uint8))
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    assert n == 12


@pytest.mark.parametrize("size", [(16, 16), (4, 4)])
def test_too_small_images_are_refused(size):
    if size[0] < 16:
        with pytest.raises(ValueError, match="too small"):
            make_rig("front_only", *size)
    else:
        assert make_rig("front_only", *size)[0].height == 16


def test_a_large_map_is_drawn_from_tiles_as_a_small_one_is_whole(monkeypatch):
    """The tiled ground (a town's) shows what the whole texture shows: force tiles on a junction map by
    shrinking the largest whole texture, and the cameras (signal heads included) and the BEV agree."""
    from envs.sensors import camera, ground

    def frames(world):
        monkeypatch.setattr(camera, "_GEOMETRY", {})  # a fresh texture for the current setting
        cams = CameraRenderer(make_rig("alpamayo4")).render(world)
        return cams, BEVRenderer().render(world), camera.map_geometry(world.compiled.road_map).ground

    red = World(_junction("red"))
    _advance(red, red.compiled.route_stop_s[0] - red.state.route_s - 15.0)
    whole, whole_bev, g = frames(red)
    assert not g.tiled
    monkeypatch.setattr(ground, "WINDOW", 256)
    tiled, tiled_bev, g = frames(red)
    assert g.tiled and g.around(float(red.state.x[0]), float(red.state.y[0])).texture.shape == (3072, 3072, 3)
    for a, b in ((whole, tiled), (whole_bev, tiled_bev)):
        diff = np.abs(a.astype(int) - b.astype(int))
        assert diff.mean() < 0.2 and (diff.max(-1) > 40).mean() < 1e-3
    assert _lamp_pixels(tiled[1], RED) >= 2  # the signal heads ahead are among the props near the ego


def test_the_zoom_camera_is_the_tele_cameras_centre_at_twice_the_pixels(smoke):
    """``alpamayo4_zoom``'s fifth image is the tele camera's centre half at twice the pixels per degree: the
    car ahead covers four times the pixels there."""
    scenario = smoke.get("lead_brake-000")
    rig = make_rig("alpamayo4_zoom")
    assert [c.name for c in rig[:4]] == [c.name for c in make_rig("alpamayo4")]
    renderer = CameraRenderer(rig[3:])
    tele, zoom = renderer.render(World(scenario)).astype(float)
    zoom_at_tele_pixels = cv2.resize(zoom, (128, 64), interpolation=cv2.INTER_AREA)
    assert (np.abs(tele[32:96, 64:192] - zoom_at_tele_pixels).sum(2) < 30).mean() > 0.9
    empty_tele, empty_zoom = renderer.render(World(_with(scenario, actors=[]))).astype(float)
    car_tele = (np.abs(tele - empty_tele).sum(2) > 30)[32:96, 64:192].sum()  # the car ahead in the centre half
    car_zoom = (np.abs(zoom - empty_zoom).sum(2) > 30).sum()
    assert car_tele > 100 and 3.5 < car_zoom / car_tele < 4.5
