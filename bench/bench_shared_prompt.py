"""Training cost of prompts shared by a group's turns: ``share_prompts`` on vs off (issue 5).

Every group's first turn shows its G members one prompt (and later turns coincide whenever
members reach the same state with the same history). With ``share_prompts`` (the default) the
trainer runs such a prompt once and lets each member's response attend to its keys/values;
without it every member pays for the prompt again. This script times the trainer's own two
passes over the same batch with the option on and off:

* **old log-probs** — ``Trainer._fill_logprobs`` (no-grad forward, micro-batched);
* **update** — ``Trainer._update`` (forward + backward with the GSPO loss, grad clip, AdamW
  step with lr 0 so the weights do not move between runs and both modes see the same model).

and checks the results agree: max |Δ| of the old log-probs, of the loss (summed over
micro-batches), of the gradient norm and of every gradient element (taken just before the
optimizer step). Advantages for the update are seeded N(0, 1) draws rather than the (often
all-zero) group advantages of an untrained model, so the gradients compared are not zero.

Batches:
* ``rollout`` — a real rollout of ``--tasks`` Sokoban groups × ``--group-size`` with
  ``--model``, up to ``--turns`` turns per episode (all turns: only prompts that coincide
  share). How often later turns coincide depends on the policy: the untrained ``tiny`` model
  writes no valid action, so every turn is a no-op and a group's members keep seeing one
  prompt; a behaviour-cloned checkpoint (``--model <dir>``) spreads them out;
* ``first turns`` — the turn-0 samples of that rollout (the single-turn case);
* ``long prompts`` — synthetic groups with prompts of 300–500 tokens and responses of 16–64
  tokens (the shape of a paper-scale template, where the prompt dominates).

Times are the best of ``--repeats`` runs per mode (modes alternate, so both see the same load).
"token positions" is what each mode feeds the model: every sample's prompt + response without
sharing, each distinct prompt once + every response with it.

    python bench/bench_shared_prompt.py [--tasks 8] [--group-size 8] [--turns 5]
                                        [--long-groups 8] [--repeats 2] [--model tiny]
                                        [--threads 1] [--micro-batch-tokens 16384]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from arlgym.rl.batching import TokenSample, prompt_groups, token_samples  # noqa: E402
from arlgym.rl.config import TrainConfig  # noqa: E402
from arlgym.rl.trainer import Trainer  # noqa: E402


def synthetic_batch(n_groups: int, group_size: int, vocab_size: int, seed: int = 0,
                    prompt_len: tuple[int, int] = (300, 500),
                    response_len: tuple[int, int] = (16, 64)) -> list[TokenSample]:
    """Groups of ``group_size`` samples with one random prompt per group, random responses."""
    g = torch.Generator().manual_seed(seed)

    def ids(lo: int, hi: int) -> list[int]:
        n = int(torch.randint(lo, hi + 1, (1,), generator=g))
        return torch.randint(3, vocab_size, (n,), generator=g).tolist()

    out = []
    for k in range(n_groups):
        prompt = ids(*prompt_len)
        for m in range(group_size):
            out.append(TokenSample(uid=f"g{k}", traj_id=f"g{k}-m{m}", step=0, anchor=f"a{k}",
                                   step_reward=0.0, episode_return=0.0, format_penalty=0.0,
                                   format_valid=True, action_valid=True, won=False,
                                   prompt_ids=prompt, response_ids=ids(*response_len)))
    return out


def token_positions(samples: list[TokenSample]) -> tuple[int, int]:
    """(positions without sharing, positions with each distinct prompt run once)."""
    responses = sum(len(s.response_ids) for s in samples)
    plain = sum(len(s.prompt_ids) for s in samples) + responses
    shared = sum(len(samples[g[0]].prompt_ids) for g in prompt_groups(samples, range(len(samples))))
    return plain, shared + responses


def _spy(trainer: Trainer, store: dict[str, Any]) -> None:
    """Record the objective and the gradients of each ``Trainer._update``.

    ``store["loss"]`` sums what goes into ``backward`` — each micro-batch's loss is normalised
    by the mini-batch totals, so the sum is the mini-batch loss whatever the micro-batch split
    (the logged ``loss`` metric is a token-weighted mean of those parts, which does depend on
    the split). ``store["grad"]`` is every gradient right before the optimizer step.
    """
    step, backward = trainer.optimizer.step, trainer.accelerator.backward

    def snapshot_then_step(*a: Any, **k: Any) -> Any:
        store["grad"] = torch.cat([p.grad.detach().flatten().clone() for p in trainer.model.parameters()
                                   if p.grad is not None])
        return step(*a, **k)

    def summing_backward(loss: torch.Tensor, **k: Any) -> Any:
        store["loss"] = store.get("loss", 0.0) + float(loss.detach())
        return backward(loss, **k)

    trainer.optimizer.step = snapshot_then_step
    trainer.accelerator.backward = summing_backward


def measure(trainer: Trainer, store: dict[str, Any], samples: list[TokenSample], repeats: int,
            seed: int = 0) -> dict[bool, dict[str, Any]]:
    """Times of both passes per mode (``repeats`` each) and each mode's results.

    ``store`` is the dict that :func:`_spy` fills for ``trainer``.
    """
    adv = torch.randn(len(samples), generator=torch.Generator().manual_seed(seed))
    res: dict[bool, dict[str, Any]] = {m: {"old_s": [], "update_s": []} for m in (True, False)}
    for r in range(repeats):
        for share in ((True, False) if r % 2 == 0 else (False, True)):
            trainer.cfg.share_prompts = share
            t = time.perf_counter()
            trainer._fill_logprobs(samples, need_entropy=False)
            res[share]["old_s"].append(time.perf_counter() - t)
            res[share]["old_logp"] = [s.old_logprobs.clone() for s in samples]
            store["loss"] = 0.0
            t = time.perf_counter()
            metrics = trainer._update(samples, adv)
            res[share]["update_s"].append(time.perf_counter() - t)
            res[share]["loss"] = store["loss"]
            res[share]["grad_norm"] = metrics["grad_norm"]
            res[share]["grad"] = store["grad"]
    trainer.cfg.share_prompts = True
    return res


def report(name: str, samples: list[TokenSample], res: dict[bool, dict[str, Any]]) -> None:
    plain, shared = token_positions(samples)
    distinct = len(prompt_groups(samples, range(len(samples))))
    mean_p = sum(len(s.prompt_ids) for s in samples) / len(samples)
    mean_r = sum(len(s.response_ids) for s in samples) / len(samples)
    on, off = res[True], res[False]
    lp = max(float((a - b).abs().max()) for a, b in zip(on["old_logp"], off["old_logp"], strict=True))
    print(f"\n{name}: {len(samples)} samples, {distinct} distinct prompts, mean prompt {mean_p:.0f} + "
          f"response {mean_r:.0f} tokens; token positions {plain:,} unshared vs {shared:,} shared "
          f"({plain / shared:.2f}x fewer)")
    print(f"  {'pass':14s} {'unshared s':>11s} {'shared s':>10s} {'speed-up':>9s}")
    for label, key in (("old log-probs", "old_s"), ("update", "update_s")):
        a, b = min(off[key]), min(on[key])
        print(f"  {label:14s} {a:11.3f} {b:10.3f} {a / b:8.2f}x")
    a = min(off["old_s"]) + min(off["update_s"])
    b = min(on["old_s"]) + min(on["update_s"])
    print(f"  {'both':14s} {a:11.3f} {b:10.3f} {a / b:8.2f}x")
    print(f"  equality: max|Δ old log-prob| {lp:.2e}, |Δ loss| {abs(on['loss'] - off['loss']):.2e}, "
          f"|Δ grad norm| {abs(on['grad_norm'] - off['grad_norm']):.2e}, "
          f"max|Δ grad| {float((on['grad'] - off['grad']).abs().max()):.2e} "
          f"(grad max {float(off['grad'].abs().max()):.2e})")


def run(args: argparse.Namespace, out_dir: str) -> None:
    """Roll out, build the three batches, time and compare both modes on each."""
    cfg = TrainConfig(algo="gspo", model=args.model, env_id="arl/Sokoban-v0",
                      env_kwargs={"max_steps": args.turns}, num_tasks=args.tasks,
                      group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                      generation_batch_size=args.tasks * args.group_size, rollout_engine="hf",
                      lr=0.0, kl_coef=0.0, micro_batch_tokens=args.micro_batch_tokens,
                      output_dir=out_dir, log_with="none")
    trainer = Trainer(cfg)
    t = time.perf_counter()
    groups, _, _ = trainer._rollout()
    rollout = token_samples([traj for group in groups for traj in group])
    valid = sum(s.format_valid for s in rollout) / len(rollout)
    print(f"rollout of {args.tasks} x {args.group_size} episodes ({args.model}, <= {args.turns} turns, "
          f"<= {args.max_new_tokens} new tokens) in {time.perf_counter() - t:.1f} s, "
          f"{valid:.0%} format-valid turns; "
          f"{torch.get_num_threads()} torch threads, micro_batch_tokens {args.micro_batch_tokens}, "
          f"best of {args.repeats}")
    batches = [
        ("rollout, all turns", rollout),
        ("rollout, first turns only", [s for s in rollout if s.step == 0]),
        ("long prompts (synthetic 300-500 tokens)",
         synthetic_batch(args.long_groups, args.group_size, len(trainer.tokenizer))),
    ]
    store: dict[str, Any] = {}
    _spy(trainer, store)
    for name, samples in batches:
        report(name, samples, measure(trainer, store, samples, args.repeats))
    trainer.collector.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="model spec (tiny, a BC checkpoint dir, ...)")
    ap.add_argument("--tasks", type=int, default=8, help="Sokoban task groups in the rollout")
    ap.add_argument("--group-size", type=int, default=8, help="rollouts per task (G)")
    ap.add_argument("--turns", type=int, default=5, help="max turns per episode (env max_steps)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--long-groups", type=int, default=8, help="groups in the long-prompt batch")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per mode (best is shown)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; 1 by default, as in bench_trl_grpo.py (a busy shared "
                         "machine stalls every OpenMP barrier of the tiny model's small ops)")
    ap.add_argument("--micro-batch-tokens", type=int, default=TrainConfig.micro_batch_tokens)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="bench_shared_") as out_dir:
        run(args, out_dir)


if __name__ == "__main__":
    main()
