"""The trainer's parts, one builder each: the run's checks, the accelerator, the policy model,
the reference model, the optimizer, the dynamic sampler and the rollout collector.

``Trainer.__init__`` calls these in a fixed order (the order matters: the global RNG is seeded
before the model loads and LoRA draws its initial adapters from it), so each part can be read,
tested and swapped on its own without knowing the trainer. Each builder takes the config and
what it needs explicitly, and returns its part; none reaches into another's state.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arlgym.envs.servers import env_server_kwargs as remote_kwargs
from arlgym.errors import ConfigError
from arlgym.models import is_vision_model, load_model_and_tokenizer, load_processor
from arlgym.policies.special_tokens import image_slot_token_ids
from arlgym.rl.config import TrainConfig
from arlgym.rl.logprobs import logit_rows_budget, resolve_lm_head
from arlgym.rl.lora import apply_lora
from arlgym.rl.presets import make_sampler
from arlgym.rollout import RolloutCollector

__all__ = ["ModelParts", "check_setup", "resolve_engine", "build_accelerator", "build_model",
           "build_reference", "build_optimizer", "build_sampler", "build_collector",
           "env_server_kwargs", "env_seed", "record_run"]


@dataclass
class ModelParts:
    """The policy model and what the trainer derives from it once.

    Attributes:
        model: the causal LM (LoRA-wrapped when ``lora``), in train mode.
        tokenizer: its tokenizer (a VLM's processor's tokenizer).
        processor: a vision-language model's processor, else None.
        logit_rows: bound on response logit rows per micro-batch (None: unbounded, or the LM
            head is fused and never materialises the logits).
        fused_head: whether log-probs come from the fused LM head.
        image_slot_ids: the token ids of image placeholders (empty for a text model).
        lora: whether LoRA adapters train instead of the full weights.
        share_prompts: whether group members with one prompt run it once (see ``build_model``).
    """

    model: Any
    tokenizer: Any
    processor: Any
    logit_rows: int | None
    fused_head: bool
    image_slot_ids: Any
    lora: bool
    share_prompts: bool


def check_setup(cfg: TrainConfig, num_processes: int, advantage: str) -> int:
    """Refuse set-ups the trainer cannot run, before any model loads; returns the rank's
    number of task groups (``num_tasks / num_processes``: whole groups stay on one rank)."""
    if cfg.num_tasks % num_processes:
        raise ConfigError(
            f"num_tasks={cfg.num_tasks} must be a multiple of the number of processes "
            f"({num_processes}) so that whole groups stay on one rank"
        )
    if cfg.old_logprobs == "rollout" and advantage == "empg":
        raise ConfigError("old_logprobs rollout: EMPG needs the entropies of a trainer forward "
                          "pass; use old_logprobs recompute (or auto)")
    if cfg.rollout_engine == "vllm_server" and num_processes > 1:
        raise ConfigError("rollout_engine vllm_server drives its servers from one process (the "
                          "NCCL weight group has one trainer rank). Fix: launch one process, or "
                          "--rollout_engine vllm (colocated, one engine per rank)")
    return cfg.num_tasks // num_processes


def resolve_engine(cfg: TrainConfig) -> str:
    """``rollout_engine``, with ``auto`` resolved: vLLM when a GPU and vLLM are present.

    ``vllm_server`` is refused without a GPU here: its weights go to the server over NCCL
    after every update, and the run would fail at its first update instead of now.
    """
    if cfg.rollout_engine == "vllm_server" and not torch.cuda.is_available():
        raise ConfigError("rollout_engine vllm_server sends the weights to its servers over NCCL "
                          "after every update, which needs a CUDA device here; this machine has "
                          "none. Fix: --rollout_engine hf on CPU")
    if cfg.rollout_engine != "auto":
        return cfg.rollout_engine
    return "vllm" if torch.cuda.is_available() and _has_vllm() else "hf"


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def build_accelerator(out: Path, log_with: str | None) -> Any:
    """The run's Accelerator: trackers logging under ``out/logs``, CPU when there is no GPU."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    return Accelerator(
        log_with=log_with,
        project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out / "logs")),
        cpu=not torch.cuda.is_available(),
    )


def record_run(accelerator: Any, out: Path, cfg: TrainConfig, algo: dict[str, Any],
               log_with: str | None) -> None:
    """The run's ``config.json`` (settings and resolved algorithm, main process only) and, with
    ``log_with``, the trackers started with the scalar settings."""
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(
            {"config": cfg.__dict__, "algorithm": algo}, indent=2, default=str))
    if log_with:
        accelerator.init_trackers("arlgym", config={k: v for k, v in cfg.__dict__.items()
                                                    if isinstance(v, (int, float, str, bool))})


def build_model(cfg: TrainConfig) -> ModelParts:
    """The policy model: loaded (seeded ``tiny`` weights), its VLM processor, the logits bound,
    LoRA adapters and gradient checkpointing as configured, left in train mode.

    The caller seeds the global RNG first: LoRA's adapters are drawn from it.
    """
    model, tokenizer = load_model_and_tokenizer(cfg.model, seed=cfg.seed)
    # A vision-language model samples and trains with its processor's image inputs.
    processor = load_processor(cfg.model) if is_vision_model(model) else None
    if processor is not None:
        tokenizer = processor.tokenizer
    logit_rows = logit_rows_budget(cfg.micro_batch_logits_mb, model)
    fused_head = resolve_lm_head(cfg.lm_head, model)
    if fused_head:  # the logits are never materialised: no logits bound needed
        logit_rows = None
    image_slot_ids = image_slot_token_ids(processor, model)
    lora = cfg.lora_r > 0
    if lora:
        model = apply_lora(model, cfg.lora_r, cfg.lora_alpha, target_modules=cfg.lora_target_modules)
    # Shared-prompt batching keeps the prompt's keys/values with gradients; HF checkpointing
    # turns the cache off in train mode (and would re-append it when recomputing), so the
    # two exclude each other: checkpointing wins, as the memory saver.
    share_prompts = cfg.share_prompts and not cfg.gradient_checkpointing
    # Vision turns: off. Their prompt ids hold the image as identical placeholder tokens, so
    # equal ids do not mean equal prompts (two rooms, same text), and the shared-prefix pass
    # has no image inputs; every vision turn runs its own prompt with its own image.
    share_prompts = share_prompts and processor is None
    if cfg.gradient_checkpointing:  # active in train mode only: rollouts keep the KV cache
        if cfg.share_prompts:
            warnings.warn("gradient_checkpointing: share_prompts is turned off (the shared "
                          "prompt's cache needs use_cache in train mode); set "
                          "share_prompts: false to silence this", stacklevel=3)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return ModelParts(model=model, tokenizer=tokenizer, processor=processor,
                      logit_rows=logit_rows, fused_head=fused_head,
                      image_slot_ids=image_slot_ids, lora=lora, share_prompts=share_prompts)


def build_reference(cfg: TrainConfig, kl_coef: float, lora: bool, device: Any) -> Any:
    """The frozen k3 reference model, or None: no KL term, or LoRA (whose reference is the
    policy with its adapters off, so no second copy of the weights is kept)."""
    if kl_coef <= 0 or lora:
        return None
    ref, _ = load_model_and_tokenizer(cfg.model, seed=cfg.seed)
    ref.requires_grad_(False)
    return ref.to(device).eval()


def build_optimizer(model: Any, lr: float, cfg: TrainConfig) -> tuple[Any, Any]:
    """AdamW over the trainable parameters and a linear warm-up over ``warmup_steps``."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  lr=lr, weight_decay=cfg.weight_decay)
    warm = max(1, cfg.warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm))
    return optimizer, scheduler


def _task_return(traj: Any) -> float:
    return traj.task_return


def build_sampler(algo: dict[str, Any], target_groups: int) -> Any:
    """The preset's dynamic sampler (None when it does not filter). ARLArena filters on the
    env's task return, without the trainer's format penalties."""
    return make_sampler(algo, target_groups=target_groups, returns_of=_task_return)


def env_seed(seed: int, process_index: int) -> int:
    """The first env seed of a rank's task stream (ranks draw disjoint tasks)."""
    return seed * 1_000_003 + process_index * 10_000_019


def env_server_kwargs(env_servers: str) -> dict[str, Any]:
    """The collector's ``servers``/``server_token`` for the ``env_servers`` setting (empty: {});
    each entry is checked to be an http(s) URL (:func:`arlgym.envs.servers.env_server_kwargs`)."""
    return remote_kwargs(env_servers, "env_servers")


def build_collector(cfg: TrainConfig, policy: Any, num_tasks: int, seed: int) -> Any:
    """The rank's :class:`~arlgym.rollout.RolloutCollector`: ``num_tasks`` groups of
    ``group_size`` per batch from env seed ``seed`` on, local envs or ``env_servers``."""
    return RolloutCollector(
        cfg.env_id, policy, group_size=cfg.group_size, num_tasks=num_tasks,
        env_kwargs=cfg.env_kwargs, seed=seed, progress=False,
        **env_server_kwargs(cfg.env_servers))
