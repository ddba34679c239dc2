"""A stand-in for the parts of ``vllm`` arlgym calls, for CPU tests of the seam.

vLLM needs a GPU, so its real engine never runs in CI. This module mimics the *interface*
arlgym depends on — ``LLM(model=..., **engine_kwargs)``, ``get_tokenizer()``,
``generate([{"prompt_token_ids": ...}], [SamplingParams(...)])`` returning request outputs whose
``outputs[0]`` has ``token_ids``/``logprobs``/``finish_reason``, ``reset_prefix_cache()`` and the
in-process weight route ``llm_engine.model_executor.driver_worker.model_runner.model
.load_weights`` — on top of a real transformers model with its *own copy* of the weights, as a
colocated engine has. Sampling is ancestral with the request's seed; log-probs are
"processed" (after temperature), the sampled token only, as with ``logprobs=0``; EOS is kept in
``token_ids``. ``load_weights`` rejects names the model does not have, as vLLM's loaders do.

What it cannot tell: whether the real vLLM still has these attributes (the GPU check script,
bench/gpu_check.py, covers that when a device is lent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

#: every engine built in this process, newest last (tests inspect construction kwargs)
ENGINES: list[LLM] = []


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    seed: int | None = None
    logprobs: int | None = None


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


class EngineModel(torch.nn.Module):
    """The engine-side module: HF parameter names, vLLM's ``load_weights`` entry point."""

    def __init__(self, hf_model: Any) -> None:
        super().__init__()
        self.hf = hf_model
        self.load_calls = 0

    def load_weights(self, weights: Any) -> set[str]:
        own = self.hf.state_dict(keep_vars=True)  # tied lm_head.weight too (vLLM skips it)
        loaded = set()
        for name, tensor in weights:
            if name not in own:
                raise KeyError(f"engine model has no parameter {name!r}")
            with torch.no_grad():
                own[name].copy_(tensor.to(own[name].dtype))
            loaded.add(name)
        self.load_calls += 1
        return loaded


class LLM:
    def __init__(self, model: str, **engine_kwargs: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_path = model
        self.engine_kwargs = engine_kwargs
        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self._tokenizer = AutoTokenizer.from_pretrained(model)
        self.engine_model = EngineModel(hf)
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=self.engine_model))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=worker))
        self.prefix_cache_resets = 0
        self._eos = {self._tokenizer.eos_token_id}
        eos = getattr(hf.generation_config, "eos_token_id", None)
        self._eos.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        ENGINES.append(self)

    def get_tokenizer(self) -> Any:
        return self._tokenizer

    def reset_prefix_cache(self) -> bool:
        self.prefix_cache_resets += 1
        return True

    @torch.no_grad()
    def generate(self, inputs: list[dict], params: list[SamplingParams], use_tqdm: bool = True
                 ) -> list[RequestOutput]:
        outs = []
        for request, sp in zip(inputs, params, strict=True):
            ids = list(request["prompt_token_ids"])
            gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else 0)
            tokens: list[int] = []
            logprobs: list[dict[int, Logprob]] = []
            finish = "length"
            for _ in range(sp.max_tokens):
                logits = self.engine_model.hf(torch.tensor([ids + tokens])).logits[0, -1].float()
                if sp.temperature > 0:
                    logp = torch.log_softmax(logits / sp.temperature, dim=-1)
                    token = int(torch.multinomial(logp.exp(), 1, generator=gen))
                else:
                    logp = torch.log_softmax(logits, dim=-1)
                    token = int(logp.argmax())
                tokens.append(token)
                logprobs.append({token: Logprob(float(logp[token]))})
                if token in self._eos:
                    finish = "stop"
                    break
            text = self._tokenizer.decode(tokens, skip_special_tokens=True)
            outs.append(RequestOutput(ids, [CompletionOutput(
                0, text, tokens, logprobs if sp.logprobs is not None else None, finish)]))
        return outs


class ApplyModelLLM(LLM):
    """A V1-style engine whose worker lives in another process: only ``apply_model``."""

    def __init__(self, model: str, **engine_kwargs: Any) -> None:
        super().__init__(model, **engine_kwargs)
        del self.llm_engine

    def apply_model(self, fn: Any) -> list[Any]:
        return [fn(self.engine_model)]


class RpcLLM(LLM):
    """An engine reachable only through ``collective_rpc(fn(worker))``."""

    def __init__(self, model: str, **engine_kwargs: Any) -> None:
        super().__init__(model, **engine_kwargs)
        self._worker = self.llm_engine.model_executor.driver_worker
        del self.llm_engine

    def collective_rpc(self, fn: Any) -> list[Any]:
        return [fn(self._worker)]
