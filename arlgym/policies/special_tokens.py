"""The one rule for image-slot tokens in model output (vision-language models).

A VLM reads its image through placeholder tokens in the prompt ids (Idefics3/SmolVLM
``<image>``, Qwen-VL ``<|image_pad|>`` between ``<|vision_start|>``/``<|vision_end|>``, ...): the
model counts those ids and scatters exactly one image feature into each. Any model can *sample*
such a token, or write its text, and either one breaks that count in the next forward —
transformers then fails inside its embedding merge ("Number of elements of source < number of
ones in mask"), in the middle of a training step.

The rule, applied everywhere a vision turn is built:

1. **Sampling never produces an image-slot token.** :class:`~arlgym.policies.hf.HFPolicy` masks
   the ids of :func:`image_slot_token_ids` out of the sampling distribution (after recording the
   log-probs, like top-k/top-p truncation: the recorded log-probs are those of the unmasked
   model, which is what the trainer recomputes).
2. **A response that holds one anyway is trained up to it.** Engines that cannot mask (a remote
   API, a vLLM build without the processor) may return one; :func:`truncate_at` cuts the
   response's token ids and log-probs before the first such id, so the trained tokens are
   exactly a prefix of what was sampled and their log-probs stay valid.
3. **Text is never re-read as an image slot.** A model may spell ``<image>`` out of ordinary
   tokens, and the env then echoes it in the next prompt's history. The image goes where the
   prompt's *last* placeholder stands (every template puts the current observation after its
   history); every earlier placeholder, and every other image-slot token string in the text, is
   shown as ``(image)`` (:func:`escape_image_text`), the way the history already shows past
   images.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["IMAGE_TEXT_STANDIN", "escape_image_text", "image_slot_token_ids",
           "image_slot_token_strings", "truncate_at"]

#: What an image-slot token string written by the model is shown as in a later prompt.
IMAGE_TEXT_STANDIN = "(image)"

# Attributes under which processors and model configs name their image/video slot tokens.
_PROCESSOR_TOKEN_ATTRS = ("image_token", "fake_image_token", "global_image_token", "video_token",
                          "vision_start_token", "vision_end_token", "boi_token", "eoi_token")
_CONFIG_ID_ATTRS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index",
                    "vision_start_token_id", "vision_end_token_id", "boi_token_id",
                    "eoi_token_id", "image_start_token_id", "image_end_token_id")
_SLOT_WORDS = ("image", "img", "video", "vision")


def image_slot_token_strings(processor: Any) -> tuple[str, ...]:
    """The strings of the processor's image/video slot tokens, longest first: those the
    processor names, and every special/added token whose text names an image, video or vision
    slot (``<global-img>``, ``<|vision_pad|>``, ...)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    found: set[str] = set()
    for attr in _PROCESSOR_TOKEN_ATTRS:
        value = getattr(processor, attr, None)
        if isinstance(value, str) and value:
            found.add(value)
    added = set(tokenizer.all_special_tokens) | set(tokenizer.get_added_vocab())
    for tok in added:
        # short tokens only: a long added token is a prompt fragment, not a slot marker
        if len(tok) <= 32 and any(w in tok.lower() for w in _SLOT_WORDS):
            found.add(tok)
    return tuple(sorted(found, key=len, reverse=True))


def image_slot_token_ids(processor: Any, model: Any | None = None) -> frozenset[int]:
    """Ids of every image/video slot token of a VLM (empty for a text model / no processor)."""
    if processor is None:
        return frozenset()
    tokenizer = getattr(processor, "tokenizer", processor)
    ids: set[int] = set()
    vocab = tokenizer.get_vocab()
    for tok in image_slot_token_strings(processor):
        if tok in vocab:
            ids.add(int(vocab[tok]))
    for source in (getattr(processor, "__dict__", {}), _config_dict(model)):
        for attr in _CONFIG_ID_ATTRS:
            value = source.get(attr)
            if isinstance(value, int) and value >= 0:
                ids.add(value)
    return frozenset(ids)


def _config_dict(model: Any) -> dict[str, Any]:
    """The model config's fields, a VLM's text config's underneath them."""
    config = getattr(model, "config", None)
    if config is None:
        return {}
    out = config.to_dict()
    text = out.get("text_config")
    return {**text, **out} if isinstance(text, dict) else out


def escape_image_text(text: str, slot_strings: Sequence[str], placeholder: str) -> str:
    """``text`` with only its last ``placeholder`` left as an image slot (rule 3).

    Every earlier ``placeholder`` and every occurrence of another image-slot token string becomes
    :data:`IMAGE_TEXT_STANDIN`. A text without ``placeholder`` keeps none (the caller puts the
    image first).
    """
    head, found, tail = text.rpartition(placeholder)
    if not found:
        head, tail = text, ""
    head = _replace_all(head, slot_strings, placeholder)
    tail = _replace_all(tail, slot_strings, placeholder)
    return head + found + tail


def _replace_all(text: str, slot_strings: Iterable[str], placeholder: str) -> str:
    for tok in (placeholder, *slot_strings):  # longest first after the placeholder
        if tok and tok in text:
            text = text.replace(tok, IMAGE_TEXT_STANDIN)
    return text


def truncate_at(response_ids: Sequence[int], logprobs: Sequence[float] | None,
                stop_ids: frozenset[int]) -> tuple[list[int], list[float] | None, bool]:
    """``(ids, logprobs, cut)``: the response before its first id in ``stop_ids`` (rule 2)."""
    ids = list(response_ids)
    lps = list(logprobs) if logprobs is not None else None
    if not stop_ids:
        return ids, lps, False
    for k, t in enumerate(ids):
        if t in stop_ids:
            return ids[:k], (lps[:k] if lps is not None else None), True
    return ids, lps, False
