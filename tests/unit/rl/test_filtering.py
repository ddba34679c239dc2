"""DAPO dynamic sampling (paper Eq. 7, §4.3). Run: pytest tests/unit/rl/test_filtering.py"""

import pytest

from arlgym.errors import ConfigError
from arlgym.rl import DynamicSampler, RegistryError, dynamic_sampling


def test_filter_keeps_only_mixed_groups():
    # [1,1,1] all equal -> drop; [0,1,0] mixed -> keep; [0,0] -> drop; [5] one member -> drop
    keep, m = dynamic_sampling([[1, 1, 1], [0, 1, 0], [0, 0], [5]])
    assert keep == [False, True, False, False]
    assert m["filter/kept_group_fraction"].item() == pytest.approx(0.25)


def test_filter_tolerance_and_empty():
    # max - min = 0.05 <= atol 0.1 -> equal
    assert dynamic_sampling([[1.0, 1.05], [0.0, 1.0]], atol=0.1)[0] == [False, True]
    keep, m = dynamic_sampling([])
    assert keep == [] and m["filter/kept_group_fraction"].item() == 0.0
    with pytest.raises(ConfigError):
        dynamic_sampling([[0, 1]], atol=-1)


def g(*returns):
    """A fake group: members are dicts with an episode_return (Trajectory-like)."""
    return [{"episode_return": r} for r in returns]


class FakeRollout:
    """Returns the scripted batches in order and counts calls."""

    def __init__(self, *batches):
        self.batches = list(batches)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.batches.pop(0)


MIXED_A, MIXED_B, MIXED_C = g(0, 1), g(1, 0, 0), g(0, 10)
FLAT_A, FLAT_B = g(0, 0), g(1, 1)


def test_accumulates_until_target():
    # try 1: [flat, mixed] -> 1 kept; try 2: [mixed, mixed] -> 3 kept >= 2 -> stop, truncate
    # kept fraction = 3 informative / 4 rolled
    roll = FakeRollout([FLAT_A, MIXED_A], [MIXED_B, MIXED_C], [MIXED_A])
    sampler = DynamicSampler(target_groups=2, max_tries=3)
    groups, m = sampler.sample(roll, step=10)
    assert groups == [MIXED_A, MIXED_B]
    assert roll.calls == 2
    assert m["filter/num_tries"].item() == 2
    assert m["filter/kept_group_fraction"].item() == pytest.approx(0.75)
    assert m["filter/num_groups"].item() == 2 and m["filter/backfilled_groups"].item() == 0
    assert m["filter/cold_start"].item() == 0
    assert sampler.last_metrics is m


def test_first_try_enough():
    roll = FakeRollout([MIXED_A, MIXED_B, FLAT_A])
    groups, m = DynamicSampler(target_groups=2, max_tries=3).sample(roll, step=0)
    assert groups == [MIXED_A, MIXED_B] and roll.calls == 1
    assert m["filter/kept_group_fraction"].item() == pytest.approx(2 / 3)


def test_max_tries_then_backfill():
    # 3 tries give 1 informative group; target 3 -> back-fill 2 uniform groups (ARLArena)
    roll = FakeRollout([FLAT_A], [FLAT_B, MIXED_A], [FLAT_A], [MIXED_B])
    groups, m = DynamicSampler(target_groups=3, max_tries=3).sample(roll, step=5)
    assert roll.calls == 3  # max_tries counts the first rollout
    assert groups == [MIXED_A, FLAT_A, FLAT_B]
    assert m["filter/backfilled_groups"].item() == 2
    assert m["filter/kept_group_fraction"].item() == pytest.approx(1 / 4)


def test_no_backfill_returns_short_batch():
    roll = FakeRollout([FLAT_A], [FLAT_B, MIXED_A])
    groups, m = DynamicSampler(target_groups=3, max_tries=2, backfill=False).sample(roll, step=5)
    assert groups == [MIXED_A] and m["filter/num_groups"].item() == 1


def test_cold_start_skips_filtering():
    # cold_start_steps = 2: steps 0 and 1 roll once and keep everything (uniform groups too)
    sampler = DynamicSampler(target_groups=1, max_tries=3, cold_start_steps=2)
    for step in (0, 1):
        roll = FakeRollout([FLAT_A, MIXED_A])
        groups, m = sampler.sample(roll, step=step)
        assert groups == [FLAT_A, MIXED_A] and roll.calls == 1
        assert m["filter/cold_start"].item() == 1
        assert m["filter/informative_group_fraction"].item() == pytest.approx(0.5)
    roll = FakeRollout([FLAT_A, MIXED_A])
    groups, m = sampler.sample(roll, step=2)  # first filtered step
    assert groups == [MIXED_A] and m["filter/cold_start"].item() == 0


def test_custom_return_reader_filters_on_success():
    won = [[{"won": True}, {"won": False}], [{"won": True}, {"won": True}]]
    sampler = DynamicSampler(target_groups=1, returns_of=lambda m: float(m["won"]))
    groups, _ = sampler.sample(FakeRollout(won), step=0)
    assert groups == [won[0]]


def test_bad_arguments():
    with pytest.raises(ConfigError, match="target_groups"):
        DynamicSampler(target_groups=0)
    with pytest.raises(ConfigError, match="max_tries"):
        DynamicSampler(target_groups=1, max_tries=0)
    with pytest.raises(ConfigError, match="cold_start"):
        DynamicSampler(target_groups=1, cold_start_steps=-1)
    with pytest.raises(RegistryError, match="dynamic_sampling"):
        DynamicSampler(target_groups=1, filter="dapo")
