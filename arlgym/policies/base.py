"""The policy protocol: prompts in, completions out, for every kind of agent.

One protocol covers the scripted expert, random and human players, HF and vLLM models and any
OpenAI-compatible endpoint, so SFT collection, RL training and evaluation share one rollout
collector. Model policies are *token-in/token-out*: a :class:`Completion` carries the exact
prompt and response token ids that were sampled and their log-probs, so the trainer trains on
those tokens and never on a re-tokenisation of the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["SamplingParams", "Completion", "Policy", "prompt_text", "prompt_image",
           "IMAGE_PLACEHOLDER"]

#: Where a vision env's prompt text shows its image (``arl/SokobanVision-v0``'s template).
IMAGE_PLACEHOLDER = "<image>"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample a response.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass (1.0: off).
        top_k: keep the k most likely tokens (0: off).
        max_new_tokens: response length cap in tokens.
        seed: seed for the policy's own sampler (None: not reseeded).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(slots=True)
class Completion:
    """One response.

    Attributes:
        text: the decoded response (what the env receives).
        prompt_token_ids: token ids of the full model input (chat template applied); model
            policies only.
        response_token_ids: sampled token ids, EOS included when it was sampled.
        logprobs: log-probability of each response token under the sampling policy
            (same length as ``response_token_ids``).
        finish_reason: ``"stop"`` (EOS/stop string), ``"length"`` or ``None``.
        meta: anything else worth keeping (latency, model name, ...).
        image_inputs: vision prompts of model policies: the exact image tensors the model read
            next to ``prompt_token_ids`` (the processor's output minus ``input_ids`` and
            ``attention_mask``, e.g. ``pixel_values``, ``pixel_attention_mask`` or
            ``image_grid_thw``; batch dimension 1, on the CPU), so a trainer recomputes the
            log-probs on exactly what was sampled.
    """

    text: str
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    image_inputs: dict[str, Any] | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything with a ``name`` and a batched ``generate``.

    ``envs`` (optional, same length as ``prompts``) gives policies that need the true state —
    the scripted expert, the random player (admissible actions), the human player's picture —
    access to the env each prompt came from. Model policies ignore it.
    """

    name: str

    def generate(
        self,
        prompts: Sequence[Any],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[Any] | None = None,
    ) -> list[Completion]: ...


def prompt_text(prompt: Any) -> str:
    """The text of a prompt: vision envs give ``{"text": ..., "image": ...}``."""
    if isinstance(prompt, dict):
        return str(prompt.get("text", ""))
    return str(prompt)


def prompt_image(prompt: Any) -> Any | None:
    """The image of a vision prompt (uint8 H×W×3 array), None for a text prompt."""
    if isinstance(prompt, dict):
        return prompt.get("image")
    return None
