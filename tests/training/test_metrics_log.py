"""Training metrics: the shares of the episodes that ended each way."""

from __future__ import annotations

from rewards import Ending
from training.metrics_log import ending_shares


def test_training_logs_the_share_of_episodes_that_ended_each_way():
    shares = ending_shares(["stalled", "route_complete", "stalled", "collision"])
    assert shares["episode/ending_stalled"] == 0.5 and shares["episode/ending_time_limit"] == 0.0
    assert set(shares) == {f"episode/ending_{e.value}" for e in Ending} and sum(shares.values()) == 1.0
    assert ending_shares([]) == {}
