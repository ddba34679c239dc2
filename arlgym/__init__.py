"""arlgym: a testbed for stable agentic RL of LLM agents (ARLArena's envs and algorithms).

Importing the package registers every env id with Gymnasium (entry points are strings, so
nothing heavy is imported until an env is made) and re-exports the small public API:

>>> import gymnasium, arlgym
>>> env = gymnasium.make("arl/Sokoban-v0")
>>> prompt, info = env.reset(seed=0)
"""

from __future__ import annotations

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
from arlgym.core.env_ids import ENV_IDS, register_envs
from arlgym.errors import ArlgymError
from arlgym.version import __version__

register_envs()

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
