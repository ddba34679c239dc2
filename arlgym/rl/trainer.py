"""The RL trainer: SAMPO and its baselines on Accelerate (entry: ``trainers/sampo.py``).

One step, top to bottom (paper §2, Appendix B; ARLArena's loop, reference §6):

1. **Rollout** — every rank plays its own task groups (``num_tasks / world_size`` groups of
   ``group_size``) through the shared :class:`~arlgym.rollout.RolloutCollector` with the live
   model (HF ``generate``; vLLM when configured, weights synced after each update). Whole
   groups stay on one rank, so group-relative advantages need no communication. The batch
   comes from a rollout source (:mod:`arlgym.rl.sources`); with ``async_rollouts`` worker
   processes play it under a staleness bound while the learner trains (docs/async.md).
2. **Dynamic sampling** (presets with a filter) — groups whose returns are all equal are
   dropped and more groups are rolled, up to ``max_tries`` rollouts.
3. **Old / reference log-probs** — recomputed without grad on the exact sampled tokens; the
   optional rollout correction (:mod:`arlgym.rl.correction`) weighs each token by the gap
   between the sampler's log-probs and these.
4. **Advantages** — the preset's estimator over the turn samples (GRPO / GiGPO / EMPG).
5. **Update** — ``ppo_epochs`` passes of mini-batches, each split into token-budgeted
   micro-batches; the preset's loss with global token/sequence counts (so the loss does not
   depend on how a mini-batch is split or sharded); ranks agree on the number of micro-batches
   (padding with zero-weight ones) so DDP/FSDP never wait on a missing collective; gradient
   clipping; optimizer step.
6. **Telemetry** — env success/return/length/format validity, KL, entropy, clip fractions, the
   IS-ratio out-of-range fractions split by advantage sign (paper Fig. 3), masked sequences,
   kept-group fraction, tokens/s, step time → Accelerate trackers and ``metrics.jsonl``.
7. **Checkpoint** — every ``save_steps`` and at the end: model, optimizer, scheduler, RNG
   states (``accelerator.save_state``) and the trainer state (step, task stream position)
   (:mod:`arlgym.rl.checkpoint`).

Where each part lives: the parts are built by :mod:`arlgym.rl.build`, the engine by
:mod:`arlgym.policies.engine`, the batch comes from a rollout source (:mod:`arlgym.rl.sources`),
steps 3 and 5 are :mod:`arlgym.rl.update`, the evals :mod:`arlgym.rl.evals`; what happens
around a step (the JSONL log, save-best, the collapse alarm) are callbacks
(:mod:`arlgym.rl.callbacks`) called at fixed points of :meth:`Trainer.train`.
"""

from __future__ import annotations

import random
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arlgym.envs import env_family as family_of
from arlgym.policies.engine import EngineSpec, make_engine
from arlgym.rl import build
from arlgym.rl import metrics as M
from arlgym.rl.advantages import advantage_metrics, compute_advantages
from arlgym.rl.batching import TokenSample, rollout_mismatch_metrics, token_samples
from arlgym.rl.callbacks import (
    CallbackList,
    CollapseAlarm,
    Control,
    HeldOutTasks,
    MetricsLog,
    SaveBest,
    TrainerCallback,
)
from arlgym.rl.checkpoint import Checkpoints, save_model
from arlgym.rl.config import TrainConfig, check_env
from arlgym.rl.correction import RolloutCorrection
from arlgym.rl.credit import apply_credit
from arlgym.rl.distributed import check_rollout_support, full_weights, set_launcher_env
from arlgym.rl.evals import eval_sampling, final_evaluation, periodic_eval
from arlgym.rl.lora import apply_lora, merged_weights
from arlgym.rl.presets import advantage_kwargs, get_preset, policy_loss_kwargs
from arlgym.rl.rollback import Rollback
from arlgym.rl.sources import AsyncSource, AsyncSpec, InProcessSource, RolloutSampling
from arlgym.rl.staleness import staleness_metrics
from arlgym.rl.update import (
    Batching,
    PolicyUpdate,
    UpdateSettings,
    fill_logprobs,
    old_from_rollout,
    sample_logprobs,
)

__all__ = ["Trainer", "resolve_algorithm", "seed_everything", "env_family", "sample_logprobs"]


def env_family(env_id: str) -> str:
    """Table 6 column of an env id (``arl/SokobanVision-v0`` -> ``sokoban``); a user's own env
    gets the ALFWorld column."""
    return family_of(env_id, default="alfworld")


def seed_everything(seed: int) -> None:
    """The one place the trainer seeds python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_algorithm(cfg: TrainConfig) -> dict[str, Any]:
    """The preset of ``cfg.algo`` for the env's Table 6 column, with ``cfg``'s overrides."""
    preset = get_preset(cfg.algo, env=env_family(cfg.env_id))
    adv = preset["advantage"]
    for key in ("norm", "gamma", "step_weight"):
        if getattr(cfg, key) is not None:
            adv[key] = getattr(cfg, key)
    if cfg.advantage is not None:
        adv["name"] = cfg.advantage
    if cfg.episode_norm is not None:
        adv["cross_steps"] = cfg.episode_norm == "turns"
    adv.update(cfg.advantage_kwargs)
    loss = preset["loss"]
    if cfg.loss is not None:
        loss = {"name": cfg.loss, "clip_low": loss["clip_low"], "clip_high": loss["clip_high"]}
        preset["loss"] = loss
    for key in ("clip_low", "clip_high"):
        if getattr(cfg, key) is not None:
            loss[key] = getattr(cfg, key)
    loss.update(cfg.loss_kwargs)
    if cfg.aggregation is not None:
        preset["aggregation"] = cfg.aggregation
    if cfg.seq_mask_delta is not None:
        preset["seq_mask"] = {"enabled": True, "delta": cfg.seq_mask_delta}
    if cfg.kl_coef is not None:
        preset["kl_coef"] = cfg.kl_coef
    if cfg.dynamic_sampling is not None:
        preset["filter"]["enabled"] = cfg.dynamic_sampling
    if cfg.max_tries is not None:
        preset["filter"]["max_tries"] = cfg.max_tries
    if cfg.cold_start_steps is not None:
        preset["filter"]["cold_start_steps"] = cfg.cold_start_steps
    if cfg.lr is not None:
        preset["lr"] = cfg.lr
    preset["max_response_len"] = cfg.max_new_tokens
    return preset


def engine_spec(cfg: TrainConfig, engine: str, lora: bool) -> EngineSpec:
    """What the rollout engines (the learner's own, the async workers') are built from; an HF
    worker copy gets the learner's LoRA wrap, so the pushed adapters load by name."""
    wrap = (partial(apply_lora, r=cfg.lora_r, alpha=cfg.lora_alpha,
                    target_modules=cfg.lora_target_modules) if lora and engine == "hf" else None)
    return EngineSpec(kind=engine, model=cfg.model, seed=cfg.seed,
                      generation_batch_size=cfg.generation_batch_size,
                      gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                      max_model_len=cfg.vllm_max_model_len, wrap=wrap,
                      urls=tuple(u.strip() for u in cfg.vllm_server_urls.split(",") if u.strip()))


def rollout_weights(model: Any, *, lora: bool, engine: str) -> dict[str, torch.Tensor]:
    """What a weight push sends the async workers (``model`` unwrapped): the whole state dict;
    with LoRA only the adapters to HF workers (the base is frozen and they load the same one),
    the merged HF-named weights to vLLM engines and servers (which hold a plain model)."""
    if lora and engine in ("vllm", "vllm_server"):
        return dict(merged_weights(model))
    state = model.state_dict()
    if lora:
        return {k: v for k, v in state.items() if "lora_" in k}
    return state


def push_weights(policy: Any, accelerator: Any, model: Any, *, lora: bool) -> None:
    """Load the live weights of ``model`` (as Accelerate wrapped it) into an engine that keeps
    its own copy (vLLM): merged into the base under LoRA, gathered across ranks otherwise."""
    if lora:
        policy.sync_weights(merged_weights(accelerator.unwrap_model(model)))
    else:
        policy.sync_weights(full_weights(accelerator, model))


def default_callbacks(cfg: TrainConfig) -> list[TrainerCallback]:
    """The callbacks a config asks for, in the order the trainer calls them (the rollback
    after the log: it moves the abandoned steps' rows out of it)."""
    out: list[TrainerCallback] = [SaveBest()] if cfg.save_best else []
    alarm = None
    if cfg.collapse_alarm:
        alarm = CollapseAlarm(stop=cfg.on_collapse == "stop", degradation=cfg.degradation_alarm)
        out.append(alarm)
    out.append(MetricsLog())
    out.append(HeldOutTasks())
    if alarm is not None and cfg.on_collapse == "rollback":
        out.append(Rollback(alarm, cfg.rollback_remedy, cfg.max_rollbacks, cfg.snapshot_steps,
                            cfg.rollback_from))
    return out


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def env_metrics(rolled: list[Any]) -> dict[str, float]:
    """The env's side of a step, over every trajectory rolled (kept by dynamic sampling or not)."""
    return {
        M.SUCCESS_RATE: _mean([t.won for t in rolled]),
        M.SCORE: _mean([t.score for t in rolled]),
        M.EPISODE_RETURN: _mean([t.episode_return for t in rolled]),
        M.EPISODE_LENGTH: _mean([t.length for t in rolled]),
        M.FORMAT_VALID: _mean([s.format_valid for t in rolled for s in t.steps]),
        M.ACTION_VALID: _mean([s.action_valid for t in rolled for s in t.steps]),
        M.TURNS: float(sum(t.length for t in rolled)),  # responses sampled, kept or not (per rank)
    }


class Trainer:
    """Runs ``cfg.max_steps`` RL steps; see the module docstring for one step.

    Args:
        cfg: the run's settings.
        callbacks: more :class:`~arlgym.rl.callbacks.TrainerCallback` s, called after the
            ones the config asks for.
    """

    def __init__(self, cfg: TrainConfig, callbacks: list[TrainerCallback] = ()) -> None:
        # Each part comes from its builder (arlgym.rl.build); the order is the RNG's: the
        # global seed is set before the model loads, LoRA draws its adapters from it.
        self.cfg = cfg
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        self.algo = resolve_algorithm(cfg)
        check_env(cfg)  # env kwargs and eval/test splits, before the model loads
        self.out = Path(cfg.output_dir)
        log_with = None if cfg.log_with in ("none", "", None) else cfg.log_with
        self.accelerator = acc = build.build_accelerator(self.out, log_with)
        self.local_tasks = build.check_setup(cfg, acc.num_processes,
                                             advantage_kwargs(self.algo)["name"])
        self.correction = RolloutCorrection(cfg.rollout_correction, cfg.rollout_correction_cap,
                                            cfg.rollout_correction_floor)
        self.engine = build.resolve_engine(cfg)
        check_rollout_support(acc, self.engine, lora=cfg.lora_r > 0)
        seed_everything(cfg.seed + acc.process_index)
        self._build_model(build.build_model(cfg))
        self.step = 0
        self.control = Control()
        self.callbacks = CallbackList([*default_callbacks(cfg), *callbacks])
        self.checkpointer = Checkpoints(acc, self.out, cfg.checkpoints_kept)
        self.policy = self._make_policy()
        self.sampler = build.build_sampler(self.algo, self.local_tasks)
        self._env_seed = build.env_seed(cfg.seed, acc.process_index)
        collector = build.build_collector(cfg, self.policy, self.local_tasks, self._env_seed)
        self.source = self._make_source(collector)
        build.record_run(acc, self.out, cfg, self.algo, log_with)
        if cfg.resume:
            self._resume()

    def _build_model(self, parts: build.ModelParts) -> None:
        """Take the policy model's parts; add the reference model, the optimizer and the update,
        and let Accelerate wrap model, optimizer and scheduler."""
        cfg, acc = self.cfg, self.accelerator
        self.tokenizer, self.processor = parts.tokenizer, parts.processor
        self.logit_rows, self.fused_head = parts.logit_rows, parts.fused_head
        self.image_slot_ids, self.lora = parts.image_slot_ids, parts.lora
        self.share_prompts = parts.share_prompts
        self.kl_coef = float(self.algo["kl_coef"] or 0.0)
        # The k3 reference: a frozen copy, or under LoRA the policy with its adapters off.
        self.use_ref = self.kl_coef > 0
        self.ref_model = build.build_reference(cfg, self.kl_coef, self.lora, acc.device)
        optimizer, scheduler = build.build_optimizer(parts.model, self.algo["lr"], cfg)
        self.model, self.optimizer, self.scheduler = acc.prepare(parts.model, optimizer, scheduler)
        self.batching = Batching(cfg.micro_batch_tokens, self.share_prompts, self.logit_rows)
        settings = UpdateSettings.of(cfg, policy_loss_kwargs(self.algo), use_ref=self.use_ref,
                                     correcting=self.correction.active)
        self.updater = PolicyUpdate(acc, self.model, self.optimizer, self.scheduler,
                                    self.tokenizer, settings, self.batching, self._logprobs)

    # ------------------------------------------------------------------ rollout side
    @property
    def collector(self) -> Any:
        """The in-process collector of the rollout source."""
        return self.source.collector

    @collector.setter
    def collector(self, value: Any) -> None:
        self.source.collector = value

    def _make_policy(self) -> Any:
        """The learner's rollout policy: HF ``generate`` on the live model, or (synchronous
        runs) a colocated vLLM engine / a vLLM server. With ``async_rollouts`` the workers own
        the engines; the learner keeps HF for its in-process collector's checkpoint fields."""
        acc, spec = self.accelerator, engine_spec(self.cfg, self.engine, self.lora)
        if self.engine == "vllm_server" and not self.cfg.async_rollouts:
            # the server serves cfg.model from its start: the first push is the first update's
            return make_engine(spec, tokenizer=self.tokenizer, device=acc.device)[0]
        if self.engine == "vllm" and not self.cfg.async_rollouts:
            # TRL's colocate recipe: the engine runs inside this rank's process ("external
            # launcher"), so the in-process weight-loading route works without serialisation;
            # one engine per rank, each seeded apart so ranks draw different samples.
            set_launcher_env(acc.process_index, acc.local_process_index, acc.num_processes)
            policy, _ = make_engine(spec, index=acc.process_index, colocated=True)
            push_weights(policy, acc, self.model, lora=self.lora)
            return policy
        hf = EngineSpec(kind="hf", generation_batch_size=self.cfg.generation_batch_size)
        return make_engine(hf, model=acc.unwrap_model(self.model), tokenizer=self.tokenizer,
                           processor=self.processor)[0]

    def _make_source(self, collector: Any) -> Any:
        """The rollout source (:mod:`arlgym.rl.sources`): in-process, or async workers."""
        cfg = self.cfg
        sampling = RolloutSampling.of(cfg, self.accelerator.process_index)
        if not cfg.async_rollouts:
            push = ((lambda: push_weights(self.policy, self.accelerator, self.model, lora=self.lora))
                    if self.engine in ("vllm", "vllm_server") else None)
            return InProcessSource(collector, sampling, push=push)
        spec = AsyncSpec.of(cfg, engine_spec(cfg, self.engine, self.lora), sampling, num_tasks=self.local_tasks,
                            env_seed=self._env_seed,
                            collector=build.env_server_kwargs(cfg.env_servers))
        return AsyncSource(collector, spec, self._rollout_weights)

    def _rollout_weights(self) -> dict[str, torch.Tensor]:
        """What a weight push sends the async workers (:func:`rollout_weights`)."""
        return rollout_weights(self.accelerator.unwrap_model(self.model), lora=self.lora,
                               engine=self.engine)

    def _sync_rollout_weights(self) -> None:
        # vLLM and async workers keep their own copy; HF generate samples from the live model
        self.source.updated(self._rollout_weights)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Checkpoint this step (:mod:`arlgym.rl.checkpoint`)."""
        return self.checkpointer.save(self.step, self.source,
                                      files=self.callbacks.checkpoint_files(self))

    def _resume(self) -> None:
        self.step = self.checkpointer.load(self.checkpointer.newest(), self.source)
        # an engine with its own copy (vLLM) still holds the start weights: give it these
        self._sync_rollout_weights()
        self.checkpointer.trim_log(self.step)

    def save_model(self, path: Path) -> None:
        """An HF model directory that loads with ``hf:<dir>`` (main process only)."""
        save_model(self.accelerator.unwrap_model(self.model), path,
                   self.processor or self.tokenizer, lora=self.lora)

    def save_final(self) -> Path:
        path = self.out / "final"
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self.save_model(path)
        self.accelerator.wait_for_everyone()
        return path

    # ------------------------------------------------------------------ one step
    def _rollout(self) -> tuple[list[Any], list[Any], dict[str, torch.Tensor]]:
        """Groups to train on, every trajectory rolled (for env metrics), filter metrics."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        unwrapped.eval()
        rolled: list[Any] = []
        attempt = [0]

        def rollout_groups() -> list[list[Any]]:
            trajs = self.source.batch(self.step, attempt[0])
            attempt[0] += 1
            rolled.extend(trajs)
            g = self.cfg.group_size
            return [trajs[i : i + g] for i in range(0, len(trajs), g)]

        try:
            if self.sampler is None:
                groups, fmetrics = rollout_groups(), {}
            else:
                groups, fmetrics = self.sampler.sample(rollout_groups, self.step)
        finally:
            unwrapped.train()
        fmetrics = {**fmetrics, **self.source.pop_metrics()}  # groups retried/dropped, async
        return groups, rolled, fmetrics

    def _samples(self, groups: list[list[Any]]) -> tuple[list[TokenSample], dict[str, float]]:
        """The turn samples of the kept groups, the credit hook applied (its metrics), each
        stamped with its staleness under ``async_rollouts`` (updates since its weights)."""
        trajs = [t for g in groups for t in g]
        samples = token_samples(trajs, stop_ids=self.image_slot_ids)
        credit_metrics = apply_credit(samples, self.tokenizer, self.cfg.credit)
        if self.cfg.async_rollouts:
            versions = [st.policy_version for t in trajs for st in t.steps]
            for s, v in zip(samples, versions, strict=True):
                s.staleness = self.step - int(v)
        return samples, credit_metrics

    def _logprobs(self, model: Any, sub: list[TokenSample], with_entropy: bool):
        return sample_logprobs(model, sub, self.tokenizer.pad_token_id, self.accelerator.device,
                               temperature=self.cfg.temperature, with_entropy=with_entropy,
                               share_prompts=self.share_prompts, fused=self.fused_head)

    def _fill_logprobs(self, samples: list[TokenSample], need_entropy: bool) -> bool:
        """Old (and reference) log-probs for every sample; returns whether the old ones were
        recomputed (False: taken from the sampler, nothing to compare them with)."""
        from_rollout = old_from_rollout(samples, self.cfg.old_logprobs, engine=self.engine,
                                        need_entropy=need_entropy,
                                        correcting=self.correction.active)
        fill_logprobs(samples, self.accelerator.unwrap_model(self.model), self._logprobs,
                      self.batching, from_rollout=from_rollout, ref_model=self.ref_model,
                      use_ref=self.use_ref, need_entropy=need_entropy)
        return not from_rollout

    def _update(self, samples: list[TokenSample], adv: torch.Tensor) -> dict[str, float]:
        return self.updater(samples, adv, self.step)

    def train_step(self) -> dict[str, float]:
        """One RL step (module docstring), one call each:

        1. roll out whole groups (dynamic sampling may roll more);
        2. their turn samples (credit, staleness);
        3. old/reference log-probs, then the rollout correction's weights;
        4. the preset's advantages;
        5. the update; the step counts;
        6. the new weights to the rollout side;
        7. the step's metrics, reduced over ranks.
        """
        t0 = time.perf_counter()
        groups, rolled, fmetrics = self._rollout()
        self.callbacks.on_rollout(self, rolled)
        t_roll = time.perf_counter() - t0
        samples, credit_metrics = self._samples(groups)
        adv_kw = advantage_kwargs(self.algo)
        adv_name = adv_kw.pop("name")
        recomputed = self._fill_logprobs(samples, need_entropy=(adv_name == "empg"))
        corr_metrics = self.correction.apply(samples) if recomputed else {}
        adv = compute_advantages(adv_name, samples, **adv_kw) if samples else torch.zeros(0)
        t1 = time.perf_counter()
        metrics = self._update(samples, adv)
        t_train = time.perf_counter() - t1
        self.step += 1
        self._sync_rollout_weights()
        metrics.update(env_metrics(rolled))
        if self.image_slot_ids:
            metrics[M.IMAGE_SLOT_CUT] = float(sum(s.cut_at_image_slot for s in samples))
        if recomputed:
            metrics.update(rollout_mismatch_metrics(samples))
        metrics.update(corr_metrics)
        metrics.update(credit_metrics)
        if self.cfg.async_rollouts:
            metrics.update(staleness_metrics([s.staleness for s in samples],
                                             self.cfg.max_staleness))
        metrics.update({k: float(v) for k, v in fmetrics.items()})
        if len(adv):
            metrics.update({k: float(v) for k, v in advantage_metrics(adv).items()})
        tokens = sum(s.num_tokens for s in samples)
        metrics.update({M.SAMPLES: float(len(samples)), M.TOKENS: float(tokens),
                        M.RESPONSE_LENGTH: _mean([len(s.response_ids) for s in samples]),
                        M.TIME_ROLLOUT: t_roll, M.TIME_TRAIN: t_train,
                        M.TIME_STEP: time.perf_counter() - t0,
                        M.TOKENS_PER_S: tokens / max(1e-9, t_train)})
        return self._reduce_metrics(metrics)

    def _reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Combine the ranks' metrics, each key by its reduction in :mod:`arlgym.rl.metrics`."""
        return self.updater.ranks.reduce_metrics(metrics)

    # ------------------------------------------------------------------ evals
    def eval_sampling(self) -> Any:
        """How the evals decode (:func:`arlgym.rl.evals.eval_sampling`)."""
        return eval_sampling(self.cfg)

    def evaluate(self) -> dict[str, float]:
        """The periodic eval of the live policy on ``eval_split``: ``eval/*`` metrics."""
        return periodic_eval(self)

    def final_evaluation(self) -> dict[str, dict[str, Any]]:
        """The final test-panel eval of final/ and best/ (:mod:`arlgym.rl.evals`)."""
        return final_evaluation(self)

    # ------------------------------------------------------------------ the loop
    def train(self) -> list[dict[str, float]]:
        """Steps until ``max_steps``, ``max_minutes`` or a callback's stop; then final/ and the
        test eval. Callbacks run at fixed points (:mod:`arlgym.rl.callbacks`)."""
        cfg, acc = self.cfg, self.accelerator
        history = []
        started = time.perf_counter()
        self.callbacks.on_train_begin(self)
        while self.step < cfg.max_steps:
            metrics = self.train_step()
            if cfg.eval_steps and self.step % cfg.eval_steps == 0:
                if acc.is_main_process:
                    metrics.update(self.evaluate())
                    self.callbacks.on_evaluate(self, metrics)
                acc.wait_for_everyone()
            metrics[M.STEP] = self.step
            self.callbacks.on_step_end(self, metrics)
            history.append(metrics)
            self.callbacks.on_log(self, metrics)
            if self.control.should_stop:
                break
            rolled_back = self.step != metrics[M.STEP]  # a rollback: nothing new to save
            if cfg.save_steps and self.step % cfg.save_steps == 0 and not rolled_back:
                self.callbacks.on_save(self, self.save_checkpoint())
            if cfg.max_minutes and self.updater.ranks.max(
                    int(time.perf_counter() - started > cfg.max_minutes * 60)):
                break
        self.callbacks.on_train_end(self)
        self.save_final()
        if cfg.test_episodes and acc.is_main_process:
            self.final_evaluation()
        acc.wait_for_everyone()
        acc.end_training()
        self.close()
        return history

    def close(self) -> None:
        """Stop the env vector and the async rollout workers (idempotent)."""
        self.source.close()
