import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # test workers share the cores: split them, before torch is imported
    _share = (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

import pytest
from hypothesis import settings

import envs  # noqa: F401  (registers the environments)
from scenarios import load_bank, make_scenario

# property tests explore the same examples on every run: CI never flakes, a failure reproduces. No deadline:
# an example's time is not what they check, and a first example that compiles (numba) or shares the cores
# with another test worker would fail one
settings.register_profile("loopdrive", derandomize=True, print_blob=True, deadline=None)
settings.load_profile("loopdrive")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that start Ray (marked ``ray``, or using ``ray_local``) run on one test worker, one at a time
    (``--dist loadgroup``): each Ray claims the machine's cores for its actors, and its tests' time-outs
    assume it has them. ``-m "not ray"`` leaves them out."""
    grouped = config.pluginmanager.hasplugin("xdist")  # its marker exists only with it (``-p no:xdist``)
    for item in items:
        if item.get_closest_marker("ray") or "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
            if grouped:
                item.add_marker(pytest.mark.xdist_group("ray"))


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
