"""Where a server steps its envs and how it writes JSON: Sokoban's steps on the event loop
(``cheap_step``) and, with ``inline_steps=False``, on the pool give the in-process episode;
the ``/health`` counters count them; :func:`arlgym.serve.codec.dumps` gives the standard
library's JSON values for every value orjson refuses."""

from __future__ import annotations

import json
import random

import gymnasium as gym
import numpy as np
import pytest

import arlgym  # noqa: F401
from arlgym.serve.client import RemoteEnv
from arlgym.serve.codec import dumps, jsonable, loads
from arlgym.serve.server import EnvServer

MOVES = ["up", "down", "left", "right"]


@pytest.mark.parametrize("inline", [True, False])
def test_both_step_paths_play_the_in_process_episode(inline):
    envs = {"arl/Sokoban-v0": {"max_steps": 6}, "arl/SokobanVision-v0": {"max_steps": 6}}
    with EnvServer(envs, inline_steps=inline) as srv:
        # only the text env's cheap steps run on the loop; the vision env PNG-encodes a frame
        assert srv.app.config.inline_steps == ({"arl/Sokoban-v0"} if inline else set())
        steps = 0
        for seed in (3, 4):
            local, remote = gym.make("arl/Sokoban-v0", max_steps=6), \
                RemoteEnv(srv.url, "arl/Sokoban-v0", {"max_steps": 6})
            try:
                assert remote.reset(seed=seed) == local.reset(seed=seed)
                rng = random.Random(seed)
                for _ in range(6):
                    text = f"<think>t</think><action>{rng.choice(MOVES)}</action>"
                    want, got = local.step(text), remote.step(text)
                    assert got == want
                    steps += 1
                    if want[2] or want[3]:
                        break
            finally:
                remote.close()
        health = json.loads(_get(srv.url + "/health"))
        assert (health["resets"], health["steps"]) == (2, steps)


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()


def test_dumps_equals_the_standard_library_on_values_orjson_refuses():
    values = [{"a": (1, 2), "f": 0.1, "u": "é\u2028", "n": None, "l": ["x", True]},
              {"np": np.float32(0.1), "i": np.int64(3), "b": [np.bool_(True)], 1: "int key"},
              {"big": 2**70, "arr": np.arange(3)}]
    for value in values:
        assert loads(dumps(value)) == json.loads(json.dumps(jsonable(value)))


def test_loads_refuses_malformed_json_as_json_decode_error():
    for bad in (b"{x", b"", "{\"a\": 1,}", b"\xff"):
        with pytest.raises(json.JSONDecodeError):
            loads(bad)
