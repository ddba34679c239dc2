"""A policy backed by a Hugging Face causal LM and ``model.generate`` (CPU tests, small GPUs).

Token-in/token-out: each prompt is wrapped as one user message in the tokenizer's chat template
(generation prompt added) and tokenised once; the :class:`Completion` carries those exact prompt
ids, the sampled response ids (EOS included when sampled, no padding) and the log-prob of each
sampled token taken from the very logits the sampler used, so a trainer can use them as
``old_logp`` without re-tokenising the text.

Which distribution the log-probs are under
-------------------------------------------
``logprobs[t] = log_softmax(raw_logits_t / T)[token_t]`` where ``raw_logits_t`` are the model's
logits before any logits processor and ``T`` is the sampling temperature (``T = 1`` for greedy
decoding). This is what verl/ARLArena compute for ``old_log_prob`` (logits divided by the
rollout temperature) and what the trainer recomputes with a forward pass. Top-k/top-p
truncation is *not* reflected: with ``top_p < 1`` or ``top_k > 0`` the tokens were drawn from
the truncated, renormalised distribution, whose log-probs are higher than these. The RL presets
sample with ``top_p = 1, top_k = 0``, where both coincide.

Vision-language models
----------------------
A model whose config has a ``vision_config`` (``tiny-vl``, SmolVLM/Idefics3, Qwen2.5-VL,
Qwen3-VL, ...) is loaded with its processor (:func:`arlgym.models.load_processor`). A vision
prompt ``{"text", "image"}`` becomes one user message whose content list puts the image where
the text says ``<image>`` (first if it does not); the processor renders the chat template,
expands the image into its tokens and computes the image tensors. Each :class:`Completion`
carries those prompt ids and the image tensors (``image_inputs``: ``pixel_values`` and
``pixel_attention_mask``, or ``image_grid_thw`` and ``mm_token_type_ids``, ...), so the trainer
recomputes log-probs on exactly the inputs that were sampled from. Prompts are processed one by
one and batched by concatenating the image tensors along dim 0 and padding the token-aligned
ones like the ids (what the processor itself does for a batch of one image per prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arlgym.errors import ConfigError
from arlgym.models import is_vision_model, load_model_and_tokenizer, load_processor
from arlgym.policies.base import (
    IMAGE_PLACEHOLDER,
    Completion,
    SamplingParams,
    prompt_image,
    prompt_text,
)
from arlgym.policies.special_tokens import (
    escape_image_text,
    image_slot_token_ids,
    image_slot_token_strings,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HFPolicy", "SampledLogprobRecorder", "chat_prompt_ids", "vision_messages", "vision_prompt_inputs",
           "batch_image_inputs", "TOKEN_ALIGNED_KEYS"]

#: Processor outputs laid out per token (shape (1, prompt length)): padded like the ids.
TOKEN_ALIGNED_KEYS: tuple[str, ...] = ("mm_token_type_ids",)
_NOT_IMAGE_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of ``text`` as one user turn plus the assistant generation prompt.

    The template is rendered to a string and tokenised without adding special tokens, which is
    what ``apply_chat_template(tokenize=True)`` does and what vLLM does, so every backend sees
    the same ids.
    """
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def vision_messages(prompt: Any, slot_strings: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One user message with list content: the text split at its last ``<image>``, the image in
    its place (first when the text has no placeholder). Works with every HF VLM chat template.

    ``slot_strings``: the processor's image-slot token strings; any of them elsewhere in the text
    (model-written, echoed by the env) is shown as ``(image)`` (see
    :mod:`arlgym.policies.special_tokens`, rule 3). Earlier ``<image>`` occurrences always are.
    """
    text = escape_image_text(prompt_text(prompt), slot_strings, IMAGE_PLACEHOLDER)
    before, found, after = text.rpartition(IMAGE_PLACEHOLDER)
    if not found:
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    content: list[dict[str, Any]] = []
    if before:
        content.append({"type": "text", "text": before})
    content.append({"type": "image"})
    if after:
        content.append({"type": "text", "text": after})
    return [{"role": "user", "content": content}]


def vision_prompt_inputs(processor: Any, prompt: Any) -> tuple[list[int], dict[str, Any]]:
    """Prompt ids (chat template, generation prompt, image tokens expanded) and image tensors
    of one vision prompt, as the model reads them. No special tokens are added beyond the
    template's (as :func:`chat_prompt_ids` and TRL's collator)."""
    import numpy as np
    from PIL import Image

    image = prompt_image(prompt)
    if not isinstance(image, Image.Image):
        image = Image.fromarray(np.asarray(image, dtype=np.uint8))
    messages = vision_messages(prompt, image_slot_token_strings(processor))
    rendered = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    out = processor(text=rendered, images=[image], return_tensors="pt", add_special_tokens=False)
    ids = out["input_ids"][0].tolist()
    inputs = {k: v for k, v in out.items() if k not in _NOT_IMAGE_INPUTS and hasattr(v, "shape")}
    return ids, inputs


def batch_image_inputs(per_sample: Sequence[dict[str, Any]], *, total: int | None = None,
                       left: bool = True) -> dict[str, Any]:
    """Concatenate per-sample image inputs along dim 0; token-aligned keys
    (:data:`TOKEN_ALIGNED_KEYS`) are zero-padded to ``total`` columns, on the left when ``left``
    (left-padded prompts end at one column), else on the right."""
    import torch

    keys = list(per_sample[0])
    if any(list(d) != keys for d in per_sample):
        raise ValueError("the samples of a batch carry different image input keys; every turn "
                         "of a batch must come from the same processor")
    out: dict[str, Any] = {}
    for key in keys:
        if key in TOKEN_ALIGNED_KEYS:
            assert total is not None
            rows = []
            for d in per_sample:
                v = d[key].reshape(-1)
                pad = total - v.shape[0]
                parts = [v.new_zeros(pad), v] if left else [v, v.new_zeros(pad)]
                rows.append(torch.cat(parts))
            out[key] = torch.stack(rows)
        else:
            out[key] = torch.cat([d[key] for d in per_sample], dim=0)
    return out


class HFPolicy:
    """Batched sampling from a transformers causal LM.

    Args:
        model_or_name: a model name for :func:`arlgym.models.load_model_and_tokenizer`
            (``"tiny"``, ``"smollm2-135m"``, a directory, a hub id), or an already loaded
            model — e.g. the trainer's live model, whose weights the policy then shares.
        tokenizer: required with a model object; overrides the loaded one with a name.
        device: move the model there (None: leave it where it is).
        batch_size: prompts per ``model.generate`` call.
        dtype: weight dtype when loading by name (None: float32).
        processor: a vision-language model's processor; loaded with the model when given by
            name, required with a VLM model object.

    Raises:
        ConfigError: a model object without a tokenizer (or a VLM without its processor), or a
            bad ``batch_size``.
        ModelNotFound: the name resolves to no model.
    """

    def __init__(
        self,
        model_or_name: str | PreTrainedModel,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        device: str | torch.device | None = None,
        batch_size: int = 32,
        dtype: str | torch.dtype | None = None,
        processor: Any | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        if isinstance(model_or_name, str):
            model, loaded_tokenizer = load_model_and_tokenizer(
                model_or_name, dtype=dtype, device=device
            )
            if processor is None:
                processor = load_processor(model_or_name)
            tokenizer = tokenizer or (processor.tokenizer if processor is not None else loaded_tokenizer)
            self.name = f"hf:{model_or_name}"
        else:
            if tokenizer is None:
                raise ConfigError("HFPolicy(model, tokenizer=...): a model object needs its tokenizer")
            model = model_or_name
            if device is not None:
                model = model.to(device)
            self.name = f"hf:{getattr(model.config, 'name_or_path', '') or type(model).__name__}"
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise ConfigError("the tokenizer has neither a pad nor an EOS token; set one")
        if processor is None and is_vision_model(model):
            raise ConfigError("HFPolicy(model, processor=...): a vision-language model object needs "
                              "its processor (arlgym.models.load_processor(name))")
        self.processor = processor
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_token_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.eos_token_ids: frozenset[int] = self._eos_ids(model, tokenizer)
        #: ids never sampled: a VLM's image-slot tokens (:mod:`arlgym.policies.special_tokens`)
        self.suppressed_token_ids: frozenset[int] = image_slot_token_ids(processor, model)

    @staticmethod
    def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
        """Every id that ends a response: the tokenizer's EOS and the generation config's."""
        ids: set[int] = set()
        for source in (tokenizer.eos_token_id, model.generation_config.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source is not None:
                ids.update(int(i) for i in source)
        if not ids:
            raise ConfigError("neither the tokenizer nor the generation config defines EOS")
        return frozenset(ids)

    # ---------------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Any],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[Any] | None = None,
    ) -> list[Completion]:
        """Sample one response per prompt (``envs`` is ignored: the model sees the prompt only).

        Vision prompts (``{"text", "image"}``) give a VLM their text and image, a text model
        their text only. With ``sampling.seed``
        set, the result is a deterministic function of (weights, prompts, sampling,
        ``batch_size``); the global torch RNG is left as it was.
        """
        import torch

        sampling = sampling or SamplingParams()
        prompt_ids: list[list[int]] = []
        images: list[dict[str, Any] | None] = []
        for p in prompts:
            if self.processor is not None and prompt_image(p) is not None:
                ids, inputs = vision_prompt_inputs(self.processor, p)
            else:
                ids, inputs = chat_prompt_ids(self.tokenizer, prompt_text(p)), None
            prompt_ids.append(ids)
            images.append(inputs)
        was_training = self.model.training
        self.model.eval()  # no dropout while sampling: log-probs must match a later forward
        device = self.model.device
        fork_devices = [device] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=fork_devices), torch.inference_mode():
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                results: list[Completion | None] = [None] * len(prompt_ids)
                for start in range(0, len(prompt_ids), self.batch_size):
                    rows = range(start, min(len(prompt_ids), start + self.batch_size))
                    # a batch's prompts either all carry images or none do
                    for part in ([i for i in rows if images[i] is not None],
                                 [i for i in rows if images[i] is None]):
                        if part:
                            done = self._generate_batch([prompt_ids[i] for i in part], sampling,
                                                        [images[i] for i in part])
                            for i, completion in zip(part, done, strict=True):
                                results[i] = completion
        finally:
            self.model.train(was_training)
        return [r for r in results if r is not None]

    def _generation_config(self, sampling: SamplingParams) -> Any:
        """A complete config, so nothing leaks in from a checkpoint's generation_config."""
        from transformers import GenerationConfig

        # Temperature, top-k and top-p are *not* set here: :meth:`_logits_processors` applies
        # them after the log-prob recorder, in generate's own order, so sampling is unchanged.
        return GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not sampling.greedy,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            min_length=0,
            num_beams=1,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
        )

    def _logits_processors(self, sampling: SamplingParams, recorder: Any) -> Any:
        """The recorder first (it must see the raw logits), then exactly the warpers that
        ``generate`` itself would build from the sampling parameters, in its order."""
        from transformers import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        procs: list[Any] = [recorder]
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                procs.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k:
                procs.append(TopKLogitsWarper(top_k=sampling.top_k))
            if sampling.top_p < 1.0:
                procs.append(TopPLogitsWarper(top_p=sampling.top_p))
        if self.suppressed_token_ids:
            procs.append(_Suppress(self.suppressed_token_ids))
        return LogitsProcessorList(procs)

    def _generate_batch(self, prompt_ids: list[list[int]], sampling: SamplingParams,
                        images: list[dict[str, Any] | None] | None = None) -> list[Completion]:
        import torch

        device = self.model.device
        width = max(len(ids) for ids in prompt_ids)
        # Left padding: every prompt ends at the same column, so new tokens line up.
        b_input = torch.full((len(prompt_ids), width), self.pad_token_id, dtype=torch.long)
        b_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for row, ids in enumerate(prompt_ids):
            b_input[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            b_mask[row, width - len(ids) :] = 1
        extra: dict[str, Any] = {}
        if images and images[0] is not None:
            extra = {k: v.to(device) for k, v in
                     batch_image_inputs(images, total=width, left=True).items()}  # type: ignore[arg-type]
        temperature = 1.0 if sampling.greedy else sampling.temperature
        recorder = SampledLogprobRecorder(temperature)
        out = self.model.generate(
            input_ids=b_input.to(device),
            attention_mask=b_mask.to(device),
            generation_config=self._generation_config(sampling),
            logits_processor=self._logits_processors(sampling, recorder),
            **extra,
        )
        b_new = out.sequences[:, width:]  # (B, T_new)
        b_token_logp = recorder.finish(b_new).cpu()  # (B, T_new)
        b_new = b_new.cpu()

        completions = []
        for row, ids in enumerate(prompt_ids):
            tokens = b_new[row].tolist()
            end = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_token_ids), None)
            finish = "stop" if end is not None else "length"
            tokens = tokens[: end if end is not None else len(tokens)]
            completions.append(
                Completion(
                    text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                    prompt_token_ids=list(ids),
                    response_token_ids=tokens,
                    logprobs=b_token_logp[row, : len(tokens)].tolist(),
                    finish_reason=finish,
                    meta={"policy": self.name, "logprob_temperature": temperature},
                    image_inputs=images[row] if images else None,
                )
            )
        return completions


class SampledLogprobRecorder:
    """A logits processor that keeps each sampled token's log-prob and nothing of size V after
    the step that needed it.

    ``generate(output_logits=True)`` would keep every step's (B, V) logits until the end — at a
    151,936-token vocabulary 0.6 MB per row per token, ~150 GiB for a 128 × 512 rollout batch.
    Placed first in the processor list, this sees each step's raw logits, keeps
    ``z = logits / T`` for one step, and when the next step shows which token was drawn (the
    last column of ``input_ids``), stores ``z[token] − logsumexp(z)`` (B floats) and drops
    ``z``; :meth:`finish` takes the last step's token from the returned sequences. Peak extra
    memory: at most one (B, V) float32 tensor (none at T = 1).
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = float(temperature)
        self._values: list[torch.Tensor] = []
        self._pending: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:
            self._take(input_ids[:, -1])
        # no copy at T = 1: every processor after this one returns a new tensor, and generate
        # makes new logits each step, so ``scores`` stays as it is until the next call
        z = scores.float()
        self._pending = z / self.temperature if self.temperature != 1.0 else z
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        import torch

        z = self._pending
        assert z is not None
        picked = z.gather(1, tokens.to(z.device).unsqueeze(1)).squeeze(1)
        self._values.append(picked - torch.logsumexp(z, dim=-1))
        self._pending = None

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """Log-probs (B, T_new) of ``new_tokens``, the tokens generate returned after the prompt."""
        import torch

        if self._pending is not None:
            self._take(new_tokens[:, -1])
        if len(self._values) != new_tokens.shape[1]:
            raise RuntimeError(f"recorded {len(self._values)} sampling steps for "
                               f"{new_tokens.shape[1]} generated tokens")
        if not self._values:
            return new_tokens.new_zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(self._values, dim=1)


class _Suppress:
    """Masks token ids out of the sampling distribution (after the recorder: see
    :mod:`arlgym.policies.special_tokens`)."""

    def __init__(self, ids: frozenset[int]) -> None:
        self.ids = sorted(ids)
        self._index: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        if self._index is None or self._index.device != scores.device:
            self._index = torch.tensor(self.ids, dtype=torch.long, device=scores.device)
        return scores.index_fill(1, self._index, float("-inf"))
