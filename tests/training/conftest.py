"""A small collected dataset, shared by the data and SFT tests (collected once per session)."""

from __future__ import annotations

import pytest

from tests.training.helpers import collect_settings
from training.data import collect


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "smoke.zarr"
    collect(collect_settings(), path, progress=False)
    return path
