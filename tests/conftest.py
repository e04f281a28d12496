import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pytest
from hypothesis import settings

import envs  # noqa: F401  (registers the environments)
from scenarios import load_bank, make_scenario

# property tests explore the same examples on every run: CI never flakes, a failure reproduces
settings.register_profile("loopdrive", derandomize=True, print_blob=True)
settings.load_profile("loopdrive")


@pytest.fixture(scope="session")
def smoke():
    return load_bank("smoke")


@pytest.fixture
def curve15():
    """A 15 m radius left curve on an empty road."""
    return make_scenario(
        "curve",
        {"radius": 15.0, "angle": 150.0, "direction": "left", "speed_limit": 13.9, "density": 0.0},
        0,
        "curve15",
    )


@pytest.fixture
def empty_straight():
    return make_scenario(
        "straight", {"lanes": 1, "length": 300.0, "speed_limit": 13.9, "density": 0.0}, 0, "empty_straight"
    )
