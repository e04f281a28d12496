"""The ``loopdrive`` command: bank subcommands and the demo."""

import json
import shutil

import cv2

from loopdrive.cli import main


def test_bank_list_and_show(capsys):
    assert main(["bank", "list"]) == 0
    out = capsys.readouterr().out
    assert "smoke" in out and "core" in out
    assert main(["bank", "show", "core", "--split", "test"]) == 0
    assert "signalized_intersection" in capsys.readouterr().out


def test_bank_generate_is_reproducible(tmp_path):
    for d in ("a", "b"):
        assert (
            main(
                [
                    "bank",
                    "generate",
                    "--name",
                    "mini",
                    "--per-family",
                    "2",
                    "--seed",
                    "5",
                    "--families",
                    "curve,cut_in",
                    "--out",
                    str(tmp_path / d),
                ]
            )
            == 0
        )
    files = sorted(p.name for p in (tmp_path / "a" / "scenarios").iterdir())
    assert len(files) == 4
    for f in files:
        assert (tmp_path / "a" / "scenarios" / f).read_text() == (tmp_path / "b" / "scenarios" / f).read_text()


def test_unknown_bank_exits_2_with_a_message(capsys):
    assert main(["bank", "show", "nope"]) == 2
    assert "no scenario bank 'nope'" in capsys.readouterr().err


def test_demo_writes_scores_and_videos(smoke, tmp_path, capsys):
    bank = tmp_path / "two"
    (bank / "scenarios").mkdir(parents=True)
    shutil.copy(smoke.path / "bank.toml", bank / "bank.toml")
    for sid in ("curve-000", "lead_brake-000"):
        shutil.copy(smoke.path / "scenarios" / f"{sid}.json", bank / "scenarios")
    out = tmp_path / "demo"
    assert main(["demo", "--bank", str(bank), "--out", str(out), "--no-sft"]) == 0
    printed = capsys.readouterr().out
    assert "expert" in printed and "constant_velocity" in printed and "report.html" in printed
    summary = json.loads((out / "expert" / "summary.json").read_text())
    assert summary["episodes"]["ok"] == 2 and summary["by_family"]["lead_brake"]["leaderboard"] == 100.0
    cap = cv2.VideoCapture(str(out / "expert" / "videos" / "curve-000__s0__alpamayo4.mp4"))
    ok, frame = cap.read()
    assert ok and frame.shape[1] > 512
    assert cap.get(cv2.CAP_PROP_FRAME_COUNT) > 50  # a frame every 0.1 s world step


def test_every_eval_flag_sets_an_eval_config_field():
    """The eval command's flags are checked against the one definition of an evaluation (EvalConfig)."""
    from evaluation import EvalConfig
    from loopdrive.cli import build_parser

    parser = build_parser()
    ev = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(" eval"))
    dests = {a.dest for a in ev._actions} - {"help", "out", "config"}
    assert dests <= set(EvalConfig.model_fields), dests - set(EvalConfig.model_fields)
    args = parser.parse_args(["eval", "--out", "x", "--rig", "alpamayo4,front_wide", "--episode-timeout", "5"])
    assert args.rigs == ["alpamayo4", "front_wide"] and args.episode_timeout_s == 5.0 and args.video is None
