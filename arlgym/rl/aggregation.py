"""Loss aggregation: the one place a per-token loss matrix becomes a scalar (docs/architecture.md,
"Conventions").

Paper Appendix A.1 (Eqs. 10–13), with ℓ_{i,t} the per-token loss of sequence (turn sample) i,
T_i its number of unmasked tokens and N the number of sequences:

=============================  =========================================================
``token-mean``                 Σ_i Σ_t ℓ_{i,t} / Σ_i T_i                         (Eq. 10)
``seq-mean-token-mean``        (1/N) Σ_i (1/T_i) Σ_t ℓ_{i,t}                     (Eq. 11)
``seq-mean-token-sum``         (1/N) Σ_i Σ_t ℓ_{i,t}                             (Eq. 12)
``seq-mean-token-sum-norm``    (1/(N·T_max)) Σ_i Σ_t ℓ_{i,t}                     (Eq. 13)
=============================  =========================================================

Making the loss independent of micro-batching and sharding
-----------------------------------------------------------
By default every denominator is taken from the tensors given (the local micro-batch). To get
the loss of the *whole* mini-batch when it is split into micro-batches (gradient accumulation)
and across W data-parallel ranks, the trainer passes the mini-batch totals and **sums** the
micro-batch losses' gradients instead of averaging them:

* ``global_tokens`` = Σ_i T_i over the whole mini-batch, all ranks (all-reduce the local
  ``mask.sum()`` once per mini-batch) — used by ``token-mean``;
* ``num_seqs`` = number of sequences in the whole mini-batch, all ranks (for
  ``seq-mean-token-mean`` count only sequences with at least one token) — used by the three
  ``seq-mean-*`` modes.

DDP/FSDP *average* gradients over the W ranks, so either multiply each micro-batch loss by W or
pass ``global_tokens / W`` and ``num_seqs / W`` (TRL does the latter with
``num_items_in_batch / num_processes``). Do not also divide by the number of accumulation steps.
Zero-mask padding micro-batches (used to equalise micro-batch counts across ranks) then add
exactly zero.

``seq-mean-token-sum-norm`` needs ``max_len`` (T_max), a constant such as the maximum response
length, so the divisor stays fixed through training (verl's ``agg_loss`` uses the padded width
``loss_mask.shape[-1]`` and leaves out 1/N; Eq. 13 and TRL's ``dr_grpo`` divide by N·T_max,
which is what this module does).
"""

from __future__ import annotations

from torch import Tensor

from arlgym.errors import ConfigError
from arlgym.rl.registry import AGGREGATIONS, register

__all__ = ["aggregate", "masked_mean", "AGGREGATION_MODES"]


def _masked(loss_mat: Tensor, mask: Tensor) -> Tensor:
    return loss_mat * mask.to(loss_mat.dtype)


def _positive(value: float | Tensor | None, name: str) -> None:
    if value is not None and float(value) <= 0:
        raise ConfigError(
            f"{name} must be > 0 (got {float(value)}); pass None to use the local count"
        )


@register("aggregation", "token-mean")
def token_mean(
    loss_mat: Tensor, mask: Tensor, *, global_tokens: float | Tensor | None = None, **_: object
) -> Tensor:
    """Σ_{i,t} m_{i,t} ℓ_{i,t} / Σ_{i,t} m_{i,t} (paper Eq. 10); denominator ``global_tokens`` if given.

    An all-zero mask gives 0 (not NaN) when no ``global_tokens`` is given.
    """
    total = _masked(loss_mat, mask).sum()
    denom = mask.sum().clamp(min=1) if global_tokens is None else global_tokens
    return total / denom


@register("aggregation", "seq-mean-token-mean")
def seq_mean_token_mean(
    loss_mat: Tensor, mask: Tensor, *, num_seqs: float | Tensor | None = None, **_: object
) -> Tensor:
    """(1/N) Σ_i (Σ_t m ℓ / T_i) (paper Eq. 11); sequences with T_i = 0 add 0 and are not counted."""
    tokens = mask.sum(dim=-1)
    nonempty = tokens > 0
    seq_means = _masked(loss_mat, mask).sum(dim=-1) / tokens.clamp(min=1)
    denom = nonempty.sum().clamp(min=1) if num_seqs is None else num_seqs
    return seq_means.sum() / denom


@register("aggregation", "seq-mean-token-sum")
def seq_mean_token_sum(
    loss_mat: Tensor, mask: Tensor, *, num_seqs: float | Tensor | None = None, **_: object
) -> Tensor:
    """(1/N) Σ_i Σ_t m ℓ (paper Eq. 12); N = ``num_seqs`` or the local row count B."""
    denom = max(loss_mat.shape[0], 1) if num_seqs is None else num_seqs
    return _masked(loss_mat, mask).sum() / denom


@register("aggregation", "seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    loss_mat: Tensor,
    mask: Tensor,
    *,
    num_seqs: float | Tensor | None = None,
    max_len: int | None = None,
    **_: object,
) -> Tensor:
    """(1/(N·T_max)) Σ_i Σ_t m ℓ (paper Eq. 13, Dr. GRPO); ``max_len`` = T_max is required."""
    if max_len is None:
        raise ConfigError(
            "aggregation 'seq-mean-token-sum-norm' needs max_len (T_max, a constant such as the "
            "max response length, paper Eq. 13); pass max_len=..."
        )
    _positive(max_len, "max_len")
    return seq_mean_token_sum(loss_mat, mask, num_seqs=num_seqs) / max_len


#: The built-in modes, in the paper's order.
AGGREGATION_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def aggregate(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    global_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Reduce a per-token loss matrix to a scalar with the registered aggregation ``mode``.

    Args:
        loss_mat: (B, T) per-token loss ℓ_{i,t}.
        mask: (B, T) 1 for response tokens that count, 0 for padding (bool or float).
        mode: a name in the ``aggregation`` registry (see the module table).
        global_tokens: Σ T_i over the whole mini-batch and all ranks (``token-mean``); see the
            module docstring for how the trainer computes it. None: the local ``mask.sum()``.
        num_seqs: number of sequences in the whole mini-batch (``seq-mean-*``). None: local.
        max_len: T_max for ``seq-mean-token-sum-norm`` (required there, ignored elsewhere).

    Returns:
        A 0-dim tensor that carries the gradient of ``loss_mat``.

    Raises:
        RegistryError: unknown ``mode`` (the message lists the modes).
        ConfigError: shapes differ, or a count is not positive, or ``max_len`` is missing.
    """
    fn = AGGREGATIONS.get(mode)
    if loss_mat.shape != mask.shape or loss_mat.dim() != 2:
        raise ConfigError(
            f"aggregate needs loss_mat and mask of the same (B, T) shape; got "
            f"{tuple(loss_mat.shape)} and {tuple(mask.shape)}"
        )
    _positive(global_tokens, "global_tokens")
    _positive(num_seqs, "num_seqs")
    return fn(loss_mat, mask, global_tokens=global_tokens, num_seqs=num_seqs, max_len=max_len)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Σ m·v / Σ m over all elements (0 for an empty mask); used for metrics, not losses."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)
