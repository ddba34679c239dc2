"""A policy backed by a vLLM offline engine (GPU only; ``pip install 'arlgym[vllm]'``).

Same contract as :class:`arlgym.policies.hf.HFPolicy`: prompts are wrapped in the chat template
and tokenised by *our* code (:func:`arlgym.policies.hf.chat_prompt_ids`), sent to vLLM as token
ids, and the :class:`Completion` carries the prompt ids, the sampled ids and each sampled
token's log-prob (``SamplingParams(logprobs=0)``: the sampled token only).

Log-prob distribution: the engine is built with ``logprobs_mode="processed_logprobs"`` (as TRL
does), i.e. log-probs after temperature scaling — and, when enabled, top-k/top-p — which equals
the HF policy's ``log_softmax(raw_logits / T)`` whenever ``top_k = 0`` and ``top_p = 1``.
Override with ``VLLMPolicy(path, logprobs_mode=...)``.

Vision-language models: a vision prompt ``{"text", "image"}`` is encoded by the model's HF
processor exactly as :class:`~arlgym.policies.hf.HFPolicy` does (chat template, image tokens
expanded) and sent as ``{"prompt_token_ids": ids, "multi_modal_data": {"image": PIL image}}``;
vLLM runs the same processor's image transform on the image, and the :class:`Completion` carries
our processor's image tensors (``image_inputs``) for the trainer's log-prob recomputation.

Weight sync: :meth:`VLLMPolicy.load_weights` / :meth:`VLLMPolicy.sync_weights` push a training
model's tensors into the engine in place (colocated training). vLLM's internals move between
releases, so three routes are tried in order:

1. ``llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights`` — the
   in-process path TRL 1.16 uses with ``distributed_executor_backend="external_launcher"``
   (also reachable as ``driver_worker.worker.model_runner`` on V1 worker wrappers);
2. ``llm.apply_model(fn)`` — V1's "run ``fn(model)`` on every worker";
3. ``llm.collective_rpc(fn)`` — the generic worker RPC (``fn(worker)``).

Routes 2 and 3 may need ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` to ship the closure to worker
processes and copy the tensors through the RPC; route 1 is zero-copy. The prefix cache is reset
after a sync so no stale KV entries survive. The real engine needs a GPU; the unit tests run this
class against a CPU stand-in with vLLM's interface (tests/fakes/fake_vllm.py), and
bench/gpu_check.py is the check to run on a GPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from arlgym.errors import MissingDependency
from arlgym.models import MODEL_ALIASES, load_processor
from arlgym.models import model_path as materialise
from arlgym.policies.base import Completion, SamplingParams, prompt_image, prompt_text
from arlgym.policies.hf import chat_prompt_ids, vision_prompt_inputs

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["VLLMPolicy", "import_vllm"]


def import_vllm() -> Any:
    """``import vllm``, or a :class:`MissingDependency` that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as e:
        raise MissingDependency(
            "the vLLM policy needs vllm (GPU only): pip install 'arlgym[vllm]' "
            "(pins vllm==0.33.0, which needs a CUDA torch 2.14.0). On CPU use 'hf:<model>'."
        ) from e


class VLLMPolicy:
    """Sampling from ``vllm.LLM``.

    Args:
        model_path: a checkpoint directory, a hub id, or an arlgym alias (``tiny``,
            ``smollm2-135m``), which is first materialised on disk by
            :func:`arlgym.models.model_path`.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (leave room for training
            when colocated).
        tensor_parallel_size: GPUs per engine.
        **engine_kwargs: passed to ``vllm.LLM`` (``seed``, ``max_model_len``, ``dtype``,
            ``enable_sleep_mode``, ``distributed_executor_backend``, ...).

    Raises:
        MissingDependency: vllm is not installed.
    """

    def __init__(
        self,
        model_path: str,
        *,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        **engine_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        path = str(materialise(model_path)) if model_path in MODEL_ALIASES else model_path
        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        self.name = f"vllm:{model_path}"
        self.llm = vllm.LLM(
            model=path,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            **engine_kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self._vllm = vllm
        #: the HF processor of a vision-language model (None: text model)
        self.processor = load_processor(path)

    # ---------------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Any],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[Any] | None = None,
    ) -> list[Completion]:
        """One response per prompt. With ``sampling.seed``, request ``i`` uses ``seed + i``,
        so identical prompts in a group still get different samples."""
        sampling = sampling or SamplingParams()
        prompt_ids: list[list[int]] = []
        images: list[dict[str, Any] | None] = []
        inputs: list[dict[str, Any]] = []
        for p in prompts:
            if self.processor is not None and prompt_image(p) is not None:
                import numpy as np
                from PIL import Image

                ids, image_inputs = vision_prompt_inputs(self.processor, p)
                image = Image.fromarray(np.asarray(prompt_image(p), dtype=np.uint8))
                inputs.append({"prompt_token_ids": ids, "multi_modal_data": {"image": image}})
            else:
                ids, image_inputs = chat_prompt_ids(self.tokenizer, prompt_text(p)), None
                inputs.append({"prompt_token_ids": ids})
            prompt_ids.append(ids)
            images.append(image_inputs)
        params = [self._sampling_params(sampling, i) for i in range(len(prompt_ids))]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        completions = []
        for ids, image_inputs, request in zip(prompt_ids, images, outputs, strict=True):
            sample = request.outputs[0]
            tokens = list(sample.token_ids)
            logprobs = None if sample.logprobs is None else [
                step[token].logprob for step, token in zip(sample.logprobs, tokens, strict=True)
            ]
            completions.append(
                Completion(
                    text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                    prompt_token_ids=ids,
                    response_token_ids=tokens,
                    logprobs=logprobs,
                    finish_reason=sample.finish_reason,
                    meta={"policy": self.name},
                    image_inputs=image_inputs,
                )
            )
        return completions

    def _sampling_params(self, sampling: SamplingParams, index: int) -> Any:
        greedy = sampling.greedy
        return self._vllm.SamplingParams(
            n=1,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=-1 if greedy or sampling.top_k <= 0 else sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            seed=None if sampling.seed is None else sampling.seed + index,
            logprobs=0,
        )

    # ---------------------------------------------------------------------------------------
    def load_weights(self, model: Any) -> None:
        """Push every parameter and buffer of a (gathered, unwrapped) HF model into the engine.

        Under ZeRO-3/FSDP the caller gathers full tensors first (e.g. inside
        ``deepspeed.zero.GatheredParameters`` or from an FSDP2 full state dict).
        """
        self.sync_weights(model.state_dict().items())

    def sync_weights(self, state_dict_iter: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load ``(name, tensor)`` pairs (HF parameter names) into the engine's model in place."""
        weights = [(name, tensor.detach()) for name, tensor in state_dict_iter]
        engine_model = self._in_process_model()
        if engine_model is not None:
            engine_model.load_weights(weights)
        elif hasattr(self.llm, "apply_model"):
            self.llm.apply_model(lambda m: m.load_weights(weights))
        elif hasattr(self.llm, "collective_rpc"):
            self.llm.collective_rpc(
                lambda worker: worker.model_runner.model.load_weights(weights)
            )
        else:  # pragma: no cover - depends on the installed vLLM
            raise MissingDependency(
                "this vLLM exposes no weight-loading route (driver_worker, apply_model or "
                "collective_rpc); install the pinned version: pip install 'arlgym[vllm]'"
            )
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()

    def _in_process_model(self) -> Any | None:
        """The engine's ``nn.Module`` when the worker lives in this process, else None."""
        executor = getattr(getattr(self.llm, "llm_engine", None), "model_executor", None)
        worker = getattr(executor, "driver_worker", None)
        for candidate in (worker, getattr(worker, "worker", None)):
            runner = getattr(candidate, "model_runner", None)
            model = getattr(runner, "model", None)
            if model is not None and hasattr(model, "load_weights"):
                return model
        return None
