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

from arlgym.core import validation as v
from arlgym.core.validation import check_choice, did_you_mean, make_checked_env
from arlgym.errors import ConfigError
from arlgym.rl.advantages import NORM_MODES, compute_advantages
from arlgym.rl.alarm import ON_COLLAPSE, REMEDY_NAMES
from arlgym.rl.losses import policy_loss
from arlgym.rl.presets import PRESETS
from arlgym.rl.registry import ADVANTAGES, AGGREGATIONS, LOSSES

__all__ = ["TrainConfig", "check_env"]


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
    save_steps: int = _f(1, "Checkpoint every N steps (0: only at the end). Every step by "
                            "default, so a killed run loses at most the step it was in and the "
                            "same command continues it.")
    save_total_limit: int = _f(-1, "Keep only the newest N checkpoints (0: all; -1: auto, the "
                                   "newest one, or all with stop_on_collapse, which reaches back "
                                   "before a collapse).")
    eval_steps: int = _f(0, "Eval on the fixed eval list every N steps (0: off); greedy unless "
                                "eval_temperature is set.")
    eval_episodes: int = _f(100, "Episodes of the periodic eval (the eval_split task list).")
    eval_split: str = _f("test", "Task split of the periodic eval. Use a validation split (Sokoban: "
                                 "val) with save_best, so the test rooms stay unseen by the choice.")
    save_best: bool = _f(False, "Keep the model of the best periodic eval in output_dir/best/ "
                                "(needs eval_steps > 0).")
    test_episodes: int = _f(0, "Eval at the end (greedy unless eval_temperature) on the "
                               "first N tasks of test_split, of final/ and (with save_best) of best/: eval/test-last.jsonl and "
                               "eval/test-best.jsonl, each with a .summary.json carrying the "
                               "task panel and its hash (0: off).")
    test_split: str = _f("test", "Task split of the final eval (test_episodes).")
    test_both_decodings: bool = _f(True, "The final test eval also plays the other decoding: "
                                         "greedy beside a sampled eval (eval_temperature > 0), "
                                         "or the paper's validation sampling (temperature 0.6, "
                                         "top-p 0.95, top-k 20, 4 episodes a task) beside a "
                                         "greedy one: eval/test-<ckpt>.<greedy|sampled>.jsonl; "
                                         "the arena report shows both.")
    eval_temperature: float = _f(0.0, "Sampling temperature of the periodic and final evals "
                                      "(0: greedy). The paper validates at 0.6 with eval_top_p "
                                      "0.95 and eval_top_k 20.")
    eval_top_p: float = _f(1.0, "Nucleus mass of the evals when eval_temperature > 0 (1: off).")
    eval_top_k: int = _f(0, "Top-k of the evals when eval_temperature > 0 (0: off).")
    eval_samples: int = _f(1, "Episodes per task of the evals (success then averages them; "
                              "more than 1 needs eval_temperature > 0).")
    collapse_alarm: bool = _f(True, "Judge the run online with arlgym.rl.alarm.detect_collapse "
                                    "(paper Finding 2): a warning and the alarm/collapse metric.")
    stop_on_collapse: bool = _f(False, "End the run when the collapse alarm fires; final/ then "
                                       "holds the last checkpoint saved before the collapse "
                                       "began (use save_steps to have one).")
    on_collapse: str = _f("warn", "What the collapse alarm does when it fires: warn (a warning, "
                                  "alarm/collapse, collapse.json) | stop (end the run; final/ "
                                  "holds the last checkpoint saved before the collapse began; "
                                  "stop_on_collapse true means this) | rollback (go back to the "
                                  "newest in-memory snapshot from before the collapse, apply "
                                  "rollback_remedy and train on to max_steps; at most "
                                  "max_rollbacks times, then stop).")
    rollback_remedy: str = _f("halve_lr", "on_collapse rollback: what changes before training "
                                          "on: halve_lr | raise_kl (kl_coef doubled, at least "
                                          "0.01) | seq_mask (the loss's sequence mask on).")
    max_rollbacks: int = _f(2, "on_collapse rollback: rollbacks allowed; the next alarm stops "
                               "the run on the newest snapshot from before that collapse.")
    snapshot_steps: int = _f(2, "on_collapse rollback: an in-memory snapshot (model, optimizer, "
                                "scheduler, RNG, task stream) every N steps; the newest 4 kept.")
    rollback_from: str = _f("memory", "on_collapse rollback: where the states to go back to "
                                      "live: memory (the snapshots of snapshot_steps, ~12 bytes "
                                      "a parameter each, in CPU memory) | checkpoints (the run's "
                                      "own checkpoints on disk, no extra memory: for models too "
                                      "big to copy; needs save_steps, and save_total_limit 0 or "
                                      ">= 8; the default -1 then keeps 8).")
    degradation_alarm: bool = _f(False, "Also fire the alarm when the periodic eval's success "
                                        "falls well below its peak with the format intact "
                                        "(arlgym.rl.alarm.detect_degradation; needs eval_steps "
                                        "and a validation eval_split).")
    log_with: str = _f("tensorboard", "Accelerate tracker: tensorboard | wandb | trackio | none. "
                                      "A JSONL log is always written.")
    # ---------------------------------------------------------------- rollout
    rollout_engine: str = _f("auto", "hf (model.generate; CPU) | vllm (colocated; GPU) | "
                                     "vllm_server (a `trl vllm-serve` or `vllm serve` server per "
                                     "rollout worker, at vllm_server_urls; GPU) | auto.")
    vllm_server_urls: str = _f("", "rollout_engine vllm_server: comma-separated server URLs, one "
                                   "per rollout worker (one with async_rollouts false). Each "
                                   "server must serve `model`; the weights go to it over NCCL "
                                   "after every update (docs/async.md).")
    env_servers: str = _f("", "Comma-separated env server URLs (`arlgym serve`, docs/serving.md): "
                              "the rollout envs (group g on server g mod n) and the periodic and "
                              "final evals' episodes run there, instead of in this process. "
                              "Empty: local envs. A token, if the servers need "
                              "one, comes from $ARLGYM_SERVE_TOKEN (never written to config.json).")
    vllm_gpu_memory_utilization: float = _f(0.3, "Fraction of GPU memory each colocated vLLM "
                                                  "engine may take (the rest is for training); "
                                                  "one engine per rank, or with async_rollouts "
                                                  "one per rollout worker.")
    vllm_max_model_len: int = _f(0, "vLLM context length (0: the model's own; set it to prompt + "
                                    "response length to shrink the KV cache reservation).")
    async_rollouts: bool = _f(False, "Play rollouts in worker processes (each with its own "
                                     "weights copy, HF engine on CPU) while the learner trains; "
                                     "new weights are pushed after every update (docs/async.md).")
    rollout_workers: int = _f(1, "Rollout worker processes (async_rollouts).")
    max_staleness: int = _f(1, "async_rollouts: most updates a trained rollout batch may lag the "
                               "learner (0: sampled by the current weights, the synchronous "
                               "schedule).")
    staleness_policy: str = _f("pace", "async_rollouts: how max_staleness is kept: pace (the "
                                       "workers wait) | drop (over-stale batches are discarded) "
                                       "| withhold (their tasks are played again).")
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
    lm_head: str = _f("fused", "How the update turns hidden states into response log-probs. "
                               "fused: TRL's chunked log-prob kernel projects only the real response "
                               "tokens, tile by tile, and never materialises the logits (memory "
                               "independent of the vocabulary; one more LM-head pass in the "
                               "backward). materialized: the response columns' logits in the "
                               "model's dtype, then a chunked selective log-softmax (logits + their "
                               "gradient in memory, bounded by micro_batch_logits_mb). A model whose "
                               "head is not a plain projection (logit softcapping/scaling) falls "
                               "back to materialized. docs/scale.md.")
    micro_batch_logits_mb: float = _f(1024.0, "Memory budget (MiB, counted at 4 bytes a logit) "
                                              "of one micro-batch's response logits: response "
                                              "tokens x vocabulary. At a real vocabulary (151,936) "
                                              "this, not micro_batch_tokens, bounds a micro-batch "
                                              "(1 GiB: ~1,700 response tokens); docs/scale.md.")
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
                                   "recompute for vLLM, for EMPG, which needs the entropies, and "
                                   "for stale async batches). rollout with async_rollouts anchors "
                                   "the PPO ratio at the policy that sampled (up to max_staleness "
                                   "updates old) and saves the learner that pass (docs/async.md).")
    rollout_correction: str = _f("none", "Off-policy correction of the gap between the sampler's "
                                         "log-probs and the learner's (engine numerics, stale "
                                         "weights): none | tis_token | tis_seq (truncated IS) | "
                                         "mis_token | mis_seq (masked IS) | icepop (two-sided "
                                         "token mask). Needs the learner's own old log-probs, so "
                                         "old_logprobs auto recomputes them (docs/async.md).")
    rollout_correction_cap: float | None = _f(None, "C of TIS/MIS (β of IcePop): the weight cap "
                                                    "or the band's top; unset: the source's "
                                                    "value (2; IcePop 5).")
    rollout_correction_floor: float | None = _f(None, "Bottom of the MIS/IcePop band (α of "
                                                      "IcePop); unset: the source's value (MIS "
                                                      "0, IcePop 0.5).")
    credit: str = _f("response", "Which response tokens carry the loss: response (every "
                                 "token, the paper) | action (the tokens after </think>, for "
                                 "every term: as if the reasoning were prompt) | action-pg (the "
                                 "policy gradient on those only; the KL and entropy keep the "
                                 "whole response). A reply without </think> keeps every token. "
                                 "arlgym/rl/credit.py says why.")
    share_prompts: bool = _f(True, "Run a prompt that several turn samples share (every group's "
                                   "first turn) once, its keys/values reused by each member's "
                                   "response; same loss and gradients, less compute.")
    # ---------------------------------------------------------------- algorithm (None: preset)
    advantage: str | None = _f(None, "Advantage estimator: grpo | gigpo | empg.")
    episode_norm: str | None = _f(None, "Over what the episode advantage's group mean/std are "
                                        "taken: turns (every turn sample of the group, verl-agent's "
                                        "compute_mean_std_cross_steps=True, the default of every "
                                        "preset) | trajectories (one value per trajectory, "
                                        "verl's vanilla GRPO).")
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
    is_band: float | None = _f(0.2, "epsilon of the band of the is/ telemetry (is/out_low_neg_adv_frac, "
                                    "is/out_high_pos_adv_frac: the paper's Fig. 3 signal and the "
                                    "collapse alarm's), the same for every preset so that runs are "
                                    "comparable (CISPO's own lower clip, 1.0, would never count a "
                                    "token); null: each loss's own clips.")
    loss_kwargs: dict = _f({}, "Extra loss knobs, e.g. {\"sapo_tau_pos\": 1.0} (override preset).")
    advantage_kwargs: dict = _f({}, "Extra advantage knobs, e.g. {\"cross_steps\": true}.")

    @property
    def checkpoints_kept(self) -> int:
        """``save_total_limit`` resolved (0: all): -1 keeps the newest checkpoint, which is all
        a resume needs, or all of them with ``stop_on_collapse``, which reloads the last one
        saved before a collapse began."""
        if self.save_total_limit >= 0:
            return self.save_total_limit
        if self.on_collapse == "rollback" and self.rollback_from == "checkpoints":
            return ROLLBACK_CHECKPOINTS
        return 0 if self.stop_on_collapse or self.on_collapse == "stop" else 1

    def __post_init__(self) -> None:
        _check_fields(self)  # types, ranges and names of every field, before anything loads
        if self.max_steps < 0:
            raise ConfigError(f"max_steps must be >= 0, got {self.max_steps}")
        if self.max_minutes < 0:
            raise ConfigError(f"max_minutes must be >= 0, got {self.max_minutes}")
        if self.num_tasks < 1 or self.group_size < 1:
            raise ConfigError("num_tasks and group_size must be >= 1")
        if self.old_logprobs not in ("auto", "recompute", "rollout"):
            raise ConfigError(f"old_logprobs must be auto, recompute or rollout, got {self.old_logprobs!r}")
        if self.lm_head not in ("fused", "materialized"):
            raise ConfigError(f"lm_head must be fused or materialized, got {self.lm_head!r}")
        if self.rollout_engine not in ("auto", "hf", "vllm", "vllm_server"):
            raise ConfigError(f"rollout_engine must be auto, hf, vllm or vllm_server, got "
                              f"{self.rollout_engine!r}")
        urls = [u for u in self.vllm_server_urls.split(",") if u.strip()]
        if self.rollout_engine == "vllm_server":
            want = self.rollout_workers if self.async_rollouts else 1
            if len(urls) != want:
                raise ConfigError(
                    f"rollout_engine vllm_server needs one server per rollout worker: "
                    f"vllm_server_urls has {len(urls)}, expected {want}. Fix: --vllm_server_urls "
                    "http://host:8000[,http://host2:8000...] (start each with trl vllm-serve "
                    "--model <model>)")
        elif urls:
            raise ConfigError("vllm_server_urls is set but rollout_engine is "
                              f"{self.rollout_engine}. Fix: --rollout_engine vllm_server, or drop "
                              "vllm_server_urls")
        _check_collapse_settings(self)
        if self.save_best and self.eval_steps <= 0:
            raise ConfigError("save_best needs a periodic eval: set eval_steps > 0 (and eval_split "
                              "to a validation split)")
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ConfigError("vllm_gpu_memory_utilization must be in (0, 1], got "
                              f"{self.vllm_gpu_memory_utilization}")
        if self.lora_r < 0:
            raise ConfigError(f"lora_r must be >= 0, got {self.lora_r}")
        from arlgym.rl.credit import check_credit

        check_credit(self.credit)
        if self.is_band is not None and not 0.0 < self.is_band < 1.0:
            raise ConfigError(f"is_band must be in (0, 1) or null, got {self.is_band}")
        if self.eval_samples > 1 and self.eval_temperature <= 0:
            raise ConfigError(f"eval_samples={self.eval_samples} repeats a greedy eval: every "
                              "sample of a task would be the same episode. Set eval_temperature "
                              "> 0 (the paper: 0.6, eval_top_p 0.95, eval_top_k 20) or "
                              "eval_samples 1")
        if self.test_episodes < 0:
            raise ConfigError(f"test_episodes must be >= 0, got {self.test_episodes}")
        if self.episode_norm not in (None, "turns", "trajectories"):
            raise ConfigError(f"episode_norm must be turns or trajectories, got {self.episode_norm!r}")
        from arlgym.rl.correction import RolloutCorrection

        RolloutCorrection(self.rollout_correction, self.rollout_correction_cap,
                          self.rollout_correction_floor)  # names and band, with the fix
        if self.rollout_correction != "none" and self.old_logprobs == "rollout":
            raise ConfigError(f"rollout_correction {self.rollout_correction} compares the "
                              "sampler's log-probs with the learner's, but old_logprobs rollout "
                              "makes them the same. Fix: --old_logprobs recompute (or auto)")
        from arlgym.rl.staleness import check_staleness

        check_staleness(self.max_staleness, self.staleness_policy)
        if self.ppo_epochs < 1:
            raise ConfigError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        for name in ("env_kwargs", "loss_kwargs", "advantage_kwargs"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    setattr(self, name, json.loads(value))
                except json.JSONDecodeError as e:
                    raise ConfigError(f"--{name} must be JSON, got {value!r}") from e


#: where a rollback's states come from (``rollback_from``)
ROLLBACK_FROM = ("memory", "checkpoints")
#: checkpoints kept by default with ``rollback_from checkpoints`` (the reach of the in-memory
#: snapshots, 4 every 2 steps: enough to reach back before a collapse judged late)
ROLLBACK_CHECKPOINTS = 8


#: Ranges of the numeric fields, checked (with the types) before anything else happens.
#: ``(min, max)`` inclusive; ``"gt0"``: > 0. Fields not listed only get their type checked.
_RANGES: dict[str, Any] = {
    "seed": (0, None), "max_steps": (0, None), "max_minutes": (0, None), "torch_threads": (0, None),
    "save_steps": (0, None), "save_total_limit": (-1, None), "eval_steps": (0, None),
    "eval_episodes": (1, None), "test_episodes": (0, None), "vllm_max_model_len": (0, None),
    "num_tasks": (1, None), "group_size": (1, None), "temperature": (0, None),
    "top_p": (0, 1), "top_k": (0, None), "max_new_tokens": (1, None),
    "generation_batch_size": (1, None), "lr": "gt0", "weight_decay": (0, None),
    "warmup_steps": (0, None), "ppo_epochs": (1, None), "mini_batch_size": (0, None),
    "micro_batch_tokens": (1, None), "micro_batch_logits_mb": "gt0", "grad_clip": (0, None),
    "lora_r": (0, None),
    "lora_alpha": "gt0", "gamma": (0, 1), "step_weight": (0, None), "clip_low": (0, None),
    "clip_high": (0, None), "seq_mask_delta": (0, None), "kl_coef": (0, None),
    "max_tries": (1, None), "cold_start_steps": (0, None), "rollout_correction_cap": "gt0",
    "rollout_correction_floor": (0, None), "rollout_workers": (1, None),
    "max_staleness": (0, None), "eval_temperature": (0, None), "eval_top_p": (0, 1),
    "max_rollbacks": (0, None), "snapshot_steps": (1, None),
    "eval_top_k": (0, None), "eval_samples": (1, None),
}
#: Example values for the fields whose default is None (for the fix hint of an error).
_EXAMPLES: dict[str, Any] = {
    "lr": 1e-6, "lora_alpha": 32, "gamma": 0.95, "step_weight": 1.0, "clip_low": 0.2,
    "clip_high": 0.28, "seq_mask_delta": 0.1, "kl_coef": 0.01, "max_tries": 3,
    "cold_start_steps": 0, "dynamic_sampling": True, "advantage": "gigpo", "loss": "ppo_clip",
    "aggregation": "token-mean", "norm": "mean_std_norm", "rollout_correction_cap": 2.0,
    "rollout_correction_floor": 0.5,
}
_WHERE = "trainer config"


def _check_collapse_settings(cfg: TrainConfig) -> None:
    """``on_collapse`` and its knobs; ``stop_on_collapse`` is ``on_collapse stop``."""
    if cfg.on_collapse not in ON_COLLAPSE:
        raise ConfigError(f"on_collapse={cfg.on_collapse!r} is unknown: expected one of "
                          f"{', '.join(ON_COLLAPSE)}. Fix: --on_collapse rollback")
    if cfg.stop_on_collapse:
        if cfg.on_collapse == "rollback":
            raise ConfigError("stop_on_collapse true and on_collapse rollback contradict "
                              "each other. Fix: drop stop_on_collapse")
        cfg.on_collapse = "stop"
    if cfg.rollback_remedy not in REMEDY_NAMES:
        raise ConfigError(f"rollback_remedy={cfg.rollback_remedy!r} is unknown: expected "
                          f"one of {', '.join(REMEDY_NAMES)}. Fix: --rollback_remedy halve_lr")
    if cfg.on_collapse != "warn" and not cfg.collapse_alarm:
        raise ConfigError(f"on_collapse {cfg.on_collapse} needs the alarm: set "
                          "collapse_alarm true (or on_collapse warn)")
    if cfg.on_collapse == "rollback" and cfg.async_rollouts:
        raise ConfigError("on_collapse rollback restores the learner in place; async "
                          "rollout workers would keep sampling the abandoned versions. Fix: "
                          "--on_collapse stop with async_rollouts, or async_rollouts false")
    if cfg.rollback_from not in ROLLBACK_FROM:
        raise ConfigError(f"rollback_from={cfg.rollback_from!r} is unknown: expected one of "
                          f"{', '.join(ROLLBACK_FROM)}. Fix: --rollback_from checkpoints")
    if cfg.on_collapse == "rollback" and cfg.rollback_from == "checkpoints":
        if cfg.save_steps <= 0:
            raise ConfigError("rollback_from checkpoints goes back to the run's checkpoints, "
                              "and save_steps 0 writes none before the end. Fix: --save_steps 1")
        if 0 < cfg.save_total_limit < ROLLBACK_CHECKPOINTS:
            raise ConfigError(f"rollback_from checkpoints: save_total_limit "
                              f"{cfg.save_total_limit} keeps too few to reach back before a "
                              f"collapse the alarm judges a few steps late. Fix: "
                              f"--save_total_limit {ROLLBACK_CHECKPOINTS} (or 0: all, or -1: auto)")
    if cfg.degradation_alarm and (cfg.eval_steps <= 0 or cfg.eval_split == "test"):
        raise ConfigError("degradation_alarm reads the periodic eval, which must not be the "
                          "test panel: set eval_steps > 0 and eval_split val")


def _check_fields(cfg: TrainConfig) -> None:
    """Check every field's type and range, then the names (preset, env, loss, aggregation,
    advantage, norm) against their registries: a bad config fails here, before any model is
    loaded. Digit strings become ints and numeric strings floats (YAML reads ``1e-6`` as a
    string); see :mod:`arlgym.core.validation`."""
    import dataclasses
    import types
    import typing

    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        tp, value = hints[f.name], getattr(cfg, f.name)
        optional = False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional, tp = len(args) < len(typing.get_args(tp)), args[0]
        rng = _RANGES.get(f.name)
        lo, hi = rng if isinstance(rng, tuple) else (None, None)
        example = _EXAMPLES.get(f.name, f.default)
        fix = None
        if example is not None and example is not dataclasses.MISSING and tp is not dict:
            shown = json.dumps(example) if not isinstance(example, str) else example
            fix = (f"write e.g. `{f.name}: {shown}` in the YAML file or `--{f.name} {shown}` on "
                   "the command line" + (" (or leave it unset: null)" if optional else ""))
        kw = {"allow_none": optional, "where": _WHERE, "fix": fix}
        if tp is bool:
            value = v.check_bool(f.name, value, **kw)
        elif tp is int:
            value = v.check_int(f.name, value, min=lo, max=hi, **kw)
        elif tp is float:
            value = v.check_float(f.name, value, min=lo, max=hi,
                                  gt=0.0 if rng == "gt0" else None, **kw)
        elif tp is str:
            value = v.check_str(f.name, value, nonempty=False, **kw)
        elif tp is dict or typing.get_origin(tp) is dict:
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    raise v.bad_value(f.name, value, "a JSON object",
                                      f"write it as JSON, e.g. --{f.name} '{{\"max_steps\": 10}}'",
                                      where=_WHERE) from None
            value = v.check_mapping(f.name, value, **kw)
        setattr(cfg, f.name, value)
    _check_names(cfg)


def _check_names(cfg: TrainConfig) -> None:
    if cfg.algo not in PRESETS:
        raise ConfigError(f"{_WHERE}: algo={cfg.algo!r} is an unknown preset: expected one of "
                          f"{', '.join(PRESETS)}. Fix: pick one of those"
                          f"{did_you_mean(cfg.algo, PRESETS)}.")
    for name, registry in (("loss", LOSSES), ("aggregation", AGGREGATIONS),
                           ("advantage", ADVANTAGES)):
        check_choice(name, getattr(cfg, name), registry.names(), allow_none=True, where=_WHERE)
    check_choice("norm", cfg.norm, list(NORM_MODES), allow_none=True, where=_WHERE)
    _check_knobs(cfg, PRESETS, ADVANTAGES, LOSSES)
    import gymnasium as gym

    known = sorted(k for k in gym.registry if k.startswith("arl/"))
    if cfg.env_id not in gym.registry:
        check_choice("env_id", cfg.env_id, known, where=_WHERE)


def _keyword_names(fn: Any, open_ok: bool = False) -> set[str] | None:
    """Keyword-only parameter names of ``fn``; None when it also takes ``**kwargs`` (unless
    ``open_ok``: then the named ones)."""
    import inspect

    params = inspect.signature(fn).parameters.values()
    if not open_ok and any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is p.KEYWORD_ONLY}


def _check_knobs(cfg: TrainConfig, presets: Any, advantages: Any, losses: Any) -> None:
    """The keys of ``loss_kwargs``/``advantage_kwargs`` must be knobs of the chosen loss and
    estimator (or of ``policy_loss``/``compute_advantages``), else a typo would only surface
    after the model is loaded and a whole rollout is played."""
    preset = presets[cfg.algo]
    tensors = {"ref_logp", "entropy", "global_tokens", "num_seqs", "token_weights"}
    checks = [
        ("loss_kwargs", cfg.loss or preset["loss"]["name"], losses, policy_loss, tensors),
        ("advantage_kwargs", cfg.advantage or preset["advantage"]["name"], advantages,
         compute_advantages, set()),
    ]
    for field_name, name, registry, front, skip in checks:
        own = _keyword_names(registry.get(name))
        common = _keyword_names(front, open_ok=True) or set()
        if own is None:
            continue
        allowed = sorted((own | common) - skip)
        for key in getattr(cfg, field_name):
            if key not in allowed:
                raise ConfigError(
                    f"{_WHERE}: {field_name} has an unknown knob {key!r} for {name!r}"
                    f"{did_you_mean(key, allowed)}. Fix: use only {', '.join(allowed)}.")


def check_env(cfg: TrainConfig) -> None:
    """Build one env with ``cfg.env_kwargs`` and check the splits the run will evaluate on
    (``eval_split`` with ``eval_steps``, ``test_split`` with ``test_episodes``), so a bad value
    fails before a model is loaded rather than at the first eval."""
    env = make_checked_env(cfg.env_id, cfg.env_kwargs, where=_WHERE)
    try:
        for field_name, count_name, used in (
                ("eval_split", "eval_episodes", cfg.eval_steps > 0),
                ("test_split", "test_episodes", getattr(cfg, "test_episodes", 0) > 0)):
            split, count = getattr(cfg, field_name, None), getattr(cfg, count_name, 0)
            if not used or split is None:
                continue
            try:
                tasks = env.unwrapped.list_tasks(split, count)
            except NotImplementedError:
                continue
            except ConfigError as e:
                raise ConfigError(f"{_WHERE}: {field_name}={split!r}: {e}") from None
            if len(tasks) < count:
                raise ConfigError(f"{_WHERE}: {count_name}={count} but {cfg.env_id} split "
                                  f"{split!r} has only {len(tasks)} tasks. Fix: set {count_name} "
                                  f"<= {len(tasks)}")
    finally:
        env.close()
