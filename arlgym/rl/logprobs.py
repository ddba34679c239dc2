"""Log-probs and entropies of chosen tokens without full-vocabulary float32 copies.

At a real vocabulary (Qwen's 151,936 tokens) the LM head's output dominates a training step's
memory: a micro-batch of N response tokens holds N × V logits, and the straightforward
``log_softmax(logits.float() / T).gather(...)`` plus ``-(p * logp).sum(-1)`` keeps four more
tensors of that size for the backward (the float32 upcast, the tempered copy, the log-softmax,
its exponential) — ~10 GB per copy for a 16k-token micro-batch. TRL's
``selective_log_softmax`` and verl's chunked entropy exist for the same reason.

:func:`selective_logprobs` is one autograd function:

* **forward**, row chunk by row chunk (~64 MB of float32 each): ``z = logits / T`` upcast to
  float32, ``lse = logsumexp(z)``, ``logp = z[token] − lse``, ``entropy = lse − Σ softmax(z)·z``;
  it saves only the logits (which the model produced anyway, in its own dtype), the token ids
  and two floats per row;
* **backward**, chunk by chunk, the analytic gradient written straight into one tensor of the
  logits' shape and dtype:
  ``∂logp/∂z = onehot(token) − p`` and ``∂H/∂z = −p ⊙ (log p + H)``, each divided by ``T``.

Peak memory beyond the model is the logits plus their gradient (2 × N × V in the model's dtype)
instead of ~6 ×; results equal the straightforward computation to float32 rounding (tests:
values and entropies within 1e-5, gradients within 1e-5 absolute, bf16 logits within bf16 rounding).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["CHUNK_BYTES", "FUSED_VOCAB_TILE", "fused_head_unsupported", "fused_logprobs",
           "lm_head_passthrough", "logit_rows_budget", "reference_logprobs", "resolve_lm_head",
           "selective_logprobs"]

#: float32 bytes of one forward/backward chunk of rows (bounds the transient memory).
CHUNK_BYTES = 64 * 1024 * 1024


def _chunks(b: int, r: int, v: int):
    rows = max(1, CHUNK_BYTES // (4 * v))
    for i in range(b):
        for t0 in range(0, r, rows):
            yield i, t0, min(r, t0 + rows)


class _SelectiveLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, ids: Tensor, temperature: float,  # type: ignore[override]
                with_entropy: bool) -> tuple[Tensor, Tensor]:
        b, r = ids.shape
        v = logits.shape[-1]
        logp = torch.empty((b, r), dtype=torch.float32, device=logits.device)
        lse = torch.empty((b, r), dtype=torch.float32, device=logits.device)
        ent = torch.empty((b, r) if with_entropy else (0,), dtype=torch.float32, device=logits.device)
        for i, t0, t1 in _chunks(b, r, v):
            z = logits[i, t0:t1].float()
            z = z / temperature if temperature != 1.0 else z
            m = torch.logsumexp(z, dim=-1)
            lse[i, t0:t1] = m
            logp[i, t0:t1] = z.gather(-1, ids[i, t0:t1].unsqueeze(-1)).squeeze(-1) - m
            if with_entropy:
                p = torch.exp(z - m.unsqueeze(-1))
                ent[i, t0:t1] = m - (p * z).sum(-1)
        ctx.save_for_backward(logits, ids, lse, ent)
        ctx.temperature = temperature
        ctx.with_entropy = with_entropy
        ctx.mark_non_differentiable(ids)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp: Tensor, g_ent: Tensor):  # type: ignore[override]
        logits, ids, lse, ent = ctx.saved_tensors
        temperature = ctx.temperature
        b, r = ids.shape
        v = logits.shape[-1]
        grad = torch.zeros_like(logits)
        use_ent = ctx.with_entropy and g_ent is not None and g_ent.numel() > 0
        for i, t0, t1 in _chunks(b, r, v):
            z = logits[i, t0:t1].float()
            z = z / temperature if temperature != 1.0 else z
            m = lse[i, t0:t1].unsqueeze(-1)
            p = torch.exp(z - m)
            gl = g_logp[i, t0:t1].float().unsqueeze(-1)
            gz = p * (-gl)
            gz.scatter_add_(-1, ids[i, t0:t1].unsqueeze(-1), gl)
            if use_ent:
                ge = g_ent[i, t0:t1].float().unsqueeze(-1)
                gz -= p * ((z - m) + ent[i, t0:t1].unsqueeze(-1)) * ge
            if temperature != 1.0:
                gz /= temperature
            grad[i, t0:t1] = gz.to(grad.dtype)
        return grad, None, None, None


def selective_logprobs(logits: Tensor, ids: Tensor, *, temperature: float = 1.0,
                       with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-probs (B, R) of ``ids`` under ``log_softmax(logits[:, :R] / temperature)`` and, with
    ``with_entropy``, the entropies (B, R) of those distributions, both float32.

    Args:
        logits: (B, L, V) with L ≥ R, any float dtype (bf16 is upcast one chunk at a time);
            column ``k`` scores ``ids[:, k]``. Columns past R are ignored (their gradient is 0).
        ids: (B, R) token ids.
        temperature: the sampling temperature the log-probs are taken at.
        with_entropy: also return entropies; they carry gradients as well.
    """
    if logits.dim() != 3 or ids.dim() != 2 or logits.shape[0] != ids.shape[0] \
            or logits.shape[1] < ids.shape[1]:
        raise ValueError(f"selective_logprobs: logits (B, L, V) with L >= R and ids (B, R), got "
                         f"{tuple(logits.shape)} and {tuple(ids.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logp, ent = _SelectiveLogprobs.apply(logits, ids, float(temperature), bool(with_entropy))
    return logp, (ent if with_entropy else None)


def reference_logprobs(logits: Tensor, ids: Tensor, *, temperature: float = 1.0,
                       with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """The straightforward full-vocabulary computation :func:`selective_logprobs` replaces
    (kept for tests and the memory bench)."""
    z = logits[:, : ids.shape[1], :].float()
    if temperature != 1.0:
        z = z / temperature
    logp_all = torch.log_softmax(z, dim=-1)
    logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, ent


def logit_rows_budget(budget_mib: float, model: object) -> int:
    """How many response positions' logits fit in ``budget_mib`` MiB at 4 bytes a logit (at
    least 1): the trainer's second micro-batch bound, next to its token budget.

    During the update a micro-batch holds its logits and their gradient (2 × rows × V in the
    model's dtype) and one ~64 MB float32 chunk; at V = 151,936 and the 1 GiB default that is
    ~1,700 rows, where the token budget alone (16,384) would allow ~10× more.
    """
    vocab = _vocab_size(model)
    return max(1, int(budget_mib * 2**20 // (4 * vocab)))


def _vocab_size(model: object) -> int:
    inner = getattr(model, "module", model)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    config = getattr(inner, "config", None)
    text = getattr(config, "text_config", None) or config
    return int(text.vocab_size)


# ---------------------------------------------------------------------------------------------
# The fused path: never materialise the logits. The model runs with its LM head passed through
# (it returns the final hidden states of the kept columns), and TRL's ChunkedLogProbFunction
# projects only the real response positions, tile by tile, recomputing the tiles in the
# backward. Memory beyond the model: one tile and the (V, H) head gradient; compute: one more
# LM-head pass in the backward than the materialised path.
# ---------------------------------------------------------------------------------------------

#: Vocabulary columns per tile of the fused path (TRL's own default is 32,768; smaller tiles
#: keep its float32 tile buffer of up to 4,096 tokens × this at 128 MiB).
FUSED_VOCAB_TILE = 8192
_HEAD_SCALE_ATTRS = ("final_logit_softcapping", "logit_scale", "output_multiplier",
                     "lm_head_multiplier", "logits_scaling")


def fused_head_unsupported(model: object) -> str | None:
    """Why the fused path cannot run this model (None: it can): it needs the LM head to be a
    plain linear projection applied right after the backbone."""
    inner = getattr(model, "module", model)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        return f"its output embeddings are {type(head).__name__}, not a linear layer"
    config = getattr(inner, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in _HEAD_SCALE_ATTRS:
        if getattr(text, attr, None) not in (None, 1, 1.0):
            return f"its config sets {attr}={getattr(text, attr)!r} (logits are rescaled after the head)"
    return None


class lm_head_passthrough:  # noqa: N801 - a context manager used like a function
    """While active, the model's LM head returns its input: ``model(...).logits`` holds the
    final hidden states of the kept columns. Patched on the module instance, so it works through
    DDP/Accelerate wrappers (their forward reaches the same head)."""

    def __init__(self, model: object) -> None:
        inner = getattr(model, "module", model)
        self.head: torch.nn.Linear = inner.get_output_embeddings()

    def __enter__(self) -> torch.nn.Linear:
        self.head.forward = _identity  # type: ignore[method-assign]
        return self.head

    def __exit__(self, *exc: object) -> None:
        del self.head.forward


def _identity(x: Tensor) -> Tensor:
    return x


def fused_logprobs(hidden: Tensor, head: torch.nn.Linear, ids: Tensor, mask: Tensor, *,
                   temperature: float = 1.0, with_entropy: bool = False
                   ) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) (B, R) of ``ids`` from final hidden states (B, L ≥ R, H): column
    ``k`` of ``hidden`` scores ``ids[:, k]``; positions where ``mask`` is 0 hold 0 and cost
    nothing (only the real response tokens are projected)."""
    from trl.kernels import ChunkedLogProbFunction

    r = ids.shape[1]
    keep = mask.bool()
    h = hidden[:, :r, :][keep]
    outputs = ("entropy",) if with_entropy else ()
    lp, ent, *_ = ChunkedLogProbFunction.apply(h, head.weight, head.bias, ids[keep],
                                               float(temperature), FUSED_VOCAB_TILE, None, 1.0,
                                               outputs)
    logp = lp.new_zeros(keep.shape).masked_scatter(keep, lp)
    entropy = ent.new_zeros(keep.shape).masked_scatter(keep, ent) if with_entropy else None
    return logp, entropy


def resolve_lm_head(mode: str, model: object) -> bool:
    """Whether the trainer uses the fused path for ``mode`` (``fused`` | ``materialized``); a
    model the fused path cannot run falls back to materialized with a warning saying why."""
    if mode != "fused":
        return False
    why = fused_head_unsupported(model)
    if why is not None:
        import warnings

        warnings.warn(f"lm_head=fused: this model cannot use the fused path ({why}); using "
                      "lm_head=materialized", stacklevel=2)
        return False
    return True
