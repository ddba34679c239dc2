"""Turn samples -> padded tensors -> per-token log-probs of the sampled responses.

The trainer trains on the exact token ids the rollout sampled (token-in/token-out). A batch is
laid out with prompts left-padded and responses right-padded, so every response starts at the
same column ``P`` (the longest prompt)::

    [pad pad p p p p | r r r pad]
    [pad p p p p p p | r r pad pad]

The model then only needs logits for the last ``R + 1`` columns (``logits_to_keep``), which
saves the LM head on the whole prompt, and position ids are counted from the first real token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from arlgym.policies.hf import TOKEN_ALIGNED_KEYS, batch_image_inputs
from arlgym.policies.special_tokens import truncate_at
from arlgym.rl import metrics as M
from arlgym.rl.logprobs import fused_logprobs, lm_head_passthrough, selective_logprobs

__all__ = [
    "TokenSample",
    "PackedBatch",
    "SharedPromptBatch",
    "pack",
    "pack_shared",
    "prompt_groups",
    "response_logprobs",
    "rollout_mismatch_metrics",
    "shared_prompt_logprobs",
    "token_samples",
    "uses_mrope",
]


@dataclass
class TokenSample:
    """One training sample = one turn of one trajectory, with its tokens (docs/architecture.md, "Data flow").

    It carries every field :func:`arlgym.rl.compute_advantages` reads, with the meanings of
    :mod:`arlgym.rl.advantages`: ``step_reward`` is the env reward of the turn (task reward −
    format penalty), ``episode_return`` the trajectory's summed env reward, ``format_penalty``
    the penalty inside ``step_reward``. ``old_logprobs``/``ref_logprobs`` are filled by the
    trainer; ``rollout_logprobs`` are the sampler's own. ``image_inputs`` (vision turns) are the
    exact image tensors the sampler's model read with ``prompt_ids`` (batch dimension 1).
    """

    uid: str
    traj_id: str
    step: int
    anchor: str
    step_reward: float
    episode_return: float
    format_penalty: float
    format_valid: bool
    action_valid: bool
    won: bool
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float] | None = None
    old_logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    entropy: float | None = None
    image_inputs: dict[str, Any] | None = None
    #: Learner updates between the weights that sampled this turn and the weights it trains
    #: (``async_rollouts``; 0 on the synchronous path). Non-zero rules out reusing the sampler's
    #: log-probs as the old ones (:func:`arlgym.rl.update.old_from_rollout`).
    staleness: int = 0
    #: The rollout correction's per-token weights (:mod:`arlgym.rl.correction`), one per
    #: response token; None when no correction is applied.
    rollout_weight: Tensor | None = None
    #: The first response token the credit hook credits (:mod:`arlgym.rl.credit`): the loss
    #: masks out the tokens before it; 0 credits the whole response.
    credit_from: int = 0
    #: Whether the response was cut at a VLM image-slot token (:func:`token_samples`).
    cut_at_image_slot: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def token_samples(trajectories: Sequence[Any], *,
                  stop_ids: frozenset[int] = frozenset()) -> list[TokenSample]:
    """Flatten :class:`~arlgym.rollout.Trajectory` objects into token samples.

    Turns whose response has no token ids (scripted policies) cannot be trained on and raise.
    ``stop_ids``: a VLM's image-slot token ids; a response holding one is trained only up to it
    (``cut_at_image_slot``; :mod:`arlgym.policies.special_tokens`, rule 2), since the
    model would otherwise look for an image that is not there.
    """
    out: list[TokenSample] = []
    for traj in trajectories:
        ret = float(traj.episode_return)
        for s in traj.steps:
            if s.prompt_token_ids is None or s.response_token_ids is None:
                raise ValueError(
                    f"trajectory {traj.traj_id} step {s.step} has no token ids; RL needs a model "
                    "policy that returns prompt/response token ids (hf:, vllm:)"
                )
            response, logprobs, cut = truncate_at(s.response_token_ids, s.logprobs, stop_ids)
            out.append(TokenSample(
                uid=s.uid, traj_id=s.traj_id, step=s.step, anchor=s.anchor,
                step_reward=float(s.step_reward), episode_return=ret,
                format_penalty=float(s.format_penalty), format_valid=bool(s.format_valid),
                action_valid=bool(s.action_valid), won=bool(traj.won),
                prompt_ids=list(s.prompt_token_ids), response_ids=response,
                rollout_logprobs=logprobs,
                image_inputs=getattr(s, "image_inputs", None),
                cut_at_image_slot=bool(cut),
            ))
    return out


def rollout_mismatch_metrics(samples: Sequence[TokenSample]) -> dict[str, float]:
    """How far the sampler's log-probs are from the trainer's recomputed ``old_logprobs``.

    Both should be ``log π_θ(token | context)`` at the rollout temperature for the same θ. HF
    generate on the live model gives gaps of float rounding (~1e-6); a colocated vLLM engine
    gives its kernel/precision gap (bf16: ~1e-2). A gap that jumps after an update means the
    engine samples from stale weights (a broken weight sync) — the check runs every step for free.
    Samples without sampler log-probs (scripted policies, API models) are skipped.
    """
    pairs = [
        (torch.as_tensor(s.rollout_logprobs, dtype=torch.float32), s.old_logprobs.float())
        for s in samples
        if s.rollout_logprobs is not None and s.old_logprobs is not None
        and len(s.rollout_logprobs) == len(s.old_logprobs) and len(s.rollout_logprobs)
    ]
    if not pairs:
        return {}
    sampler = torch.cat([a for a, _ in pairs])
    trainer = torch.cat([b for _, b in pairs])
    d = (sampler - trainer).abs()
    p_diff = (sampler.exp() - trainer.exp()).abs()
    return {M.LOGPROB_DIFF_MEAN: float(d.mean()),
            M.LOGPROB_DIFF_MAX: float(d.max()),
            M.PROB_DIFF_MEAN: float(p_diff.mean())}


@dataclass
class PackedBatch:
    """Tensors of a micro-batch. Shapes: ``input_ids``/``attention_mask``/``position_ids``
    (B, P + R); ``response_ids``/``response_mask`` (B, R). ``image_inputs``: the samples' image
    tensors batched (vision turns; None for text)."""

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    response_ids: Tensor
    response_mask: Tensor
    prompt_width: int
    image_inputs: dict[str, Tensor] | None = None

    @property
    def response_width(self) -> int:
        return self.response_ids.shape[1]


def pack(samples: Sequence[TokenSample], pad_id: int, device: torch.device | str = "cpu") -> PackedBatch:
    """Left-pad prompts and right-pad responses so that all responses start at one column."""
    if not samples:
        raise ValueError("pack() needs at least one sample")
    p_max = max(len(s.prompt_ids) for s in samples)
    r_max = max(1, max(len(s.response_ids) for s in samples))
    b = len(samples)
    input_ids = torch.full((b, p_max + r_max), pad_id, dtype=torch.long)
    attn = torch.zeros((b, p_max + r_max), dtype=torch.long)
    resp = torch.full((b, r_max), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((b, r_max), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, p_max - p : p_max] = torch.tensor(s.prompt_ids)
        attn[i, p_max - p : p_max + r] = 1
        if r:
            input_ids[i, p_max : p_max + r] = torch.tensor(s.response_ids)
            resp[i, :r] = torch.tensor(s.response_ids)
            resp_mask[i, :r] = 1.0
    position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)
    return PackedBatch(input_ids.to(device), attn.to(device), position_ids.to(device),
                       resp.to(device), resp_mask.to(device), p_max,
                       _pack_images(samples, p_max, r_max, device))


def _pack_images(samples: Sequence[TokenSample], p_max: int, r_max: int,
                 device: torch.device | str) -> dict[str, Tensor] | None:
    """The image inputs of a micro-batch laid out like :func:`pack`'s ids (or None: text)."""
    with_images = [s.image_inputs is not None for s in samples]
    if not any(with_images):
        return None
    if not all(with_images):
        raise ValueError("pack(): a micro-batch mixes turns with and without images; vision "
                         "envs give every turn an image")
    out = batch_image_inputs([s.image_inputs for s in samples], total=p_max, left=True)
    for key in TOKEN_ALIGNED_KEYS:  # responses are text: zero type ids after the prompt
        if key in out:
            out[key] = torch.nn.functional.pad(out[key], (0, r_max))
    return {k: v.to(device) for k, v in out.items()}


def uses_mrope(model: Any) -> bool:
    """Whether the model computes its own multimodal rotary positions from the ids and image
    grid (Qwen2-VL/2.5-VL/3-VL: ``get_rope_index``): it must get ``position_ids=None``."""
    inner = getattr(model, "module", model)  # DDP
    return any(hasattr(m, "get_rope_index") for m in (inner, getattr(inner, "model", None))
               if m is not None)


def response_logprobs(
    model: Any,
    batch: PackedBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    fused: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (B, R) of the response tokens under ``model`` (and token entropies (B, R)).

    ``log_softmax(logits / temperature)``, the distribution the sampler drew from (verl and
    ARLArena divide by the rollout temperature the same way). Gradients flow when called
    outside ``torch.no_grad()``. Padding positions hold 0. ``fused``: never materialise the
    logits (:func:`arlgym.rl.logprobs.fused_logprobs`); else the response columns' logits are
    materialised in the model's dtype (:func:`arlgym.rl.logprobs.selective_logprobs`).
    """
    r = batch.response_width
    images = batch.image_inputs or {}
    # Vision turns: the image tensors go in with the ids; a Qwen-VL-style model derives its 3-D
    # rotary positions from ids, image grid and attention mask itself (as generate does).
    positions = None if images and uses_mrope(model) else batch.position_ids
    def run() -> Any:
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                     position_ids=positions, logits_to_keep=r + 1, use_cache=False, **images)

    # column P-1+k predicts response token k
    return _head_logprobs(model, run, batch.response_ids, batch.response_mask,
                          temperature=temperature, with_entropy=with_entropy, fused=fused)


def _head_logprobs(model: Any, run: Any, response_ids: Tensor, response_mask: Tensor, *,
                   temperature: float, with_entropy: bool, fused: bool
                   ) -> tuple[Tensor, Tensor | None]:
    """``run()`` is the model call whose output columns ``0..R-1`` score ``response_ids``."""
    if fused:
        with lm_head_passthrough(model) as head:
            hidden = run().logits
        return fused_logprobs(hidden, head, response_ids, response_mask,
                              temperature=temperature, with_entropy=with_entropy)
    logp, entropy = selective_logprobs(run().logits, response_ids, temperature=temperature,
                                       with_entropy=with_entropy)
    logp = logp * response_mask
    if entropy is not None:
        entropy = entropy * response_mask
    return logp, entropy


# ---------------------------------------------------------------------------------------------
# Turns that share a prompt. Every group's first turn shows the G members the same prompt (and
# later turns coincide whenever members reach the same state with the same history), so running
# that prompt once and letting each member's response attend to its keys/values saves
# (G - 1) * P tokens of forward and backward work per group. The gradient flows through the
# shared keys/values, so loss and gradients equal the per-sample computation (tested).
# ---------------------------------------------------------------------------------------------


def prompt_groups(samples: Sequence[TokenSample], idx: Sequence[int]) -> list[list[int]]:
    """Indices of ``idx`` grouped by identical prompt ids, in first-seen order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in idx:
        groups.setdefault(tuple(samples[i].prompt_ids), []).append(i)
    return list(groups.values())


@dataclass
class SharedPromptBatch:
    """Tensors for :func:`shared_prompt_logprobs`.

    ``prefix_*`` (G, P - 1): each distinct prompt but its last token, left-padded.
    ``member_group`` (B,): which prefix row member ``b`` continues.
    ``suffix_*`` (B, 1 + R): the prompt's last token, then the response, right-padded — the
    hidden state at suffix column ``k`` predicts response token ``k``.
    """

    prefix_ids: Tensor
    prefix_mask: Tensor
    prefix_positions: Tensor
    member_group: Tensor
    suffix_ids: Tensor
    suffix_mask: Tensor
    suffix_positions: Tensor
    response_ids: Tensor
    response_mask: Tensor

    @property
    def response_width(self) -> int:
        return self.response_ids.shape[1]

    @property
    def num_tokens(self) -> int:
        """Token positions the model runs (the padded area of both forwards)."""
        return self.prefix_ids.numel() + self.suffix_ids.numel()


def pack_shared(groups: Sequence[Sequence[TokenSample]], pad_id: int,
                device: torch.device | str = "cpu") -> SharedPromptBatch:
    """Lay out groups of samples whose members share one prompt (every prompt ≥ 2 tokens)."""
    if not groups or any(not g for g in groups):
        raise ValueError("pack_shared() needs non-empty groups")
    prompts = [g[0].prompt_ids for g in groups]
    if any(len(p) < 2 for p in prompts):
        raise ValueError("pack_shared() needs prompts of at least 2 tokens")
    members = [s for g in groups for s in g]
    p_max = max(len(p) for p in prompts) - 1
    r_max = max(1, max(len(s.response_ids) for s in members))
    g_n, b = len(groups), len(members)
    prefix = torch.full((g_n, p_max), pad_id, dtype=torch.long)
    prefix_mask = torch.zeros((g_n, p_max), dtype=torch.long)
    for k, p in enumerate(prompts):
        n = len(p) - 1
        prefix[k, p_max - n:] = torch.tensor(p[:-1])
        prefix_mask[k, p_max - n:] = 1
    member_group = torch.tensor([k for k, g in enumerate(groups) for _ in g], dtype=torch.long)
    suffix = torch.full((b, 1 + r_max), pad_id, dtype=torch.long)
    suffix_mask = torch.zeros((b, 1 + r_max), dtype=torch.long)
    suffix_pos = torch.zeros((b, 1 + r_max), dtype=torch.long)
    resp = torch.full((b, r_max), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((b, r_max), dtype=torch.float32)
    for row, s in enumerate(members):
        r = len(s.response_ids)
        suffix[row, : 1 + r] = torch.tensor(s.prompt_ids[-1:] + s.response_ids)
        suffix_mask[row, : 1 + r] = 1
        suffix_pos[row] = torch.arange(len(s.prompt_ids) - 1, len(s.prompt_ids) + r_max)
        if r:
            resp[row, :r] = torch.tensor(s.response_ids)
            resp_mask[row, :r] = 1.0
    prefix_pos = (prefix_mask.cumsum(dim=1) - 1).clamp(min=0)
    dev = device
    return SharedPromptBatch(prefix.to(dev), prefix_mask.to(dev), prefix_pos.to(dev),
                             member_group.to(dev), suffix.to(dev), suffix_mask.to(dev),
                             suffix_pos.to(dev), resp.to(dev), resp_mask.to(dev))


def shared_prompt_logprobs(
    model: Any,
    batch: SharedPromptBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    fused: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Like :func:`response_logprobs`, running each distinct prompt once.

    Two calls of ``model`` (also when it is DDP-wrapped): the prefixes with ``use_cache`` (LM
    head on one column only), then every member's suffix on top of its group's cached
    keys/values, gathered per member. Gradients flow through the cache.
    """
    out = model(input_ids=batch.prefix_ids, attention_mask=batch.prefix_mask,
                position_ids=batch.prefix_positions, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, batch.member_group)
        layer.values = layer.values.index_select(0, batch.member_group)
    mask = torch.cat([batch.prefix_mask.index_select(0, batch.member_group), batch.suffix_mask], dim=1)
    r = batch.response_width

    def run() -> Any:
        return model(input_ids=batch.suffix_ids, attention_mask=mask,
                     position_ids=batch.suffix_positions, past_key_values=cache, use_cache=True,
                     logits_to_keep=r + 1)

    return _head_logprobs(model, run, batch.response_ids, batch.response_mask,
                          temperature=temperature, with_entropy=with_entropy, fused=fused)
