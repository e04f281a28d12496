"""Collecting, resuming and reading driving data; labels, the teacher and the consistency filter."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from agents import load_agent
from agents.vla import action_space
from agents.vla.perception import PERCEPTION_TARGETS
from rewards.transition import EgoState
from tests.envs.helpers import drive_to_the_end
from tests.training.helpers import SCENARIOS, collect_settings
from training.data import DatasetError, DrivingDataset, card_path, collect, future_in_ego_frame
from training.data.labels import (
    ConsistencyFilter,
    TemplateTeacher,
    label_meta_actions,
    make_teacher,
)


def test_dataset_round_trip_and_card(dataset):
    ds = DrivingDataset(dataset)
    card = json.loads(card_path(dataset).read_text())
    assert card["samples"] == len(ds) > 20
    assert card["episodes_complete"] == 3  # two scenarios + one perturbed start
    assert card["rig"] == "alpamayo4" and card["image_size"] == [56, 112]
    assert sum(card["labels"]["meta_actions"].values()) >= len(ds)
    assert card["labels"]["filter"]["kept"] == len(ds)
    obs, reasoning, target, perception, manoeuvres, actions = ds.batch([0, len(ds) - 1])
    assert obs[0]["cameras"].shape == (4, 1, 56, 112, 3) and obs[0]["cameras"].dtype == np.uint8
    assert target.shape == (2, 64, 3) and np.isfinite(target).all()
    assert all(r.endswith(".") for r in reasoning)
    assert perception.shape == (2, len(PERCEPTION_TARGETS)) and ((perception >= -1) & (perception <= 1)).all()
    assert manoeuvres.dtype == np.int64 and manoeuvres.tolist() == ds.manoeuvres[[0, len(ds) - 1]].tolist()
    assert actions is None  # the flow head's target actions come only when asked for (a lateral action)
    assert ds.arrays["perturbed"].any() and not ds.arrays["perturbed"].all()
    # the target is the driven future: at speed, it starts ahead of the car
    moving = ds.arrays["speed0"] > 3
    assert (ds.arrays["target"][moving, 0, 0] > 0).all()
    # collecting again into the same path finds nothing to do
    again = collect(collect_settings(), dataset, progress=False)
    assert again["samples"] == len(ds)


def test_each_sample_has_its_scenarios_family_and_a_scenario_not_in_the_bank_is_named(dataset):
    ds = DrivingDataset(dataset)
    families = ds.families()
    assert len(families) == len(ds)
    assert dict(zip(ds.text["scenario"], families.tolist())) == {"lead_brake-000": "lead_brake", "curve-000": "curve"}
    ds.text["scenario"][3] = "nowhere-000"
    with pytest.raises(DatasetError, match=r"scenario: sample 3's scenario 'nowhere-000' is not in bank 'smoke'"):
        ds.families()


def test_target_actions_are_fitted_once_and_are_what_each_batch_would_fit(dataset):
    """The flow head's targets, fitted over the whole dataset in chunks, equal a batch's own fit (to float
    rounding: the solve is the same per sample), and come with a batch only when asked for."""
    ds = DrivingDataset(dataset)
    fitted = ds.target_actions("lateral_acceleration", chunk=7)  # several chunks and a short last one
    assert fitted.shape == (len(ds), 64, 2) and fitted.dtype == np.float32
    idx = [len(ds) - 1, 0, 9]
    batch = ds.batch(idx, "lateral_acceleration")
    speed = action_space.initial_speed(torch.from_numpy(ds.arrays["ego_history"][idx]))
    own = action_space.from_trajectory(torch.from_numpy(batch.targets), speed, lateral="lateral_acceleration")
    np.testing.assert_allclose(batch.actions, own.numpy(), rtol=0, atol=1e-6)
    assert ds.target_actions("lateral_acceleration") is fitted  # not fitted again
    curvature = ds.batch(idx, "curvature").actions
    assert np.array_equal(curvature[..., 0], batch.actions[..., 0])  # the same acceleration, another lateral
    assert not np.allclose(curvature[..., 1], batch.actions[..., 1])
    assert ds.batch(idx).actions is None


def _collect_killed(path, monkeypatch, at_episode: int) -> None:
    """Collect into ``path`` as a kill before its ``at_episode``-th episode (1-based) leaves it."""
    from training.data import record as data_mod

    real, calls = data_mod._rollout, {"n": 0}

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == at_episode:
            raise KeyboardInterrupt  # as a kill between episodes
        return real(*a, **k)

    monkeypatch.setattr(data_mod, "_rollout", dies)
    with pytest.raises(KeyboardInterrupt):
        collect(collect_settings(), path, progress=False)
    monkeypatch.setattr(data_mod, "_rollout", real)


def test_collect_resumes_after_a_kill(dataset, tmp_path, monkeypatch):
    path = tmp_path / "resumed.zarr"
    _collect_killed(path, monkeypatch, at_episode=3)
    collect(collect_settings(), path, progress=False)
    a, b = DrivingDataset(dataset), DrivingDataset(path)
    for k in ("cameras", "target", "ego_history", "episode", "plan"):
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert a.text["reasoning"] == b.text["reasoning"]
    # the card counts each episode once, and keeps the filter's verdicts of the run that was killed
    assert {**a.card, "path": None} == {**b.card, "path": None}
    assert b.card["labels"]["filter"]["kept"] == len(b) and b.card["labels"]["episodes"] == 3
    with pytest.raises(ValueError, match="other settings"):
        collect(collect_settings(n_frames=2), path, progress=False)


def test_a_dataset_from_before_plans_were_recorded_reads_and_resumes_without_them(dataset, tmp_path, monkeypatch):
    import shutil

    path = tmp_path / "old.zarr"
    _collect_killed(path, monkeypatch, at_episode=3)
    assert DrivingDataset(path).n > 0  # the kill left complete samples
    shutil.rmtree(path / "plan")  # as collected before 2026-11-27
    collect(collect_settings(), path, progress=False)  # finishing it writes no plan for the later episodes
    new, old = DrivingDataset(dataset), DrivingDataset(path)
    assert "plan" in new.arrays and "plan" not in old.arrays and not (path / "plan").exists()
    assert new.arrays["plan"].shape == new.arrays["target"].shape
    for k in ("cameras", "target", "episode"):
        np.testing.assert_array_equal(new.arrays[k], old.arrays[k])


def test_an_episodes_last_decisions_learn_the_future_driven_on_past_its_end(dataset, tmp_path):
    """``run_out``: the decisions of an episode's last 6.4 s have the future the driver went on to drive
    past the goal; without it (the default) they are left out, and every other sample is the same."""
    import zarr

    from envs import LoopDriveEnv

    ran_on = tmp_path / "run_out.zarr"
    collect(collect_settings(run_out=True), ran_on, progress=False)
    a, b = DrivingDataset(dataset), DrivingDataset(ran_on)
    assert a.card["source"]["run_out"] is False and b.card["source"]["run_out"] is True
    assert b.card["labels"]["run_out"] == len(b) - len(a) > 0
    assert b.card["labels"]["short_future"] == a.card["labels"]["short_future"] - b.card["labels"]["run_out"]
    old = [(int(e), round(float(t), 1)) for e, t in zip(a.arrays["episode"], a.arrays["t"])]
    new = [(int(e), round(float(t), 1)) for e, t in zip(b.arrays["episode"], b.arrays["t"])]
    kept = [new.index(key) for key in old]
    np.testing.assert_array_equal(a.arrays["target"], b.arrays["target"][kept])
    # the last sample of lead_brake-000 by hand: the episode driven to its end, then on
    mine = [i for i in range(len(b)) if b.text["scenario"][i] == "lead_brake-000" and not b.arrays["perturbed"][i]]
    last = max(mine)
    env = LoopDriveEnv(bank="smoke", n_frames=1, observations=("ego_state",))
    expert = load_agent("expert")
    drive_to_the_end(env, expert, "lead_brake-000")
    episode = list(env.ego_track)
    track = episode + env.run_out(lambda o: expert.act(o).trajectory, 64)
    assert env.ego_track == episode
    k = round(float(b.arrays["t"][last]) * 10)
    assert k + 64 >= len(env.ego_track)  # (a decision of the last 6.4 s)
    np.testing.assert_array_equal(b.arrays["target"][last], future_in_ego_frame(track, k))
    # data collected before the setting existed had no run-out: it is finished without one
    g = zarr.open_group(ran_on, mode="a")
    g.attrs["config"] = {k: v for k, v in g.attrs["config"].items() if k != "run_out"}
    with pytest.raises(DatasetError, match="other settings"):
        collect(collect_settings(run_out=True), ran_on, progress=False)
    assert collect(collect_settings(), ran_on, progress=False)["samples"] == len(b)


def test_a_run_out_cut_short_by_the_routes_end_gives_futures_that_only_go_forward(tmp_path):
    """pedestrian_crossing-000's route ends 1 s of driving past its goal (a run-out of 10 world steps):
    the last decisions whose future fits in that are driven on, the rest dropped; no future holds the
    run-out's poses twice (jumping back to where the car had been, as it did when the run-out grew the
    episode's poses the collection held)."""
    from envs import LoopDriveEnv

    path = tmp_path / "short_run_out.zarr"
    collect(
        collect_settings(scenarios=["pedestrian_crossing-000"], perturb_fraction=0.0, run_out=True),
        path,
        progress=False,
    )
    data = DrivingDataset(path)
    assert data.card["labels"]["run_out"] > 0 and data.card["labels"]["short_future"] > 0
    steps = np.diff(data.arrays["target"][..., :2], axis=1)
    assert (np.einsum("nki,nki->nk", steps[:, 1:], steps[:, :-1]) > -1e-6).all()  # each step onward
    env = LoopDriveEnv(bank="smoke", n_frames=1, observations=("ego_state",))
    expert = load_agent("expert")
    drive_to_the_end(env, expert, "pedestrian_crossing-000")
    track = list(env.ego_track) + env.run_out(lambda o: expert.act(o).trajectory, 64)
    last = int(np.argmax(data.arrays["t"]))
    k = round(float(data.arrays["t"][last]) * 10)
    assert len(env.ego_track) <= k + 64 < len(track)  # a decision of the last 6.4 s, its future driven on
    np.testing.assert_array_equal(data.arrays["target"][last], future_in_ego_frame(track, k))


def test_collect_the_agents_plan_as_the_target(dataset, tmp_path):
    """``target="plan"`` keeps the collecting agent's plan at each decision, so no sample lacks a target."""
    import envs  # noqa: F401
    from agents import load_agent
    from envs import LoopDriveEnv

    path = tmp_path / "plan.zarr"
    collect(collect_settings(scenarios=SCENARIOS[:1], perturb_fraction=0.0, target="plan"), path, progress=False)
    plan = DrivingDataset(path)
    card = json.loads(card_path(path).read_text())
    assert card["labels"]["short_future"] == 0
    driven = DrivingDataset(dataset)
    first = driven.arrays["episode"] == driven.arrays["episode"][0]
    assert len(plan) > first.sum()  # the driven future is missing for the last 6.4 s of an episode
    env = LoopDriveEnv(
        bank="smoke", n_frames=1, observations=("cameras", "ego_history", "ego_state", "route", "command")
    )
    obs, _ = env.reset(seed=0, options={"scenario": SCENARIOS[0]})
    expert = load_agent("expert")
    expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    np.testing.assert_allclose(plan.arrays["target"][0], expert.act(obs).trajectory, atol=1e-5)
    np.testing.assert_array_equal(plan.arrays["plan"], plan.arrays["target"])  # the plan, recorded twice
    with pytest.raises(ValueError, match="target"):  # the settings refuse a target there is no data for
        collect_settings(target="imagined")


def test_future_in_ego_frame():
    # a car at (10, 5) heading north, driving north at 10 m/s
    track = [
        EgoState(i * 0.1, 10.0, 5.0 + i, np.pi / 2, 10, 0, 0, 0, 0, 0, 0, 0, 0, False, False, False) for i in range(80)
    ]
    fut = future_in_ego_frame(track, 0)
    np.testing.assert_allclose(fut[:, 0], np.arange(1, 65), atol=1e-5)
    np.testing.assert_allclose(fut[:, 1:], 0.0, atol=1e-5)
    assert future_in_ego_frame(track, 20) is None


def test_filter_counts_crafted_inconsistent_samples():
    filt = ConsistencyFilter(threshold=0.5)
    samples = [
        ("The traffic light ahead is red, so accelerate.", {"stop"}, {"red_light"}),  # contradicts
        ("A pedestrian is near my path, so slow down.", {"keep_speed"}, set()),  # nothing there, wrong action
        ("The traffic light ahead is red, so come to a stop.", {"stop"}, {"red_light"}),  # consistent
        ("There is a lead vehicle ahead, so slow down.", {"decelerate"}, {"lead_vehicle"}),  # consistent
    ]
    kept = [filt(*s)[0] for s in samples]
    assert kept == [False, False, True, True]
    stats = filt.stats()
    assert stats["kept"] == 2 and stats["rejected"] == 2
    assert any(r.startswith("contradicts_executed_action:accelerate") for r in stats["rejected_by_reason"])


def test_template_teacher_agrees_with_its_labels():
    teacher, filt = TemplateTeacher(), ConsistencyFilter()
    for meta in (
        {"stop"},
        {"decelerate", "turn_left"},
        {"accelerate", "keep_lane"},
        {"keep_speed", "nudge_right"},
        {"start_from_stop", "turn_right"},
    ):
        for causes in (set(), {"red_light", "traffic_light"}, {"lead_vehicle"}, {"pedestrian", "curve"}):
            assert filt(teacher.write(meta, causes), meta, causes)[0], (meta, causes)
    straight = np.stack([np.arange(1, 65) * 1.0, np.zeros(64), np.zeros(64)], 1)
    assert "keep_speed" in label_meta_actions(straight, 10.0)


def test_a_car_already_standing_still_is_told_to_start_again_or_to_stay_not_to_come_to_a_stop():
    teacher, filt = make_teacher("template_standing"), ConsistencyFilter()
    t = np.arange(1, 65) * 0.1
    waits_then_goes = np.maximum(t - 1.5, 0.0) ** 2  # stands for 1.5 s, then accelerates at 2 m/s^2
    brakes_then_goes = np.where(t < 1.0, 5 * t - 2.5 * t**2, 2.5) + np.maximum(t - 3.0, 0.0) ** 2  # 5 m/s -> 0 in 1 s
    stays = np.zeros(64)
    cases = {
        "start moving again": (waits_then_goes, 0.0),
        "come to a stop": (brakes_then_goes, 5.0),
        "stay stopped": (stays, 0.0),
    }
    causes = {"stop_sign", "junction"}
    for phrase, (x, speed0) in cases.items():
        future = np.stack([x, np.zeros(64), np.zeros(64)], 1)
        meta = label_meta_actions(future, speed0)
        text = teacher.write(meta, causes, {"speed": speed0})
        assert f"so {phrase}" in text, (phrase, meta, text)
        assert filt(text, meta, causes)[0], (text, meta)
    assert "so come to a stop" in teacher.write({"stop", "start_from_stop"}, causes)  # no facts: as before
    standing_start = label_meta_actions(np.stack([waits_then_goes, np.zeros(64), np.zeros(64)], 1), 0.0)
    assert "so come to a stop" in make_teacher("template").write(standing_start, causes, {"speed": 0.0})  # the default


def test_perception_targets_scale_what_is_ahead_and_read_as_far_when_nothing_is():
    from agents.vla.perception import perception_targets
    from rewards.scene import SceneFacts

    empty = dict(zip(PERCEPTION_TARGETS, perception_targets(SceneFacts(speed=10.0))))
    assert empty == {
        "lead_gap": 1.0,
        "lead_closing_speed": 0.0,
        "lead_stopped": 0.0,
        "blocked_gap": 1.0,
        "cut_in_gap": 1.0,
        "stop_distance": 1.0,
        "pedestrian_in_path": 0.0,
        "oncoming": 0.0,
    }
    busy = SceneFacts(
        speed=12.0,
        lead_vehicle={"id": "a", "gap": 15.0, "speed": 0.0, "stopped": True},
        blocked_lane={"id": "a", "gap": 15.0},
        cut_in={"id": "b", "gap": 45.0, "side": "left"},
        signal_ahead={"state": "green", "distance": 20.0},
        stop_sign_ahead=30.0,
        pedestrians=[{"id": "p", "distance": 9.0, "in_path": False}, {"id": "q", "distance": 30.0, "in_path": True}],
        oncoming=5,
    )
    got = dict(zip(PERCEPTION_TARGETS, perception_targets(busy).tolist()))
    want = dict(lead_gap=0.25, lead_closing_speed=1.0, lead_stopped=1.0, blocked_gap=0.375, cut_in_gap=1.0)
    want |= dict(stop_distance=0.6, pedestrian_in_path=1.0, oncoming=1.0)  # a green light is no stop
    assert got == pytest.approx(want)
    red = SceneFacts(signal_ahead={"state": "red", "distance": 10.0}, stop_sign_ahead=30.0)
    assert perception_targets(red)[PERCEPTION_TARGETS.index("stop_distance")] == pytest.approx(0.2)


def test_time_to_lead_is_the_gap_over_the_closing_speed_and_infinite_when_nothing_closes_in():
    from agents.vla.perception import perception_targets, time_to_lead
    from rewards.scene import SceneFacts

    def ttc(gap: float, lead_speed: float, speed: float = 12.0) -> float:
        lead = {"id": "a", "gap": gap, "speed": lead_speed, "stopped": lead_speed == 0.0}
        return float(time_to_lead(perception_targets(SceneFacts(speed=speed, lead_vehicle=lead))))

    assert ttc(15.0, 4.0) == pytest.approx(15.0 / 8.0)
    assert ttc(30.0, 0.0, speed=15.0) == pytest.approx(3.0)  # a closing speed over 10 m/s reads as 10
    assert ttc(15.0, 11.8) == np.inf  # closing at 0.2 m/s: following, not closing in
    assert ttc(15.0, 14.0) == np.inf  # the gap opens
    assert ttc(75.0, 0.0) == np.inf  # beyond the 60 m the targets see
    assert float(time_to_lead(perception_targets(SceneFacts(speed=12.0)))) == np.inf  # nothing ahead
    rows = np.stack(
        [
            perception_targets(
                SceneFacts(speed=12.0, lead_vehicle={"id": "a", "gap": g, "speed": 2.0, "stopped": False})
            )
            for g in (5.0, 20.0)
        ]
    )
    np.testing.assert_allclose(time_to_lead(rows), [0.5, 2.0])


def test_manoeuvre_classes_come_from_each_samples_meta_actions_and_a_malformed_entry_is_refused(dataset, tmp_path):
    """Lane changes and nudges to a side are that side's class, turns follow the route (keep_lane), left
    first when a future has both; the dataset reads each sample's from its recorded meta-actions, and an
    entry that is not a JSON list of names is a ``DatasetError`` naming the array and the sample."""
    import zarr

    from agents.vla.manoeuvre import MANOEUVRES
    from training.data.labels import manoeuvre_class

    assert [
        MANOEUVRES[manoeuvre_class(m)]
        for m in (
            ["keep_lane", "keep_speed"],
            ["turn_left", "decelerate"],
            ["lane_change_left"],
            ["nudge_right", "keep_lane"],
            ["lane_change_right", "nudge_left"],
            [],
        )
    ] == ["keep_lane", "keep_lane", "change_left", "change_right", "change_left", "keep_lane"]
    ds = DrivingDataset(dataset)
    expected = [manoeuvre_class(json.loads(m)) for m in ds.text["meta_actions"]]
    assert ds.manoeuvres.tolist() == expected and ds.batch([1, 0]).manoeuvres.tolist() == expected[1::-1]
    broken = tmp_path / "broken.zarr"
    shutil.copytree(dataset, broken)
    zarr.open_group(broken, mode="r+")["meta_actions"][3] = "lane_change_left"
    with pytest.raises(DatasetError, match=r"broken\.zarr/meta_actions: sample 3 is not a JSON list"):
        DrivingDataset(broken)


def test_data_of_an_earlier_format_is_refused_with_why_before_anything_is_read_or_added(dataset, tmp_path):
    """Data collected before the cameras showed brake lights would teach a model pictures it never sees
    again: reading it or collecting more into it is a ``DatasetError`` naming the path and the reason,
    and the copy is left as it was."""
    import zarr

    old = tmp_path / "old.zarr"
    shutil.copytree(dataset, old)
    zarr.open_group(old, mode="r+").attrs["format"] = "loopdrive-driving-data/2"
    before = sorted((p.relative_to(old), p.stat().st_size) for p in old.rglob("*") if p.is_file())
    for attempt in (lambda: DrivingDataset(old), lambda: collect(collect_settings(), old, progress=False)):
        with pytest.raises(DatasetError, match=r"old\.zarr: collected by an earlier LoopDrive .*no brake lights"):
            attempt()
    assert sorted((p.relative_to(old), p.stat().st_size) for p in old.rglob("*") if p.is_file()) == before


def test_a_lane_change_not_under_way_by_then_reads_as_keep_lane():
    """``manoeuvre_under_way``: a change counts once its future is 0.5 m towards its side at ``by_s``."""
    from agents.vla.manoeuvre import MANOEUVRES
    from training.data.labels import manoeuvre_under_way

    keep, left, right = (MANOEUVRES.index(m) for m in ("keep_lane", "change_left", "change_right"))
    targets = np.zeros((5, 64, 3), np.float32)
    targets[0, 29, 1] = 0.6  # left, under way at 3 s
    targets[1, 29, 1] = 0.4  # left, not yet
    targets[2, 29, 1] = -0.7  # right, under way
    targets[3, 29, 1] = 0.9  # "right" but moving left: not under way
    targets[4, 29, 1] = 2.0  # keep_lane stays keep_lane
    classes = np.array([left, left, right, right, keep])
    assert manoeuvre_under_way(classes, targets, by_s=3.0).tolist() == [left, keep, right, keep, keep]
    assert manoeuvre_under_way(classes, targets, by_s=2.0).tolist() == [keep] * 5  # index 19 is all zeros


def test_a_moving_future_that_stands_by_then_is_a_stop_and_a_lane_change_stays_a_change():
    """``manoeuvre_classes(stop=True)``: a future that keeps its lane, moves at its start and stands (below 0.3
    m/s over a 0.1 s step) by ``by_s`` (or ``stop_by_s``) is ``stop``; one that stands later, one already
    standing, and a lane change that stops are not; without ``stop`` the classes are the lane's three."""
    from agents.vla.manoeuvre import MANOEUVRES
    from training.data.labels import manoeuvre_classes, stops_by

    keep, left, stop = (MANOEUVRES.index(m) for m in ("keep_lane", "change_left", "stop"))

    def future(speeds: list[float]) -> np.ndarray:
        """Straight ahead at these speeds (m/s) over each 0.1 s, the last held to 6.4 s."""
        v = np.array(speeds + [speeds[-1]] * (64 - len(speeds)))
        out = np.zeros((64, 3), np.float32)
        out[:, 0] = np.cumsum(v * 0.1)
        return out

    braking = list(np.linspace(5.0, 0.0, 21))  # 5 m/s to a stand in 2 s
    late = [5.0] * 20 + braking  # the same, 2 s later: standing from 4.1 s
    targets = np.stack([future(braking), future(late), future([0.0]), future([5.0]), future(braking)])
    targets[4, 20:, 1] = 1.0  # a change to the left that stops
    recorded = np.array([keep, keep, keep, keep, left])
    assert stops_by(targets, 3.0).tolist() == [True, False, False, False, True]
    assert stops_by(targets, None).tolist() == [True, True, False, False, True]
    assert manoeuvre_classes(recorded, targets, 3.0, stop=True).tolist() == [stop, keep, keep, keep, left]
    assert manoeuvre_classes(recorded, targets, None, stop=True).tolist() == [stop, stop, keep, keep, left]
    assert manoeuvre_classes(recorded, targets, 3.0).tolist() == [keep, keep, keep, keep, left]
    # the stop's own time (manoeuvre_stop_by_s): the later stop named too, the lane change still read at 3 s
    assert manoeuvre_classes(recorded, targets, 3.0, stop=True, stop_by_s=6.4).tolist() == [
        stop,
        stop,
        keep,
        keep,
        left,
    ]
    assert manoeuvre_classes(recorded, targets, None, stop=True, stop_by_s=1.5).tolist() == [keep] * 4 + [left]


def test_a_lane_change_in_the_routes_frame_is_named_until_the_car_drives_back():
    """``manoeuvre_classes(frame="route")``: the lane the future is in at ``by_s`` beside the route's, or the
    ego class's start where the future leaves the route's centre; half-way through a change (the car heading
    into the new lane, its future straight on in its own frame) the ego class reads ``keep_lane``, the route's
    ``change_left``; the way back from an offset or from the left lane is ``keep_lane``."""
    from agents.vla.manoeuvre import MANOEUVRES
    from training.data.labels import manoeuvre_classes, route_laterals

    keep, left, right = (MANOEUVRES.index(m) for m in ("keep_lane", "change_left", "change_right"))

    def seen_from(offset: float, heading: float) -> np.ndarray:
        """A straight route (2 m to 64 m ahead) seen from a car ``offset`` m to its left, heading ``heading``
        rad to the left of it."""
        ahead = np.stack([np.arange(2.0, 65.0, 2.0), np.full(32, -offset)], 1)
        c, s = np.cos(heading), np.sin(heading)
        return ahead @ np.array([[c, -s], [s, c]])

    # (car's offset, heading, future at 3 s in the ego frame, recorded class, ego class, route class)
    cases = [
        (0.0, 0.0, (30.0, 1.0), left, left, left),  # a change starting: both
        (1.5, 0.1, (30.0, -0.2), keep, keep, left),  # half-way: straight on in its own frame, 4.3 m out
        (-1.5, 0.0, (30.0, 1.5), left, left, keep),  # moved 1.5 m right, back to the centre: not a change
        (3.5, 0.0, (30.0, 0.0), keep, keep, left),  # passing in the left lane
        (3.5, 0.0, (30.0, -2.5), right, right, keep),  # driving back into the route's lane
        (0.0, 0.0, (30.0, -2.0), keep, keep, right),  # out into the lane on the right
        (0.0, 0.0, (30.0, 0.3), keep, keep, keep),  # drifting within the lane
    ]
    routes = np.stack([seen_from(c[0], c[1]) for c in cases])
    targets = np.zeros((len(cases), 64, 3), np.float32)
    targets[:, 29, :2] = [c[2] for c in cases]
    recorded = np.array([c[3] for c in cases])
    np.testing.assert_allclose(route_laterals(routes, np.zeros((len(cases), 2))), [c[0] for c in cases], atol=1e-9)
    assert manoeuvre_classes(recorded, targets, 3.0, "ego").tolist() == [c[4] for c in cases]
    assert manoeuvre_classes(recorded, targets, 3.0, "route", routes).tolist() == [c[5] for c in cases]
    with pytest.raises(ValueError, match="need manoeuvre_by_s and the routes"):
        manoeuvre_classes(recorded, targets, 3.0, "route")
    with pytest.raises(ValueError, match="manoeuvre_frame must be one of"):
        manoeuvre_classes(recorded, targets, 3.0, "lane")
