"""The env ids arlgym registers with Gymnasium, and their registration.

Entry points are ``"module:Class"`` strings, so registering imports no env: an env family is
imported when an env of it is made. This is the one place where the core names the env
families above it, by name only. Any code that makes envs from ids (worker processes of a
vector env, ``make_checked_env``) calls :func:`register_envs` itself instead of importing the
``arlgym`` package for its side effect.
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["ENV_IDS", "register_envs"]

#: id -> (entry point, default kwargs); max_episode_steps is left to the env's own max_steps
ENV_IDS: dict[str, tuple[str, dict]] = {
    "arl/Sokoban-v0": ("arlgym.envs.sokoban.env:SokobanEnv", {}),
    "arl/SokobanVision-v0": ("arlgym.envs.sokoban.env:SokobanVisionEnv", {}),
    "arl/ALFWorld-v0": ("arlgym.envs.alfworld.env:ALFWorldEnv", {}),
    "arl/TIRMath-v0": ("arlgym.envs.tir_math.env:TIRMathEnv", {}),
    "arl/WebShop-v0": ("arlgym.envs.webshop.env:WebShopEnv", {}),
    "arl/WebShopBrowser-v0": ("arlgym.envs.webshop.browser:WebShopBrowserEnv", {}),
}


def register_envs() -> None:
    """Register every id in :data:`ENV_IDS` with Gymnasium (idempotent)."""
    for env_id, (entry_point, kwargs) in ENV_IDS.items():
        if env_id in gym.registry:  # re-import (e.g. importlib.reload) keeps the first one
            continue
        # The env counts steps itself (max_steps kwarg), so no TimeLimit wrapper is stacked,
        # and the passive checker is off because check_env is run in the tests instead.
        gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs,
                     disable_env_checker=True)
