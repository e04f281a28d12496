"""DAgger's labels: the expert's driven future from a state another agent drove into."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import envs  # noqa: F401
from agents import load_agent
from envs import LoopDriveEnv
from envs.sensors.resize import resize_frames
from tests.envs.helpers import drive_to_the_end
from tests.training.helpers import collect_settings
from training.data import DrivingDataset, card_path, collect, future_in_ego_frame
from training.data.dagger import ExpertLabeller

OBSERVED = ("cameras", "ego_history", "ego_state", "route", "command")
ROOT = Path(__file__).resolve().parents[3]  # the repository, for the Ray workers' imports


def drive(env, agent, decisions: int, scenario: str, offset=(0.0, 0.0)):
    obs, _ = env.reset(seed=0, options={"scenario": scenario, "ego_offset": offset})
    agent.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    for _ in range(decisions):
        obs, *_ = env.step(agent.act(obs).trajectory)
    return obs


def test_the_label_is_the_experts_driven_future_from_the_restored_snapshot_bit_for_bit():
    """Labelled in a camera-less env, the future equals the one the expert drives in the episode's own
    env (cameras on) after restoring the same snapshot; and it is not what the driving agent did."""
    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(32, 64), observations=OBSERVED)
    # a perturbed start, driven straight on: a state the expert would not have reached itself
    drive(env, load_agent("constant_velocity"), 4, "curve-000", offset=(0.8, 0.1))
    snap = env.snapshot()
    k = len(env.ego_track) - 1
    label = ExpertLabeller("smoke", None, env.decision_every).label(snap)
    assert label.target is not None and not label.failed

    obs, _ = env.restore(snap)
    expert = load_agent("expert")
    expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    while len(env.ego_track) - 1 <= k + 64:
        obs, *_ = env.step(expert.act(obs).trajectory)
    assert np.array_equal(label.target, future_in_ego_frame(env.ego_track, k))

    obs, _ = env.restore(snap)  # the agent that drove there goes on straight; the expert steers round
    cv = load_agent("constant_velocity")
    cv.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    done = False
    while len(env.ego_track) - 1 <= k + 64 and not done:
        obs, _, terminated, truncated, _ = env.step(cv.act(obs).trajectory)
        done = terminated or truncated
    straight = future_in_ego_frame(env.ego_track, k)
    assert straight is None or np.abs(label.target[:, 1] - straight[:, 1]).max() > 1.0


def test_a_label_near_the_end_is_driven_on_past_it_and_left_out_without_run_out():
    """2 s before the goal the expert's branch ends at it; with ``run_out`` the label is its future
    driven on past the goal, as the expert drives it in the episode's own env from the snapshot."""
    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(32, 64), observations=OBSERVED)
    expert = load_agent("expert")
    snaps = []
    drive_to_the_end(env, expert, "straight-000", snaps)
    snap, k = snaps[-4], len(snaps[-4]["ego_track"]) - 1
    assert ExpertLabeller("smoke", None, env.decision_every).label(snap).target is None
    label = ExpertLabeller("smoke", None, env.decision_every, run_out=True).label(snap)
    assert label.ran_out and not label.failed and label.target is not None

    obs, _ = env.restore(snap)
    drive_to_the_end(env, expert, obs=obs)
    track = env.ego_track + env.run_out(lambda o: expert.act(o).trajectory, 64)
    np.testing.assert_array_equal(label.target, future_in_ego_frame(track, k))


def test_a_label_whose_expert_crashes_is_marked_failed():
    """An unavoidable collision ahead: the expert's branch from there is no demonstration."""
    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(32, 64), observations=OBSERVED)
    cv = load_agent("constant_velocity")
    obs = drive(env, cv, 0, "lead_brake-000")
    labeller = ExpertLabeller("smoke", None, env.decision_every)
    labels, done, info = [], False, {}
    while not done:  # constant velocity closes on the braking leader until it hits it
        labels.append(labeller.label(env.snapshot()))
        obs, _, terminated, truncated, info = env.step(cv.act(obs).trajectory)
        done = terminated or truncated
    assert info["metrics"]["at_fault_collisions"] == 1
    assert not labels[0].failed and labels[-1].failed  # from the start the expert brakes in time; at the end not


def test_dagger_collect_keeps_crashed_episodes_and_labels_every_kth_decision(tmp_path):
    """``target="expert"``: the agent's episodes are kept even when it crashes, each labelled decision
    carries the labeller's future, and the card counts what was left out."""
    cfg = collect_settings(agent="constant_velocity", target="expert", label_every=2, perturb_fraction=0.0)
    path = tmp_path / "dagger.zarr"
    collect(cfg, path, progress=False)
    ds = DrivingDataset(path)
    card = json.loads(card_path(path).read_text())
    assert card["source"]["target"] == "expert" and card["labels"]["dropped_episodes"] == 0
    # constant velocity drives into the braking leader of lead_brake-000: its states are in the data
    assert set(ds.text["scenario"]) == {"lead_brake-000", "curve-000"}
    curve = np.array(ds.text["scenario"]) == "curve-000"
    np.testing.assert_allclose(np.diff(ds.arrays["t"][curve]), 1.0, atol=1e-4)  # every second decision: 1 s apart
    # the first labelled decision of curve-000 again, by hand
    env = LoopDriveEnv(bank="smoke", n_frames=1, observations=OBSERVED)
    env.reset(seed=0, options={"scenario": "curve-000"})
    label = ExpertLabeller("smoke", None, env.decision_every).label(env.snapshot())
    np.testing.assert_array_equal(ds.arrays["target"][curve][0], label.target)
    # beside the label, the agent's own plan there: what DAgger's focus compares with it
    cv = load_agent("constant_velocity")
    obs, _ = env.reset(seed=0, options={"scenario": "curve-000"})
    cv.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    np.testing.assert_array_equal(ds.arrays["plan"][curve][0], cv.act(obs).trajectory.astype(np.float32))


@pytest.mark.parametrize("target", ["executed", "expert"])
def test_a_closer_lead_is_the_car_ahead_moved_back_rendered_and_labelled_there_and_the_episode_goes_on(
    target, tmp_path
):
    """``closer_lead``: beside a decision with a car ahead (in DAgger's data a labelled one), a sample with
    that car nearer (its gap drawn between 2 m and its own, at most 20 m), the cameras rendered there and
    the expert's driven future from there as its target, bit for bit as by hand; the driver's own samples
    are those of a collection without it."""
    from rewards.scene import scene_facts
    from training.dagger import disagreement
    from training.data.record import CLOSER_LEAD_MAX_GAP_M, CLOSER_LEAD_MIN_GAP_M

    every = 3 if target == "expert" else 1
    base = dict(agent="expert", target=target, scenarios=["lead_brake-000"], perturb_fraction=0.0, label_every=every)
    collect(collect_settings(**base), tmp_path / "plain.zarr", progress=False)
    collect(collect_settings(**base, closer_lead=0.5), tmp_path / "closer.zarr", progress=False)
    plain, closer = DrivingDataset(tmp_path / "plain.zarr"), DrivingDataset(tmp_path / "closer.zarr")
    moved = closer.arrays["perturbed"][:]
    assert 0 < moved.sum() < (~moved).sum() == len(plain)
    for name in plain.arrays:  # the driver's own samples: unchanged
        np.testing.assert_array_equal(plain.arrays[name][:], closer.arrays[name][:][~moved], err_msg=name)
    assert np.isnan(closer.arrays["plan"][:][moved]).all()  # the driver did not drive there ...
    if target == "expert":  # ... so DAgger's focus counts them as the round's average
        wrong = disagreement(closer)
        assert np.allclose(wrong[moved], wrong[~moved].mean()) and np.isfinite(wrong).all()
    gap = closer.arrays["perception"][:, 0] * 60.0
    own = {float(t): g for t, g in zip(closer.arrays["t"][:][~moved], gap[~moved])}
    for t, g in zip(closer.arrays["t"][:][moved], gap[moved]):
        assert CLOSER_LEAD_MIN_GAP_M - 0.1 <= g <= min(own[float(t)], CLOSER_LEAD_MAX_GAP_M) + 0.1

    # the first closer lead by hand: the expert drives, the same draws, the car moved, rendered, labelled
    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(128, 256), observations=OBSERVED)
    obs, _ = env.reset(seed=0, options={"scenario": "lead_brake-000"})
    expert, labeller = load_agent("expert"), ExpertLabeller("smoke", None, env.decision_every)
    expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    draws, decision = np.random.default_rng(2000), 0
    while True:
        plan = expert.act(obs).trajectory
        lead = scene_facts(env.world).lead_vehicle
        if decision % every == 0 and lead is not None and lead["gap"] > CLOSER_LEAD_MIN_GAP_M:
            farthest = min(lead["gap"], CLOSER_LEAD_MAX_GAP_M)
            take, drawn = draws.random() < 0.5, draws.uniform(CLOSER_LEAD_MIN_GAP_M, farthest)
            if take:
                break
        obs, *_ = env.step(plan)
        decision += 1
    by_hand = env.move_actor(lead["id"], drawn - lead["gap"])
    first = int(np.flatnonzero(moved)[0])
    np.testing.assert_array_equal(closer.arrays["cameras"][first], resize_frames(by_hand["cameras"], (56, 112)))
    np.testing.assert_array_equal(closer.arrays["target"][first], labeller.label(env.snapshot()).target)
    assert closer.arrays["t"][first - 1] == closer.arrays["t"][first]  # the driver's own sample there, before it
    assert not np.array_equal(closer.arrays["cameras"][first], closer.arrays["cameras"][first - 1])  # the car nearer


def test_an_offset_ego_is_the_ego_moved_sideways_and_turned_rendered_and_labelled_there_and_the_episode_goes_on(
    tmp_path,
):
    """``offset_ego``: beside a decision, a sample with the ego moved sideways and turned (drawn within the
    bounds), its history carried along, the cameras rendered there and the expert's driven future from
    there as its target, bit for bit as by hand; the driver's own samples are those of a collection
    without it, and the card counts the branches."""
    from training.data.record import HORIZON

    base = dict(agent="expert", scenarios=["curve-000"], perturb_fraction=0.0)
    collect(collect_settings(**base), tmp_path / "plain.zarr", progress=False)
    card = collect(collect_settings(**base, offset_ego=0.3), tmp_path / "offset.zarr", progress=False)
    plain, offset = DrivingDataset(tmp_path / "plain.zarr"), DrivingDataset(tmp_path / "offset.zarr")
    moved = offset.arrays["perturbed"][:]
    assert 0 < moved.sum() <= card["labels"]["branches"]["offset_ego"] and (~moved).sum() == len(plain)
    for name in plain.arrays:  # the driver's own samples: unchanged
        np.testing.assert_array_equal(plain.arrays[name][:], offset.arrays[name][:][~moved], err_msg=name)
    assert np.isnan(offset.arrays["plan"][:][moved]).all()
    own = {float(t): i for i, t in enumerate(offset.arrays["t"][:]) if not moved[i]}
    for i in np.flatnonzero(moved):  # the same motion in the ego's own frame, the route moved beside it
        j = own[float(offset.arrays["t"][i])]
        np.testing.assert_allclose(offset.arrays["ego_history"][i], offset.arrays["ego_history"][j], atol=1e-4)
        shift = np.linalg.norm(offset.arrays["route"][i][0] - offset.arrays["route"][j][0])
        assert 0.0 < shift <= 1.5 + 0.1 + 2.0 * np.radians(5.0) * np.linalg.norm(offset.arrays["route"][j][0])

    # the first offset by hand: the expert drives, the same draws, the ego moved, rendered, labelled
    env = LoopDriveEnv(bank="smoke", n_frames=1, camera_size=(128, 256), observations=OBSERVED)
    obs, _ = env.reset(seed=0, options={"scenario": "curve-000"})
    expert, labeller = load_agent("expert"), ExpertLabeller("smoke", None, env.decision_every)
    expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    draws = np.random.default_rng(3000)
    while True:
        plan = expert.act(obs).trajectory
        take, lateral, heading = draws.random() < 0.3, draws.uniform(-1, 1) * 1.5, draws.uniform(-1, 1) * 5.0
        if take:
            break
        obs, *_ = env.step(plan)
    by_hand = env.shift_ego(lateral, np.radians(heading))
    first = int(np.flatnonzero(moved)[0])
    np.testing.assert_array_equal(offset.arrays["cameras"][first], resize_frames(by_hand["cameras"], (56, 112)))
    np.testing.assert_array_equal(offset.arrays["route"][first], by_hand["route"])
    label = labeller.label(env.snapshot())
    np.testing.assert_array_equal(offset.arrays["target"][first], label.target)
    assert label.target.shape == (HORIZON, 3)
    assert offset.arrays["t"][first - 1] == offset.arrays["t"][first]  # the driver's own sample there, before it


def test_a_branch_is_declined_where_a_fresh_expert_would_not_drive_on_as_the_driver(tmp_path):
    """Half-way through an overtake a fresh expert, knowing nothing of it, plans otherwise than the driver:
    its label from a branch there would teach another decision than the demonstration's. The collection
    declines those branches, counts them, and takes the others."""
    env = LoopDriveEnv(bank="smoke", n_frames=1, observations=("ego_state",))
    obs, _ = env.reset(seed=0, options={"scenario": "overtake-000"})
    driver, labeller = load_agent("expert"), ExpertLabeller("smoke", None, env.decision_every)
    driver.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    agrees, done = {}, False
    while not done:
        plan = driver.act(obs).trajectory
        t = round((len(env.ego_track) - 1) * 0.1, 3)
        agrees[t] = labeller.plans_as(env.snapshot(), plan)
        if not agrees[t]:  # out in the other lane, the overtake under way
            assert driver.maneuver == "overtake_left" and env.world.state.lateral > 1.5
        obs, _, terminated, truncated, _ = env.step(plan)
        done = terminated or truncated
    half_way = {t for t, agreed in agrees.items() if not agreed}
    assert 0 < len(half_way) < len(agrees) / 2

    settings = collect_settings(agent="expert", scenarios=["overtake-000"], perturb_fraction=0.0, offset_ego=1.0)
    card = collect(settings, tmp_path / "offset.zarr", progress=False)
    assert card["labels"]["branches_declined"] == {"offset_ego": len(half_way)}
    data = DrivingDataset(tmp_path / "offset.zarr")
    branched = {round(float(t), 3) for t in data.arrays["t"][:][data.arrays["perturbed"][:]]}
    assert branched and not branched & half_way


def test_a_closer_lead_needs_a_driven_target_and_one_frame():
    with pytest.raises(ValueError, match=r"closer_lead = 0.5: target = 'plan' has no plan"):
        collect_settings(target="plan", closer_lead=0.5)
    with pytest.raises(ValueError, match=r"closer_lead .* needs n_frames = 1"):
        collect_settings(target="expert", closer_lead=0.5, n_frames=2)
    with pytest.raises(ValueError, match=r"offset_ego = 0.5: target = 'plan' has no plan"):
        collect_settings(target="plan", offset_ego=0.5)
    with pytest.raises(ValueError, match=r"offset_ego .* needs n_frames = 1"):
        collect_settings(target="expert", offset_ego=0.5, n_frames=2)
    env = LoopDriveEnv(bank="smoke", n_frames=2, camera_size=(32, 64), observations=OBSERVED)
    env.reset(seed=0, options={"scenario": "lead_brake-000"})
    with pytest.raises(ValueError, match="n_frames = 2; the older frames would show the actor unmoved"):
        env.move_actor("lead", -5.0)
    with pytest.raises(ValueError, match="n_frames = 2; the older frames would show the ego unmoved"):
        env.shift_ego(1.0, 0.0)
    from training.recipes import RecipeError, load_recipe

    with pytest.raises(RecipeError, match=r"dagger.closer_lead needs data.n_frames = 1 \(it is 4\)"):
        load_recipe(None, ["dagger.rounds=1", "dagger.closer_lead=0.5", "data.n_frames=4"])
    with pytest.raises(RecipeError, match=r"dagger.offset_ego needs data.n_frames = 1 \(it is 4\)"):
        load_recipe(None, ["dagger.rounds=1", "dagger.offset_ego=0.5", "data.n_frames=4"])
    assert load_recipe(None, ["dagger.rounds=1", "dagger.closer_lead=0.5", "data.n_frames=1"]).dagger.closer_lead == 0.5


def test_label_every_is_validated():
    with pytest.raises(ValueError, match="label_every"):
        collect_settings(label_every=0)


@pytest.mark.slow
@pytest.mark.ray
def test_a_dagger_round_on_ray_workers_is_the_same_data_and_resumes_one_started_in_process(tmp_path, monkeypatch):
    """``workers``: the VLA drives on Ray actors (one torch thread each, as in-process) and the episodes
    are written in order, so a collection killed in-process and finished on two workers holds the
    same samples, bit for bit, as one that never left the process."""
    ray = pytest.importorskip("ray")
    from agents.vla import VLA, VLAConfig
    from training.data import record

    VLA(VLAConfig(size="tiny")).save_pretrained(tmp_path / "vla")
    cfg = collect_settings(agent=f"vla:{tmp_path / 'vla'}?reasoning=0&noise=0", target="expert")  # 3 episodes
    collect(cfg, tmp_path / "in_process.zarr", progress=False)

    real, calls = record._rollout, {"n": 0}

    def killed_before_the_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(record, "_rollout", killed_before_the_second)
    with pytest.raises(KeyboardInterrupt):
        collect(cfg, tmp_path / "resumed.zarr", progress=False)
    monkeypatch.setattr(record, "_rollout", real)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    try:
        collect(cfg.model_copy(update={"workers": 2}), tmp_path / "resumed.zarr", progress=False)
        assert not ray.is_initialized()  # the Ray it started is down again, out of the way of the training after it
    finally:
        ray.shutdown()
    a, b = DrivingDataset(tmp_path / "in_process.zarr"), DrivingDataset(tmp_path / "resumed.zarr")
    assert len(a) == len(b) > 0 and b.card["labels"]["episodes"] == 3
    for name in a.arrays:
        np.testing.assert_array_equal(a.arrays[name], b.arrays[name], err_msg=name)
    assert a.text == b.text
    assert {**a.card, "path": None} == {**b.card, "path": None}
