"""The policy update: old/reference log-probs and the optimizer steps over one rollout batch.

Two jobs of a trainer step live here, apart from the loop that calls them:

* :func:`fill_logprobs` — the old (and reference) log-probs of every sample, without grad, on
  the exact sampled tokens (or the sampler's own, see :func:`old_from_rollout`).
* :class:`PolicyUpdate` — ``ppo_epochs`` passes of mini-batches, each split into
  token-budgeted micro-batches (:func:`micro_batches`). The loss of every micro-batch is divided
  by the whole mini-batch's *global* token/sequence counts (summed over ranks), so a
  mini-batch's loss does not depend on how it was split or sharded. Ranks agree on the number of
  micro-batches: a rank with fewer pads with zero-weight *dummy* ones (a rank with no samples
  runs a one-token placeholder), so DDP/FSDP never wait on a collective one rank skips.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.batching import (
    TokenSample,
    pack,
    pack_shared,
    prompt_groups,
    response_logprobs,
    shared_prompt_logprobs,
)
from arlgym.rl.credit import counted_tokens, credit_masks
from arlgym.rl.lora import adapters_disabled
from arlgym.rl.losses import policy_loss

__all__ = ["Batching", "Collectives", "PolicyUpdate", "fill_logprobs", "micro_batches",
           "old_from_rollout", "sample_logprobs"]

#: ``(model, samples, with_entropy) -> (logp, entropy, mask)``: the log-prob pass, bound to the
#: run's pad id, device, temperature and batching (the trainer's ``_logprobs``)
LogProbs = Callable[[Any, list[TokenSample], bool], tuple[torch.Tensor, Any, torch.Tensor]]


@dataclass(frozen=True)
class Batching:
    """How samples are cut into forward passes: the token budget of a micro-batch, whether
    members with one prompt run it once, and the bound on response logit rows (None: none)."""

    micro_batch_tokens: int
    share_prompts: bool = False
    logit_rows: int | None = None


def micro_batches(samples: list[TokenSample], order: list[int], budget: int,
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
    Vision turns never share (their prompt ids hold identical image placeholders).
    """
    width = max(1, max(len(s.response_ids) for s in sub))
    mask = torch.zeros(len(sub), width)
    for row, s in enumerate(sub):
        mask[row, : len(s.response_ids)] = 1.0
    mask = mask.to(device)
    share_prompts = share_prompts and all(s.image_inputs is None for s in sub)
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


# ---------------------------------------------------------------------- old / reference log-probs
def old_from_rollout(samples: list[TokenSample], mode: str, *, engine: str, need_entropy: bool,
                     correcting: bool) -> bool:
    """Whether this step takes the old log-probs from the sampler (``old_logprobs``).

    ``rollout`` always (refused when the sampler gave none); ``auto`` only when they are the
    learner's own to float rounding: HF generate on the live model, no entropy needed (EMPG),
    no rollout correction (which compares the two) and no stale async sample (whose log-probs
    are an older policy's).
    """
    have = all(s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.response_ids)
               for s in samples)
    if mode == "rollout":
        if not have:
            raise ConfigError("old_logprobs rollout: the rollout policy returned no log-probs "
                              "for some turns; use old_logprobs recompute")
        return True
    fresh = all(s.staleness == 0 for s in samples)
    return mode == "auto" and engine == "hf" and have and not need_entropy and not correcting and fresh


@torch.no_grad()
def fill_logprobs(samples: list[TokenSample], model: Any, logprobs: LogProbs, batching: Batching,
                  *, from_rollout: bool, ref_model: Any = None, use_ref: bool = False,
                  need_entropy: bool = False) -> None:
    """Old (unless ``from_rollout``: the sampler's), reference (``use_ref``: ``ref_model``, or
    under LoRA ``model`` with its adapters off) log-probs and mean entropies of ``samples``."""
    if from_rollout:
        for s in samples:
            s.old_logprobs = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
        if not use_ref:
            return
    for mb in micro_batches(samples, list(range(len(samples))), batching.micro_batch_tokens,
                            batching.share_prompts, batching.logit_rows):
        sub = [samples[i] for i in mb]
        logp, ent = None, None
        if not from_rollout:
            logp, ent, _ = logprobs(model, sub, need_entropy)
        ref = None
        if ref_model is not None:
            ref, _, _ = logprobs(ref_model, sub, False)
        elif use_ref:  # LoRA: the base weights are the reference
            with adapters_disabled(model):
                ref, _, _ = logprobs(model, sub, False)
        for row, i in enumerate(mb):
            n = len(samples[i].response_ids)
            if logp is not None:
                samples[i].old_logprobs = logp[row, :n].cpu()
            if ref is not None:
                samples[i].ref_logprobs = ref[row, :n].cpu()
            if ent is not None:
                samples[i].entropy = float(ent[row, :n].mean()) if n else 0.0


# ---------------------------------------------------------------------- the update
class Collectives:
    """Sums and maxima over ranks (the identity on one process)."""

    def __init__(self, accelerator: Any) -> None:
        self.acc = accelerator

    def max(self, value: int) -> int:
        if self.acc.num_processes == 1:
            return value
        t = torch.tensor([value], device=self.acc.device)
        return int(self.acc.reduce(t, reduction="max").item())

    def sum(self, value: float) -> float:
        if self.acc.num_processes == 1:
            return value
        t = torch.tensor([float(value)], device=self.acc.device)
        return float(self.acc.reduce(t, reduction="sum").item())

    def reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Combine the ranks' metrics, each key by its reduction in :mod:`arlgym.rl.metrics`
        (counts such as ``env/turns`` and ``tokens`` add up; rates average)."""
        if self.acc.num_processes == 1:
            return metrics
        acc = self.acc

        def collective(values: list[float], how: str) -> list[float]:
            t = torch.tensor(values, device=acc.device)
            if how == "min":
                return (-acc.reduce(-t, reduction="max")).tolist()
            return acc.reduce(t, reduction=how).tolist()

        return M.reduce_across(metrics, collective)


def _stack(rows: list[Any], width: int, device: Any) -> torch.Tensor:
    """Per-sample 1-D values as a (len(rows), width) zero-padded tensor on ``device``."""
    out = torch.zeros(len(rows), width)
    for row, v in enumerate(rows):
        out[row, : len(v)] = v
    return out.to(device)


def dummy_sample(tokenizer: Any) -> TokenSample:
    """A one-token placeholder for ranks with no samples (its loss is multiplied by 0)."""
    t = tokenizer.pad_token_id
    return TokenSample(uid="pad", traj_id="pad", step=0, anchor="pad", step_reward=0.0,
                       episode_return=0.0, format_penalty=0.0, format_valid=True,
                       action_valid=True, won=False, prompt_ids=[t], response_ids=[t])


class _null:
    def __enter__(self) -> _null:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


@dataclass
class UpdateSettings:
    """The knobs of one update (from the config and the resolved preset)."""

    loss: str
    loss_kwargs: dict[str, Any]
    ppo_epochs: int
    mini_batch_size: int
    grad_clip: float
    credit: str
    seed: int
    use_ref: bool
    correcting: bool

    @classmethod
    def of(cls, cfg: Any, loss_kwargs: dict[str, Any], *, use_ref: bool,
           correcting: bool) -> UpdateSettings:
        """From the config and the preset's loss (``name`` and its knobs); ``is_band`` sets
        one telemetry band for every preset, so runs are comparable."""
        loss_kw = dict(loss_kwargs)
        name = loss_kw.pop("name")
        if cfg.is_band is not None:
            loss_kw.setdefault("is_clip_low", cfg.is_band)
            loss_kw.setdefault("is_clip_high", cfg.is_band)
        return cls(loss=name, loss_kwargs=loss_kw, ppo_epochs=cfg.ppo_epochs,
                   mini_batch_size=cfg.mini_batch_size, grad_clip=cfg.grad_clip,
                   credit=cfg.credit, seed=cfg.seed, use_ref=use_ref, correcting=correcting)


class PolicyUpdate:
    """``ppo_epochs`` passes of mini-batches over one rollout batch (module docstring).

    Args:
        accelerator, model, optimizer, scheduler: Accelerate's prepared parts.
        tokenizer: for a sample-less rank's placeholder.
        settings: loss, epochs, mini-batch size, clipping, credit, seed, KL and correction.
        batching: the micro-batch budgets.
        logprobs: the log-prob pass.
    """

    def __init__(self, accelerator: Any, model: Any, optimizer: Any, scheduler: Any,
                 tokenizer: Any, settings: UpdateSettings, batching: Batching,
                 logprobs: LogProbs) -> None:
        self.acc, self.model, self.optimizer, self.scheduler = accelerator, model, optimizer, scheduler
        self.tokenizer, self.s, self.batching, self.logprobs = tokenizer, settings, batching, logprobs
        self.ranks = Collectives(accelerator)

    def __call__(self, samples: list[TokenSample], adv: torch.Tensor, step: int) -> dict[str, float]:
        """Train on ``samples`` with advantages ``adv`` at trainer ``step`` (which seeds the
        mini-batch shuffle); returns the update's metrics (this rank's share)."""
        s = self.s
        gen = torch.Generator().manual_seed(s.seed * 31 + step)
        n_local = len(samples)
        mini = s.mini_batch_size or max(1, n_local)
        n_mini = self.ranks.max(max(1, math.ceil(n_local / mini)))
        self._sums: dict[str, float] = {}
        self._weight_total = 0.0
        grad_norms: list[float] = []
        # loss and pg_loss are divided by the whole mini-batch's token/sequence totals in every
        # micro-batch, so a mini-batch's loss is the SUM of its micro-batch losses (not an
        # average, which would depend on how the mini-batch was split); logged: mean per step
        step_losses: dict[str, list[float]] = {"loss": [], "pg_loss": []}
        for _epoch in range(s.ppo_epochs):
            perm = torch.randperm(n_local, generator=gen).tolist() if n_local else []
            for chunk in (perm[k::n_mini] for k in range(n_mini)):
                for key, val in self._mini_batch(samples, adv, chunk).items():
                    step_losses[key].append(val)
                grad_norms.append(float(self.acc.clip_grad_norm_(self.model.parameters(), s.grad_clip)))
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
        out = {k: v / max(1.0, self._weight_total) for k, v in self._sums.items()}
        # each rank holds its share of the global sum; the trainer's reduction adds them up
        out.update({k: float(np.mean(v)) if v else 0.0 for k, v in step_losses.items()})
        out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        out["learning_rate"] = float(self.scheduler.get_last_lr()[0])
        return out

    def _mini_batch(self, samples: list[TokenSample], adv: torch.Tensor,
                    chunk: list[int]) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch over its micro-batches (global counts,
        dummy micro-batches to the ranks' common count); its summed ``loss`` and ``pg_loss``."""
        s, b, world = self.s, self.batching, self.acc.num_processes
        tokens = sum(counted_tokens(samples[i], s.credit) for i in chunk)
        g_tokens = max(1.0, self.ranks.sum(tokens))
        g_seqs = max(1.0, self.ranks.sum(len(chunk)))
        micro = (micro_batches(samples, chunk, b.micro_batch_tokens, b.share_prompts, b.logit_rows)
                 if chunk else [])
        n_micro = self.ranks.max(len(micro))
        micro += [[]] * (n_micro - len(micro))
        chunk_loss = {"loss": 0.0, "pg_loss": 0.0}
        for k, mb in enumerate(micro):
            sync = self.acc.no_sync(self.model) if (k < n_micro - 1 and world > 1) else _null()
            with sync:
                loss, metrics, response_mask = self._micro_batch(samples, adv, mb, g_tokens, g_seqs)
            if mb:  # a dummy micro-batch adds nothing to the metrics
                w = float(response_mask.sum())
                self._weight_total += w
                for key, val in metrics.items():
                    if key not in chunk_loss:
                        self._sums[key] = self._sums.get(key, 0.0) + float(val) * w
                chunk_loss["loss"] += float(loss.detach())
                chunk_loss["pg_loss"] += float(metrics["pg_loss"])
        return chunk_loss

    def _micro_batch(self, samples: list[TokenSample], adv: torch.Tensor, mb: list[int],
                     g_tokens: float, g_seqs: float) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """Forward and backward of one micro-batch (an empty ``mb``: a zero-weight dummy)."""
        s, device, n_local = self.s, self.acc.device, len(samples)
        idx = mb if mb else [0]
        sub = [samples[i] for i in idx] if n_local else [dummy_sample(self.tokenizer)]
        logp, ent, response_mask = self.logprobs(self.model, sub, True)
        width = logp.shape[1]
        if n_local:
            old = _stack([samples[i].old_logprobs for i in idx], width, device)
            ref = _stack([samples[i].ref_logprobs for i in idx], width, device) if s.use_ref else None
            a = adv[idx].to(device)
        else:
            old, ref, a = logp.detach(), (logp.detach() if s.use_ref else None), torch.zeros(1, device=device)
        weights = ({"token_weights": _stack([samples[i].rollout_weight for i in idx], width, device)}
                   if s.correcting and n_local else {})
        if n_local:  # the credit hook (response: unchanged)
            response_mask, weights = credit_masks(s.credit, samples, idx, response_mask, weights)
        loss, metrics = policy_loss(s.loss, logp, old, a, response_mask, ref_logp=ref,
                                    entropy=ent, global_tokens=g_tokens, num_seqs=g_seqs,
                                    **weights, **s.loss_kwargs)
        scale = 0.0 if not mb else float(self.acc.num_processes)  # DDP averages; we want sums
        self.acc.backward(loss * scale)
        return loss, metrics, response_mask
