"""One engine factory: what a rollout policy samples with — ``hf``, ``vllm`` or ``vllm_server``.

The trainer's learner and each async rollout worker both need "a policy plus a way to give it
new weights", and the three engines differ in the same ways on both sides; the choice lives here
once (:func:`make_engine`), configured by a plain, picklable :class:`EngineSpec`:

``hf``
    ``model.generate`` on a model in this process: the learner's live model (nothing to load:
    every update is seen at once), or in a worker a copy it loads itself (``state_dict`` loads;
    under LoRA the learner's wrap, so the pushed adapters load by name).
``vllm``
    A vLLM engine of this process's own, HF-named weights loaded in place. On the learner it is
    colocated (TRL's recipe: ``external_launcher``, seeded per rank).
``vllm_server``
    A `trl vllm-serve` / `vllm serve` server (``urls[index]``), weights sent over NCCL. Version
    0 is not sent: the server was started with the run's start model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arlgym.errors import WorkerError
from arlgym.models import (
    is_vision_model,
    load_model_and_tokenizer,
    load_processor,
    load_tokenizer,
    model_path,
)
from arlgym.policies.hf import HFPolicy
from arlgym.policies.vllm import VLLMPolicy
from arlgym.policies.vllm_server import GROUP_PORT, VLLMServerPolicy

__all__ = ["ENGINES", "EngineSpec", "Loader", "make_engine"]

#: the engine kinds, as ``rollout_engine`` names them
ENGINES = ("hf", "vllm", "vllm_server")

#: ``load(version, state_dict)``: give the engine the learner's weights of ``version``
Loader = Callable[[int, dict[str, Any]], None]


@dataclass(frozen=True)
class EngineSpec:
    """How to build one engine (picklable: it travels to worker processes).

    Attributes:
        kind: ``hf | vllm | vllm_server``.
        model: the model spec (``tiny``, a directory, a hub id) engines load.
        seed: the run's seed (``tiny``'s init; vLLM's sampler seed is ``seed + index``).
        generation_batch_size: prompts per HF ``generate`` call.
        gpu_memory_utilization: a vLLM engine's share of GPU memory.
        max_model_len: vLLM's context length (0: the model's own).
        urls: the vLLM servers, one per worker.
        wrap: wraps an HF copy as the learner's model is wrapped (LoRA: a ``functools.partial``
            of :func:`arlgym.rl.lora.apply_lora` with the run's settings), so the pushed adapter
            weights load by name — and only they are pushed, so loading is not strict.
    """

    kind: str = "hf"
    model: str = "tiny"
    seed: int = 0
    generation_batch_size: int = 64
    gpu_memory_utilization: float = 0.3
    max_model_len: int = 0
    urls: tuple[str, ...] = ()
    wrap: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ValueError(f"engine kind {self.kind!r} is unknown: expected one of "
                             f"{', '.join(ENGINES)}")

    @property
    def vllm_kwargs(self) -> dict[str, Any]:
        """Extra vLLM engine arguments (only what is set)."""
        return {"max_model_len": self.max_model_len} if self.max_model_len else {}


def make_engine(spec: EngineSpec, *, index: int = 0, model: Any = None, tokenizer: Any = None,
                processor: Any = None, colocated: bool = False,
                device: Any = "cuda") -> tuple[Any, Loader]:
    """A rollout policy for ``spec`` and its weight loader.

    Args:
        spec: the engine settings.
        index: the rank (learner) or worker index: vLLM's seed offset, the server and its port.
        model, tokenizer, processor: ``hf`` with a live model (the learner's): sample from it
            in place; without ``model`` an HF copy of ``spec.model`` is loaded.
        colocated: ``vllm`` on a learner rank: vLLM's ``external_launcher`` backend (the caller
            sets the launcher's environment first).
        device: where a ``vllm_server`` policy's NCCL weight transfer runs from.
    """
    if spec.kind == "vllm":
        return _vllm(spec, index, colocated)
    if spec.kind == "vllm_server":
        return _vllm_server(spec, index, tokenizer, device)
    return _hf(spec, index, model, tokenizer, processor)


def _vllm(spec: EngineSpec, index: int, colocated: bool) -> tuple[Any, Loader]:
    backend = {"distributed_executor_backend": "external_launcher"} if colocated else {}
    policy = VLLMPolicy(str(model_path(spec.model, seed=spec.seed)),
                        gpu_memory_utilization=spec.gpu_memory_utilization, **backend,
                        seed=spec.seed + index, **spec.vllm_kwargs)

    def load(_version: int, state: dict[str, Any]) -> None:
        # every version, the first too: a resumed run's weights are not the start model's
        policy.sync_weights(state.items())

    return policy, load


def _vllm_server(spec: EngineSpec, index: int, tokenizer: Any, device: Any) -> tuple[Any, Loader]:
    policy = VLLMServerPolicy(spec.urls[index % len(spec.urls)],
                              tokenizer if tokenizer is not None else load_tokenizer(spec.model),
                              device=device, group_port=GROUP_PORT + index)

    def load(version: int, state: dict[str, Any]) -> None:
        if version > 0:
            policy.sync_weights(state.items())

    return policy, load


def _hf(spec: EngineSpec, index: int, model: Any, tokenizer: Any,
        processor: Any) -> tuple[Any, Loader]:
    if model is not None:  # the live model: every update is already in it
        policy = HFPolicy(model, tokenizer=tokenizer, processor=processor,
                          batch_size=spec.generation_batch_size)
        return policy, lambda _version, _state: None
    model, tokenizer = load_model_and_tokenizer(spec.model, seed=spec.seed)
    # a vision-language model samples with its processor, as the learner's own policy does
    processor = load_processor(spec.model) if is_vision_model(model) else None
    if processor is not None:
        tokenizer = processor.tokenizer
    lora = spec.wrap is not None
    if lora:  # the learner's wrap, so its adapters load by name; pushes carry only those
        model = spec.wrap(model)
    model.eval()
    policy = HFPolicy(model, tokenizer=tokenizer, processor=processor,
                      batch_size=spec.generation_batch_size)

    def load(_version: int, state: dict[str, Any]) -> None:
        missing, unexpected = model.load_state_dict(state, strict=not lora)
        if unexpected or (lora and any("lora_" in k for k in missing)):
            raise WorkerError(f"rollout worker {index}: the pushed weights do not fit its model "
                              f"(unexpected {unexpected[:3]}, missing {missing[:3]})")

    return policy, load
