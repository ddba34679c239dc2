"""Which response tokens the policy gradient trains: the whole response, or its action only.

A turn's response is ``<think>…</think><action>…</action>``. The paper trains every response
token on the turn's advantage. Where the reasoning is long and the action a few tokens, that
spreads one scalar of credit over a plan the reward never judged: a won episode reinforces
whatever the think said, a lost one punishes it, and with a few hundred episodes a step the
plan drifts on noise while the move that decided the reward is a small share of the gradient.

``credit`` names the tokens that carry the loss:

==============  ==============================================================================
``response``    every response token (the paper; the default)
``action``      the tokens after the closing ``</think>`` — the ``<action>`` block and the end
                of turn — for every term: the turn is trained as if its reasoning were prompt
                (policy gradient, KL, entropy and the loss's token counts over the action)
``action-pg``   the policy gradient on those tokens only, as a per-token weight (0 on the
                reasoning); the KL to the reference, the entropy bonus and the token counts
                keep the whole response, so the reasoning is held to the reference while the
                move learns from the reward
==============  ==============================================================================

A response with no ``</think>`` keeps every token, so the format penalty still reaches a
malformed reply. The reasoning is still conditioned on, and its weights still move through the
shared network; what these modes remove is the direct push of the advantage on the reasoning's
own tokens. ``action`` multiplies the response mask, so the sequence mask of ``*_SM`` presets and
GSPO's sequence ratio are taken over the action too — and the KL term goes with it: the
reasoning's tokens lose their pull towards the reference. Measured on the main job's Sokoban,
that made ``action`` worse than ``response`` (the plan drifted; docs/algorithms.md), which is
what ``action-pg`` keeps. (Zero-weighted tokens carry no policy gradient under GSPO/SAMPO
either: their per-token term is ``s_i · π_t/sg(π_t)``, whose gradient is the token's own.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M

__all__ = ["CREDIT_MODES", "THINK_END", "action_start", "apply_credit", "check_credit",
           "counted_tokens", "credit_masks", "credit_rows"]

CREDIT_MODES = ("response", "action", "action-pg")
THINK_END = "</think>"


def check_credit(mode: str) -> None:
    if mode not in CREDIT_MODES:
        raise ConfigError(f"credit must be one of {', '.join(CREDIT_MODES)}, got {mode!r}. "
                          "Fix: --credit response (every response token, the paper), "
                          "--credit action (the tokens after </think>, every loss term) or "
                          "--credit action-pg (the policy gradient on those only)")


def action_start(response_ids: Sequence[int], tokenizer: Any, marker: str = THINK_END) -> int | None:
    """Index of the first token after the one that completes ``marker``; None if the decoded
    response never holds it. Found by bisection on decoded prefixes: a token may carry part of
    the marker, so the boundary is the token whose prefix first contains all of it."""
    ids = list(response_ids)
    if marker not in tokenizer.decode(ids, skip_special_tokens=False):
        return None
    lo, hi = 1, len(ids)  # smallest k with the marker inside decode(ids[:k])
    while lo < hi:
        mid = (lo + hi) // 2
        if marker in tokenizer.decode(ids[:mid], skip_special_tokens=False):
            hi = mid
        else:
            lo = mid + 1
    return lo


def apply_credit(samples: Sequence[Any], tokenizer: Any, mode: str) -> dict[str, float]:
    """Write each sample's credited span as ``credit_from`` (tokens before it carry no
    policy gradient) for the action modes; nothing for ``response``. Returns
    ``credit/token_frac``, the share of response tokens that carry the policy gradient."""
    check_credit(mode)
    if mode == "response" or not samples:
        return {}
    total = credited = 0
    for s in samples:
        start = action_start(s.response_ids, tokenizer)
        if start is None or start >= len(s.response_ids):
            start = 0  # no reasoning closed (or nothing after it): train the whole reply
        s.credit_from = start
        credited += len(s.response_ids) - start
        total += len(s.response_ids)
    return {M.CREDIT_TOKEN_FRAC: credited / max(1, total)}


def credit_rows(samples: Sequence[Any], idx: Sequence[int], width: int):
    """(len(idx), width) 0/1 mask of the credited tokens of ``samples[idx]``."""
    import torch

    out = torch.zeros(len(idx), width)
    for row, i in enumerate(idx):
        s = samples[i]
        out[row, s.credit_from: len(s.response_ids)] = 1.0
    return out


def counted_tokens(sample: Any, mode: str) -> int:
    """The sample's tokens in the loss's denominators: the credited ones under ``action``,
    the whole response otherwise."""
    if mode == "action":
        return len(sample.response_ids) - sample.credit_from
    return len(sample.response_ids)


def credit_masks(mode: str, samples: Sequence[Any], idx: Sequence[int], response_mask: Any,
                 loss_kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The micro-batch's response mask and ``policy_loss`` keyword arguments under ``mode``:
    ``action`` narrows the mask, ``action-pg`` multiplies the per-token policy-gradient weights
    (the rollout correction's, if any) by the credited tokens."""
    if mode == "response":
        return response_mask, loss_kwargs
    rows = credit_rows(samples, idx, response_mask.shape[1]).to(response_mask)
    if mode == "action":
        return response_mask * rows, loss_kwargs
    weights = loss_kwargs.get("token_weights")
    return response_mask, {**loss_kwargs, "token_weights": rows if weights is None else weights * rows}
