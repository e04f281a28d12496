"""The straight-driving bias (``evaluation.steering``): a curvature ratio of 1 for an agent that follows
the road, 0 for one that drives straight ahead and 0.5 for one that turns half as much."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation import EvalConfig, evaluate
from evaluation.steering import SteeringSums, decision_turns, episode_sums, pooled_ratio


def _arc(curvature: float, length: float, step: float = 2.0, start: float = 2.0) -> np.ndarray:
    """Points every ``step`` m along a circle of ``curvature`` from the origin, heading +x."""
    s = np.arange(start, length + 1e-9, step)
    if curvature == 0:
        return np.stack([s, np.zeros_like(s)], 1)
    return np.stack([np.sin(curvature * s) / curvature, (1 - np.cos(curvature * s)) / curvature], 1)


def _plan(curvature: float, speed: float = 8.0) -> np.ndarray:
    s = np.arange(1, 65) * speed * 0.1
    xy = _arc(curvature, s[-1], speed * 0.1, speed * 0.1) if curvature else np.stack([s, 0 * s], 1)
    return np.column_stack([xy, curvature * s])


@pytest.mark.parametrize("gain", [1.0, 0.5, 0.0, -1.0])
def test_a_plan_that_turns_a_share_of_the_road_scores_that_share(gain):
    road = _arc(0.02, 64.0)
    planned, driven = decision_turns(road, _plan(0.02 * gain), np.zeros(1), np.zeros(1), 0)
    assert planned is not None and driven is None  # nothing driven yet
    need, turned = planned
    assert need == pytest.approx(0.02 * 38, abs=0.05)  # the bend over the 40 m arc (from the first segment)
    assert turned / need == pytest.approx(gain, abs=0.06)


def test_straight_roads_and_standing_plans_measure_nothing():
    assert decision_turns(_arc(0.0, 64.0), _plan(0.0), np.zeros(1), np.zeros(1), 0) == (None, None)
    standing = np.zeros((64, 3))
    assert decision_turns(_arc(0.05, 64.0), standing, np.zeros(1), np.zeros(1), 0) == (None, None)


def test_the_driven_turn_reads_the_poses_after_the_decision():
    road, k = _arc(0.02, 64.0), 0.02
    s = np.arange(0, 50, 0.8)
    poses = np.column_stack([np.sin(k * s) / k + 100, (1 - np.cos(k * s)) / k - 30, k * s + 1.0])  # anywhere
    sums = episode_sums([(road, _plan(k), 0)], poses)
    assert sums.decisions == 1
    assert sums.planned_ratio == pytest.approx(1.0, abs=0.06)
    assert sums.driven_ratio == pytest.approx(1.0, abs=0.06)


def test_pooled_ratio_weights_decisions_and_resamples_episodes():
    a = SteeringSums(decisions=2, road_sq=1.0, planned=1.0, driven_road_sq=1.0, driven=0.0)
    b = SteeringSums(decisions=1, road_sq=3.0, planned=0.0, driven_road_sq=1.0, driven=1.0)
    got = pooled_ratio([a, b])
    assert got["episodes"] == 2 and got["decisions"] == 3
    assert got["planned"]["ratio"] == pytest.approx(0.25)  # (1 + 0) / (1 + 3)
    assert got["driven"]["ratio"] == pytest.approx(0.5)
    assert got["planned"]["ci95"] == pytest.approx([0.0, 1.0])  # the bootstrap sees b alone, a alone, both
    empty = pooled_ratio([])
    assert empty["planned"]["ratio"] is None and empty["episodes"] == 0


def test_scripted_agents_closed_loop(tmp_path):
    """In closed loop on a curve, an s-bend and a junction turn: ~1 for the road follower in its plans and
    as it drove; 0.5 in the plans of the half-turner (less as driven: the controller's lag adds to it and
    nothing pulls it back), ~0 straight ahead; in summary.json and the report."""
    expected = {
        "FollowsRoad": (1.0, (0.85, 1.15)),
        "TurnsHalf": (0.5, (0.2, 0.55)),
        "DrivesStraight": (0.0, (-0.1, 0.1)),
    }
    for name, (planned, driven) in expected.items():
        cfg = EvalConfig(
            bank="smoke",
            agent=f"tests.evaluation.plugin_agents:{name}",
            scenarios=["curve-000", "s_bend-000", "t_junction-000"],
        )
        s = evaluate(cfg, tmp_path / name, progress=False)
        got = s["curvature_ratio"]["alpamayo4"]
        assert set(got) == {"all", "curves", "turns"}
        assert got["all"]["episodes"] == 3 and got["turns"]["episodes"] == 1
        assert got["all"]["planned"]["ratio"] == pytest.approx(planned, abs=0.08), name
        assert driven[0] < got["all"]["driven"]["ratio"] < driven[1], name
        for kind in ("planned", "driven"):
            lo, hi = got["all"][kind]["ci95"]
            assert lo - 1e-9 <= got["all"][kind]["ratio"] <= hi + 1e-9
        assert "curvature ratio" in (tmp_path / name / "report.html").read_text()


def test_compare_puts_runs_side_by_side(tmp_path, capsys):
    """``loopdrive compare``: a row per run and rig with the ratio, a plot, one curve's video per run."""
    from loopdrive.cli import main

    for name in ("FollowsRoad", "DrivesStraight"):
        cfg = EvalConfig(
            bank="smoke",
            agent=f"tests.evaluation.plugin_agents:{name}",
            scenarios=["curve-000", "straight-000"],
            rigs=["front_tele"],
            video=True,
        )
        evaluate(cfg, tmp_path / name, progress=False)
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--out",
                str(out),
                f"road={tmp_path / 'FollowsRoad'}",
                f"straight={tmp_path / 'DrivesStraight'}",
            ]
        )
        == 0
    )
    md = (out / "compare.md").read_text()
    assert "| road | front_tele | 2 | 1.0" in md or "| road | front_tele | 2 | 0.9" in md
    assert "| straight | front_tele | 2 | 0.00" in md
    page = (out / "compare.html").read_text()
    assert page.count("<video") == 2 and "../FollowsRoad/videos/curve-000__s0__front_tele.mp4" in page
    assert "<svg" in page
    assert main(["compare", "--out", str(out), f"missing={tmp_path / 'nothing'}"]) == 2
    err = capsys.readouterr().err
    assert "missing=" in err and "no summary.json" in err
    assert main(["compare", "--out", str(out), "no-label"]) == 2
