"""Datasets (collect, labels, filtering, resume) and SFT through training/run.py (resume, checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rewards.transition import EgoState
from training import checkpoints as ckpt_mod
from training.data import CollectSettings, DrivingDataset, card_path, collect, future_in_ego_frame
from training.data.labels import ConsistencyFilter, TemplateTeacher, label_meta_actions
from training.recipes import RecipeError, load_recipe, parse_override
from training.run import main as run_main

SCENARIOS = ["lead_brake-000", "curve-000"]


def _collect_cfg(**kw) -> CollectSettings:
    base = dict(bank="smoke", split=None, scenarios=SCENARIOS, n_frames=1, chunk=16, perturb_fraction=0.5)
    return CollectSettings(**(base | kw))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "smoke.zarr"
    collect(_collect_cfg(), path, progress=False)
    return path


def _recipe(tmp: Path, data: Path, **train) -> Path:
    t = {"steps": 6, "batch_size": 4, "log_every": 1, "warmup_steps": 2, "threads": 1} | train
    text = f"""algorithm = "sft"
seed = 3
[data]
path = "{data}"
collect = false
n_frames = 1
[train]
{chr(10).join(f"{k} = {json.dumps(v)}" for k, v in t.items())}
[eval]
final = false
[checkpoint]
every = 2
keep_last = 2
"""
    path = tmp / "recipe.toml"
    path.write_text(text)
    return path


def test_dataset_round_trip_and_card(dataset):
    ds = DrivingDataset(dataset)
    card = json.loads(card_path(dataset).read_text())
    assert card["samples"] == len(ds) > 20
    assert card["episodes_complete"] == 3  # two scenarios + one perturbed start
    assert card["rig"] == "alpamayo4" and card["image_size"] == [56, 112]
    assert sum(card["labels"]["meta_actions"].values()) >= len(ds)
    assert card["labels"]["filter"]["kept"] == len(ds)
    obs, reasoning, target = ds.batch([0, len(ds) - 1])
    assert obs[0]["cameras"].shape == (4, 1, 56, 112, 3) and obs[0]["cameras"].dtype == np.uint8
    assert target.shape == (2, 64, 3) and np.isfinite(target).all()
    assert all(r.endswith(".") for r in reasoning)
    assert ds.arrays["perturbed"].any() and not ds.arrays["perturbed"].all()
    # the target is the driven future: at speed, it starts ahead of the car
    moving = ds.arrays["speed0"] > 3
    assert (ds.arrays["target"][moving, 0, 0] > 0).all()
    # collecting again into the same path finds nothing to do
    again = collect(_collect_cfg(), dataset, progress=False)
    assert again["samples"] == len(ds)


def test_collect_resumes_after_a_kill(dataset, tmp_path, monkeypatch):
    from training.data import record as data_mod

    real = data_mod._rollout
    calls = {"n": 0}

    def dies_on_the_third(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # as a kill between episodes
        return real(*a, **k)

    path = tmp_path / "resumed.zarr"
    monkeypatch.setattr(data_mod, "_rollout", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        collect(_collect_cfg(), path, progress=False)
    monkeypatch.setattr(data_mod, "_rollout", real)
    collect(_collect_cfg(), path, progress=False)
    a, b = DrivingDataset(dataset), DrivingDataset(path)
    for k in ("cameras", "target", "ego_history", "episode"):
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert a.text["reasoning"] == b.text["reasoning"]
    with pytest.raises(ValueError, match="other settings"):
        collect(_collect_cfg(n_frames=2), path, progress=False)


def test_collect_the_agents_plan_as_the_target(dataset, tmp_path):
    """``target="plan"`` keeps the collecting agent's plan at each decision, so no sample lacks a target."""
    import envs  # noqa: F401
    from agents import load_agent
    from envs import LoopDriveEnv

    path = tmp_path / "plan.zarr"
    collect(_collect_cfg(scenarios=SCENARIOS[:1], perturb_fraction=0.0, target="plan"), path, progress=False)
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
    with pytest.raises(ValueError, match="target"):  # the settings refuse a target there is no data for
        _collect_cfg(target="imagined")


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


def test_recipe_validation_and_overrides(tmp_path):
    assert parse_override("train.steps=50") == (["train", "steps"], 50)
    assert parse_override("data.path=data/x.zarr") == (["data", "path"], "data/x.zarr")
    r = load_recipe(None, ["train.lr=0.01", "model.size='tiny'", "init_from=runs/a/checkpoints/final"])
    assert r.train.lr == 0.01 and r.init_from == "runs/a/checkpoints/final"
    bad = tmp_path / "bad.toml"
    bad.write_text('algorithm = "sft"\n[train]\nstepz = 3\n')
    with pytest.raises(RecipeError, match=r"bad.toml: train.stepz: Extra inputs"):
        load_recipe(bad)
    with pytest.raises(RecipeError, match=r"train\.steps"):
        load_recipe(None, ["train.steps=-1"])
    assert run_main(["--config", str(tmp_path / "missing.toml")]) == 2
    with pytest.raises(RecipeError, match=r"rl: Extra inputs"):  # each algorithm has exactly its own sections
        load_recipe(None, ["rl.lr=0.1"])
    grpo = ['algorithm="grpo"']
    with pytest.raises(RecipeError, match=r"stall_noise_level needs"):  # a level for stalls, but no stalls
        load_recipe(None, [*grpo, "rl.stall_noise_level=[1.0, 0.5]"])
    with pytest.raises(RecipeError, match=r"rl.stall_noise_level.*two"):
        stalls = ['rl.branch="before_failure"', "rl.stall_decisions=4"]
        load_recipe(None, [*grpo, *stalls, "rl.stall_noise_level=[1, 0, 2]"])
    with pytest.raises(RecipeError, match=r"rl.gamma: Extra inputs"):  # PPO's settings are not GRPO's
        load_recipe(None, [*grpo, "rl.gamma=0.9"])
    with pytest.raises(RecipeError, match=r"differ"):
        load_recipe(None, ["model.image_size=[56, 112]", "data.image_size=[28, 56]"])
    assert load_recipe(None, ["model.image_size=[28, 56]"]).data.image_size == (28, 56)  # stored as the VLA reads
    assert load_recipe(None, ["seed=7"]).model.seed == 7


def _weights(path: Path) -> dict[str, torch.Tensor]:
    out = load_file(path / "action_expert.safetensors")
    for f in sorted((path / "backbone").glob("*.safetensors")):
        out |= {f"backbone.{k}": v for k, v in load_file(f).items()}
    return out


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("samples_per_s", None)
    return rows


def test_sft_resume_gives_the_same_result(dataset, tmp_path):
    recipe = _recipe(tmp_path, dataset)
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert run_main(["--config", str(recipe), "--run-dir", str(straight)]) == 0
    assert run_main(["--config", str(recipe), "--run-dir", str(broken), "--set", "train.max_steps_this_run=3"]) == 0
    assert (broken / "checkpoints" / "latest").read_text().strip() == "step_0000002"
    assert not (broken / "checkpoints" / "final").exists()
    assert run_main(["--resume", str(broken), "--set", "train.max_steps_this_run=100"]) == 0
    a, b = _weights(straight / "checkpoints" / "final"), _weights(broken / "checkpoints" / "final")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert _metrics(straight) == _metrics(broken)
    assert (straight / "curves.png").exists() and list((straight / "tb").iterdir())
    saved = json.loads((straight / "config.json").read_text())
    assert saved["train"]["steps"] == 6 and saved["seed"] == 3
    assert sorted(p.name for p in (straight / "checkpoints").glob("step_*")) == ["step_0000004", "step_0000006"]


def test_a_failed_save_never_breaks_the_latest_checkpoint(dataset, tmp_path, monkeypatch):
    recipe = _recipe(tmp_path, dataset)
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
    recipe = _recipe(tmp_path, dataset, steps=4, two_stage=True, stage1_fraction=0.5)
    run = tmp_path / "two"
    assert run_main(["--config", str(recipe), "--run-dir", str(run), "--set", "checkpoint.keep_last=5"]) == 0
    s2, s4 = _weights(run / "checkpoints" / "step_0000002"), _weights(run / "checkpoints" / "step_0000004")
    backbone = [k for k in s2 if k.startswith("backbone.")]
    expert = [k for k in s2 if not k.startswith("backbone.")]
    assert all(torch.equal(s2[k], s4[k]) for k in backbone)
    assert any(not torch.equal(s2[k], s4[k]) for k in expert)
    stages = [r["stage"] for r in _metrics(run)]
    assert stages == [1, 1, 2, 2]


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
    recipe = _recipe(tmp_path, data, steps=4)
    text = recipe.read_text().replace("final = false", 'final = true\nbank = "smoke"\nsplit = "test"\nscenarios = 1')
    recipe.write_text(text)
    run = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "closed-loop eval: driving score" in out
    summary = json.loads((run / "evals" / "final" / "summary.json").read_text())
    assert summary["episodes"]["total"] == 1 and summary["agent"].startswith("vla:")
    last = _metrics(run)[-1]
    assert "eval/leaderboard" in last and 0 <= last["eval/leaderboard"] <= 100


def test_every_shipped_recipe_validates():
    from training.recipes import load_recipe

    recipes = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.toml"))
    assert {p.stem for p in recipes} >= {"sft_tiny", "sft_demo", "grpo_tiny", "ppo_sb3_state"}
    for path in recipes:
        recipe = load_recipe(path)
        if recipe.algorithm in ("grpo", "ppo"):
            assert recipe.init_from, f"{path.name}: RL starts from a trained policy"


class _Weights:
    """A stand-in policy for checkpoint tests: saves one file naming its version."""

    def __init__(self) -> None:
        self.version = 0

    def save_pretrained(self, path) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "weights.txt").write_text(str(self.version))


def test_select_on_val_publishes_the_best_checkpoint_or_the_start(tmp_path):
    from training.checkpoints import save_checkpoint
    from training.metrics_log import MetricsLogger
    from training.milestones import after_step, before_first_step, finish
    from training.recipes import recipe_from_dict

    start = tmp_path / "sft_final"
    start.mkdir()
    (start / "weights.txt").write_text("start")
    policy, calls = _Weights(), []

    def evaluate(checkpoint, out, split=None):
        calls.append((out.name, split))
        version = (checkpoint / "weights.txt").read_text()
        score = {"start": 50.0, "2": 40.0, "4": 60.0, "6": 55.0}[version] if split else 99.0
        return {"suites": {"leaderboard": {"mean": score}}, "success_rate": 0.0}

    def run(scores_from: str | None, run_dir):
        recipe = recipe_from_dict(
            {
                "eval": {"every": 2, "select_on": scores_from, "split": "test"},
                "checkpoint": {"every": 2, "keep_last": 1},
            }
        )
        logger = MetricsLogger(run_dir)
        before_first_step(recipe, start, evaluate, logger, run_dir)

        def checkpoint(at):
            return save_checkpoint(run_dir, at, policy, None, {"iteration": at}, {}, 1)

        for step in range(1, 7):
            policy.version = step
            after_step(step, 6, recipe, checkpoint, evaluate, logger, run_dir)
        return finish(6, 6, recipe, evaluate, logger, run_dir, {})

    result = run("val", tmp_path / "selected")
    # the start and steps 2, 4, 6 were scored on val; step 4 won though keep_last pruned its folder
    assert calls == [
        ("val_start", "val"),
        ("val_step_0000002", "val"),
        ("val_step_0000004", "val"),
        ("val_step_0000006", "val"),
        ("final", None),
    ]
    assert result["selected"] == {"step": 4, "score": 60.0, "split": "val"}
    assert (Path(result["final"]) / "weights.txt").read_text() == "4"
    logged = [json.loads(line) for line in (tmp_path / "selected" / "metrics.jsonl").read_text().splitlines()]
    assert [d["val/leaderboard"] for d in logged if "val/leaderboard" in d] == [50.0, 40.0, 60.0, 55.0]
    assert logged[-1]["eval/leaderboard"] == 99.0  # the final evaluation, on the eval split

    calls.clear()
    result = run(None, tmp_path / "last")  # no selection: periodic evals on the eval split, final = the last
    assert calls == [("step_0000002", None), ("step_0000004", None), ("final", None)]
    assert (Path(result["final"]) / "weights.txt").read_text() == "6" and "selected" not in result


def test_select_on_keeps_the_start_when_nothing_beats_it(tmp_path):
    from training.metrics_log import MetricsLogger
    from training.milestones import before_first_step, finish
    from training.recipes import recipe_from_dict

    start = tmp_path / "sft_final"
    start.mkdir()
    (start / "weights.txt").write_text("start")
    recipe = recipe_from_dict({"eval": {"every": 2, "select_on": "val", "final": False}})
    run_dir = tmp_path / "run"
    logger = MetricsLogger(run_dir)
    before_first_step(
        recipe, start, lambda c, o, split=None: {"suites": {"leaderboard": {"mean": 70.0}}}, logger, run_dir
    )
    result = finish(4, 4, recipe, None, logger, run_dir, {})
    assert result["selected"]["step"] == 0 and (Path(result["final"]) / "weights.txt").read_text() == "start"
