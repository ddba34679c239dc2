"""What a rollout engine needs from a (possibly sharded) trained model: full weights.

Under DDP and ZeRO-2 every rank holds the full parameters, so the unwrapped model's state dict
is the weight sync. Under FSDP2 and ZeRO-3 parameters are sharded: a weight sync has to gather
them, and it is a collective, so every rank must call it at the same point (the trainer does,
right after each optimizer step).

HF ``generate`` cannot roll out from a sharded model here: each rank plays different episodes, so
ranks would run different numbers of forward passes and the gathers inside them would hang.
Sharded runs therefore roll out with vLLM (each rank's colocated engine gets the gathered
weights), which :func:`check_rollout_support` enforces before any work starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["sharding", "check_rollout_support", "full_weights", "set_launcher_env"]


def sharding(accelerator: Any) -> str | None:
    """``"fsdp"`` or ``"zero3"`` when parameters are sharded across ranks, else None."""
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind == DistributedType.FSDP:
        return "fsdp"
    if kind == DistributedType.DEEPSPEED:
        plugin = accelerator.state.deepspeed_plugin
        if plugin is not None and int(plugin.zero_stage) == 3:
            return "zero3"
    return None


def set_launcher_env(rank: int, local_rank: int, world_size: int) -> None:
    """Give vLLM's ``external_launcher`` backend the torch.distributed variables it reads.

    ``accelerate launch``/torchrun set them already; a plain ``python trainers/sampo.py`` on one
    GPU does not, so single-process defaults are filled in (existing values are kept).
    """
    import os

    for key, value in (("RANK", rank), ("LOCAL_RANK", local_rank), ("WORLD_SIZE", world_size),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, str(value))
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_rollout_support(accelerator: Any, engine: str, lora: bool) -> None:
    """Refuse combinations that would hang or silently sync wrong weights, with what to do."""
    shard = sharding(accelerator)
    if shard is None:
        return
    if engine != "vllm":
        raise ConfigError(
            f"{shard} shards the parameters, and HF generate rollouts would hang (ranks run "
            "different numbers of forward passes). Use --rollout_engine vllm, or an accelerate "
            "config that keeps full weights per rank (configs/accelerate/ddp.yaml or zero2.yaml)."
        )
    if lora:
        raise ConfigError(f"LoRA with {shard} is not supported; use ddp.yaml or zero2.yaml with LoRA.")


def full_weights(accelerator: Any, model: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(hf_name, full tensor)`` for every parameter and buffer of ``model``.

    ``model`` is the prepared (wrapped) model. Call on every rank together when sharded.
    """
    shard = sharding(accelerator)
    unwrapped = accelerator.unwrap_model(model)
    if shard == "zero3":
        import deepspeed

        params = list(unwrapped.parameters())
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            # copies: the gathered storage is released again when the context exits
            for name, tensor in unwrapped.state_dict().items():
                yield name, tensor.detach().clone()
        return
    if shard == "fsdp":  # FSDP2 keeps HF names; each DTensor shard gathers to its full tensor
        for name, tensor in unwrapped.state_dict().items():
            yield name, tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        return
    yield from unwrapped.state_dict().items()
