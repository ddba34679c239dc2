"""arlgym: a testbed for stable agentic RL of LLM agents (ARLArena's envs and algorithms).

Importing the package registers every env id with Gymnasium (entry points are strings, so
nothing heavy is imported until an env is made) and re-exports the small public API:

>>> import gymnasium, arlgym
>>> env = gymnasium.make("arl/Sokoban-v0")
>>> prompt, info = env.reset(seed=0)
"""

from __future__ import annotations

import gymnasium as gym

from arlgym.core import (
    FORMAT_ERRORS,
    INFO_KEYS,
    ActResult,
    AgentEnv,
    GroupVecEnv,
    ParsedResponse,
    TaskSpec,
    anchor_hash,
    make_group_vec,
    parse_response,
)
from arlgym.errors import ArlgymError

__version__ = "0.1.0"

#: id -> (entry point, default kwargs, max_episode_steps is left to the env's own max_steps)
ENV_IDS: dict[str, tuple[str, dict]] = {
    "arl/Sokoban-v0": ("arlgym.envs.sokoban.env:SokobanEnv", {}),
    "arl/SokobanVision-v0": ("arlgym.envs.sokoban.env:SokobanVisionEnv", {}),
    "arl/ALFWorld-v0": ("arlgym.envs.alfworld.env:ALFWorldEnv", {}),
    "arl/TIRMath-v0": ("arlgym.envs.tir_math.env:TIRMathEnv", {}),
    "arl/WebShop-v0": ("arlgym.envs.webshop.env:WebShopEnv", {}),
    "arl/WebShopBrowser-v0": ("arlgym.envs.webshop.browser:WebShopBrowserEnv", {}),
}


def _register_all() -> None:
    for env_id, (entry_point, kwargs) in ENV_IDS.items():
        if env_id in gym.registry:  # re-import (e.g. importlib.reload) keeps the first one
            continue
        # The env counts steps itself (max_steps kwarg), so no TimeLimit wrapper is stacked,
        # and the passive checker is off because check_env is run in the tests instead.
        gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs,
                     disable_env_checker=True)


_register_all()

__all__ = [
    "__version__",
    "ENV_IDS",
    "AgentEnv",
    "ActResult",
    "TaskSpec",
    "INFO_KEYS",
    "parse_response",
    "ParsedResponse",
    "FORMAT_ERRORS",
    "anchor_hash",
    "make_group_vec",
    "GroupVecEnv",
    "ArlgymError",
]
