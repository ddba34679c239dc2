"""`arlgym envs` says an env is usable exactly when ``gymnasium.make`` makes it: both run the
same requirement checks (arlgym/envs/requirements.py), the TIR sandbox's full isolation check
included — not merely "is bubblewrap installed"."""

from __future__ import annotations

import sys
import venv

import gymnasium as gym
import pytest

import arlgym
from arlgym.envs.requirements import install_commands, missing
from arlgym.errors import ArlgymError


def _makes(env_id: str) -> tuple[bool, str]:
    try:
        env = gym.make(env_id)
    except ArlgymError as e:
        return False, str(e)
    env.close()
    return True, ""


@pytest.mark.parametrize("env_id", list(arlgym.ENV_IDS))
def test_envs_and_make_agree(env_id):
    lacking = missing(env_id)
    made, why = _makes(env_id)
    assert made == (not lacking), (env_id, [r.what for r in lacking], why)
    for r in lacking:  # make's one line names what envs names
        assert r.what in why


def test_tir_math_is_usable_and_plays_a_problem_from_a_venv_under_tmp(monkeypatch):
    """A virtual environment under /tmp (a checkout there): the sandbox binds that venv alone,
    read-only, into the server and into each cell over its private /tmp, so `envs` says the env
    is usable and ``gym.make`` plays a problem with code cells run by that interpreter. Without
    bubblewrap at all, `envs` names bubblewrap and the command that installs it instead."""
    import tempfile

    from arlgym.envs.tir_math.isolation import find_bwrap

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # /tmp itself, wherever pytest's tmp is
        env_dir = f"{tmp}/venv"
        venv.create(env_dir, symlinks=True, with_pip=False)
        monkeypatch.setattr(sys, "executable", f"{env_dir}/bin/python")
        lacking = missing("arl/TIRMath-v0")
        if find_bwrap() is None:  # nothing isolates here: installing bubblewrap is the fix
            assert [r.what for r in lacking] == ["bubblewrap (the code sandbox)"]
            made, error = _makes("arl/TIRMath-v0")
            assert not made and install_commands(lacking) and "bubblewrap" in error
            return
        assert lacking == [], [(r.what, r.why()) for r in lacking]
        env = gym.make("arl/TIRMath-v0", sandbox_timeout=10.0).unwrapped
        try:
            env.reset(seed=0)
            code = "```python\nimport sys, fractions\nprint(sys.prefix, fractions.Fraction(84, 2))\n```"
            observation, reward, terminated, _, info = env.step(code)
            assert f"{env_dir} 42" in observation and not terminated and info["action_valid"], observation
            answer = f"```python\nfinal_answer({env.problem.answer!r})\n```"
            _, reward, terminated, _, info = env.step(answer)
            assert (reward, terminated, info["won"]) == (1.0, True, True)
        finally:
            env.close()
