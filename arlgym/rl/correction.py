"""Off-policy (rollout) correction: weights for the gap between the policy that *sampled* a
turn and the learner's own log-probs of it.

The PPO ratio r = π_θ/π_old assumes π_old is the policy the tokens were drawn from. Two things
break that: the sampling engine computes probabilities with other kernels and precision (vLLM
bf16 vs the trainer's fp32), and with asynchronous rollouts the sampler's weights are some
updates older than the learner's. With ρ_t = π_learner(y_t | ·) / π_sampler(y_t | ·) — the
learner's old log-probs against the sampler's log-probs of the same tokens — each method gives
a per-token weight w that multiplies the per-token policy loss ℓ_t (detached, a constant):

==============  ===========================================================================
``none``        w = 1 (no correction; the loss is today's bit for bit)
``tis_token``   w_t = min(ρ_t, C) — truncated IS, Yao, Liu, Zhang, Shen & Gao (2025), "Your
                efficient RL framework secretly brings you off-policy RL training"; C = 2
``tis_seq``     w_i = min(ρ_i, C), ρ_i = Π_t ρ_t the sequence ratio — sequence-level truncated
                IS, as analysed by Liu et al. (2025), next row
``mis_token``   w_t = ρ_t · 1[lo ≤ ρ_t ≤ C] — masked IS, Liu, Li, Fu, Wang, Liu & Shen (2025),
                "When Speed Kills Stability: Demystifying RL Collapse from the
                Training-Inference Mismatch": a token whose ratio leaves the band is dropped
                rather than truncated; C = 2, lo = 0 (upper side only, as in the source)
``mis_seq``     w_i = ρ_i · 1[lo ≤ ρ_i ≤ C] — the same source's sequence-level MIS
``icepop``      w_t = ρ_t · 1[α ≤ ρ_t ≤ β] — IcePop, Ling team / inclusionAI (2025), "Small
                Leak Can Sink a Great Ship — Boost RL Training on MoE with IcePop": a
                two-sided token mask, α = 0.5, β = 5
==============  ===========================================================================

``cap`` is C (β for IcePop) and ``floor`` is lo (α for IcePop); ``None`` takes the source's
value above. Masked tokens keep counting in the loss's denominators (the trainer's global
token/sequence counts), as the sequence mask does, so the normaliser does not depend on which
tokens the correction dropped.

The diagnostics (:func:`mismatch_metrics`) are logged whether or not a correction is applied:
``mismatch/kl`` is the k3 estimate of KL(π_sampler‖π_learner) per token, E[ρ − 1 − log ρ] over
tokens drawn from the sampler (Schulman's k3, always ≥ 0), ``mismatch/ratio_q05|q50|q95`` the
token-ratio quantiles, ``mismatch/masked_frac`` and ``mismatch/truncated_frac`` what the chosen
method zeroed or capped, ``mismatch/weight_mean`` the mean weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M

__all__ = ["METHODS", "DEFAULTS", "correction_weights", "mismatch_metrics", "RolloutCorrection"]

#: method -> (cap, floor) of its source
DEFAULTS: dict[str, tuple[float | None, float | None]] = {
    "none": (None, None),
    "tis_token": (2.0, None),
    "tis_seq": (2.0, None),
    "mis_token": (2.0, 0.0),
    "mis_seq": (2.0, 0.0),
    "icepop": (5.0, 0.5),
}
METHODS = tuple(DEFAULTS)

#: log-ratio clamp: only guards exp overflow (as the losses' token ratio)
_CLAMP = 20.0


def _check(method: str, cap: float | None, floor: float | None) -> tuple[float, float]:
    if method not in DEFAULTS:
        raise ConfigError(f"rollout_correction={method!r} is unknown: expected one of "
                          f"{', '.join(METHODS)}. Fix: pick one of those.")
    c = DEFAULTS[method][0] if cap is None else float(cap)
    f = DEFAULTS[method][1] if floor is None else float(floor)
    c = 1.0 if c is None else c
    f = 0.0 if f is None else f
    if method != "none" and not (0.0 <= f < 1.0 < c):
        raise ConfigError(f"rollout_correction {method}: needs 0 <= floor < 1 < cap, got "
                          f"floor={f} cap={c}. Fix: e.g. --rollout_correction_cap 2.0 "
                          "--rollout_correction_floor 0.5 (or leave them unset: the source's "
                          "values)")
    return c, f


def correction_weights(method: str, learner_logp: Tensor, sampler_logp: Tensor, mask: Tensor,
                       *, cap: float | None = None, floor: float | None = None,
                       ) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token weights (B, T) of ``method`` and what they did (module docstring).

    Args:
        learner_logp: (B, T) the learner's log-probs of the sampled tokens (its old log-probs).
        sampler_logp: (B, T) the sampler's log-probs of the same tokens.
        mask: (B, T) 1 for response tokens, 0 for padding (padding gets weight 0).
        cap, floor: C and lo (β and α for IcePop); None: the source's values.

    Returns:
        (weights, metrics): weights without grad; ``mismatch/masked_frac``,
        ``mismatch/truncated_frac`` and ``mismatch/weight_mean`` as 0-dim tensors (token means).
    """
    c, f = _check(method, cap, floor)
    if learner_logp.shape != sampler_logp.shape or learner_logp.shape != mask.shape:
        raise ValueError(f"shapes differ: learner {tuple(learner_logp.shape)}, sampler "
                         f"{tuple(sampler_logp.shape)}, mask {tuple(mask.shape)}")
    mask = mask.float()
    log_ratio = ((learner_logp - sampler_logp).float() * mask).detach()
    token_ratio = torch.exp(log_ratio.clamp(-_CLAMP, _CLAMP))
    seq_ratio = torch.exp(log_ratio.sum(-1).clamp(-_CLAMP, _CLAMP)).unsqueeze(-1).expand_as(mask)
    ratio = seq_ratio if method.endswith("_seq") else token_ratio
    truncated = torch.zeros_like(mask, dtype=torch.bool)
    dropped = torch.zeros_like(mask, dtype=torch.bool)
    if method == "none":
        w = torch.ones_like(mask)
    elif method.startswith("tis"):
        truncated = ratio > c
        w = ratio.clamp(max=c)
    else:  # mis_token, mis_seq, icepop: ratio inside the band, 0 outside
        dropped = (ratio > c) | (ratio < f)
        w = ratio.masked_fill(dropped, 0.0)
    w = w * mask
    n = mask.sum().clamp(min=1.0)
    metrics = {M.MISMATCH_MASKED: (dropped.float() * mask).sum() / n,
               M.MISMATCH_TRUNCATED: (truncated.float() * mask).sum() / n,
               M.MISMATCH_WEIGHT: w.sum() / n}
    return w, metrics


def mismatch_metrics(learner_logp: Tensor, sampler_logp: Tensor, mask: Tensor,
                     quantiles: Sequence[float] = (0.05, 0.5, 0.95)) -> dict[str, Tensor]:
    """``mismatch/kl`` (k3 of KL(π_sampler‖π_learner) per token) and token-ratio quantiles
    ``mismatch/ratio_qNN`` over the response tokens (zeros when there are none)."""
    sel = mask.bool()
    lr = (learner_logp - sampler_logp).float()[sel].clamp(-_CLAMP, _CLAMP)
    out: dict[str, Tensor] = {}
    if lr.numel() == 0:
        out[M.MISMATCH_KL] = torch.zeros(())
        for q in quantiles:
            out[M.mismatch_quantile_key(q)] = torch.zeros(())
        return out
    ratio = lr.exp()
    out[M.MISMATCH_KL] = (ratio - 1.0 - lr).mean()
    qs = torch.quantile(ratio, torch.tensor(list(quantiles), dtype=ratio.dtype))
    for q, v in zip(quantiles, qs, strict=True):
        out[M.mismatch_quantile_key(q)] = v
    return out


@dataclass
class RolloutCorrection:
    """The trainer's hook: from a step's turn samples to per-sample weight rows.

    :meth:`apply` reads each sample's ``rollout_logprobs`` (sampler) and ``old_logprobs``
    (learner), computes the weights of the whole batch at once (sequence methods need whole
    responses) and stores each sample's row in ``sample.rollout_weight``; the update
    multiplies the per-token loss by it (``policy_loss(token_weights=...)``). ``active`` is
    False for ``none``: the update then passes no weights at all.
    """

    method: str = "none"
    cap: float | None = None
    floor: float | None = None

    def __post_init__(self) -> None:
        _check(self.method, self.cap, self.floor)

    @property
    def active(self) -> bool:
        return self.method != "none"

    def apply(self, samples: Sequence[Any]) -> dict[str, float]:
        """Set the weights of ``samples`` (when active); return the ``mismatch/`` metrics of
        the samples that carry both log-probs (empty when none do)."""
        pairs = [s for s in samples if s.rollout_logprobs is not None and s.old_logprobs is not None
                 and len(s.rollout_logprobs) == len(s.old_logprobs)]
        if self.active and len(pairs) != len(samples):
            raise ConfigError(f"rollout_correction {self.method}: some turns have no sampler "
                              "log-probs to compare with (a policy that returns none). Fix: "
                              "--rollout_correction none")
        if not pairs:
            return {}
        width = max(1, max(len(s.old_logprobs) for s in pairs))
        learner = torch.zeros(len(pairs), width)
        sampler = torch.zeros(len(pairs), width)
        mask = torch.zeros(len(pairs), width)
        for row, s in enumerate(pairs):
            n = len(s.old_logprobs)
            learner[row, :n] = s.old_logprobs.float()
            sampler[row, :n] = torch.as_tensor(s.rollout_logprobs, dtype=torch.float32)
            mask[row, :n] = 1.0
        metrics = mismatch_metrics(learner, sampler, mask)
        if self.active:
            w, wm = correction_weights(self.method, learner, sampler, mask, cap=self.cap,
                                       floor=self.floor)
            metrics.update(wm)
            for row, s in enumerate(pairs):
                s.rollout_weight = w[row, : len(s.old_logprobs)].clone()
        return {k: float(v) for k, v in metrics.items()}
