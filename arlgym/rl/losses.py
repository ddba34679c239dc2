"""Policy losses, the sequence-mask modifier and the k3 KL penalty (paper §2.2, App. A.2, Table 1).

Each registered loss is a pure function of tensors (docs/architecture.md, "Conventions")::

    fn(logp, old_logp, advantages, mask, *, clip_low, clip_high, **own_knobs)
        -> (loss_mat (B, T), metrics)

where ``loss_mat`` is the per-token loss ℓ_{i,t} (to be *minimised*, i.e. the negated surrogate)
before aggregation, and every knob is a keyword argument with its default in the signature.
:func:`policy_loss` is the public entry: it checks shapes and knobs, runs the loss, applies the
optional sequence mask, aggregates with :func:`arlgym.rl.aggregation.aggregate`, adds the
optional k3 KL and entropy terms and gathers the stability telemetry.

Notation: r_{i,t} = exp(logp − old_logp) is the token importance-sampling (IS) ratio (Eq. 2),
A the advantage (one per sequence, broadcast over its tokens, or one per token), ε_l/ε_h the
clip widths ``clip_low``/``clip_high``.

Metrics (all detached 0-dim tensors, local masked means; the trainer reduces and logs them):

============================  ==========================================================
``clip_ratio/low_mean``       tokens whose update the loss's lower clip changed
``clip_ratio/high_mean``      tokens whose update the loss's upper clip changed
``clip_ratio/region_mean``    low + high (TRL names; per-loss meaning in each docstring)
``is/out_low_neg_adv_frac``   tokens with r < 1−ε_l and A < 0 (paper Fig. 3, lower part)
``is/out_high_pos_adv_frac``  tokens with r > 1+ε_h and A > 0 (paper Fig. 3, upper part)
``is/out_frac``               tokens with r outside [1−ε_l, 1+ε_h], any advantage sign
``is/ratio_mean|min|max``     token IS ratio statistics
``is/ppo_kl``                 KL(π_old‖π_θ) ≈ mean(old_logp − logp) (k1, verl ``ppo_kl``)
``is/ppo_kl_k3``              KL(π_old‖π_θ) ≈ mean(r − 1 − log r) (k3, always ≥ 0)
``seq_mask/masked_frac``      fraction of sequences the sequence mask dropped
``kl``                        mean k3 KL(π_θ‖π_ref), when ``ref_logp`` is given
``entropy``                   mean token entropy, when ``entropy`` is given
``pg_loss``                   the aggregated policy-gradient term alone
============================  ==========================================================

The ``is/`` band uses the loss's ``clip_low``/``clip_high`` unless ``is_clip_low`` /
``is_clip_high`` are passed, so runs with very different clip widths (GSPO's 3e-3) can still be
compared on one band (e.g. 0.2).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.aggregation import aggregate, masked_mean
from arlgym.rl.registry import LOSSES, MODIFIERS, register

__all__ = [
    "LossFn",
    "policy_loss",
    "kl_k3",
    "is_group_metrics",
    "IS_GROUPS",
    "ppo_clip",
    "gspo",
    "sapo",
    "cispo",
    "seq_mask",
    "loss_knobs",
]

Metrics = dict[str, Tensor]
#: Signature of a registered loss: (logp, old_logp, advantages, mask, *, clip_low, clip_high,
#: **knobs) -> (per-token loss (B, T), metrics). ``advantages`` arrives already (B, T).
LossFn = Callable[..., tuple[Tensor, Metrics]]

#: Log-ratio clamp of the token ratio, as verl's ``compute_policy_loss_vanilla`` ([−20, 20]).
_LOG_RATIO_CLAMP = 20.0


def _token_ratio(logp: Tensor, old_logp: Tensor, clamp: float = _LOG_RATIO_CLAMP) -> Tensor:
    """r = exp(clamp(logp − old_logp, ±clamp)), (B, T); the clamp only guards exp overflow."""
    return torch.exp((logp - old_logp).clamp(-clamp, clamp))


def _fractions(low: Tensor, high: Tensor, mask: Tensor) -> Metrics:
    """TRL-named clip fractions from boolean (B, T) ``low``/``high`` indicators."""
    low, high = low.detach(), high.detach()
    return {
        M.CLIP_LOW: masked_mean(low.float(), mask),
        M.CLIP_HIGH: masked_mean(high.float(), mask),
        M.CLIP_REGION: masked_mean((low | high).float(), mask),
    }


def kl_k3(logp: Tensor, ref_logp: Tensor, *, clamp: float | None = 10.0) -> Tensor:
    """Per-token k3 estimator of KL(π_θ‖π_ref) (Schulman 2017; paper §3.1 "Auxiliary KL Loss").

    k3 = exp(ref − logp) − (ref − logp) − 1 ≥ 0, computed elementwise on (B, T) tensors; its
    gradient flows through ``logp``. ``clamp`` caps the value at ``clamp`` like verl's
    ``low_var_kl`` (which ARLArena uses, clamp 10); None disables the cap.
    """
    diff = (ref_logp - logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    kl = torch.exp(diff) - diff - 1.0
    return kl if clamp is None else kl.clamp(max=clamp)


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------


@register("loss", "ppo_clip")
def ppo_clip(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, Metrics]:
    """PPO/GRPO token-level clipped surrogate (paper Eq. 15; DAPO's clip-higher via ε_h ≠ ε_l).

    ℓ = max(−A·r, −A·clip(r, 1−ε_l, 1+ε_h)); with ``dual_clip`` = c > 1 (Ye et al. 2020, verl
    ``clip_ratio_c``) tokens with A < 0 are further capped: ℓ = min(ℓ, −c·A).

    ``clip_ratio/low_mean`` counts r < 1−ε_l with A < 0 and ``high`` r > 1+ε_h with A > 0 — the
    tokens whose gradient the clip removes (TRL's definition). ``clip_ratio/dual_mean`` counts
    tokens where the dual clip is active.
    """
    ratio = _token_ratio(logp, old_logp)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    metrics = _fractions(
        (ratio < 1.0 - clip_low) & (advantages < 0),
        (ratio > 1.0 + clip_high) & (advantages > 0),
        mask,
    )
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ConfigError(f"dual_clip must be > 1 (verl uses 3.0), got {dual_clip}; or None")
        cap = -advantages * dual_clip
        dual_active = (advantages < 0) & (loss > cap)
        loss = torch.where(advantages < 0, torch.minimum(loss, cap), loss)
        metrics[M.CLIP_DUAL] = masked_mean(dual_active.detach().float(), mask)
    return loss, metrics


@register("loss", "gspo")
def gspo(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    log_ratio_max: float = 10.0,
) -> tuple[Tensor, Metrics]:
    """GSPO sequence-level clipping (Zheng et al. 2025; paper Eqs. 20–21), "GSPO-token" form.

    s_i = exp((1/T_i) Σ_t (logp − old_logp)) is the length-normalised sequence ratio. Each token
    uses s_{i,t} = exp(logp_t − sg(logp_t) + sg(log s_i)): its value is s_i, its gradient
    ∂s_{i,t}/∂logp_t = s_i (verl's and ARLArena's implementation). The loss is the PPO clip on
    it: ℓ_{i,t} = max(−A·s_{i,t}, −A·clip(s_{i,t}, 1−ε_l, 1+ε_h)). With one advantage per
    sequence this has the same gradient as clipping s_i once per sequence, under every
    aggregation. ``log_ratio_max`` caps log s_{i,t} (verl: 10).

    Pass GSPO-sized clips explicitly (Table 6: 3e-3 / 4e-3 on ALFWorld): :func:`policy_loss`
    defaults to 0.2 for every loss. The loss does not choose the aggregation (verl forced
    seq-mean-token-mean; the presets pick it). ``clip_ratio/*`` count tokens of sequences whose s_i is clipped (s_i < 1−ε_l with A < 0,
    s_i > 1+ε_h with A > 0); ``is/seq_ratio_mean`` is the mean s_i over non-empty sequences.
    """
    m = mask.to(logp.dtype)
    tokens = m.sum(dim=-1)
    seq_log_ratio = ((logp - old_logp) * m).sum(dim=-1) / tokens.clamp(min=1)  # (B,)
    log_s = logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)
    s = torch.exp(log_s.clamp(max=log_ratio_max))  # (B, T), value s_i on every token
    unclipped = -advantages * s
    clipped = -advantages * s.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    metrics = _fractions(
        (s < 1.0 - clip_low) & (advantages < 0), (s > 1.0 + clip_high) & (advantages > 0), mask
    )
    seq_ratio = torch.exp(seq_log_ratio.detach().clamp(max=log_ratio_max))
    metrics[M.IS_SEQ_RATIO] = masked_mean(seq_ratio, tokens > 0)
    return loss, metrics


@register("loss", "sapo")
def sapo(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
) -> tuple[Tensor, Metrics]:
    """SAPO soft gate (Gao et al. 2025; paper Eqs. 18–19), defaults from Table 6.

    ℓ = −f(r)·A with f(r) = σ(τ(r − 1))·4/τ, τ = τ_pos where A > 0 else τ_neg. At r = 1,
    f = 2/τ and ∂f/∂r = 1, so on-policy the gradient equals plain policy gradient's.
    ε_l/ε_h do not enter the loss; ``clip_ratio/*`` report the band ARLArena logs as SAPO's
    ``pg_clipfrac``: r < 1−ε_l with A < 0, r > 1+ε_h with A > 0 (diagnostic only).
    """
    if sapo_tau_pos <= 0 or sapo_tau_neg <= 0:
        raise ConfigError(
            f"sapo_tau_pos and sapo_tau_neg must be > 0 (Table 6: 1.0 and 1.05), got "
            f"{sapo_tau_pos} and {sapo_tau_neg}"
        )
    ratio = _token_ratio(logp, old_logp)
    tau = torch.where(
        advantages > 0,
        torch.as_tensor(sapo_tau_pos, dtype=ratio.dtype, device=ratio.device),
        torch.as_tensor(sapo_tau_neg, dtype=ratio.dtype, device=ratio.device),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    loss = -gate * advantages
    metrics = _fractions(
        (ratio < 1.0 - clip_low) & (advantages < 0),
        (ratio > 1.0 + clip_high) & (advantages > 0),
        mask,
    )
    metrics[M.IS_SAPO_GATE] = masked_mean(gate.detach(), mask)
    return loss, metrics


@register("loss", "cispo")
def cispo(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 1.0,
    clip_high: float = 0.2,
) -> tuple[Tensor, Metrics]:
    """CISPO clipped IS weight (MiniMax-M1, Chen et al. 2025; paper Eqs. 16–17, Table 1).

    ℓ = −sg(clip(r, 1−ε_l, 1+ε_h))·A·logp. The clip is two-sided as in the paper's Table 1 and
    ARLArena (not TRL's upper-only absolute cap); Table 6 uses ε_l = 1 (no effective lower
    bound) and ε_h = 0.2 — pass ``clip_low=1.0`` to :func:`policy_loss`, whose default is 0.2.
    The gradient is −sg(ŵ)·A·∇logp for *every* token, clipped or not.
    ``clip_ratio/low_mean``/``high_mean`` count tokens whose weight was truncated
    (r < 1−ε_l / r > 1+ε_h), whatever the advantage sign.
    """
    ratio = _token_ratio(logp, old_logp)
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high).detach()
    loss = -weight * advantages * logp
    metrics = _fractions(ratio < 1.0 - clip_low, ratio > 1.0 + clip_high, mask)
    return loss, metrics


# --------------------------------------------------------------------------------------------
# Modifiers
# --------------------------------------------------------------------------------------------


@register("modifier", "seq_mask")
def seq_mask(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    delta: float = 0.223,
) -> tuple[Tensor, Metrics]:
    """Sequence mask for off-policy negative samples (paper Table 1 "GRPO_SM", §4.1).

    M_i = 0 iff A_i < 0 and (1/T_i) Σ_t log(π_old/π_θ) > δ, else 1 — i.e. drop negative-advantage
    sequences whose ratio has fallen low (DeepSeek-V3.2 off-policy masking; ARLArena
    ``apply_seq_mask``). A_i is the sequence's mean advantage over its tokens. Computed without
    gradient. ``delta`` defaults to 0.223 ≈ ln 1.25 (ARLArena's default); the ARLArena
    seq-mask scripts use 3e-3.

    Returns:
        (keep (B,) float 0/1, metrics with ``seq_mask/masked_frac`` over non-empty sequences).
    """
    with torch.no_grad():
        m = mask.to(logp.dtype)
        tokens = m.sum(dim=-1)
        nonempty = tokens > 0
        seq_adv = (advantages * m).sum(dim=-1) / tokens.clamp(min=1)
        seq_kl = ((old_logp - logp) * m).sum(dim=-1) / tokens.clamp(min=1)
        drop = (seq_adv < 0) & (seq_kl > delta) & nonempty
        keep = (~drop).to(logp.dtype)
        metrics = {M.SEQ_MASKED: masked_mean(drop.float(), nonempty)}
    return keep, metrics


# --------------------------------------------------------------------------------------------
# Public entry
# --------------------------------------------------------------------------------------------

_COMMON = ("clip_low", "clip_high")


def loss_knobs(name: str) -> dict[str, Any]:
    """The loss-specific keyword knobs of loss ``name`` and their defaults (beyond the clips)."""
    params = inspect.signature(LOSSES.get(name)).parameters.values()
    return {
        p.name: p.default
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _COMMON
    }


def _check_shapes(logp: Tensor, **others: Tensor | None) -> None:
    if logp.dim() != 2:
        raise ConfigError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    for key, t in others.items():
        if t is not None and t.shape != logp.shape:
            raise ConfigError(
                f"{key} must have logp's shape {tuple(logp.shape)}, got {tuple(t.shape)}"
            )


def _broadcast_advantages(advantages: Tensor, logp: Tensor) -> Tensor:
    b, t = logp.shape
    if advantages.shape == (b,):
        return advantages.detach().to(logp.dtype).unsqueeze(-1).expand(b, t)
    if advantages.shape == (b, t):
        return advantages.detach().to(logp.dtype)
    raise ConfigError(
        f"advantages must be (B,) or (B, T) = ({b},) or ({b}, {t}), got {tuple(advantages.shape)}"
    )


def _is_metrics(ratio: Tensor, adv: Tensor, mask: Tensor, lo: float, hi: float) -> Metrics:
    """Loss-independent token IS-ratio telemetry (paper Fig. 3 (a, b))."""
    below, above = ratio < 1.0 - lo, ratio > 1.0 + hi
    valid = mask.bool()
    big = torch.finfo(ratio.dtype).max
    any_tok = bool(valid.any())
    return {
        M.IS_LOW_NEG: masked_mean((below & (adv < 0)).float(), mask),
        M.IS_HIGH_POS: masked_mean((above & (adv > 0)).float(), mask),
        M.IS_OUT: masked_mean((below | above).float(), mask),
        M.IS_RATIO_MEAN: masked_mean(ratio, mask),
        M.IS_RATIO_MAX: ratio.masked_fill(~valid, -big).max() if any_tok else ratio.new_zeros(()),
        M.IS_RATIO_MIN: ratio.masked_fill(~valid, big).min() if any_tok else ratio.new_zeros(()),
    }


IS_GROUPS = tuple(f"{a}_{r}_{e}" for a in ("pos", "neg") for r in ("ratio_hi", "ratio_lo")
                  for e in ("ent_hi", "ent_lo")) + ("zero_adv",)


def is_group_metrics(ratio: Tensor, adv: Tensor, mask: Tensor, entropy: Tensor,
                     kl: Tensor | None) -> Metrics:
    """The paper's IS analysis (Figs. 3c/d, 4): tokens split by advantage sign × IS ratio
    above/below 1 × entropy above/below the batch median (``zero_adv``: A = 0, no gradient).

    For each group ``g``: ``is_groups/<g>/tokens`` is its share of the response tokens and
    ``is_groups/<g>/kl`` its summed k3 KL to the reference per response token, so that
    ``kl_g / Σ kl`` is the group's share of the KL. Both are token means, so the trainer's
    token-weighted average over micro-batches keeps them exact; the entropy median is taken per
    micro-batch (on CPU configs one micro-batch is the whole mini-batch).
    """
    valid = mask.bool()
    if not bool(valid.any()):
        return {}
    median = entropy[valid].median()
    sides = {"pos": adv > 0, "neg": adv < 0}
    ratios = {"ratio_hi": ratio > 1.0, "ratio_lo": ratio <= 1.0}
    ents = {"ent_hi": entropy > median, "ent_lo": entropy <= median}
    out: Metrics = {}
    for g in IS_GROUPS:
        if g == "zero_adv":
            sel = adv == 0
        else:
            a, r1, r2, e1, e2 = g.split("_")
            sel = sides[a] & ratios[f"{r1}_{r2}"] & ents[f"{e1}_{e2}"]
        sel = sel.float()
        out[M.is_group_key(g, "tokens")] = masked_mean(sel, mask)
        if kl is not None:
            out[M.is_group_key(g, "kl")] = masked_mean(sel * kl, mask)
    return out


def policy_loss(
    name: str,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    aggregation: str = "token-mean",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    seq_mask_delta: float | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    global_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    max_len: int | None = None,
    is_clip_low: float | None = None,
    is_clip_high: float | None = None,
    token_weights: Tensor | None = None,
    **extra: Any,
) -> tuple[Tensor, Metrics]:
    """Policy-gradient loss ``name`` on a batch of turn samples, aggregated, with telemetry.

    loss = agg(M_i·ℓ_{i,t}) + kl_coef·agg(k3(logp, ref_logp)) − entropy_coef·agg(entropy),
    where ``agg`` is :func:`~arlgym.rl.aggregation.aggregate` with ``aggregation`` and the same
    global counts for every term, and M_i is the sequence mask (1 unless ``seq_mask_delta``).
    Masked sequences keep counting in the denominators (as in Table 1's GRPO_SM formula), so the
    normaliser does not depend on which sequences were dropped.

    Args:
        name: a registered loss: ``ppo_clip | gspo | sapo | cispo``.
        logp: (B, T) log-probs of the response tokens under the current policy (with grad).
        old_logp: (B, T) log-probs under the behaviour policy π_old (treated as constants).
        advantages: (B,) one per sequence (broadcast over its tokens) or (B, T); constants.
        mask: (B, T) 1 for response tokens, 0 for prompt/padding.
        aggregation: ``token-mean | seq-mean-token-mean | seq-mean-token-sum |
            seq-mean-token-sum-norm`` (paper Eqs. 10–13).
        clip_low, clip_high: ε_l, ε_h (Table 6 per method).
        seq_mask_delta: δ of the ``seq_mask`` modifier; None (default) leaves it off.
        ref_logp: (B, T) reference-model log-probs; gives the ``kl`` metric.
        kl_coef: k3 KL penalty coefficient (Table 6: 0.01; 0 for TIR Math). Added only when
            > 0, which requires ``ref_logp``.
        entropy: (B, T) token entropies; gives the ``entropy`` metric.
        entropy_coef: entropy bonus coefficient; > 0 requires ``entropy`` with grad.
        global_tokens, num_seqs, max_len: aggregation denominators, see
            :mod:`arlgym.rl.aggregation` for how the trainer computes them.
        is_clip_low, is_clip_high: band of the ``is/`` telemetry; None: the loss's clips.
        token_weights: (B, T) constant per-token weights on ℓ_{i,t} (the rollout correction of
            :mod:`arlgym.rl.correction`); None (default) leaves the loss untouched. Zero-weight
            tokens keep counting in the denominators, as sequence-masked ones do.
        **extra: the loss's own knobs (``dual_clip`` for ppo_clip, ``sapo_tau_pos`` /
            ``sapo_tau_neg`` for sapo, ``log_ratio_max`` for gspo); see :func:`loss_knobs`.

    Returns:
        (loss, metrics): a 0-dim loss with grad, and detached 0-dim metric tensors (module
        docstring table).

    Raises:
        RegistryError: unknown loss or aggregation name.
        ConfigError: unknown knob, bad shape, negative coefficient, KL/entropy term asked for
            without its tensor.
    """
    fn = LOSSES.get(name)
    knobs = loss_knobs(name)
    unknown = sorted(set(extra) - set(knobs))
    if unknown:
        raise ConfigError(
            f"unknown keyword(s) {unknown} for loss {name!r}; its own knobs are "
            f"{sorted(knobs) or '(none)'}, and policy_loss also takes aggregation, clip_low, "
            "clip_high, seq_mask_delta, ref_logp, kl_coef, entropy, entropy_coef, global_tokens, "
            "num_seqs, max_len, is_clip_low, is_clip_high, token_weights"
        )
    _check_shapes(logp, old_logp=old_logp, mask=mask, ref_logp=ref_logp, entropy=entropy)
    if clip_low < 0 or clip_high < 0:
        raise ConfigError(f"clip_low and clip_high must be >= 0, got {clip_low} and {clip_high}")
    if kl_coef < 0 or entropy_coef < 0:
        raise ConfigError(
            f"kl_coef and entropy_coef must be >= 0, got {kl_coef} and {entropy_coef}"
        )
    if kl_coef > 0 and ref_logp is None:
        raise ConfigError(f"kl_coef={kl_coef} > 0 needs ref_logp (reference-model log-probs)")
    if entropy_coef > 0 and entropy is None:
        raise ConfigError(f"entropy_coef={entropy_coef} > 0 needs the entropy tensor")

    old_logp = old_logp.detach()
    adv = _broadcast_advantages(advantages, logp)
    agg = {"global_tokens": global_tokens, "num_seqs": num_seqs, "max_len": max_len}

    loss_mat, metrics = fn(
        logp, old_logp, adv, mask, clip_low=clip_low, clip_high=clip_high, **extra
    )
    if seq_mask_delta is not None:
        keep, mask_metrics = MODIFIERS.get("seq_mask")(
            logp, old_logp, adv, mask, delta=seq_mask_delta
        )
        loss_mat = loss_mat * keep.unsqueeze(-1)
        metrics.update(mask_metrics)
    if token_weights is not None:
        _check_shapes(logp, token_weights=token_weights)
        loss_mat = loss_mat * token_weights.detach()
    pg = aggregate(loss_mat, mask, aggregation, **agg)
    loss = pg

    with torch.no_grad():
        ratio = _token_ratio(logp.detach(), old_logp)
        lo = clip_low if is_clip_low is None else is_clip_low
        hi = clip_high if is_clip_high is None else is_clip_high
        metrics.update(_is_metrics(ratio, adv, mask, lo, hi))
        metrics[M.PPO_KL] = masked_mean(old_logp - logp.detach(), mask)
        metrics[M.PPO_KL_K3] = masked_mean(kl_k3(old_logp, logp.detach(), clamp=None), mask)
        metrics[M.PG_LOSS] = pg.detach()
        if entropy is not None:
            kl_tok = kl_k3(logp.detach(), ref_logp.detach()) if ref_logp is not None else None
            metrics.update(is_group_metrics(ratio, adv, mask, entropy.detach(), kl_tok))

    if ref_logp is not None:
        kl_mat = kl_k3(logp, ref_logp.detach())
        metrics[M.KL_REF] = masked_mean(kl_mat.detach(), mask)
        if kl_coef > 0:
            loss = loss + kl_coef * aggregate(kl_mat, mask, aggregation, **agg)
    if entropy is not None:
        metrics[M.ENTROPY] = masked_mean(entropy.detach(), mask)
        if entropy_coef > 0:
            loss = loss - entropy_coef * aggregate(entropy, mask, aggregation, **agg)
    return loss, {k: v.detach() for k, v in metrics.items()}
