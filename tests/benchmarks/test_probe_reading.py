"""``benchmarks/probe_reading.py``'s report against readings made by hand: a car closing at 4 m/s, its gap
read 3 m long at every decision (a tracker reads the closing speed exactly) or with an error that flips
sign each decision (a tracker reads it 8 m/s off), and the probe's closing speed read as 0."""

import numpy as np
import pytest

from agents.vla.perception import CLOSING_SCALE_MPS, LEAD_RANGE_M, PERCEPTION_TARGETS
from benchmarks.probe_reading import reading_report

GAP, CLOSING = PERCEPTION_TARGETS.index("lead_gap"), PERCEPTION_TARGETS.index("lead_closing_speed")


def _episode(gap_error: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ten decisions 0.5 s apart, the gap falling from 30 m at 4 m/s: (read, truth)."""
    truth = np.zeros((10, len(PERCEPTION_TARGETS)), np.float32)
    truth[:, GAP] = (30.0 - 2.0 * np.arange(10)) / LEAD_RANGE_M
    truth[:, CLOSING] = 4.0 / CLOSING_SCALE_MPS
    read = truth.copy()
    read[:, GAP] += gap_error / LEAD_RANGE_M
    read[:, CLOSING] = 0.0
    return read, truth


@pytest.mark.parametrize(
    ("gap_error", "error_sd", "tracked_mae", "tracked_sees_closing", "mean_mae"),
    [
        (np.full(10, 3.0), 0.0, 0.0, 1.0, 2.0),  # the mean of 4 and the probe's 0
        # reads -4 (5 pairs) and 12 m/s (4 pairs); averaged with 0: -2 and 6, off by 6 and 2
        (np.where(np.arange(10) % 2, 2.0, -2.0), 2.0, 8.0, 4 / 9, (5 * 6 + 4 * 2) / 9),
    ],
)
def test_the_report_reads_gap_errors_and_what_tracking_them_would_read(
    gap_error, error_sd, tracked_mae, tracked_sees_closing, mean_mae
):
    read, truth = _episode(gap_error)
    t = np.arange(10) * 0.5
    report = reading_report(read, truth, np.full(10, 10.0), np.zeros(10, np.int32), t)
    near = report["near"]  # under 4 s at 4 m/s: the gaps of 14 and 12 m
    assert near["samples"] == 2
    assert near["gap_true_median"] == pytest.approx(13.0)
    assert near["gap_error_mean"] == pytest.approx(float(np.mean(gap_error[8:])), abs=1e-4)
    assert near["closing_read_median"] == 0.0 and near["closing_true_median"] == pytest.approx(4.0)
    assert near["closing_read_mae"] == pytest.approx(4.0) and near["read_under_ttc"] == 0.0
    assert report["with_lead"]["samples"] == 10
    assert report["with_lead"]["gap_error_sd"] == pytest.approx(error_sd, abs=1e-4)
    assert report["tracking"]["period_s"] == 0.5
    assert report["tracking"]["near"]["pairs"] == 2  # into the gaps of 14 and 12 m
    tracking = report["tracking"]["with_lead"]
    assert tracking["pairs"] == 9 and tracking["fast_pairs"] == 9 and tracking["steady_pairs"] == 0
    assert tracking["probe_fast_read_closing"] == 0.0  # read as 0
    assert tracking["tracked_fast_read_closing"] == pytest.approx(tracked_sees_closing, abs=1e-3)
    assert np.isnan(tracking["tracked_steady_read_closing"])
    assert tracking["tracked_closing_mae"] == pytest.approx(tracked_mae, abs=1e-3)
    assert tracking["probe_closing_mae"] == pytest.approx(4.0)
    assert tracking["mean_closing_mae"] == pytest.approx(mean_mae, abs=0.005)  # rounded to 0.01
    assert tracking["gap_error_change_sd"] == pytest.approx(np.std(np.diff(gap_error)), abs=0.01)
    assert tracking["true_gap_change_sd"] == pytest.approx(0.0, abs=1e-4)


def test_pairs_are_successive_decisions_of_one_episode():
    """No pair spans two episodes, or a gap in the record longer than the decision period."""
    read, truth = _episode(np.zeros(10))
    t = np.array([0, 0.5, 1.0, 1.5, 0, 0.5, 1.0, 2.5, 3.0, 3.5])  # episode 0: four; episode 1: two runs
    episode = np.array([0] * 4 + [1] * 6, np.int32)
    report = reading_report(read, truth, np.full(10, 10.0), episode, t)
    assert report["tracking"]["with_lead"]["pairs"] == 3 + 2 + 2


def test_near_samples_are_reported_by_family_with_their_tracking():
    """Two episodes of two families: one gap read 3 m long throughout (its tracker exact), one whose error
    flips sign each decision; each family's figures are its own samples' alone."""
    steady, steady_truth = _episode(np.full(10, 3.0))
    flipping, flipping_truth = _episode(np.where(np.arange(10) % 2, 2.0, -2.0))
    read, truth = np.concatenate([steady, flipping]), np.concatenate([steady_truth, flipping_truth])
    t = np.tile(np.arange(10) * 0.5, 2)
    episode = np.repeat(np.array([0, 1], np.int32), 10)
    family = np.repeat(np.array(["lead_brake", "cut_in"]), 10)
    report = reading_report(read, truth, np.full(20, 10.0), episode, t, family=family)
    by_family = report["near_by_family"]
    assert list(by_family) == ["cut_in", "lead_brake"]
    assert by_family["lead_brake"]["samples"] == 2 and by_family["lead_brake"]["gap_error_mean"] == pytest.approx(3.0)
    assert by_family["lead_brake"]["tracking"]["tracked_closing_mae"] == pytest.approx(0.0, abs=1e-3)
    assert by_family["cut_in"]["gap_error_sd"] == pytest.approx(2.0, abs=1e-4)
    assert by_family["cut_in"]["tracking"]["pairs"] == 2
    assert by_family["cut_in"]["tracking"]["tracked_closing_mae"] == pytest.approx(8.0, abs=1e-3)
    assert "near_by_family" not in reading_report(steady, steady_truth, np.full(10, 10.0), episode[:10], t[:10])
