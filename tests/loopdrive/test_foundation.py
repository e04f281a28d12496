"""The foundation every layer uses: objects by import path, seeds from parts, flags from settings."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from loopdrive.flags import add_model_flags, model_from_flags
from loopdrive.plugins import load_callable, load_object
from loopdrive.seeding import derive_seed, rng
from training.data import CollectSettings


class _Custom(ValueError):
    pass


def test_load_object_names_what_went_wrong():
    assert load_object("math:pi") == pytest.approx(3.14159, abs=1e-5)
    assert load_object("os.path:join.__name__") == "join"  # dotted attributes
    with pytest.raises(_Custom, match="reward term 'nocolon': not an import path"):
        load_object("nocolon", "reward term", _Custom)
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_x'"):
        load_object("no_such_module_x:f", "agent")
    with pytest.raises(ValueError, match="module 'math' has no attribute 'nope'"):
        load_object("math:nope", "metric")
    with pytest.raises(ValueError, match="float is not callable"):
        load_callable("math:pi", "metric")


def test_seeds_depend_on_every_part_and_nothing_else():
    assert derive_seed(1, "curve-000") == derive_seed(1, "curve-000")
    seeds = {derive_seed(s, sid) for s in range(5) for sid in ("a-000", "a-001", "b-000")}
    assert len(seeds) == 15 and all(0 <= s < 2**31 - 1 for s in seeds)
    assert derive_seed(1, 2) != derive_seed(2, 1) and derive_seed(3) != derive_seed("3")
    # int parts give numpy's own stream for a list seed (SFT's data order did not change)
    np.testing.assert_array_equal(rng(3, 5).permutation(20), np.random.default_rng([3, 5]).permutation(20))
    with pytest.raises(ValueError, match=">= 0"):
        derive_seed(-1)
    with pytest.raises(TypeError):
        derive_seed(1.5)


def test_flags_come_from_the_settings_model():
    parser = argparse.ArgumentParser()
    add_model_flags(parser, CollectSettings)
    flags = {a.dest for a in parser._actions if a.dest != "help"}
    assert flags == set(CollectSettings.model_fields)  # every setting, nothing else
    args = parser.parse_args(["--seeds", "3", "--camera-size", "64x128", "--scenarios", "a,b", "--target", "plan"])
    settings = model_from_flags(args, CollectSettings)
    assert settings.seeds == 3 and settings.camera_size == (64, 128) and settings.scenarios == ["a", "b"]
    assert settings.target == "plan" and settings.rig == CollectSettings().rig  # the rest: the defaults
    with pytest.raises(SystemExit):
        parser.parse_args(["--target", "imagined"])
    with pytest.raises(ValueError, match="seeds"):
        model_from_flags(parser.parse_args(["--seeds", "0"]), CollectSettings)
