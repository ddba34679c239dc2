"""``gymnasium.make_vec(id, vectorization_mode="async")`` with Gymnasium's defaults (shared
memory on) works for every registered text env and gives exactly the sync vector's results."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

import arlgym
from arlgym.core.spaces import AnyText

RESPONSE = "<think>a ü, ünïcode 空 line\nand spaces</think><action>up</action>"


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return list(a) == list(b) if isinstance(a, tuple | list) else a == b


@pytest.mark.parametrize("env_id", sorted(arlgym.ENV_IDS))
def test_async_make_vec_with_defaults_equals_sync(env_id, request):
    if env_id == "arl/WebShopBrowser-v0":
        request.getfixturevalue("chromium")
    runs = {}
    for mode in ("sync", "async"):
        vec = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode)
        try:
            obs, _ = vec.reset(seed=3)
            step = vec.step((RESPONSE, "not a valid response at all"))
        finally:
            vec.close()
        runs[mode] = (obs, step[0], step[1].tolist(), step[2].tolist())
    sync, async_ = runs["sync"], runs["async"]
    text = sync[0]["text"] if isinstance(sync[0], dict) else sync[0]
    assert any(" " in t and "\n" in t for t in text)  # real prompts: spaces and newlines
    for a, b in zip(sync, async_, strict=True):
        assert _equal(a, b)


def test_shared_memory_round_trip_keeps_any_unicode_up_to_max_length():
    from gymnasium.vector.utils import (
        create_shared_memory,
        read_from_shared_memory,
        write_to_shared_memory,
    )

    space = AnyText(max_length=6)
    mem = create_shared_memory(space, n=3)
    for i, text in enumerate(["", "空 ü\n😀x", "abcdef"]):
        write_to_shared_memory(space, i, text, mem)
    view = read_from_shared_memory(space, mem, n=3)
    assert view == ("", "空 ü\n😀x", "abcdef")
    write_to_shared_memory(space, 1, "new", mem)  # a live view, like numpy buffers
    assert view[1] == "new" and copy.deepcopy(view) == ("", "new", "abcdef")
    assert type(copy.deepcopy(view)) is tuple
    with pytest.raises(ValueError, match="max_length 6"):
        write_to_shared_memory(space, 0, "x" * 7 * 4, mem)
