"""Shared-prefix SFT: the fast single-process engine of ``arlgym-sft train --engine prefix``.

Every prompt of an env starts with the same long instruction (the paper's template: ~250 of the
~330–510 tokens of a Sokoban prompt). TRL's SFTTrainer runs the model over that instruction once
per sample. Here each batch runs it **once**: the common prefix goes through the model with a
KV cache (gradients flow through it), the cache is broadcast to the batch, and only each
sample's own suffix (rest of the prompt + response) is computed per sample. The LM head is only
applied where a response token is predicted. The loss is the same token-mean cross-entropy over
assistant tokens as TRL's ``assistant_only_loss``; only the compute differs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arlgym.errors import ConfigError
from arlgym.models import load_model_and_tokenizer

__all__ = ["TokenizedSample", "tokenize_samples", "common_prefix_length", "train_prefix_sft"]


@dataclass
class TokenizedSample:
    prompt_ids: list[int]
    response_ids: list[int]


#: how far past the time budget a run may go: a run whose epochs fit within budget × (1 + slack)
#: keeps its full step count and schedule, so it does not depend on the machine's pace
BUDGET_SLACK = 0.1


def budget_horizon(step: int, elapsed_s: float, per_step_s: float, budget_s: float, total: int,
                   current: int) -> int:
    """The cosine horizon (in steps) after ``step`` steps took ``elapsed_s``, at a pace of
    ``per_step_s`` seconds a step now.

    The run's end is projected as elapsed time plus the remaining steps at the current pace
    (the caller measures the pace after the first steps, which are slow: allocation, warm-up,
    a busy machine at start). The horizon is unchanged while that end stays within the budget
    plus :data:`BUDGET_SLACK` — so a run that fits is bit-for-bit reproducible, its schedule never
    nudged by timing noise; otherwise it is shrunk to the steps the rest of the budget allows.
    """
    if elapsed_s + per_step_s * (current - step) <= budget_s * (1 + BUDGET_SLACK):
        return current
    return max(step + 1, min(total, step + int(max(0.0, budget_s - elapsed_s) / per_step_s)))


def tokenize_samples(samples: list[dict[str, Any]], tokenizer: Any) -> list[TokenizedSample]:
    """Split each chat sample into prompt ids (with the generation prompt) and response ids
    (the assistant turn's tokens, end-of-turn included), exactly as the chat template renders
    them in full."""
    out = []
    for sample in samples:
        messages = sample["messages"]
        if len(messages) < 2 or messages[-1]["role"] != "assistant":
            raise ConfigError("each SFT sample must end with an assistant message")
        full = _ids(tokenizer.apply_chat_template(messages, tokenize=True))
        prompt = _ids(tokenizer.apply_chat_template(messages[:-1], tokenize=True,
                                                    add_generation_prompt=True))
        if full[: len(prompt)] != prompt:
            raise ConfigError("the chat template does not render the prompt as a prefix of the "
                              "full conversation; use --engine trl for this model")
        response = full[len(prompt):]
        # drop trailing template whitespace after the end-of-turn token (e.g. "\n")
        eos = tokenizer.eos_token_id
        if eos in response:
            response = response[: response.index(eos) + 1]
        out.append(TokenizedSample(prompt, response))
    return out


def _ids(encoded: Any) -> list[int]:
    if hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def common_prefix_length(samples: list[TokenizedSample]) -> int:
    """Length of the longest token prefix shared by every prompt, leaving ≥ 1 prompt token."""
    first = samples[0].prompt_ids
    n = min(len(s.prompt_ids) for s in samples) - 1
    for s in samples[1:]:
        ids = s.prompt_ids
        k = 0
        while k < n and ids[k] == first[k]:
            k += 1
        n = k
        if n == 0:
            break
    return max(0, n)


def _batch_loss(model: Any, prefix: torch.Tensor, batch: list[TokenizedSample]) -> tuple[torch.Tensor, int]:
    """Token-mean cross-entropy of the responses of ``batch`` given the shared ``prefix``."""
    L = prefix.shape[1]
    b = len(batch)
    suffixes = [s.prompt_ids[L:] + s.response_ids for s in batch]
    width = max(len(x) for x in suffixes)
    pad = 0
    ids = torch.full((b, width), pad, dtype=torch.long)
    mask = torch.zeros((b, L + width), dtype=torch.long)
    mask[:, :L] = 1
    targets = torch.full((b, width), -100, dtype=torch.long)
    for i, (s, suf) in enumerate(zip(batch, suffixes, strict=True)):
        ids[i, : len(suf)] = torch.tensor(suf)
        mask[i, L : L + len(suf)] = 1
        start = len(s.prompt_ids) - L  # first response token's index in the suffix
        # hidden state at j predicts token j+1
        targets[i, start - 1 : len(suf) - 1] = torch.tensor(s.response_ids)
    backbone = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    cache = None
    if L:
        out = backbone(input_ids=prefix, use_cache=True)
        cache = out.past_key_values
        for layer in cache.layers:
            layer.keys = layer.keys.expand(b, -1, -1, -1)
            layer.values = layer.values.expand(b, -1, -1, -1)
    positions = torch.arange(L, L + width).unsqueeze(0).expand(b, -1)
    hidden = backbone(input_ids=ids, attention_mask=mask, position_ids=positions,
                      past_key_values=cache, use_cache=cache is not None).last_hidden_state
    sel = targets != -100
    logits = model.get_output_embeddings()(hidden[sel]).float()
    loss = torch.nn.functional.cross_entropy(logits, targets[sel])
    return loss, int(sel.sum())


def train_prefix_sft(cfg: Any, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Train ``cfg.model`` (an :class:`~arlgym.sft.train.SFTRunConfig`) on ``samples``."""
    from tqdm.auto import tqdm

    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model_and_tokenizer(cfg.model, seed=cfg.seed)
    model.train()
    data = tokenize_samples(samples, tokenizer)
    data = [d for d in data if len(d.prompt_ids) + len(d.response_ids) <= cfg.max_length]
    if not data:
        raise ConfigError(f"every sample is longer than --max-length {cfg.max_length}")
    L = common_prefix_length(data)
    prefix = torch.tensor([data[0].prompt_ids[:L]], dtype=torch.long)
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.epochs * steps_per_epoch)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    # With a time budget the number of steps may not fit: from step 50 on the horizon is
    # re-estimated from the pace measured since step 10 (see budget_horizon), so the cosine
    # decay ends when the budget does instead of being cut off half way.
    horizon = {"total": total}
    warm = max(1, int(cfg.warmup_ratio * total))

    def lr_factor(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        if cfg.lr_scheduler != "cosine":
            return 1.0
        progress = min(1.0, (s - warm) / max(1, horizon["total"] - warm))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    gen = torch.Generator().manual_seed(cfg.seed)
    log: list[dict[str, float]] = []
    started = time.perf_counter()
    pace_from: tuple[int, float] | None = None  # (step, time) where the pace is measured from
    step = 0
    bar = tqdm(total=total, desc="sft (shared prefix)", disable=not cfg.progress)
    running = 0.0
    stop = False
    while step < total and not stop:
        order = torch.randperm(len(data), generator=gen).tolist()
        # group similar suffix lengths into a batch (less padding), then shuffle the batches
        chunk = cfg.batch_size * 32
        batches = []
        for c in range(0, len(order), chunk):
            part = sorted(order[c : c + chunk], key=lambda i: len(data[i].prompt_ids) + len(data[i].response_ids))
            batches += [part[k : k + cfg.batch_size] for k in range(0, len(part), cfg.batch_size)]
        batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
        for idx in batches:
            loss, _ = _batch_loss(model, prefix, [data[i] for i in idx])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == 10:
                pace_from = (step, time.perf_counter())
            if cfg.time_budget_minutes and step % 50 == 0 and pace_from is not None:
                # re-estimated as it goes: step time drifts with sequence lengths and load
                now = time.perf_counter()
                pace = (now - pace_from[1]) / (step - pace_from[0])
                horizon["total"] = budget_horizon(step, now - started, pace,
                                                  cfg.time_budget_minutes * 60, total, horizon["total"])
            running += float(loss.detach())
            if step % cfg.logging_steps == 0 or step == total:
                n = cfg.logging_steps if step % cfg.logging_steps == 0 else step % cfg.logging_steps
                log.append({"step": step, "loss": running / n, "lr": sched.get_last_lr()[0],
                            "seconds": time.perf_counter() - started})
                bar.set_postfix(loss=f"{running / n:.3f}")
                running = 0.0
            bar.update(1)
            if step >= total or (cfg.time_budget_minutes and time.perf_counter() - started
                                 > cfg.time_budget_minutes * 60 * (1 + BUDGET_SLACK)):
                stop = True
                break
    bar.close()
    elapsed = time.perf_counter() - started
    out = Path(cfg.output_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    stats = {"engine": "prefix", "model": cfg.model, "samples": len(data), "shared_prefix_tokens": L,
             "mean_tokens_per_sample": sum(len(d.prompt_ids) + len(d.response_ids) for d in data) / len(data),
             "steps": step, "planned_steps": total, "train_loss": log[-1]["loss"] if log else float("nan"),
             "seconds": elapsed, "epochs_done": step / steps_per_epoch, "log": log}
    (out / "sft_stats.json").write_text(json.dumps(stats, indent=2))
    return stats
