"""Fixtures of the RL tests: a local Ray, a tiny random VLA saved to disk."""

from __future__ import annotations

import pytest

# --- end to end -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_vla(tmp_path_factory):
    from agents.vla.model import VLA, VLAConfig

    path = tmp_path_factory.mktemp("vla") / "vla"
    VLA(VLAConfig(size="tiny", image_size=(56, 112))).save_pretrained(path)
    return path
