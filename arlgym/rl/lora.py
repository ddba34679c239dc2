"""LoRA for the RL trainer: adapters on the policy, the frozen base as the KL reference.

With ``lora_r > 0`` only the adapters train, so the optimizer state is a few percent of full
fine-tuning, and the reference model of the k3 KL term needs no second copy of the weights: the
policy with its adapters switched off *is* the reference (TRL does the same under PEFT). The
rollout engine needs plain HF weights: :func:`merged_weights` merges the adapters in, yields the
base model's parameter names, and unmerges again, which is what a vLLM weight sync loads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from arlgym.errors import ConfigError, MissingDependency

__all__ = ["apply_lora", "adapters_disabled", "merged_weights", "merged_copy"]


def apply_lora(model: Any, r: int, alpha: float | None = None, dropout: float = 0.0,
               target_modules: str = "all-linear") -> Any:
    """Wrap ``model`` in a PEFT LoRA model of rank ``r`` (``alpha`` defaults to ``2r``).

    Dropout defaults to 0 so that the recomputed old log-probs equal the sampler's: with LoRA
    dropout on, the training forward pass would not be the policy that sampled.
    """
    if r < 1:
        raise ConfigError(f"lora_r must be >= 1 to apply LoRA, got {r}")
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - peft is in the [train] extra
        raise MissingDependency("LoRA needs peft: pip install 'arlgym[train]'") from e
    targets: str | list[str] = target_modules
    if target_modules != "all-linear":
        targets = [t.strip() for t in target_modules.split(",") if t.strip()]
    config = LoraConfig(r=r, lora_alpha=alpha if alpha is not None else 2 * r, lora_dropout=dropout,
                        target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def adapters_disabled(model: Any) -> contextlib.AbstractContextManager:
    """Context in which ``model`` computes with its base weights only (the KL reference)."""
    return model.disable_adapter()


def _base_name(name: str) -> str:
    """``base_model.model.model.layers.0.q_proj.base_layer.weight`` -> HF ``model.layers.0.q_proj.weight``."""
    if name.startswith("base_model.model."):
        name = name[len("base_model.model."):]
    return name.replace(".base_layer.", ".")


def merged_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(hf_name, tensor)`` of the adapters merged into the base weights.

    The adapters are merged for the duration of the iteration and unmerged afterwards, so the
    trainable model is left exactly as it was (up to float rounding of merge/unmerge). Merged
    tensors are yielded as copies: unmerging works in place, and a consumer that collects the
    pairs before loading them would otherwise read the base weights again.
    """
    model.merge_adapter()
    try:
        for name, tensor in model.state_dict().items():
            if "lora_" in name or "modules_to_save" in name:
                continue
            merged = ".base_layer." in name
            yield _base_name(name), tensor.detach().clone() if merged else tensor
    finally:
        model.unmerge_adapter()


def merged_copy(model: Any) -> Any:
    """A plain HF model with the adapters merged in (for saving a loadable ``final/``)."""
    import copy

    return copy.deepcopy(model).merge_and_unload()
