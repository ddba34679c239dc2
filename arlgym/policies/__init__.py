"""Policies: anything that turns prompts into responses (see :mod:`arlgym.policies.base`).

``make_policy(spec)`` builds one from a spec string, the same everywhere (CLI, SFT, eval):
``expert``, ``greedy``, ``random``, ``human``, ``hf:<path|alias>``, ``vllm:<path>``,
``openai:<base_url>#<model>``, ``openai-tools:<base_url>#<model>`` (the model calls the
env's ``act`` tool).
"""

from arlgym.policies.base import Completion, Policy, SamplingParams, prompt_text
from arlgym.policies.scripted import ExpertPolicy, GreedyTeacherPolicy, HumanPolicy, RandomPolicy
from arlgym.policies.spec import POLICY_KINDS, make_policy

__all__ = [
    "Completion",
    "Policy",
    "SamplingParams",
    "prompt_text",
    "ExpertPolicy",
    "GreedyTeacherPolicy",
    "RandomPolicy",
    "HumanPolicy",
    "make_policy",
    "POLICY_KINDS",
]
