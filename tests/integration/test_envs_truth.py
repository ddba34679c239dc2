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


def test_an_interpreter_under_tmp_is_not_usable_for_tir_math_and_envs_says_why(monkeypatch):
    """A virtual environment under /tmp: every cell mounts its own /tmp, so the sandbox refuses
    the interpreter; `envs` must say so (and why), as `make` does. Without bubblewrap at all,
    `envs` names bubblewrap and the command that installs it instead."""
    import tempfile

    from arlgym.envs.tir_math.isolation import find_bwrap

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # /tmp itself, wherever pytest's tmp is
        env_dir = f"{tmp}/venv"
        venv.create(env_dir, symlinks=True, with_pip=False)
        monkeypatch.setattr(sys, "executable", f"{env_dir}/bin/python")
        lacking = missing("arl/TIRMath-v0")
        assert [r.what for r in lacking] == ["bubblewrap (the code sandbox)"]
        why = lacking[0].why()
        made, error = _makes("arl/TIRMath-v0")
        assert not made
        if find_bwrap() is None:  # nothing isolates here: installing bubblewrap is the fix
            assert install_commands(lacking) and "bubblewrap" in error
            return
        assert why and env_dir in why and "outside /tmp" in why
        assert install_commands(lacking) == []  # installing bubblewrap would not fix it
        assert env_dir in error
