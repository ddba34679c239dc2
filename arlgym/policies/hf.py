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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arlgym.errors import ConfigError
from arlgym.policies.base import Completion, SamplingParams, prompt_text

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HFPolicy", "chat_prompt_ids"]


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

    Raises:
        ConfigError: a model object without a tokenizer, or a bad ``batch_size``.
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
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        if isinstance(model_or_name, str):
            from arlgym.models import load_model_and_tokenizer

            model, loaded_tokenizer = load_model_and_tokenizer(
                model_or_name, dtype=dtype, device=device
            )
            tokenizer = tokenizer or loaded_tokenizer
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
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_token_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.eos_token_ids: frozenset[int] = self._eos_ids(model, tokenizer)

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
        """Sample one response per prompt (``envs`` is ignored: the model sees text only).

        Vision prompts (``{"text", "image"}``) contribute their text. With ``sampling.seed``
        set, the result is a deterministic function of (weights, prompts, sampling,
        ``batch_size``); the global torch RNG is left as it was.
        """
        import torch

        sampling = sampling or SamplingParams()
        prompt_ids = [chat_prompt_ids(self.tokenizer, prompt_text(p)) for p in prompts]
        was_training = self.model.training
        self.model.eval()  # no dropout while sampling: log-probs must match a later forward
        device = self.model.device
        fork_devices = [device] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=fork_devices), torch.inference_mode():
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                results: list[Completion] = []
                for start in range(0, len(prompt_ids), self.batch_size):
                    batch = prompt_ids[start : start + self.batch_size]
                    results += self._generate_batch(batch, sampling)
        finally:
            self.model.train(was_training)
        return results

    def _generation_config(self, sampling: SamplingParams) -> Any:
        """A complete config, so nothing leaks in from a checkpoint's generation_config."""
        from transformers import GenerationConfig

        sample = not sampling.greedy
        return GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=sample,
            # Greedy decoding ignores these; leaving them unset avoids transformers' warnings.
            temperature=sampling.temperature if sample else None,
            top_p=sampling.top_p if sample else None,
            top_k=sampling.top_k if sample else None,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            min_length=0,
            num_beams=1,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )

    def _generate_batch(self, prompt_ids: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        import torch

        device = self.model.device
        width = max(len(ids) for ids in prompt_ids)
        # Left padding: every prompt ends at the same column, so new tokens line up.
        b_input = torch.full((len(prompt_ids), width), self.pad_token_id, dtype=torch.long)
        b_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for row, ids in enumerate(prompt_ids):
            b_input[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            b_mask[row, width - len(ids) :] = 1
        out = self.model.generate(
            input_ids=b_input.to(device),
            attention_mask=b_mask.to(device),
            generation_config=self._generation_config(sampling),
        )
        b_new = out.sequences[:, width:].cpu()  # (B, T_new)
        # (B, T_new, V) raw logits of the steps that produced b_new -> log-probs of the tokens.
        temperature = 1.0 if sampling.greedy else sampling.temperature
        b_logits = torch.stack(out.logits, dim=1).float().cpu()
        b_logp = torch.log_softmax(b_logits / temperature, dim=-1)
        b_token_logp = b_logp.gather(-1, b_new.unsqueeze(-1)).squeeze(-1)  # (B, T_new)

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
                )
            )
        return completions
