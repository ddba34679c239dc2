"""Which response tokens the policy gradient trains: the whole response, or its action only.

A turn's response is ``<think>…</think><action>…</action>``. The paper trains every response
token on the turn's advantage. Where the reasoning is long and the action a few tokens, that
spreads one scalar of credit over a plan the reward never judged: a won episode reinforces
whatever the think said, a lost one punishes it, and with a few hundred episodes a step the
plan drifts on noise while the move that decided the reward is a small share of the gradient.

``credit`` names the tokens that carry the loss:

============  ================================================================================
``response``  every response token (the paper; the default)
``action``    the tokens after the closing ``</think>``: the ``<action>`` block and the end of
              turn. A response with no ``</think>`` keeps every token, so the format penalty
              still reaches a malformed reply.
============  ================================================================================

The reasoning is still conditioned on, and its weights still move through the shared network;
what ``action`` removes is the direct push on the reasoning's own tokens. The mask multiplies the
response mask, so the loss's token and sequence counts (and the sequence mask of ``*_SM``
presets) are taken over the credited tokens — and the KL term too: the reasoning's tokens lose
their pull towards the reference along with their policy gradient. Measured on the main job's
Sokoban, that made ``action`` worse than ``response`` (the plan drifted; docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["CREDIT_MODES", "THINK_END", "action_start", "apply_credit", "check_credit", "credit_rows",
           "credited_tokens"]

CREDIT_MODES = ("response", "action")
THINK_END = "</think>"


def check_credit(mode: str) -> None:
    if mode not in CREDIT_MODES:
        raise ConfigError(f"credit must be one of {', '.join(CREDIT_MODES)}, got {mode!r}. "
                          "Fix: --credit response (every response token, the paper) or "
                          "--credit action (the tokens after </think>)")


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
    """Write each sample's credited span as ``extra["credit_from"]`` (tokens before it carry no
    loss) for ``mode`` ``action``; nothing for ``response``. Returns ``credit/token_frac``, the
    share of response tokens that carry the loss."""
    check_credit(mode)
    total = sum(len(s.response_ids) for s in samples)
    if mode == "response" or not samples:
        return {}
    credited = 0
    for s in samples:
        start = action_start(s.response_ids, tokenizer)
        if start is None or start >= len(s.response_ids):
            start = 0  # no reasoning closed (or nothing after it): train the whole reply
        s.extra["credit_from"] = start
        credited += len(s.response_ids) - start
    return {"credit/token_frac": credited / max(1, total)}


def credit_rows(samples: Sequence[Any], idx: Sequence[int], width: int):
    """(len(idx), width) 0/1 mask of the credited tokens of ``samples[idx]``."""
    import torch

    out = torch.zeros(len(idx), width)
    for row, i in enumerate(idx):
        s = samples[i]
        out[row, int(s.extra.get("credit_from", 0)): len(s.response_ids)] = 1.0
    return out


def credited_tokens(sample: Any) -> int:
    return len(sample.response_ids) - int(sample.extra.get("credit_from", 0))
