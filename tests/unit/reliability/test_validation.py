"""The conversion rules of arlgym.core.validation, decided once for every caller."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arlgym.core import validation as v
from arlgym.errors import ConfigError


@pytest.mark.parametrize("value, want", [(3, 3), ("12", 12), (" -3 ", -3), ("1_000", 1000),
                                         (np.int64(5), 5)])
def test_int_accepts_ints_and_int_strings(value, want):
    out = v.check_int("n", value)
    assert out == want and type(out) is int


@pytest.mark.parametrize("value", [True, 3.0, "3.0", "x", None, [3], "", "0x10"])
def test_int_rejects_the_rest(value):
    with pytest.raises(ConfigError, match=r"^n=.* is invalid: expected an int\. Fix: "):
        v.check_int("n", value)


def test_int_range_and_message_format():
    with pytest.raises(ConfigError) as info:
        v.check_int("search_depth", 0, min=1, where="SokobanEnv", example=30)
    assert str(info.value) == ("SokobanEnv: search_depth=0 is invalid: expected an int >= 1. "
                               "Fix: pass an int >= 1, e.g. search_depth=30.")
    assert v.check_int("n", None, allow_none=True) is None


@pytest.mark.parametrize("value, want", [(1, 1.0), ("1e-6", 1e-6), (np.float32(0.5), 0.5)])
def test_float_accepts_numbers_and_numeric_strings(value, want):
    assert math.isclose(v.check_float("lr", value), want, rel_tol=1e-6)


@pytest.mark.parametrize("value", [True, "fast", float("nan"), float("inf"), None, [1.0]])
def test_float_rejects_the_rest(value):
    with pytest.raises(ConfigError, match="lr="):
        v.check_float("lr", value)


def test_float_bounds():
    with pytest.raises(ConfigError, match="> 0"):
        v.check_float("lr", 0, gt=0)
    with pytest.raises(ConfigError, match="<= 1"):
        v.check_float("top_p", 1.5, min=0, max=1)
    assert v.check_float("x", float("inf"), finite=False) == float("inf")


@pytest.mark.parametrize("value", ["no", "false", "False", "0", 0, 1, "yes", None])
def test_bool_takes_only_true_and_false(value):
    with pytest.raises(ConfigError, match="strict_format=.* expected True or False"):
        v.check_bool("strict_format", value)
    assert v.check_bool("b", np.bool_(True)) is True


def test_bool_string_hint_says_strings_are_truthy():
    with pytest.raises(ConfigError, match="not the string 'no'"):
        v.check_bool("strict_format", "no")


def test_choice_suggests_the_closest_name():
    with pytest.raises(ConfigError, match=r"did you mean 'gigpo'"):
        v.check_choice("advantage", "gipo", ["grpo", "gigpo", "empg"])
    with pytest.raises(ConfigError):  # True == 1, but a bool is not the choice 1
        v.check_choice("x", True, [1, 2])
    with pytest.raises(ConfigError):  # unhashable
        v.check_choice("x", {}, ["a"])
    assert v.check_choice("split", "test", ("train", "test")) == "test"


def test_pair_path_mapping_sequence_keys(tmp_path):
    assert v.check_pair_of_ints("dim_room", 7, allow_single=True) == (7, 7)
    assert v.check_pair_of_ints("dim_room", ["6", 7]) == (6, 7)
    for bad in ([6], (6, 6, 6), "66", (6, "x")):
        with pytest.raises(ConfigError, match="dim_room"):
            v.check_pair_of_ints("dim_room", bad)
    assert v.check_path("data", tmp_path, kind="dir") == tmp_path
    with pytest.raises(ConfigError, match="does not exist"):
        v.check_path("data", tmp_path / "nope")
    with pytest.raises(ConfigError, match="give a file"):
        v.check_path("data", tmp_path, kind="file")
    with pytest.raises(ConfigError, match="env_kwargs"):
        v.check_mapping("env_kwargs", [1, 2])
    assert v.check_sequence("families", ("a", "b"), v.check_str) == ["a", "b"]
    with pytest.raises(ConfigError, match=r"families\[1\]"):
        v.check_sequence("families", ["a", 3], v.check_str)
    with pytest.raises(ConfigError, match="families"):
        v.check_sequence("families", "ab")
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        v.check_keys("env_kwargs", {"max_step": 1}, ["max_steps", "seed"])


def test_long_values_are_cut():
    with pytest.raises(ConfigError) as info:
        v.check_int("n", "x" * 500)
    assert len(str(info.value)) < 250
