"""``TrainConfig``: every knob of ``trainers/sampo.py``, with help text and its source.

Algorithm knobs (advantage, loss, clipping, KL, filtering) default to ``None`` = "take the
value of the ``--algo`` preset" (:mod:`arlgym.rl.presets`, paper Table 6); a value given in the
YAML config or on the command line overrides the preset. Everything else is run plumbing.
YAML files hold the same field names; ``--config x.yaml`` loads them and flags override.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["TrainConfig"]


def _f(default: Any, help: str, **kw: Any) -> Any:  # noqa: A002 - mirrors dataclasses' name
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: json.loads(json.dumps(default)), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class TrainConfig:
    # ---------------------------------------------------------------- run
    algo: str = _f("sampo", "Preset name: sampo, grpo, grpo_st, grpo_sm, sapo, sapo_sm, cispo, "
                            "cispo_sm, gspo, gigpo, empg, dapo_grpo, dapo_gigpo (paper Table 1/6).")
    env_id: str = _f("arl/Sokoban-v0", "Registered env id.")
    env_kwargs: dict = _f({}, "Keyword arguments for gymnasium.make (JSON on the command line).")
    model: str = _f("tiny", "Model spec: tiny | smollm2-135m | checkpoint dir | HF hub id. RL "
                            "should start from a behaviour-cloned checkpoint (paper §3.1).")
    output_dir: str = _f("runs/rl", "Where logs, checkpoints and the final model go.")
    seed: int = _f(0, "Seeds python/numpy/torch once, the env task stream and sampling.")
    max_steps: int = _f(10, "Trainer steps (one rollout batch + PPO update each).")
    max_minutes: float = _f(0.0, "Wall-clock budget: stop after the step that crosses it (0: off). "
                                 "Checked on rank 0 and broadcast, so all ranks stop together.")
    torch_threads: int = _f(0, "torch CPU threads (0: torch's default). 1 suits tiny models on "
                               "CPU: their matrices are too small to split, and on busy cores "
                               "extra threads stall each other at every barrier.")
    resume: bool = _f(False, "Continue from the newest checkpoint in output_dir.")
    save_steps: int = _f(0, "Checkpoint every N steps (0: only at the end).")
    eval_steps: int = _f(0, "Greedy eval on the fixed eval list every N steps (0: off).")
    eval_episodes: int = _f(100, "Episodes of the periodic eval (the eval_split task list).")
    eval_split: str = _f("test", "Task split of the periodic eval. Use a validation split (Sokoban: "
                                 "val) with save_best, so the test rooms stay unseen by the choice.")
    save_best: bool = _f(False, "Keep the model of the best periodic eval in output_dir/best/ "
                                "(needs eval_steps > 0).")
    log_with: str = _f("tensorboard", "Accelerate tracker: tensorboard | wandb | trackio | none. "
                                      "A JSONL log is always written.")
    # ---------------------------------------------------------------- rollout
    rollout_engine: str = _f("auto", "hf (model.generate; CPU) | vllm (colocated; GPU) | auto.")
    vllm_gpu_memory_utilization: float = _f(0.3, "Fraction of GPU memory each colocated vLLM "
                                                  "engine may take (the rest is for training).")
    vllm_max_model_len: int = _f(0, "vLLM context length (0: the model's own; set it to prompt + "
                                    "response length to shrink the KV cache reservation).")
    num_tasks: int = _f(16, "Task groups per step, over all ranks (Table 6 'User Prompt Number').")
    group_size: int = _f(8, "Rollouts per task, GRPO's G (Table 6: 8).")
    temperature: float = _f(1.0, "Rollout sampling temperature (Table 6: 1.0).")
    top_p: float = _f(1.0, "Rollout nucleus sampling mass.")
    top_k: int = _f(0, "Rollout top-k (0: off).")
    max_new_tokens: int = _f(64, "Response cap in tokens (Table 6 uses 512 for Qwen3-4B).")
    generation_batch_size: int = _f(64, "Prompts per model.generate call.")
    # ---------------------------------------------------------------- optimisation
    lr: float | None = _f(None, "Actor learning rate (preset: Table 6 1e-6 for Qwen3-4B; CPU "
                                "configs set their own).")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    warmup_steps: int = _f(0, "Linear LR warm-up steps.")
    ppo_epochs: int = _f(1, "Passes over each rollout batch (Table 6: 1).")
    mini_batch_size: int = _f(0, "Turn samples per optimizer step (0: the whole batch, i.e. "
                                 "on-policy; smaller values make later mini-batches off-policy).")
    micro_batch_tokens: int = _f(16384, "Token budget of one forward/backward micro-batch.")
    grad_clip: float = _f(1.0, "Max gradient norm (Table 6: 1.0).")
    gradient_checkpointing: bool = _f(False, "Recompute activations in the backward pass: far "
                                             "less memory for long multi-turn samples (paper "
                                             "configs), ~30% more training compute. Turns "
                                             "share_prompts off.")
    lora_r: int = _f(0, "LoRA rank (0: full fine-tuning). With LoRA only the adapters train and "
                        "the KL reference is the policy with its adapters switched off (no "
                        "second model copy); final/ holds the merged model.")
    lora_alpha: float | None = _f(None, "LoRA alpha (None: 2 * lora_r).")
    lora_target_modules: str = _f("all-linear", "Modules that get adapters: all-linear or a "
                                                "comma-separated list such as q_proj,v_proj.")
    old_logprobs: str = _f("auto", "Where the PPO ratio's old log-probs come from: recompute (a "
                                   "forward pass of the trainer, as verl) | rollout (the sampler's "
                                   "own) | auto (rollout for HF generate, which samples from the "
                                   "live fp32 model, so both agree to ~1e-6 and the pass is saved; "
                                   "recompute for vLLM and for EMPG, which needs the entropies).")
    share_prompts: bool = _f(True, "Run a prompt that several turn samples share (every group's "
                                   "first turn) once, its keys/values reused by each member's "
                                   "response; same loss and gradients, less compute.")
    # ---------------------------------------------------------------- algorithm (None: preset)
    advantage: str | None = _f(None, "Advantage estimator: grpo | gigpo | empg.")
    norm: str | None = _f(None, "Group normalisation: mean_std_norm | mean_norm.")
    gamma: float | None = _f(None, "GiGPO step-return discount γ (Table 6: 0.95).")
    step_weight: float | None = _f(None, "GiGPO step advantage weight ω (Table 6: 1.0).")
    loss: str | None = _f(None, "Policy loss: ppo_clip | gspo | sapo | cispo.")
    aggregation: str | None = _f(None, "token-mean | seq-mean-token-mean | seq-mean-token-sum | "
                                       "seq-mean-token-sum-norm.")
    clip_low: float | None = _f(None, "ε_low of the IS clip.")
    clip_high: float | None = _f(None, "ε_high of the IS clip.")
    seq_mask_delta: float | None = _f(None, "δ of the sequence mask (negative-advantage, "
                                            "off-policy sequences); unset: off.")
    kl_coef: float | None = _f(None, "k3 KL-to-reference coefficient (Table 6: 0.01); 0 turns "
                                     "the reference model off.")
    dynamic_sampling: bool | None = _f(None, "DAPO dynamic sampling: drop groups whose returns "
                                             "are all equal and re-roll.")
    max_tries: int | None = _f(None, "Dynamic sampling rollouts per step at most (Table 6: 3).")
    cold_start_steps: int | None = _f(None, "Steps before dynamic sampling starts filtering.")
    loss_kwargs: dict = _f({}, "Extra loss knobs, e.g. {\"sapo_tau_pos\": 1.0} (override preset).")
    advantage_kwargs: dict = _f({}, "Extra advantage knobs, e.g. {\"cross_steps\": true}.")

    def __post_init__(self) -> None:
        if self.max_steps < 0:
            raise ConfigError(f"max_steps must be >= 0, got {self.max_steps}")
        if self.max_minutes < 0:
            raise ConfigError(f"max_minutes must be >= 0, got {self.max_minutes}")
        if self.num_tasks < 1 or self.group_size < 1:
            raise ConfigError("num_tasks and group_size must be >= 1")
        if self.old_logprobs not in ("auto", "recompute", "rollout"):
            raise ConfigError(f"old_logprobs must be auto, recompute or rollout, got {self.old_logprobs!r}")
        if self.rollout_engine not in ("auto", "hf", "vllm"):
            raise ConfigError(f"rollout_engine must be auto, hf or vllm, got {self.rollout_engine!r}")
        if self.save_best and self.eval_steps <= 0:
            raise ConfigError("save_best needs a periodic eval: set eval_steps > 0 (and eval_split "
                              "to a validation split)")
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ConfigError("vllm_gpu_memory_utilization must be in (0, 1], got "
                              f"{self.vllm_gpu_memory_utilization}")
        if self.lora_r < 0:
            raise ConfigError(f"lora_r must be >= 0, got {self.lora_r}")
        if self.ppo_epochs < 1:
            raise ConfigError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        for name in ("env_kwargs", "loss_kwargs", "advantage_kwargs"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    setattr(self, name, json.loads(value))
                except json.JSONDecodeError as e:
                    raise ConfigError(f"--{name} must be JSON, got {value!r}") from e
