"""SFT: exact resume, atomic checkpoints, two-stage freezing, and the tiny collect -> SFT -> eval pipeline."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from agents import load_agent
from tests.training.helpers import closing_copy, metrics_of, sft_recipe, weights_of
from training import checkpoints as ckpt_mod
from training.recipes import load_recipe
from training.run import main as run_main


def test_sft_resume_gives_the_same_result(dataset, tmp_path, capsys):
    recipe = sft_recipe(tmp_path, dataset)
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main(["--config", str(recipe), "--run-dir", str(straight)]) == 0
    assert run_main(["--config", str(recipe), "--run-dir", str(broken), "--set", "train.max_steps_this_run=3"]) == 0
    assert (broken / "checkpoints" / "latest").read_text().strip() == "step_0000002"
    assert not (broken / "checkpoints" / "final").exists()
    assert run_main(["--config", str(recipe), "--run-dir", str(broken)]) == 2  # the same command again: no restart
    assert "--resume" in capsys.readouterr().err
    assert (broken / "checkpoints" / "latest").read_text().strip() == "step_0000002"
    assert run_main(["--resume", str(broken), "--set", "train.max_steps_this_run=100"]) == 0
    a, b = weights_of(straight / "checkpoints" / "final"), weights_of(broken / "checkpoints" / "final")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert metrics_of(straight) == metrics_of(broken)
    assert (straight / "curves.png").exists() and list((straight / "tb").iterdir())
    saved = json.loads((straight / "config.json").read_text())
    assert saved["train"]["steps"] == 6 and saved["seed"] == 3
    assert sorted(p.name for p in (straight / "checkpoints").glob("step_*")) == ["step_0000004", "step_0000006"]


def test_with_ema_decay_a_run_saves_the_average_of_its_steps_and_resumes_it_exactly(dataset, tmp_path):
    """``ema_decay``: every checkpoint's model is the warmed exponential average of the weights after each
    step (computed here by hand from a run without it, whose steps are the same bit for bit), the weights
    trained are beside it, and a killed run resumes both exactly."""
    decay = 0.3  # the warm-up (1 + n) / (10 + n) passes it after 3 updates: both branches are used
    recipe = sft_recipe(tmp_path, dataset)
    every_step = ["--set", "checkpoint.every=1", "--set", "checkpoint.keep_last=10"]
    plain, straight, broken = tmp_path / "plain", tmp_path / "straight", tmp_path / "broken"
    averaged = [*every_step, "--set", f"train.ema_decay={decay}"]
    assert run_main(["--config", str(recipe), "--run-dir", str(plain), *every_step]) == 0
    assert run_main(["--config", str(recipe), "--run-dir", str(straight), *averaged]) == 0
    assert (
        run_main(["--config", str(recipe), "--run-dir", str(broken), *averaged, "--set", "train.max_steps_this_run=3"])
        == 0
    )
    assert run_main(["--resume", str(broken)]) == 0

    steps = [weights_of(plain / "checkpoints" / f"step_{k:07d}") for k in range(1, 7)]
    expected = dict(steps[0])
    for n, weights in enumerate(steps[1:], start=1):
        d = min(decay, (1 + n) / (10 + n))  # after n updates
        expected = {k: d * expected[k] + (1 - d) * weights[k] for k in expected}
    final = weights_of(straight / "checkpoints" / "final")
    assert final.keys() == expected.keys()
    for k in final:
        torch.testing.assert_close(final[k], expected[k], msg=k)
    assert any(not torch.equal(final[k], steps[-1][k]) for k in final)  # the average, not the last step
    trained = ckpt_mod.load_trained_weights(straight / "checkpoints" / "step_0000006")
    assert (
        json.loads((straight / "checkpoints" / "step_0000006" / "trainer_state.json").read_text())["ema_updates"] == 6
    )
    expert = {k: v for k, v in trained.items() if k.startswith("expert.")}
    assert expert and all(torch.equal(v, steps[-1][k[len("expert.") :]]) for k, v in expert.items())
    resumed = weights_of(broken / "checkpoints" / "final")
    for k in final:
        torch.testing.assert_close(resumed[k], final[k], rtol=0, atol=0, msg=k)
    assert metrics_of(broken) == metrics_of(straight) == metrics_of(plain)
    with pytest.raises(ckpt_mod.CheckpointError, match="no trained"):
        ckpt_mod.load_trained_weights(plain / "checkpoints" / "final")


def test_a_failed_save_never_breaks_the_latest_checkpoint(dataset, tmp_path, monkeypatch):
    recipe = sft_recipe(tmp_path, dataset)
    run = tmp_path / "run"
    real = ckpt_mod.save_file
    calls = {"n": 0}

    def fails_second_time(tensors, path, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            real({k: v for k, v in list(tensors.items())[:1]}, path)  # half a file, then the crash
            raise OSError("disk full (injected)")
        return real(tensors, path, *a, **k)

    monkeypatch.setattr(ckpt_mod, "save_file", fails_second_time)
    with pytest.raises(OSError, match="injected"):
        from training.run import train

        train(load_recipe(recipe), run, progress=False)
    monkeypatch.setattr(ckpt_mod, "save_file", real)
    latest = ckpt_mod.latest_checkpoint(run)
    assert latest.name == "step_0000002"
    state, optim, rng = ckpt_mod.load_trainer_state(latest)
    assert state["step"] == 2 and optim["state"] and "noise" in rng
    assert list((run / "checkpoints").glob(".tmp-*"))  # the broken save is left aside, not promoted
    assert run_main(["--resume", str(run)]) == 0
    assert not list((run / "checkpoints").glob(".tmp-*"))
    assert (run / "checkpoints" / "final" / "vla_config.json").exists()


def test_two_stage_freezes_the_vlm_in_stage_two(dataset, tmp_path):
    recipe = sft_recipe(tmp_path, dataset, steps=4, two_stage=True, stage1_fraction=0.5)
    run = tmp_path / "two"
    assert run_main(["--config", str(recipe), "--run-dir", str(run), "--set", "checkpoint.keep_last=5"]) == 0
    s2, s4 = weights_of(run / "checkpoints" / "step_0000002"), weights_of(run / "checkpoints" / "step_0000004")
    backbone = [k for k in s2 if k.startswith("backbone.")]
    expert = [k for k in s2 if not k.startswith("backbone.")]
    assert all(torch.equal(s2[k], s4[k]) for k in backbone)
    assert any(not torch.equal(s2[k], s4[k]) for k in expert)
    stages = [r["stage"] for r in metrics_of(run)]
    assert stages == [1, 1, 2, 2]


def test_text_only_post_training_leaves_the_trajectory_head_bit_identical(dataset, tmp_path):
    """The Cosmos Cookbook's way (reasoning cross-entropy only, the action expert frozen) cannot touch
    the trajectory head's weights; trajectory-head SFT moves them."""
    recipe = sft_recipe(tmp_path, dataset, steps=2)
    start = tmp_path / "start"
    assert run_main(["--config", str(recipe), "--run-dir", str(start)]) == 0
    init = f"init_from={start / 'checkpoints' / 'final'}"
    text = ["--set", init, "--set", 'train.parts="vlm"', "--set", "train.flow_weight=0"]
    assert run_main(["--config", str(recipe), "--run-dir", str(tmp_path / "text"), *text]) == 0
    head = ["--set", init, "--set", 'train.parts="expert"', "--set", "train.text_weight=0"]
    assert run_main(["--config", str(recipe), "--run-dir", str(tmp_path / "head"), *head]) == 0
    before = weights_of(start / "checkpoints" / "final")
    text_only = weights_of(tmp_path / "text" / "checkpoints" / "final")
    head_only = weights_of(tmp_path / "head" / "checkpoints" / "final")
    expert = [k for k in before if not k.startswith("backbone.")]
    backbone = [k for k in before if k.startswith("backbone.")]
    assert all(torch.equal(before[k], text_only[k]) for k in expert)
    assert any(not torch.equal(before[k], text_only[k]) for k in backbone)
    assert all(torch.equal(before[k], head_only[k]) for k in backbone)
    assert any(not torch.equal(before[k], head_only[k]) for k in expert)


def test_a_head_trained_with_unconditional_draws_is_saved_as_guidable_and_evaluated_with_guidance(dataset, tmp_path):
    """``flow_unconditional`` reaches the checkpoint's config (what lets an agent guide its plans), and
    the recipe's ``[eval] guidance`` is in the spec of the agent its evaluations and rounds drive."""
    recipe = sft_recipe(tmp_path, dataset, steps=2, flow_unconditional=0.5)
    run = tmp_path / "guided"
    assert run_main(["--config", str(recipe), "--run-dir", str(run)]) == 0
    saved = json.loads((run / "checkpoints" / "final" / "vla_config.json").read_text())
    assert saved["vla"]["flow_unconditional"] == 0.5
    agent = load_agent(f"vla:{run / 'checkpoints' / 'final'}?reasoning=0&noise=0&guidance=2,1")
    assert agent.guidance == (2.0, 1.0)
    r = load_recipe(recipe, ["eval.guidance=[2, 1]", "eval.noise=0"])
    assert r.eval.agent_options() == "reasoning=0&noise=0&guidance=2,1"
    assert load_recipe(recipe, []).eval.agent_options() == "reasoning=0&noise=1"


def test_the_perception_probe_trains_is_saved_resumes_exactly_and_needs_data_that_records_its_targets(
    dataset, tmp_path, capsys
):
    """``perception_weight`` gives the VLA a probe sized by the data's perception targets, logs its loss,
    saves it with the checkpoint and resumes it exactly (and builds the wider state token of
    ``perception_in_state``, which ``flow_perception_truth`` gives the data's targets, refused without it);
    data recorded without the targets is refused."""
    from safetensors.torch import load_file

    from agents.vla.perception import PERCEPTION_TARGETS

    recipe = sft_recipe(tmp_path, dataset, steps=4, perception_weight=2.0)
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main(["--config", str(recipe), "--run-dir", str(straight)]) == 0
    assert run_main(["--config", str(recipe), "--run-dir", str(broken), "--set", "train.max_steps_this_run=2"]) == 0
    assert run_main(["--resume", str(broken)]) == 0
    final = straight / "checkpoints" / "final"
    saved = json.loads((final / "vla_config.json").read_text())
    assert saved["vla"]["perception_targets"] == len(PERCEPTION_TARGETS)
    a, b = (
        load_file(final / "perception_probe.safetensors"),
        load_file(broken / "checkpoints/final/perception_probe.safetensors"),
    )
    assert a.keys() == {"score.weight", "score.bias", "value.weight", "value.bias"}
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    rows = metrics_of(straight)
    assert rows == metrics_of(broken) and all(r["loss/perception"] > 0 for r in rows if "loss/flow" in r)
    assert load_agent(f"vla:{final}?reasoning=0&noise=0").model.perception_probe is not None
    in_state = tmp_path / "in_state"
    assert (
        run_main(["--config", str(recipe), "--run-dir", str(in_state), "--set", "model.perception_in_state=true"]) == 0
    )
    saved = json.loads((in_state / "checkpoints" / "final" / "vla_config.json").read_text())
    assert saved["vla"]["perception_in_state"] and saved["expert"]["state_dim"] == 27 + len(PERCEPTION_TARGETS)
    truth = ["--config", str(recipe), "--set", "train.flow_perception_truth=1.0"]
    in_state_truth = ["--run-dir", str(tmp_path / "truth"), "--set", "model.perception_in_state=true"]
    assert run_main([*truth, *in_state_truth]) == 0  # the plan given the data's targets
    given = [r["loss/flow"] for r in metrics_of(tmp_path / "truth") if "loss/flow" in r]
    assert given != [r["loss/flow"] for r in metrics_of(in_state) if "loss/flow" in r]
    assert run_main([*truth, "--run-dir", str(tmp_path / "unread")]) == 2
    assert "flow_perception_truth: the plan reads no probe" in capsys.readouterr().err

    old = tmp_path / "old.zarr"
    shutil.copytree(dataset, old)
    shutil.rmtree(old / "perception")  # as data collected before the targets were recorded
    old_recipe = sft_recipe(tmp_path, old, steps=1, perception_weight=1.0)
    assert run_main(["--config", str(old_recipe), "--run-dir", str(tmp_path / "old_run")]) == 2
    assert f"{old}: no perception array" in capsys.readouterr().err


def test_perception_hazard_weight_counts_the_probes_loss_near_the_car_ahead_that_many_times(dataset, tmp_path):
    """``perception_hazard_weight`` multiplies the probe's loss on the states ``hazard_weight`` would draw more
    often (under ``hazard_ttc_s`` from the car ahead) and leaves the draws, and so the plan's loss, alone;
    without a probe to weight it is refused."""
    from agents.vla.perception import time_to_lead
    from training.data import DrivingDataset
    from training.loop import perception_loss_weights
    from training.recipes import RecipeError, TrainSection

    copy = closing_copy(dataset, tmp_path)
    perception = DrivingDataset(copy).arrays["perception"][:]
    near = time_to_lead(perception) < 4.0
    assert near.any() and not near.all()
    weighted = TrainSection(perception_weight=1.0, perception_hazard_weight=3.0)
    np.testing.assert_array_equal(perception_loss_weights(perception, weighted), np.where(near, 3.0, 1.0))
    assert perception_loss_weights(perception, TrainSection(perception_weight=1.0)) is None

    first = {}
    for w in (1.0, 3.0):
        recipe = sft_recipe(tmp_path, copy, steps=1, perception_weight=1.0, perception_hazard_weight=w)
        assert run_main(["--config", str(recipe), "--run-dir", str(tmp_path / f"w{w}")]) == 0
        first[w] = next(r for r in metrics_of(tmp_path / f"w{w}") if "loss/flow" in r)
    assert first[3.0]["loss/flow"] == first[1.0]["loss/flow"]  # the same batch, the same plan loss
    assert first[3.0]["loss/perception"] > first[1.0]["loss/perception"]
    with pytest.raises(RecipeError, match=r"perception_hazard_weight.*perception_weight > 0"):
        load_recipe(sft_recipe(tmp_path, copy, steps=1, perception_hazard_weight=2.0), [])
    with pytest.raises(RecipeError, match=r"flow_perception_truth.*perception_weight > 0"):
        load_recipe(sft_recipe(tmp_path, copy, steps=1, flow_perception_truth=0.5), [])


def test_the_clearance_loss_trains_the_plan_logs_its_metres_and_resumes_exactly(dataset, tmp_path, capsys, monkeypatch):
    """``clearance_weight`` adds the clearance loss (metres past the car ahead) to the plan's losses and logs
    it, with its margin and ``clearance_synthetic`` given to every batch, and a run killed half-way resumes to
    the same metrics. Without the probe's targets, without the loss, or without a state token that reads the
    car, it is refused, saying why."""
    from agents.vla import VLA
    from training.recipes import RecipeError

    given, plain_losses = [], VLA.losses

    def recording_losses(self, *args, **kwargs):
        given.append((kwargs["clearance_margin"], kwargs["clearance_synthetic"]))
        return plain_losses(self, *args, **kwargs)

    monkeypatch.setattr(VLA, "losses", recording_losses)
    copy = closing_copy(dataset, tmp_path)
    options = {"perception_weight": 1.0, "clearance_weight": 0.5, "clearance_margin_m": 3.0}
    recipe = sft_recipe(tmp_path, copy, steps=4, **options, clearance_synthetic=0.75)
    in_state = ["--set", "model.perception_in_state=true"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main(["--config", str(recipe), "--run-dir", str(straight), *in_state]) == 0
    assert given and set(given) == {(3.0, 0.75)}
    killed = ["--set", "train.max_steps_this_run=2"]
    assert run_main(["--config", str(recipe), "--run-dir", str(broken), *in_state, *killed]) == 0
    assert run_main(["--resume", str(broken)]) == 0
    rows = metrics_of(straight)
    assert rows == metrics_of(broken) and any(r["loss/clearance"] > 0 for r in rows if "loss/flow" in r)
    assert run_main(["--config", str(recipe), "--run-dir", str(tmp_path / "unread")]) == 2
    assert "clearance_synthetic: a synthetic car ahead reaches the plan through the state token" in (
        capsys.readouterr().err
    )
    with pytest.raises(RecipeError, match=r"clearance_weight.*perception_weight > 0"):
        load_recipe(sft_recipe(tmp_path, copy, steps=1, clearance_weight=1.0), [])
    with pytest.raises(RecipeError, match=r"clearance_synthetic.*clearance_weight > 0"):
        load_recipe(sft_recipe(tmp_path, copy, steps=1, perception_weight=1.0, clearance_synthetic=0.5), [])


def test_the_manoeuvre_head_trains_is_saved_resumes_exactly_and_plans_with_the_datas_manoeuvres(
    dataset, tmp_path, capsys, monkeypatch
):
    """``manoeuvre_weight`` gives the VLA a manoeuvre head, logs its loss, saves it with the checkpoint and
    resumes it exactly; ``manoeuvre_in_state`` widens the state token by the classes and plans them
    (``manoeuvre_by_s`` and ``manoeuvre_frame``: what the classes mean, saved with the checkpoint, so RL's
    behaviour-cloning anchor gives the plan the same classes); either without a head is refused, a frame
    without its time, and a frame other than the one an ``init_from`` checkpoint's mean plans were read in."""
    from safetensors.torch import load_file

    from agents.vla import VLA
    from agents.vla.manoeuvre import manoeuvre_names
    from loopdrive.seeding import rng as seeded_rng
    from training.data.dataset import SampleBatch
    from training.rl.demonstrations import Demonstrations

    recipe = sft_recipe(tmp_path, dataset, steps=4, manoeuvre_weight=1.0)
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    in_state = ["--set", "model.manoeuvre_in_state=true", "--set", "train.manoeuvre_by_s=3.0"]
    in_state += ["--set", "train.manoeuvre_frame=route"]
    assert run_main(["--config", str(recipe), "--run-dir", str(straight), *in_state]) == 0
    assert (
        run_main(["--config", str(recipe), "--run-dir", str(broken), *in_state, "--set", "train.max_steps_this_run=2"])
        == 0
    )
    assert run_main(["--resume", str(broken)]) == 0
    final = straight / "checkpoints" / "final"
    saved = json.loads((final / "vla_config.json").read_text())
    lane_classes = len(manoeuvre_names(stop=False))
    assert saved["vla"]["manoeuvres"] == lane_classes and saved["vla"]["manoeuvre_in_state"]
    assert saved["expert"]["state_dim"] == 27 + lane_classes
    a, b = weights_of(final), weights_of(broken / "checkpoints" / "final")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    head = load_file(final / "manoeuvre_head.safetensors")
    for k, v in load_file(broken / "checkpoints/final/manoeuvre_head.safetensors").items():
        torch.testing.assert_close(head[k], v, rtol=0, atol=0, msg=k)
    rows = metrics_of(straight)
    assert rows == metrics_of(broken) and all(r["loss/manoeuvre"] > 0 for r in rows if "loss/flow" in r)
    assert load_agent(f"vla:{final}?reasoning=0&noise=0").model.manoeuvre_head is not None
    assert json.loads((straight / "config.json").read_text())["train"]["manoeuvre_by_s"] == 3.0
    assert saved["vla"]["manoeuvre_by_s"] == 3.0 and saved["vla"]["manoeuvre_frame"] == "route"
    # what its classes mean travels with it, to RL's anchor:
    policy, given = VLA.from_pretrained(final), []
    plain_losses = policy.losses
    policy.losses = lambda *a, **k: given.append(k["manoeuvres"]) or plain_losses(*a, **k)
    demos = Demonstrations(dataset, seed=0, batch=4, with_text=False)
    assert torch.isfinite(demos.loss(policy, step=0))
    rng = seeded_rng("demonstrations", 0, 0)  # the anchor's batch of step 0
    idx = np.sort(rng.choice(len(demos.data), size=4, replace=False))
    np.testing.assert_array_equal(given[0].numpy(), demos.data.batch(idx).manoeuvre_classes(3.0, "route"))
    asked = []  # (this data's classes read the same in both frames: the meaning asked for is what is checked)
    plain_classes = SampleBatch.manoeuvre_classes
    monkeypatch.setattr(SampleBatch, "manoeuvre_classes", lambda b, *a: asked.append(a) or plain_classes(b, *a))
    demos.loss(policy, step=1)
    assert asked == [(3.0, "route", False, None)]  # by_s, frame, stop, stop_by_s
    no_head = ["--config", str(recipe), "--run-dir", str(tmp_path / "no_head"), "--set", "train.manoeuvre_weight=0"]
    assert run_main([*no_head, "--set", "train.manoeuvre_by_s=3.0"]) == 2
    assert "train.manoeuvre_by_s: no manoeuvre head" in capsys.readouterr().err
    assert run_main([*no_head, "--set", "train.manoeuvre_frame=route"]) == 2
    assert "train.manoeuvre_frame: no manoeuvre head" in capsys.readouterr().err
    no_time = ["--config", str(recipe), "--run-dir", str(tmp_path / "no_time"), "--set", "train.manoeuvre_frame=route"]
    assert run_main(no_time) == 2
    assert "train.manoeuvre_frame: the classes' frame needs their time" in capsys.readouterr().err
    # a start whose plans begin from mean plans of the route frame's classes is not trained on the ego's
    start = tmp_path / "route_start"
    shutil.copytree(final, start)
    config = json.loads((start / "vla_config.json").read_text())
    config["vla"]["manoeuvre_origins"] = np.zeros((lane_classes, 64, 2)).tolist()
    (start / "vla_config.json").write_text(json.dumps(config))
    other = ["--config", str(recipe), "--run-dir", str(tmp_path / "other"), "--set", "train.manoeuvre_by_s=3.0"]
    assert run_main([*other, "--set", f"init_from={start}", "--set", "train.manoeuvre_frame=ego"]) == 2
    assert "the init_from checkpoint's plans start from its classes' mean plans as 'route'" in capsys.readouterr().err


def test_manoeuvre_origins_are_each_classs_mean_plan_and_data_without_a_class_is_refused(dataset, tmp_path, capsys):
    """``manoeuvre_origin``'s starts are each class's mean target in the flow's normalised actions (the classes
    as ``manoeuvre_by_s`` and ``manoeuvre_stop`` read them; the stop's brakes); an SFT run on data without one
    of the classes is refused by name; ``[eval] hold`` reaches the agent spec its evaluations drive."""
    from agents.vla import action_space
    from agents.vla.config import VLAConfig
    from agents.vla.manoeuvre import MANOEUVRES, manoeuvre_names
    from training.data import DrivingDataset
    from training.data.labels import manoeuvre_classes
    from training.sft import manoeuvre_origins

    data = DrivingDataset(dataset)
    lanes = len(manoeuvre_names(stop=False))
    data.manoeuvres = np.arange(len(data)) % lanes  # every lane class, whatever the smoke run drove
    speed = action_space.initial_speed(torch.from_numpy(data.arrays["ego_history"][:]))
    recorded = np.array(data.arrays["target"][:])
    for i in range(0, len(data), 6):  # and stops: a sixth of the futures (kept lanes) brake to a stand in 2 s
        steps = np.concatenate([np.linspace(float(speed[i]), 0.0, 21)[1:], np.zeros(44)]) * 0.1
        recorded[i, :, :] = 0.0
        recorded[i, :, 0] = np.cumsum(steps)
    data.arrays["target"] = recorded
    targets = torch.from_numpy(recorded).float()
    actions = action_space.from_trajectory(targets, speed, lateral="lateral_acceleration")
    normalised = (actions - torch.tensor([0.2, 0.01])) / torch.tensor([1.1, 0.4])
    for stop in (False, True):
        config = VLAConfig(
            lateral_action="lateral_acceleration",
            action_mean=(0.2, 0.01),
            action_std=(1.1, 0.4),
            manoeuvre_by_s=3.0,
            manoeuvre_stop=stop,
        )
        origins = torch.tensor(manoeuvre_origins(data, config))
        assert origins.shape == (len(manoeuvre_names(stop)), 64, 2)
        classes = manoeuvre_classes(data.manoeuvres, targets.numpy(), 3.0, stop=stop)
        assert (classes == MANOEUVRES.index("stop")).any() == stop
        for k in range(len(origins)):
            if (classes == k).any():
                torch.testing.assert_close(origins[k], normalised[torch.from_numpy(classes == k)].mean(0))
    assert origins[MANOEUVRES.index("stop"), :10, 0].mean() < origins[0, :10, 0].mean() - 0.5  # it brakes
    # keep_origin_with_stops: keep's start is a head's without the stop class (its braking kept), the rest unchanged
    keep = MANOEUVRES.index("keep_lane")
    with_stops = torch.tensor(manoeuvre_origins(data, config.model_copy(update={"keep_origin_with_stops": True})))
    without_class = torch.tensor(manoeuvre_origins(data, config.model_copy(update={"manoeuvre_stop": False})))
    torch.testing.assert_close(with_stops[keep], without_class[keep])
    assert not torch.allclose(with_stops[keep], origins[keep])
    torch.testing.assert_close(with_stops[keep + 1 :], origins[keep + 1 :])
    recipe = sft_recipe(tmp_path, dataset, steps=2, manoeuvre_weight=1.0)
    run = ["--config", str(recipe), "--run-dir", str(tmp_path / "run"), "--set", "model.manoeuvre_origin=true"]
    present = set(DrivingDataset(dataset).manoeuvres.tolist())
    missing = next(name for k, name in enumerate(MANOEUVRES) if k not in present)  # lead_brake and curve: no change
    assert run_main(run) == 2
    assert f"{dataset}: no sample of manoeuvre {missing!r}" in capsys.readouterr().err
    # its evaluations (and DAgger rounds) can hold the head's lane changes
    assert load_recipe(recipe, ["eval.hold=6", "eval.noise=0"]).eval.agent_options() == "reasoning=0&noise=0&hold=6"
    shifted = load_recipe(recipe, ["eval.hold=12", "eval.route_shift=3.5", "eval.noise=0"]).eval.agent_options()
    assert shifted == "reasoning=0&noise=0&hold=12&route_shift=3.5"


def test_with_route_origin_each_manoeuvres_origin_is_its_mean_residual_from_the_routes_actions(dataset):
    """``route_origin``: a class's origin plus its samples' mean route actions is the class's mean plan, so
    the flow starts, on average over the class, where ``manoeuvre_origin`` alone starts it."""
    from agents.vla import action_space
    from agents.vla.config import VLAConfig
    from agents.vla.manoeuvre import manoeuvre_names
    from agents.vla.route_prior import route_origin
    from training.data import DrivingDataset
    from training.data.labels import manoeuvre_under_way
    from training.sft import manoeuvre_origins

    data = DrivingDataset(dataset)
    lanes = len(manoeuvre_names(stop=False))
    data.manoeuvres = np.arange(len(data)) % lanes
    common = dict(lateral_action="lateral_acceleration", action_mean=(0.2, 0.01), action_std=(1.1, 0.4))
    common |= dict(manoeuvres=3, manoeuvre_origin=True, manoeuvre_by_s=3.0)
    plain = torch.tensor(manoeuvre_origins(data, VLAConfig(**common)))
    residual = torch.tensor(manoeuvre_origins(data, VLAConfig(**common, route_origin=True)))
    speed = action_space.initial_speed(torch.from_numpy(data.arrays["ego_history"][:])).numpy()
    route = torch.from_numpy(route_origin(data.arrays["route"][:], speed, "lateral_acceleration", (1.1, 0.4)))
    assert route.abs().max() > 0.1  # the smoke data holds a curve
    classes = manoeuvre_under_way(data.manoeuvres, data.arrays["target"][:], 3.0)
    for k in range(lanes):
        if (classes == k).any():
            mean_route = route[torch.from_numpy(classes == k)].mean(0)
            torch.testing.assert_close(residual[k, :, 0], plain[k, :, 0])
            torch.testing.assert_close(residual[k, :, 1] + mean_route, plain[k, :, 1], atol=1e-5, rtol=1e-5)


def test_a_recipe_that_learns_nothing_or_mixes_stages_and_parts_is_refused(dataset, tmp_path):
    from training.recipes import RecipeError

    recipe = sft_recipe(tmp_path, dataset)
    with pytest.raises(RecipeError, match="nothing would be learned"):
        load_recipe(recipe, ["train.text_weight=0", "train.flow_weight=0"])
    with pytest.raises(RecipeError, match="two_stage sets the parts"):
        load_recipe(recipe, ["train.two_stage=true", 'train.parts="vlm"'])


@pytest.mark.slow
def test_tiny_pipeline_collect_sft_evaluate(tmp_path, capsys):
    """The whole loop in miniature: collect -> label -> SFT a few steps -> closed-loop evaluation."""
    from loopdrive.cli import main

    data = tmp_path / "d.zarr"
    assert (
        main(
            [
                "collect",
                "--bank",
                "smoke",
                "--split",
                "test",
                "--out",
                str(data),
                "--n-frames",
                "1",
                "--scenarios",
                "straight-000",
            ]
        )
        == 0
    )
    assert "samples from 1 episodes" in capsys.readouterr().out
    recipe = sft_recipe(tmp_path, data, steps=4)
    text = recipe.read_text().replace("final = false", 'final = true\nbank = "smoke"\nsplit = "test"\nscenarios = 1')
    recipe.write_text(text)
    run = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "closed-loop eval: driving score" in out
    summary = json.loads((run / "evals" / "final" / "summary.json").read_text())
    assert summary["episodes"]["total"] == 1 and summary["agent"].startswith("vla:")
    last = metrics_of(run)[-1]
    assert "eval/leaderboard" in last and 0 <= last["eval/leaderboard"] <= 100


def test_a_trained_vla_is_evaluated_and_fine_tuned_on_the_observations_it_learnt_from(dataset, tmp_path):
    """SFT records its data's observation set-up in the checkpoint; an evaluation renders it (its rig too)
    unless told otherwise and refuses another frame count or spacing, as do a collection it drives and an RL recipe
    starting from it."""
    from pydantic import ValidationError

    from evaluation.config import EvalConfig
    from training.recipes import RecipeError
    from training.rl.setup import starting_point

    run = tmp_path / "run"
    assert run_main(["--config", str(sft_recipe(tmp_path, dataset, steps=2)), "--run-dir", str(run)]) == 0
    final = run / "checkpoints" / "final"
    recorded = json.loads((final / "vla_config.json").read_text())["vla"]["observation"]
    assert recorded == {
        "rig": "alpamayo4",
        "camera_size": [128, 256],
        "n_frames": 1,
        "decision_every": 5,
        "frame_every": 1,
    }

    vla = EvalConfig(agent=f"vla:{final}?reasoning=0")
    assert (vla.n_frames, vla.decision_every, vla.camera_size) == (1, 5, (128, 256))
    assert EvalConfig(agent="expert").n_frames == 4  # an agent that records nothing: the suite's default
    assert EvalConfig(agent=f"vla:{final}", camera_size=(64, 128)).camera_size == (64, 128)  # a free choice
    assert vla.rigs == EvalConfig(agent="expert").rigs == ["alpamayo4"]
    zoomed = tmp_path / "zoomed"  # trained on another rig: evaluated on it, unless a rig ablation names others
    shutil.copytree(final, zoomed)
    config = json.loads((zoomed / "vla_config.json").read_text())
    config["vla"]["observation"]["rig"] = "alpamayo4_zoom"
    (zoomed / "vla_config.json").write_text(json.dumps(config))
    assert EvalConfig(agent=f"vla:{zoomed}").rigs == ["alpamayo4_zoom"]
    assert EvalConfig(agent=f"vla:{zoomed}", rigs=["alpamayo4", "front_tele"]).rigs == ["alpamayo4", "front_tele"]
    with pytest.raises(ValidationError, match="trained on 1 frame"):
        EvalConfig(agent=f"vla:{final}", n_frames=4)
    with pytest.raises(ValidationError, match=r"1 step\(s\) apart .*, not 1 frame\(s\) 5 step\(s\) apart"):
        EvalConfig(agent=f"vla:{final}", frame_every=5)
    older = tmp_path / "older"  # a VLA saved before SFT recorded its set-up: the default, with a warning
    shutil.copytree(final, older)
    config = json.loads((older / "vla_config.json").read_text())
    del config["vla"]["observation"]["frame_every"]  # saved before frame_every: frames 1 step apart
    (older / "vla_config.json").write_text(json.dumps(config))
    assert EvalConfig(agent=f"vla:{older}").frame_every == 1
    del config["vla"]["observation"]
    (older / "vla_config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match="records no training set-up"):
        assert EvalConfig(agent=f"vla:{older}").n_frames == 4
    with warnings.catch_warnings():  # no VLA there at all (a run still training): loading it will say so, alone
        warnings.simplefilter("error")
        assert EvalConfig(agent=f"vla:{tmp_path / 'not_yet'}").n_frames == 4

    from training.data import CollectSettings, DatasetError, collect

    with pytest.raises(DatasetError, match="trained on 1 frame"):  # a VLA collecting (DAgger by hand)
        collect(CollectSettings(agent=f"vla:{final}", bank="smoke", n_frames=4), tmp_path / "d.zarr")
    with pytest.raises(DatasetError, match="collect with n_frames = 1, frame_every = 1"):
        collect(CollectSettings(agent=f"vla:{final}", bank="smoke", n_frames=1, frame_every=5), tmp_path / "d.zarr")
    assert not (tmp_path / "d.zarr").exists()

    rl = ['algorithm="ppo"', f'init_from="{final}"', f'data.path="{dataset}"']
    assert starting_point(load_recipe(None, [*rl, "data.n_frames=1"]), tmp_path / "rl", resume=False)[1] == final
    with pytest.raises(RecipeError, match=r"data\.n_frames: init_from .* trained on 1 frame"):
        starting_point(load_recipe(None, [*rl, "data.n_frames=4"]), tmp_path / "rl", resume=False)
    with pytest.raises(RecipeError, match=r"data\.n_frames: init_from .* not 1 frame\(s\) 5 step\(s\) apart"):
        starting_point(load_recipe(None, [*rl, "data.n_frames=1", "data.frame_every=5"]), tmp_path / "rl", resume=False)
