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
   states (``accelerator.save_state``) and the trainer state (step, task stream position).
"""

from __future__ import annotations

import json
import math
import random
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arlgym.envs import env_family as family_of
from arlgym.errors import ConfigError
from arlgym.rl import build
from arlgym.rl import metrics as M
from arlgym.rl.advantages import advantage_metrics, compute_advantages
from arlgym.rl.batching import (
    TokenSample,
    pack,
    pack_shared,
    prompt_groups,
    response_logprobs,
    rollout_mismatch_metrics,
    shared_prompt_logprobs,
    token_samples,
)
from arlgym.rl.config import TrainConfig, check_env
from arlgym.rl.correction import RolloutCorrection
from arlgym.rl.credit import apply_credit, counted_tokens, credit_masks
from arlgym.rl.distributed import check_rollout_support, full_weights, set_launcher_env
from arlgym.rl.lora import adapters_disabled, merged_copy, merged_weights
from arlgym.rl.losses import policy_loss
from arlgym.rl.presets import advantage_kwargs, get_preset, policy_loss_kwargs

__all__ = ["Trainer", "resolve_algorithm", "seed_everything", "env_family"]

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


def _micro_batches(samples: list[TokenSample], order: list[int], budget: int,
                   share_prompts: bool = False, logit_rows: int | None = None) -> list[list[int]]:
    """Split ``order`` into micro-batches whose padded token area stays within ``budget`` and
    whose response logits (one row of the vocabulary per response token + 1) stay within
    ``logit_rows`` (None: no such bound; see :func:`arlgym.rl.logprobs.logit_rows_budget`).

    Samples are grouped by similar length first (sorted), so padding stays small. With
    ``share_prompts`` the units are groups of samples with one prompt, kept whole, and a unit
    costs its prompt once plus each member's response.
    """
    units = prompt_groups(samples, order) if share_prompts else [[i] for i in order]
    units.sort(key=lambda u: (len(samples[u[0]].prompt_ids), max(len(samples[i].response_ids) for i in u)))
    out: list[list[int]] = []
    cur: list[int] = []
    cost = rows = 0
    row_cap = logit_rows if logit_rows is not None else float("inf")
    for unit in units:
        p = len(samples[unit[0]].prompt_ids)
        r = max(len(samples[i].response_ids) for i in unit)
        c = p + len(unit) * (r + 1) if share_prompts and len(unit) > 1 else len(unit) * (p + r)
        lr = len(unit) * (r + 1)
        if cur and (cost + c > budget or rows + lr > row_cap):
            out.append(cur)
            cur, cost, rows = [], 0, 0
        cur += unit
        cost += c
        rows += lr
    if cur:
        out.append(cur)
    return out


def sample_logprobs(model: Any, sub: list[TokenSample], pad_id: int, device: Any, *,
                    temperature: float, with_entropy: bool, share_prompts: bool,
                    fused: bool = False,
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Response log-probs (B, R), entropies and the response mask of ``sub``, in its order.

    With ``share_prompts``, members with an identical prompt run it once
    (:func:`~arlgym.rl.batching.shared_prompt_logprobs`); the rest go through one plain batch.
    """
    width = max(1, max(len(s.response_ids) for s in sub))
    mask = torch.zeros(len(sub), width)
    for row, s in enumerate(sub):
        mask[row, : len(s.response_ids)] = 1.0
    mask = mask.to(device)
    share_prompts = share_prompts and all(s.image_inputs is None for s in sub)  # see Trainer
    groups = prompt_groups(sub, range(len(sub))) if share_prompts else [[i] for i in range(len(sub))]
    shared = [g for g in groups if len(g) > 1 and len(sub[g[0]].prompt_ids) >= 2]
    single = [i for g in groups if not (len(g) > 1 and len(sub[g[0]].prompt_ids) >= 2) for i in g]
    rows: list[int] = []
    lps: list[torch.Tensor] = []
    ents: list[torch.Tensor] = []

    def add(lp: torch.Tensor, en: torch.Tensor | None, idx: list[int]) -> None:
        pad = (0, width - lp.shape[1])
        lps.append(torch.nn.functional.pad(lp, pad))
        if en is not None:
            ents.append(torch.nn.functional.pad(en, pad))
        rows.extend(idx)

    if shared:
        batch = pack_shared([[sub[i] for i in g] for g in shared], pad_id, device)
        lp, en = shared_prompt_logprobs(model, batch, temperature=temperature,
                                        with_entropy=with_entropy, fused=fused)
        add(lp, en, [i for g in shared for i in g])
    if single:
        batch = pack([sub[i] for i in single], pad_id, device)
        lp, en = response_logprobs(model, batch, temperature=temperature,
                                   with_entropy=with_entropy, fused=fused)
        add(lp, en, single)
    inverse = torch.empty(len(sub), dtype=torch.long)
    inverse[torch.tensor(rows)] = torch.arange(len(sub))
    inverse = inverse.to(device)
    logp = torch.cat(lps).index_select(0, inverse)
    entropy = torch.cat(ents).index_select(0, inverse) if with_entropy else None
    return logp, entropy, mask


class Trainer:
    """Runs ``cfg.max_steps`` RL steps; see the module docstring for one step."""

    def __init__(self, cfg: TrainConfig) -> None:
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
        self.policy = self._make_policy()
        self.sampler = build.build_sampler(self.algo, self.local_tasks)
        self._env_seed = build.env_seed(cfg.seed, acc.process_index)
        collector = build.build_collector(cfg, self.policy, self.local_tasks, self._env_seed)
        self.source = self._make_source(collector)
        if acc.is_main_process:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.json").write_text(json.dumps(
                {"config": cfg.__dict__, "algorithm": self.algo}, indent=2, default=str))
        if log_with:
            acc.init_trackers("arlgym", config={k: v for k, v in cfg.__dict__.items()
                                                if isinstance(v, (int, float, str, bool))})
        if cfg.resume:
            self._resume()

    def _build_model(self, parts: build.ModelParts) -> None:
        """Take the policy model's parts; add the reference model and the optimizer, and let
        Accelerate wrap model, optimizer and scheduler."""
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

    # ------------------------------------------------------------------ plumbing
    @property
    def collector(self) -> Any:
        """The in-process collector of the rollout source."""
        return self.source.collector

    @collector.setter
    def collector(self, value: Any) -> None:
        self.source.collector = value

    def _make_source(self, collector: Any) -> Any:
        """The rollout source (:mod:`arlgym.rl.sources`): in-process, or async workers."""
        from arlgym.rl.sources import AsyncSource, InProcessSource

        if not self.cfg.async_rollouts:
            push = ((lambda: self._push_weights(self.policy))
                    if self.engine in ("vllm", "vllm_server") else None)
            return InProcessSource(collector, lambda step, attempt: self._sampling(attempt, step),
                                   push=push)
        return AsyncSource(collector, self._start_async)

    def _start_async(self, version: int, state: dict[str, Any] | None) -> Any:
        """Start the async rollout workers at learner version ``version`` (its step)."""
        from dataclasses import asdict

        from arlgym.rl.async_rollout import AsyncRollouts, _Spec

        cfg = self.cfg
        spec = _Spec(model=cfg.model, seed=cfg.seed, env_id=cfg.env_id,
                     env_kwargs=dict(cfg.env_kwargs), group_size=cfg.group_size,
                     num_tasks=self.local_tasks, env_seed=self._env_seed,
                     generation_batch_size=cfg.generation_batch_size,
                     torch_threads=cfg.torch_threads,
                     extra={"collector": build.env_server_kwargs(cfg.env_servers),
                            "engine": self._worker_engine(), "lora": self._worker_lora()})
        return AsyncRollouts(
            spec, self._rollout_weights(), num_workers=cfg.rollout_workers,
            max_staleness=cfg.max_staleness, policy=cfg.staleness_policy,
            sampling=lambda task: asdict(self._sampling(0, step=task)), version=version,
            state=state)

    def _worker_lora(self) -> dict[str, Any] | None:
        """The LoRA wrap the async workers give their HF copy, so the learner's adapter
        weights load into it by name (None without LoRA, and for vLLM workers)."""
        if not self.lora or self.engine != "hf":
            return None
        return {"r": self.cfg.lora_r, "alpha": self.cfg.lora_alpha,
                "target_modules": self.cfg.lora_target_modules}

    def _rollout_weights(self) -> dict[str, Any]:
        """What a weight push sends the async workers: the whole state dict; with LoRA only
        the adapters to HF workers (the base is frozen and they load the same one), the merged
        HF-named weights to vLLM engines and servers (which hold a plain model)."""
        model = self.accelerator.unwrap_model(self.model)
        if self.lora and self.engine in ("vllm", "vllm_server"):
            return dict(merged_weights(model))
        state = model.state_dict()
        if self.lora:
            return {k: v for k, v in state.items() if "lora_" in k}
        return state

    def _worker_engine(self) -> dict[str, Any]:
        """What the async workers sample with: their own HF copy, their own vLLM engine, or a
        vLLM server each."""
        if self.engine == "vllm":
            kwargs = {"max_model_len": self.cfg.vllm_max_model_len} if self.cfg.vllm_max_model_len else {}
            return {"kind": "vllm", "engine_kwargs": kwargs,
                    "gpu_memory_utilization": self.cfg.vllm_gpu_memory_utilization}
        if self.engine == "vllm_server":
            return {"kind": "vllm_server", "urls": [u.strip() for u in
                                                    self.cfg.vllm_server_urls.split(",") if u.strip()]}
        return {"kind": "hf"}

    def _make_policy(self):
        if self.engine == "vllm_server" and not self.cfg.async_rollouts:
            from arlgym.policies.vllm_server import VLLMServerPolicy

            # the server serves cfg.model from its start: the first push is the first update's.
            # (With async_rollouts the workers own the servers; the learner keeps HF below for
            # its in-process collector, which then only carries checkpoint fields.)
            return VLLMServerPolicy(self._worker_engine()["urls"][0], self.tokenizer,
                                    device=self.accelerator.device)
        if self.engine == "vllm" and not self.cfg.async_rollouts:  # async: the workers' engines
            from arlgym.models import model_path
            from arlgym.policies.vllm import VLLMPolicy

            acc = self.accelerator
            set_launcher_env(acc.process_index, acc.local_process_index, acc.num_processes)
            extra = {"max_model_len": self.cfg.vllm_max_model_len} if self.cfg.vllm_max_model_len else {}
            # TRL's colocate recipe: the engine runs inside this rank's process ("external
            # launcher"), so the in-process weight-loading route works without serialisation;
            # one engine per rank, each seeded apart so ranks draw different samples.
            policy = VLLMPolicy(str(model_path(self.cfg.model, seed=self.cfg.seed)),
                                gpu_memory_utilization=self.cfg.vllm_gpu_memory_utilization,
                                distributed_executor_backend="external_launcher",
                                seed=self.cfg.seed + acc.process_index, **extra)
            self._push_weights(policy)
            return policy
        from arlgym.policies.hf import HFPolicy

        return HFPolicy(self.accelerator.unwrap_model(self.model), tokenizer=self.tokenizer, processor=self.processor,
                        batch_size=self.cfg.generation_batch_size)

    def _push_weights(self, policy: Any) -> None:
        """Load the live weights into an engine that keeps its own copy (vLLM)."""
        if self.lora:
            policy.sync_weights(merged_weights(self.accelerator.unwrap_model(self.model)))
        else:
            policy.sync_weights(full_weights(self.accelerator, self.model))

    def _sync_rollout_weights(self) -> None:
        # vLLM and async workers keep their own copy; HF generate samples from the live model
        self.source.updated(self._rollout_weights)

    def _checkpoint_dir(self, step: int) -> Path:
        return self.out / "checkpoints" / f"step-{step:06d}"

    def save_checkpoint(self) -> Path:
        """Written under ``step-N.tmp`` and renamed when complete, so a run killed while
        saving never leaves a half-written checkpoint for ``--resume`` to trip on."""
        import shutil

        path = self._checkpoint_dir(self.step)
        tmp = path.with_name(path.name + ".tmp")
        if self.accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(str(tmp))
        if self.accelerator.is_main_process:
            (tmp / "trainer_state.json").write_text(json.dumps({"step": self.step}))
        # each rank's task-stream position (ranks draw disjoint tasks)
        (tmp / f"collector_rank{self.accelerator.process_index}.json").write_text(
            json.dumps(self.source.state_dict()))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            if self.cfg.checkpoints_kept:
                for old in self.checkpoints()[: -self.cfg.checkpoints_kept]:
                    shutil.rmtree(old, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        return path

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first (``.tmp`` folders of an interrupted save are not)."""
        return sorted(p for p in (self.out / "checkpoints").glob("step-*")
                      if not p.name.endswith(".tmp") and (p / "trainer_state.json").exists())

    def _resume(self) -> None:
        ckpts = self.checkpoints()
        if not ckpts:
            raise ConfigError(f"--resume: no checkpoint under {self.out / 'checkpoints'}")
        self._load_checkpoint(ckpts[-1])
        # an engine with its own copy (vLLM) still holds the start weights: give it these
        self._sync_rollout_weights()
        # rows logged after that checkpoint are replayed by this run: drop them, so the log
        # of an interrupted and resumed run equals that of an uninterrupted one
        log = self.out / "metrics.jsonl"
        if self.accelerator.is_main_process and log.exists():
            kept = [r for r in M.read_metrics_jsonl(log) if r.get(M.STEP, 0) <= self.step]
            log.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self.accelerator.wait_for_everyone()

    def _load_checkpoint(self, path: Path) -> None:
        self.accelerator.load_state(str(path))
        self.step = json.loads((path / "trainer_state.json").read_text())["step"]
        state = json.loads((path / f"collector_rank{self.accelerator.process_index}.json").read_text())
        self.source.load_state_dict(state)

    # ------------------------------------------------------------------ one step
    def _sampling(self, attempt: int, step: int | None = None):
        from arlgym.policies import SamplingParams

        c = self.cfg
        step = self.step if step is None else step
        seed = (c.seed * 7919 + step * 104_729 + attempt * 1_299_709
                + self.accelerator.process_index * 15_485_863) % 2**31
        return SamplingParams(temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                              max_new_tokens=c.max_new_tokens, seed=seed)

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

    def _logprobs(self, model: Any, sub: list[TokenSample], with_entropy: bool):
        return sample_logprobs(model, sub, self.tokenizer.pad_token_id, self.accelerator.device,
                               temperature=self.cfg.temperature, with_entropy=with_entropy,
                               share_prompts=self.share_prompts, fused=self.fused_head)

    def _old_from_rollout(self, samples: list[TokenSample], need_entropy: bool) -> bool:
        """Whether this step takes the old log-probs from the sampler (see ``old_logprobs``)."""
        mode = self.cfg.old_logprobs
        have = all(s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.response_ids)
                   for s in samples)
        if mode == "rollout":
            if not have:
                raise ConfigError("old_logprobs rollout: the rollout policy returned no log-probs "
                                  "for some turns; use old_logprobs recompute")
            return True
        # a rollout correction compares the sampler's log-probs with the learner's own; a
        # stale async sample's log-probs are an older policy's, not the learner's
        fresh = all(s.extra.get("staleness", 0) == 0 for s in samples)
        return (mode == "auto" and self.engine == "hf" and have and not need_entropy
                and not self.correction.active and fresh)

    @torch.no_grad()
    def _fill_logprobs(self, samples: list[TokenSample], need_entropy: bool) -> bool:
        """Old (and reference) log-probs for every sample; returns whether the old ones were
        recomputed (False: taken from the sampler, nothing to compare them with)."""
        model = self.accelerator.unwrap_model(self.model)
        from_rollout = self._old_from_rollout(samples, need_entropy)
        if from_rollout:
            for s in samples:
                s.old_logprobs = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
            if not self.use_ref:
                return False
        for mb in _micro_batches(samples, list(range(len(samples))), self.cfg.micro_batch_tokens,
                                 self.share_prompts, self.logit_rows):
            sub = [samples[i] for i in mb]
            logp, ent = None, None
            if not from_rollout:
                logp, ent, _ = self._logprobs(model, sub, need_entropy)
            ref = None
            if self.ref_model is not None:
                ref, _, _ = self._logprobs(self.ref_model, sub, False)
            elif self.use_ref:  # LoRA: the base weights are the reference
                with adapters_disabled(model):
                    ref, _, _ = self._logprobs(model, sub, False)
            for row, i in enumerate(mb):
                n = len(samples[i].response_ids)
                if logp is not None:
                    samples[i].old_logprobs = logp[row, :n].cpu()
                if ref is not None:
                    samples[i].ref_logprobs = ref[row, :n].cpu()
                if ent is not None:
                    samples[i].entropy = float(ent[row, :n].mean()) if n else 0.0
        return not from_rollout

    def _all_max(self, value: int) -> int:
        t = torch.tensor([value], device=self.accelerator.device)
        return int(self.accelerator.reduce(t, reduction="max").item()) if self.accelerator.num_processes > 1 else value

    def _all_sum(self, value: float) -> float:
        t = torch.tensor([float(value)], device=self.accelerator.device)
        return float(self.accelerator.reduce(t, reduction="sum").item()) if self.accelerator.num_processes > 1 else value

    def _stack(self, samples: list[TokenSample], idx: list[int], width: int, attr: str) -> torch.Tensor:
        out = torch.zeros(len(idx), width)
        for row, i in enumerate(idx):
            v = getattr(samples[i], attr)
            out[row, : len(v)] = v
        return out.to(self.accelerator.device)

    def _weights(self, samples: list[TokenSample], idx: list[int], width: int) -> torch.Tensor:
        """The rollout-correction weights of ``idx`` as a (len(idx), width) tensor."""
        out = torch.zeros(len(idx), width)
        for row, i in enumerate(idx):
            w = samples[i].extra["rollout_weight"]
            out[row, : len(w)] = w
        return out.to(self.accelerator.device)

    def _update(self, samples: list[TokenSample], adv: torch.Tensor) -> dict[str, float]:
        cfg, acc = self.cfg, self.accelerator
        loss_kw = policy_loss_kwargs(self.algo)
        name = loss_kw.pop("name")
        if cfg.is_band is not None:  # one telemetry band for every preset (comparable runs)
            loss_kw.setdefault("is_clip_low", cfg.is_band)
            loss_kw.setdefault("is_clip_high", cfg.is_band)
        world = acc.num_processes
        gen = torch.Generator().manual_seed(cfg.seed * 31 + self.step)
        sums: dict[str, float] = {}
        weight_total = 0.0
        n_local = len(samples)
        mini = cfg.mini_batch_size or max(1, n_local)
        n_mini = self._all_max(max(1, math.ceil(n_local / mini)))
        grad_norms = []
        # loss and pg_loss are divided by the whole mini-batch's token/sequence totals in every
        # micro-batch, so a mini-batch's loss is the SUM of its micro-batch losses (not an
        # average, which would depend on how the mini-batch was split); logged: mean per step
        step_losses: dict[str, list[float]] = {"loss": [], "pg_loss": []}
        for _epoch in range(cfg.ppo_epochs):
            perm = torch.randperm(n_local, generator=gen).tolist() if n_local else []
            chunks = [perm[k::n_mini] for k in range(n_mini)]
            for chunk in chunks:
                tokens = sum(counted_tokens(samples[i], cfg.credit) for i in chunk)
                g_tokens = max(1.0, self._all_sum(tokens))
                g_seqs = max(1.0, self._all_sum(len(chunk)))
                micro = (_micro_batches(samples, chunk, cfg.micro_batch_tokens, self.share_prompts,
                                        self.logit_rows) if chunk else [])
                n_micro = self._all_max(len(micro))
                micro += [[]] * (n_micro - len(micro))
                chunk_loss = {key: 0.0 for key in step_losses}
                for k, mb in enumerate(micro):
                    dummy = not mb
                    idx = mb if mb else [0]
                    sub = [samples[i] for i in idx] if n_local else [_dummy_sample(self.tokenizer)]
                    sync = acc.no_sync(self.model) if (k < n_micro - 1 and world > 1) else _null()
                    with sync:
                        logp, ent, response_mask = self._logprobs(self.model, sub, True)
                        width = logp.shape[1]
                        if n_local:
                            old = self._stack(samples, idx, width, "old_logprobs")
                            ref = self._stack(samples, idx, width, "ref_logprobs") if self.use_ref else None
                            a = adv[idx].to(acc.device)
                        else:
                            old, ref, a = logp.detach(), (logp.detach() if self.use_ref else None), torch.zeros(1, device=acc.device)
                        weights = ({"token_weights": self._weights(samples, idx, width)}
                                   if self.correction.active and n_local else {})
                        if n_local:  # the credit hook (response: unchanged)
                            response_mask, weights = credit_masks(cfg.credit, samples, idx,
                                                                  response_mask, weights)
                        loss, metrics = policy_loss(
                            name, logp, old, a, response_mask, ref_logp=ref,
                            entropy=ent, global_tokens=g_tokens, num_seqs=g_seqs,
                            **weights, **loss_kw)
                        scale = 0.0 if dummy else float(world)  # DDP averages; we want sums
                        acc.backward(loss * scale)
                    if not dummy:
                        w = float(response_mask.sum())
                        weight_total += w
                        for key, val in metrics.items():
                            if key not in step_losses:
                                sums[key] = sums.get(key, 0.0) + float(val) * w
                        chunk_loss["loss"] += float(loss.detach())
                        chunk_loss["pg_loss"] += float(metrics["pg_loss"])
                for key, val in chunk_loss.items():
                    step_losses[key].append(val)
                norm = acc.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                grad_norms.append(float(norm))
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
        out = {k: v / max(1.0, weight_total) for k, v in sums.items()}
        # each rank holds its share of the global sum; _reduce_metrics adds them up (M.LOSS)
        out.update({k: float(np.mean(v)) if v else 0.0 for k, v in step_losses.items()})
        out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        out["learning_rate"] = float(self.scheduler.get_last_lr()[0])
        return out

    def train_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        groups, rolled, fmetrics = self._rollout()
        t_roll = time.perf_counter() - t0
        trajs = [t for g in groups for t in g]
        samples = token_samples(trajs, stop_ids=self.image_slot_ids)
        credit_metrics = apply_credit(samples, self.tokenizer, self.cfg.credit)
        if self.cfg.async_rollouts:  # each turn's staleness: updates since its weights
            versions = [st.policy_version for t in trajs for st in t.steps]
            for s, v in zip(samples, versions, strict=True):
                s.extra["staleness"] = self.step - int(v)
        adv_kw = advantage_kwargs(self.algo)
        adv_name = adv_kw.pop("name")
        recomputed = self._fill_logprobs(samples, need_entropy=(adv_name == "empg"))
        # the correction hook: mismatch diagnostics, and (unless none) each sample's weights
        corr_metrics = self.correction.apply(samples) if recomputed else {}
        adv = compute_advantages(adv_name, samples, **adv_kw) if samples else torch.zeros(0)
        t1 = time.perf_counter()
        metrics = self._update(samples, adv)
        t_train = time.perf_counter() - t1
        self.step += 1
        self._sync_rollout_weights()
        env = {
            M.SUCCESS_RATE: float(np.mean([t.won for t in rolled])) if rolled else 0.0,
            M.SCORE: float(np.mean([t.score for t in rolled])) if rolled else 0.0,
            M.EPISODE_RETURN: float(np.mean([t.episode_return for t in rolled])) if rolled else 0.0,
            M.EPISODE_LENGTH: float(np.mean([t.length for t in rolled])) if rolled else 0.0,
            M.FORMAT_VALID: float(np.mean([s.format_valid for t in rolled for s in t.steps])) if rolled else 0.0,
            M.ACTION_VALID: float(np.mean([s.action_valid for t in rolled for s in t.steps])) if rolled else 0.0,
            M.TURNS: float(sum(t.length for t in rolled)),  # responses sampled, kept or not (per rank)
        }
        metrics.update(env)
        if self.image_slot_ids:
            metrics[M.IMAGE_SLOT_CUT] = float(sum("cut_at_image_slot" in s.extra for s in samples))
        if recomputed:
            metrics.update(rollout_mismatch_metrics(samples))
        metrics.update(corr_metrics)
        metrics.update(credit_metrics)
        if self.cfg.async_rollouts:
            metrics.update(_staleness_metrics([s.extra["staleness"] for s in samples],
                                              self.cfg.max_staleness))
        metrics.update({k: float(v) for k, v in fmetrics.items()})
        if len(adv):
            metrics.update({k: float(v) for k, v in advantage_metrics(adv).items()})
        tokens = sum(s.num_tokens for s in samples)
        metrics.update({M.SAMPLES: float(len(samples)), M.TOKENS: float(tokens),
                        M.RESPONSE_LENGTH: float(np.mean([len(s.response_ids) for s in samples]))
                        if samples else 0.0, M.TIME_ROLLOUT: t_roll,
                        M.TIME_TRAIN: t_train, M.TIME_STEP: time.perf_counter() - t0,
                        M.TOKENS_PER_S: tokens / max(1e-9, t_train)})
        return self._reduce_metrics(metrics)

    def _reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Combine the ranks' metrics, each key by its reduction in :mod:`arlgym.rl.metrics`
        (counts such as ``env/turns`` and ``tokens`` add up; rates average)."""
        if self.accelerator.num_processes == 1:
            return metrics
        acc = self.accelerator

        def collective(values: list[float], how: str) -> list[float]:
            t = torch.tensor(values, device=acc.device)
            if how == "min":
                return (-acc.reduce(-t, reduction="max")).tolist()
            return acc.reduce(t, reduction=how).tolist()

        return M.reduce_across(metrics, collective)

    def eval_sampling(self) -> Any:
        """How the periodic and final evals decode: greedy by default; with eval_temperature the
        paper's validation protocol (0.6, top-p 0.95, top-k 20), seeded by the run's seed so a
        checkpoint's eval is reproducible and two runs of one seed play the same draws."""
        from arlgym.policies import SamplingParams

        c = self.cfg
        if c.eval_temperature <= 0:
            return SamplingParams(temperature=0.0, max_new_tokens=c.max_new_tokens)
        return SamplingParams(temperature=c.eval_temperature, top_p=c.eval_top_p,
                              top_k=c.eval_top_k, max_new_tokens=c.max_new_tokens,
                              seed=c.seed + 1234)

    def evaluate(self) -> dict[str, float]:
        from arlgym.evaluation.runner import evaluate
        from arlgym.policies.hf import HFPolicy

        model = self.accelerator.unwrap_model(self.model)
        model.eval()
        try:  # vLLM holds the synced weights (and a sharded model cannot generate on one rank)
            policy = self.policy if self.engine == "vllm" else HFPolicy(
                model, tokenizer=self.tokenizer, processor=self.processor, batch_size=self.cfg.generation_batch_size)
            summary, _ = evaluate(self.cfg.env_id, policy, episodes=self.cfg.eval_episodes,
                                  split=self.cfg.eval_split, batch_size=64, env_kwargs=self.cfg.env_kwargs,
                                  sampling=self.eval_sampling(),
                                  samples_per_task=self.cfg.eval_samples, progress=False,
                                  **build.env_server_kwargs(self.cfg.env_servers))
        finally:
            model.train()
        o = summary["overall"]
        return {M.EVAL_SUCCESS: o["success_rate"], M.EVAL_SUCCESS_SE: o["success_se"],
                M.EVAL_SCORE: o["mean_score"], M.EVAL_FORMAT_VALID: o["format_valid_ratio"]}

    def train(self) -> list[dict[str, float]]:
        from tqdm.auto import tqdm

        cfg, acc = self.cfg, self.accelerator
        history = []
        log_path = self.out / "metrics.jsonl"
        bar = tqdm(total=cfg.max_steps, initial=self.step, desc=f"{cfg.algo} {cfg.env_id}",
                   disable=not acc.is_main_process)
        started = time.perf_counter()
        alarm = self._collapse_monitor(log_path)
        while self.step < cfg.max_steps:
            metrics = self.train_step()
            if cfg.eval_steps and self.step % cfg.eval_steps == 0:
                if acc.is_main_process:
                    metrics.update(self.evaluate())
                    if cfg.save_best:
                        self._keep_if_best(metrics[M.EVAL_SUCCESS])
                acc.wait_for_everyone()
            metrics[M.STEP] = self.step
            stop = self._check_collapse(alarm, metrics)
            history.append(metrics)
            if acc.is_main_process:
                with log_path.open("a") as fh:
                    fh.write(json.dumps(metrics) + "\n")
                bar.update(1)
                bar.set_postfix(success=f"{metrics[M.SUCCESS_RATE]:.2f}",
                                fmt=f"{metrics[M.FORMAT_VALID]:.2f}")
            acc.log(metrics, step=self.step)
            if stop:
                self._restore_healthy(alarm.fired)
                break
            if cfg.save_steps and self.step % cfg.save_steps == 0:
                self.save_checkpoint()
            if cfg.max_minutes and self._all_max(int(time.perf_counter() - started > cfg.max_minutes * 60)):
                break
        bar.close()
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

    # ------------------------------------------------------------------ collapse alarm hook
    def _collapse_monitor(self, log_path: Path):
        """The online collapse alarm (:class:`arlgym.arena.alarm.CollapseMonitor`), primed
        with the rows a resumed run already logged; None when ``collapse_alarm`` is off."""
        if not self.cfg.collapse_alarm:
            return None
        from arlgym.arena.alarm import CollapseMonitor

        return CollapseMonitor(M.read_metrics_jsonl(log_path))

    def _check_collapse(self, alarm, metrics: dict[str, float]) -> bool:
        """Feed this step to the alarm; log ``alarm/collapse``; whether the run must stop."""
        if alarm is None:
            return False
        verdict = alarm.update(metrics)
        metrics[M.ALARM_COLLAPSE] = float(alarm.fired is not None)
        if verdict is not None and self.accelerator.is_main_process:
            warnings.warn(f"collapse alarm at step {verdict['detected_at']} (began at step "
                          f"{verdict['step']}): {verdict['reason']}", stacklevel=2)
            (self.out / "collapse.json").write_text(json.dumps(verdict, indent=2))
        return bool(self.cfg.stop_on_collapse and alarm.fired is not None)

    def _restore_healthy(self, verdict: dict[str, Any]) -> None:
        """stop_on_collapse: reload the newest checkpoint from before the collapse began, so
        ``final/`` is the last healthy policy (the live one is kept if there is none)."""
        healthy = [p for p in self.checkpoints()
                   if json.loads((p / "trainer_state.json").read_text())["step"] < verdict["step"]]
        if healthy:
            self._load_checkpoint(healthy[-1])
        elif self.accelerator.is_main_process:
            warnings.warn("stop_on_collapse: no checkpoint from before the collapse (set "
                          "save_steps); final/ holds the policy at the alarm", stacklevel=2)
        if self.accelerator.is_main_process:
            record = json.loads((self.out / "collapse.json").read_text())
            record["stopped"] = True
            record["final_from_step"] = self.step if healthy else None
            (self.out / "collapse.json").write_text(json.dumps(record, indent=2))

    # ------------------------------------------------------------------ final test eval
    def final_evaluation(self) -> dict[str, dict[str, Any]]:
        """Greedy eval of final/ (and best/) on the test panel: ``eval/test-{last,best}.jsonl``
        and ``.summary.json`` files that carry the panel and its hash (main process)."""
        from arlgym.evaluation.panel import make_panel
        from arlgym.evaluation.runner import evaluate
        from arlgym.policies import make_policy
        from arlgym.policies.hf import HFPolicy

        cfg = self.cfg
        panel = make_panel(cfg.env_id, cfg.test_split, cfg.test_episodes, cfg.env_kwargs)
        folder = self.out / "eval"
        folder.mkdir(exist_ok=True)
        model = self.accelerator.unwrap_model(self.model)
        policies = {"last": HFPolicy(model, tokenizer=self.tokenizer, processor=self.processor,
                                     batch_size=self.cfg.generation_batch_size)}
        # the live model holds final/'s weights: the eval's settings name that folder, not the
        # model the run started from (which is what the live model's config still names)
        policies["last"].name = f"hf:{self.out / 'final'}"
        if (self.out / "best" / "best.json").exists():
            policies["best"] = make_policy(f"hf:{self.out / 'best'}")
        out: dict[str, dict[str, Any]] = {}
        model.eval()
        try:
            for name, policy in policies.items():
                path = folder / f"test-{name}.jsonl"
                summary, _ = evaluate(
                    cfg.env_id, policy, episodes=cfg.test_episodes, split=cfg.test_split, out=path,
                    batch_size=64, env_kwargs=cfg.env_kwargs, progress=False,
                    sampling=self.eval_sampling(), samples_per_task=cfg.eval_samples,
                    **build.env_server_kwargs(cfg.env_servers))
                summary.update({"checkpoint": name, "panel": panel, "panel_hash": panel["hash"],
                                "train_step": self.step})
                if name == "best":
                    summary["best"] = json.loads((self.out / "best" / "best.json").read_text())
                path.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2))
                out[name] = summary
        finally:
            model.train()
        return out

    def save_final(self) -> Path:
        path = self.out / "final"
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self.save_model(path)
        self.accelerator.wait_for_everyone()
        return path

    def save_model(self, path: Path) -> None:
        """An HF model directory that loads with ``hf:<dir>`` (main process only)."""
        model = self.accelerator.unwrap_model(self.model)
        if self.lora:  # the merged model, plus the adapter alone
            merged_copy(model).save_pretrained(path)
            model.save_pretrained(path / "adapter")
        else:
            model.save_pretrained(path)
        (self.processor or self.tokenizer).save_pretrained(path)

    def _keep_if_best(self, score: float) -> None:
        """Save the model to ``best/`` when ``score`` beats every earlier periodic eval.

        The record lives in ``best/best.json``, so a resumed run keeps comparing against it.
        Ties keep the earlier model. Written to a temporary folder and renamed, so a crash
        never leaves a half-written ``best/``.
        """
        import shutil

        best, record = self.out / "best", self.out / "best" / "best.json"
        if record.exists() and json.loads(record.read_text())[M.EVAL_SUCCESS] >= score:
            return
        tmp = self.out / "best.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.save_model(tmp)
        (tmp / "best.json").write_text(json.dumps(
            {"step": self.step, M.EVAL_SUCCESS: score, "eval_split": self.cfg.eval_split,
             "eval_episodes": self.cfg.eval_episodes}))
        shutil.rmtree(best, ignore_errors=True)
        tmp.rename(best)


def _staleness_metrics(staleness: list[int], k: int) -> dict[str, float]:
    """Mean, max and histogram (``staleness/hist_0..k``) of the trained turns' staleness."""
    out = {M.STALENESS_MEAN: float(np.mean(staleness)) if staleness else 0.0,
           M.STALENESS_MAX: float(max(staleness)) if staleness else 0.0}
    for i in range(k + 1):
        out[f"staleness/hist_{i}"] = float(sum(1 for x in staleness if x == i))
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _dummy_sample(tokenizer) -> TokenSample:
    """A one-token placeholder for ranks with no samples (its loss is multiplied by 0)."""
    t = tokenizer.pad_token_id
    return TokenSample(uid="pad", traj_id="pad", step=0, anchor="pad", step_reward=0.0,
                       episode_return=0.0, format_penalty=0.0, format_valid=True,
                       action_valid=True, won=False, prompt_ids=[t], response_ids=[t])

