"""SFT with DAgger rounds: the schedule, the policy each round publishes and lets drive, the mixing
ratio, and an exact resume after kills in the middle of a round's training and of its collection."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.training.helpers import closing_copy, metrics_of, sft_recipe, weights_of
from training import dagger
from training.data import DatasetError, DrivingDataset, card_path
from training.recipes import RecipeError, load_recipe
from training.run import main as run_main

DAGGER = ["--set", "data.bank=smoke", "--set", "data.split=all"]


def dagger_recipe(tmp_path, data, **rounds) -> str:
    path = sft_recipe(tmp_path, data, steps=4)
    d = {"rounds": 2, "episodes": 1, "steps": 2, "label_every": 3, "expert_fraction": 0.5} | rounds
    path.write_text(path.read_text() + "[dagger]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items()))
    return str(path)


@pytest.fixture(scope="module")
def straight_run(dataset, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dagger")
    run = tmp / "straight"
    assert run_main(["--config", dagger_recipe(tmp, dataset), "--run-dir", str(run), *DAGGER]) == 0
    return run


def test_each_round_lets_the_policy_of_its_start_drive_and_the_expert_label(straight_run):
    rows = metrics_of(straight_run)
    rounds = [(r["step"], r["dagger/round"]) for r in rows if "dagger/round" in r]
    assert rounds == [(4, 1), (6, 2)]  # after the 4 expert-data steps, then every 2 steps
    assert max(r["step"] for r in rows) == 8
    for r in (1, 2):
        card = json.loads(card_path(dagger.round_data(straight_run, r)).read_text())
        policy = straight_run / "checkpoints" / f"dagger_round_{r}"
        assert card["source"]["agent"] == f"vla:{policy}?reasoning=0&noise=1"
        assert card["source"]["target"] == "expert" and card["episodes_complete"] == 1
        assert card["samples"] > 0
    # training went on after round 1's policy drove
    first, final = (weights_of(straight_run / "checkpoints" / n) for n in ("dagger_round_1", "final"))
    assert any(not torch.equal(first[k], final[k]) for k in first)


def test_batches_mix_the_expert_and_the_rounds_at_the_configured_ratio(dataset, straight_run, tmp_path):
    recipe = load_recipe(dagger_recipe(tmp_path, dataset, expert_fraction=0.75), DAGGER[1::2])
    expert = DrivingDataset(dataset)
    batches = dagger.MixedBatches(expert, recipe)
    target = batches.next(8).targets
    assert _from(expert, target).all()  # before the first round: the expert's data only
    for r in (1, 2):
        batches.add_round(DrivingDataset(dagger.round_data(straight_run, r)), r)
    assert len(batches) == len(expert) + sum(len(d) for d in batches.rounds)
    for _ in range(5):
        target = batches.next(8).targets
        assert _from(expert, target).tolist() == [True] * 6 + [False] * 2


def test_focused_batches_draw_half_their_on_policy_samples_by_how_wrong_the_policy_was(dataset, straight_run, tmp_path):
    recipe = load_recipe(dagger_recipe(tmp_path, dataset, focus="disagreement"), DAGGER[1::2])
    rounds = [DrivingDataset(dagger.round_data(straight_run, r)) for r in (1, 2)]
    batches = dagger.MixedBatches(DrivingDataset(dataset), recipe)
    for number, r in enumerate(rounds, 1):
        batches.add_round(r, number)
    wrong = np.concatenate(
        [np.linalg.norm(r.arrays["plan"][..., :2] - r.arrays["target"][..., :2], axis=-1).mean(-1) for r in rounds]
    )
    assert wrong.std() > 0.1  # the policy was nearer the expert at some states than at others
    np.testing.assert_allclose(batches.on_policy.p, (wrong + wrong.mean()) / (wrong + wrong.mean()).sum())
    drawn = np.concatenate([batches.on_policy.next(64) for _ in range(50)])
    assert wrong[drawn].mean() > wrong.mean() + 0.25 * wrong.std()  # the wrong states come back more often
    # the draws resume exactly from a checkpoint's state
    state, expected = batches.state(), [batches.next(8).targets for _ in range(3)]
    again = dagger.MixedBatches(DrivingDataset(dataset), recipe)
    again.restore(state, straight_run)
    for want in expected:
        np.testing.assert_array_equal(again.next(8)[2], want)


def test_weighted_draws_follow_their_weights_and_all_zero_weights_draw_uniformly():
    from training.loop import WeightedSampler

    drawn = np.concatenate([WeightedSampler(np.array([0.0, 1.0, 3.0]), seed=0, draws=k).next(100) for k in range(40)])
    np.testing.assert_allclose(np.bincount(drawn, minlength=3) / len(drawn), [0, 0.25, 0.75], atol=0.03)
    np.testing.assert_array_equal(WeightedSampler(np.zeros(4), seed=0).p, np.full(4, 0.25))


def _draws_follow(batches, weights, marked, straight_run, expected) -> np.ndarray:
    """The expert's samples are drawn in proportion to ``weights`` (the ``marked`` ones as often as their
    weights say), and the rounds' samples, once added, by ``expected`` too; the rounds' weights returned."""
    np.testing.assert_allclose(batches.sampler.p, weights / weights.sum())
    drawn = np.concatenate([batches.sampler.next(64) for _ in range(60)])
    np.testing.assert_allclose(marked[drawn].mean(), (weights * marked).sum() / weights.sum(), atol=0.03)
    for r in (1, 2):
        batches.add_round(DrivingDataset(dagger.round_data(straight_run, r)), r)
    on_policy = np.concatenate([expected(d) for d in batches.rounds])
    np.testing.assert_allclose(batches.on_policy.p, on_policy / on_policy.sum())
    return on_policy


def test_meta_action_weights_draw_a_rare_manoeuvre_that_much_more_often_and_resume_exactly(
    dataset, straight_run, tmp_path
):
    expert = DrivingDataset(dataset)
    shown = [set(json.loads(labels)) for labels in expert.text["meta_actions"]]
    rare = "decelerate"
    has = np.array([rare in s for s in shown])
    assert 0 < has.sum() < len(shown) / 2  # some samples show it, most do not
    weights = [f"train.meta_action_weights={{{rare} = 5.0, accelerate = 2.0}}"]
    recipe = load_recipe(dagger_recipe(tmp_path, dataset), DAGGER[1::2] + weights)

    def expected(data: DrivingDataset) -> np.ndarray:  # the largest weight a sample's labels show, else 1
        labels = [set(json.loads(x)) for x in data.text["meta_actions"]]
        return np.array([5.0 if rare in x else 2.0 if "accelerate" in x else 1.0 for x in labels])

    batches = dagger.MixedBatches(expert, recipe)
    on_policy = _draws_follow(batches, expected(expert), has, straight_run, expected)  # the rounds' by labels too
    assert len(set(on_policy)) > 1
    # a checkpoint's state gives the same draws again
    state, targets = batches.state(), [batches.next(8).targets for _ in range(3)]
    again = dagger.MixedBatches(DrivingDataset(dataset), recipe)
    again.restore(state, straight_run)
    for target in targets:
        np.testing.assert_array_equal(again.next(8)[2], target)
    with pytest.raises(RecipeError, match="'swerve' is not a meta-action"):
        load_recipe(dagger_recipe(tmp_path, dataset), ["train.meta_action_weights={swerve = 2.0}"])
    with pytest.raises(RecipeError, match=r"meta_action_weights\.stop: 0\.0 must be > 0"):
        load_recipe(dagger_recipe(tmp_path, dataset), ["train.meta_action_weights={stop = 0.0}"])


def test_family_weights_multiply_each_samples_draw_weight_by_its_scenario_familys(dataset, straight_run, tmp_path):
    expert = DrivingDataset(dataset)
    curve = np.array([s.startswith("curve-") for s in expert.text["scenario"]])  # smoke: curve-000, lead_brake-000
    assert 0 < curve.sum() < len(curve)
    settings = ["train.family_weights={curve = 3.0}", "train.meta_action_weights={decelerate = 2.0}"]
    recipe = load_recipe(dagger_recipe(tmp_path, dataset), DAGGER[1::2] + settings)

    def expected(data: DrivingDataset) -> np.ndarray:  # the meta-action weight times the family's (curve: 3)
        slows = np.array(["decelerate" in set(json.loads(x)) for x in data.text["meta_actions"]])
        family = np.array([3.0 if s.startswith("curve-") else 1.0 for s in data.text["scenario"]])
        return np.where(slows, 2.0, 1.0) * family

    want = expected(expert)
    assert len(set(want)) > 2  # both weights vary over the samples
    _draws_follow(dagger.MixedBatches(expert, recipe), want, curve, straight_run, expected)  # the rounds' too
    misspelt = load_recipe(dagger_recipe(tmp_path, dataset), DAGGER[1::2] + ["train.family_weights={curves = 2.0}"])
    with pytest.raises(DatasetError, match=r"\['curves'\] are no family of bank 'smoke'.*'lead_brake'"):
        dagger.MixedBatches(expert, misspelt)
    with pytest.raises(RecipeError, match=r"family_weights\.curve: 0\.0 must be > 0"):
        load_recipe(dagger_recipe(tmp_path, dataset), ["train.family_weights={curve = 0.0}"])


def test_hazard_weight_draws_the_states_near_the_car_ahead_that_much_more_often(dataset, straight_run, tmp_path):
    from agents.vla.perception import time_to_lead

    copy = closing_copy(dataset, tmp_path)
    expert = DrivingDataset(copy)
    near = time_to_lead(expert.arrays["perception"][:]) < 4.0
    np.testing.assert_array_equal(near, np.arange(len(expert)) % 3 == 0)
    settings = ["train.hazard_weight=3.0", "train.meta_action_weights={stop = 5.0}"]
    recipe = load_recipe(dagger_recipe(tmp_path, copy), DAGGER[1::2] + settings)

    def expected(data: DrivingDataset) -> np.ndarray:  # the larger of the two weights, else 1
        stop = np.array(["stop" in set(json.loads(x)) for x in data.text["meta_actions"]])
        hazard = np.where(time_to_lead(data.arrays["perception"][:]) < 4.0, 3.0, 1.0)
        return np.maximum(np.where(stop, 5.0, 1.0), hazard)

    want = expected(expert)
    assert set(want) >= {1.0, 3.0}
    _draws_follow(dagger.MixedBatches(expert, recipe), want, near, straight_run, expected)  # the rounds' too
    with pytest.raises(RecipeError, match="hazard_weight"):
        load_recipe(dagger_recipe(tmp_path, dataset), ["train.hazard_weight=0.5"])


def test_hazard_weight_refuses_data_without_perception_targets(dataset, tmp_path):
    import shutil

    old = tmp_path / "old.zarr"
    shutil.copytree(dataset, old)
    shutil.rmtree(old / "perception")
    recipe = load_recipe(dagger_recipe(tmp_path, dataset), DAGGER[1::2] + ["train.hazard_weight=2.0"])
    with pytest.raises(DatasetError, match=r"old\.zarr: train\.hazard_weight needs the perception targets"):
        dagger.MixedBatches(DrivingDataset(old), recipe)


def test_focus_refuses_round_data_without_the_policys_plans(dataset, straight_run, tmp_path):
    import shutil

    old = tmp_path / "old_round.zarr"
    shutil.copytree(dagger.round_data(straight_run, 1), old)
    shutil.rmtree(old / "plan")
    batches = dagger.MixedBatches(
        DrivingDataset(dataset), load_recipe(dagger_recipe(tmp_path, dataset, focus="disagreement"), DAGGER[1::2])
    )
    with pytest.raises(DatasetError, match=r"old_round\.zarr.*plans"):
        batches.add_round(DrivingDataset(old), 1)


def _from(ds: DrivingDataset, targets: np.ndarray) -> np.ndarray:
    return np.array([(ds.arrays["target"] == t).all(axis=(1, 2)).any() for t in targets])


def test_dagger_resumes_exactly_after_kills_in_training_and_in_collection(dataset, straight_run, tmp_path, monkeypatch):
    from training.data import record

    recipe, broken = dagger_recipe(tmp_path, dataset), tmp_path / "broken"
    # killed in round 1's training (after its collection) ...
    assert run_main(["--config", recipe, "--run-dir", str(broken), *DAGGER, "--set", "train.max_steps_this_run=5"]) == 0
    # ... and then inside round 2's collection
    real = record._rollout

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(record, "_rollout", killed)
    with pytest.raises(KeyboardInterrupt):
        run_main(["--resume", str(broken)])
    monkeypatch.setattr(record, "_rollout", real)
    assert (broken / "checkpoints" / "dagger_round_2").exists()
    assert run_main(["--resume", str(broken)]) == 0
    a, b = weights_of(straight_run / "checkpoints" / "final"), weights_of(broken / "checkpoints" / "final")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert metrics_of(straight_run) == metrics_of(broken)


def test_round_schedule_and_refusals(dataset, tmp_path):
    recipe = load_recipe(dagger_recipe(tmp_path, dataset, rounds=3, steps=5))
    assert dagger.total_steps(recipe) == 4 + 3 * 5
    assert [dagger.round_starting_at(s, recipe) for s in (0, 3, 4, 5, 9, 14, 19)] == [None, None, 1, None, 2, 3, None]
    recipe = load_recipe(dagger_recipe(tmp_path, dataset, round0_driver="expert?time_headway=0.6", rounds=1, steps=4))
    assert [dagger.round_starting_at(s, recipe) for s in (0, 1, 4)] == [0, None, 1]
    first, second = dagger.round_scenarios(recipe, 1), dagger.round_scenarios(recipe, 2)
    assert len(first) == 1 and first != second  # a seeded draw per round
    with pytest.raises(RecipeError, match=r"dagger\.round0_driver: .*unknown option\(s\) \['headway'\]"):
        load_recipe(dagger_recipe(tmp_path, dataset, round0_driver="expert?headway=0.6"))
    with pytest.raises(RecipeError, match="two_stage"):
        load_recipe(dagger_recipe(tmp_path, dataset), ["train.two_stage=true"])


def test_round0_lets_another_driver_drive_before_the_first_step_and_resumes_exactly(dataset, tmp_path):
    follower = "expert?time_headway=0.6&min_gap=2"
    recipe = dagger_recipe(tmp_path, dataset, round0_driver=follower, rounds=1)
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert run_main(["--config", recipe, "--run-dir", str(whole), *DAGGER]) == 0
    rows = metrics_of(whole)
    assert [(r["step"], r["dagger/round"]) for r in rows if "dagger/round" in r] == [(0, 0), (4, 1)]
    card = json.loads(card_path(dagger.round_data(whole, 0)).read_text())
    assert card["source"]["agent"] == follower and card["source"]["target"] == "expert" and card["samples"] > 0
    assert not (whole / "checkpoints" / "dagger_round_0").exists()  # no policy of its own to publish
    # the follower's data is in the batches from the first step, and a resume finds it and round 1's again
    assert run_main(["--config", recipe, "--run-dir", str(broken), *DAGGER, "--set", "train.max_steps_this_run=5"]) == 0
    assert run_main(["--resume", str(broken)]) == 0
    a, b = weights_of(whole / "checkpoints" / "final"), weights_of(broken / "checkpoints" / "final")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert metrics_of(whole) == metrics_of(broken)
