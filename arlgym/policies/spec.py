"""Policy spec strings -> policy objects.

Model-backed policies are imported lazily so that scripted play needs neither torch nor
transformers.
"""

from __future__ import annotations

from typing import Any

from arlgym.core.validation import did_you_mean
from arlgym.errors import UnknownPolicyError
from arlgym.policies.scripted import (
    ExpertPolicy,
    GreedyTeacherPolicy,
    HumanPolicy,
    RandomPolicy,
    SlipPolicy,
)

__all__ = ["make_policy", "seeded_policy", "draws_its_own", "POLICY_KINDS", "check_policy_spec"]

POLICY_KINDS: dict[str, str] = {
    "expert": "the env's scripted expert (optimal solver / planner)",
    "greedy": "the env's greedy teacher (Sokoban: no path planning, no deadlock look-ahead)",
    "random": "uniformly random admissible action",
    "human": "you, at the terminal",
    "slips:<p>:<spec>": "another policy whose action is a random admissible one with probability p",
    "mistakes:<p>:<spec>": "the same, its reasoning rewritten to name the random move",
    "hf:<path|alias>": "a Hugging Face model (hub id, local dir, 'tiny', 'smollm2-135m') with model.generate",
    "vllm:<path>": "a vLLM offline engine (GPU; pip install 'arlgym[vllm]')",
    "openai:<base_url>#<model>": "any OpenAI-compatible /v1/chat/completions endpoint",
    "openai-tools:<base_url>#<model>": "the same, the model playing by calling the env's act "
                                       "tool (no <think>/<action> text; docs/serving.md)",
}


def draws_its_own(spec: str) -> bool:
    """Whether the policy a spec names draws from an RNG of its own (``random``, ``slips:…``,
    ``mistakes:…``): its episodes then depend on the seed it is built with."""
    spec = spec.strip()
    return spec == "random" or spec.startswith(("slips:", "mistakes:"))


def seeded_policy(spec: str, seed: int | None):
    """:func:`make_policy`, with ``seed`` given to the policies that draw from an RNG of their
    own (:func:`draws_its_own`), so their episodes are reproducible like everything else;
    model policies take their seed per request."""
    return make_policy(spec, seed=seed) if draws_its_own(spec) else make_policy(spec)


def make_policy(spec: str, **kwargs: Any):
    """Build the policy a spec string names; ``kwargs`` go to its constructor.

    Raises:
        UnknownPolicyError: the spec names no policy kind.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UnknownPolicyError(f"a policy spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec == "expert":
        return ExpertPolicy(**kwargs)
    if spec == "greedy":
        return GreedyTeacherPolicy(**kwargs)
    if spec == "random":
        return RandomPolicy(**kwargs)
    if spec == "human":
        return HumanPolicy(**kwargs)
    kind, sep, rest = spec.partition(":")
    if sep and rest:
        if kind == "hf":
            from arlgym.policies.hf import HFPolicy

            return HFPolicy(rest, **kwargs)
        if kind == "vllm":
            from arlgym.policies.vllm import VLLMPolicy

            return VLLMPolicy(rest, **kwargs)
        if kind in ("slips", "mistakes"):
            p, sep2, base = rest.partition(":")
            try:
                prob = float(p)
            except ValueError:
                prob = -1.0
            if not sep2 or not base or not 0.0 <= prob <= 1.0:
                raise UnknownPolicyError(
                    f"{kind} spec {spec!r} needs a probability in [0, 1] and a policy: "
                    f"{kind}:<p>:<spec>, e.g. {kind}:0.3:expert")
            return SlipPolicy(make_policy(base), prob, seed=kwargs.pop("seed", None),
                              reasoning="keep" if kind == "slips" else "match")
        if kind in ("openai", "openai-tools"):
            from arlgym.policies.openai import OpenAIPolicy

            base_url, hash_, model = rest.partition("#")
            if not hash_ or not model:
                raise UnknownPolicyError(
                    f"{kind} spec {spec!r} needs a model: {kind}:<base_url>#<model>, e.g. "
                    f"{kind}:http://localhost:8000/v1#Qwen/Qwen3-4B"
                )
            if kind == "openai-tools":
                kwargs.setdefault("tool_calls", True)
            return OpenAIPolicy(base_url, model, **kwargs)
    options = "\n  ".join(f"{k:28s} {v}" for k, v in POLICY_KINDS.items())
    raise UnknownPolicyError(f"unknown policy spec {spec!r}; valid specs:\n  {options}")


def check_policy_spec(flag: str, spec: Any, prog: str) -> None:
    """A ``--policy`` that names no policy kind: one line with a did-you-mean and the kinds,
    before anything is built (a model policy's spec is checked when it loads)."""
    plain = [k for k in POLICY_KINDS if ":" not in k]
    kinds = [k.split(":")[0] for k in POLICY_KINDS if ":" in k]
    text = spec.strip() if isinstance(spec, str) else ""
    kind, sep, rest = text.partition(":")
    if text in plain or (sep and rest and kind in kinds):
        return
    guess = did_you_mean(kind if sep else text, plain + kinds) if text else ""
    raise UnknownPolicyError(f"{flag} {spec!r} is an unknown policy spec{guess}; valid specs: "
                             f"{', '.join(POLICY_KINDS)}. See `{prog} --help`")
