"""The uniform agent-env contract: parser, anchors, prompts, base env, group vectors.

Nothing env-specific lives here; every env family builds on these pieces.
"""

from arlgym.core.anchors import anchor_hash
from arlgym.core.env import INFO_KEYS, ActResult, AgentEnv, TaskSpec
from arlgym.core.parsing import FORMAT_ERRORS, ParsedResponse, parse_response
from arlgym.core.vector import GroupVecEnv, make_group_vec

__all__ = [
    "anchor_hash",
    "AgentEnv",
    "ActResult",
    "TaskSpec",
    "INFO_KEYS",
    "parse_response",
    "ParsedResponse",
    "FORMAT_ERRORS",
    "make_group_vec",
    "GroupVecEnv",
]
