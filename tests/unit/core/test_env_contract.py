"""Every registered env id honours the AgentEnv contract (docs/architecture.md, "The env contract")."""

import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import arlgym
from arlgym import INFO_KEYS

ENV_IDS = sorted(arlgym.ENV_IDS)


@pytest.fixture(autouse=True)
def _browser_needs_chromium(request):
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "Browser" in callspec.params.get("env_id", ""):
        request.getfixturevalue("chromium")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_without_warnings(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped, skip_render_check=False)
    assert [str(w.message) for w in caught] == []
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_keys_on_reset_and_step(env_id):
    env = gym.make(env_id)
    _, info = env.reset(seed=0)
    assert list(info) == list(INFO_KEYS)
    assert info["step"] == 0 and info["think"] is None and info["format_valid"]
    _, reward, term, trunc, info = env.step("no tags at all")
    assert list(info) == list(INFO_KEYS)
    assert info["step"] == 1 and not info["format_valid"] and info["format_penalty"] == pytest.approx(0.1)
    assert reward == pytest.approx(info["task_reward"] - 0.1)
    assert isinstance(info["anchor"], str) and len(info["anchor"]) == 32
    assert 0.0 <= info["score"] <= 1.0
    env.close()


def test_import_is_light_and_fast():
    # CPU time of the import (other work on a busy machine does not count)
    code = ("import time, sys; t = time.process_time(); import arlgym; "
            "print(time.process_time() - t, 'torch' in sys.modules, 'transformers' in sys.modules)")
    best = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.split()[0]) for _ in range(3))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False"]
    assert best < 0.5, f"import arlgym took {best:.3f} s of CPU"
