"""Behaviour-cloning benchmark (issue target: tiny model ≥ 55% greedy success on 200 held-out
6×6 rooms within 8 minutes of SFT on 2 cores, from ~2,000 expert episodes).

Collects expert demonstrations, trains the tiny model with a wall-clock budget (shared-prefix
engine by default, or TRL's SFTTrainer with --engine trl), then evaluates greedy success of the
random policy and of the SFT model on held-out rooms, printing the numbers and tokens/s.

    python bench/bench_sft.py [--episodes 2000] [--minutes 8] [--engine prefix|trl] [--eval 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from arlgym.evaluation.runner import evaluate
from arlgym.policies import SamplingParams, make_policy
from arlgym.sft.collect import CollectConfig, collect_sft
from arlgym.sft.train import SFTRunConfig, train_sft

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--engine", default="prefix", choices=["prefix", "trl"])
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0, help="seeds the expert rooms, model init and batch order")
    ap.add_argument("--out", default="runs/bench_sft")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (0: torch's default; 1 is as fast for the tiny model "
                         "and robust on busy cores)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out)
    t = time.perf_counter()
    data = collect_sft(CollectConfig(episodes=args.episodes, seed=args.seed, batch_tasks=64), out / "data", progress=False)
    print(f"collected {data['samples']} samples from {data['episodes']} expert episodes in {time.perf_counter() - t:.1f} s")
    stats = train_sft(SFTRunConfig(data=(str(out / "data"),), output_dir=str(out / "model"),
                                   engine=args.engine, epochs=args.epochs, lr=args.lr,
                                   batch_size=args.batch_size,
                                   time_budget_minutes=args.minutes, seed=args.seed, logging_steps=20))
    tokens = stats.get("mean_tokens_per_sample", float("nan")) * stats["steps"] * args.batch_size
    print(f"SFT ({args.engine}): {stats['steps']} steps, {stats['epochs_done']:.2f} epochs in "
          f"{stats['seconds'] / 60:.1f} min, final loss {stats['train_loss']:.4f}, "
          f"~{tokens / stats['seconds']:,.0f} sample tokens/s")
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    rows = {}
    for name, spec in [("random", "random"), ("SFT", f"hf:{out / 'model'}")]:
        summary, _ = evaluate("arl/Sokoban-v0", make_policy(spec), episodes=args.eval, split="test",
                              batch_size=100, sampling=greedy, progress=False)
        rows[name] = summary["overall"]
        o = summary["overall"]
        print(f"{name:7s} success {o['success_rate']:.1%} ± {o['success_se']:.1%}  "
              f"format-valid {o['format_valid_ratio']:.1%}  ({args.eval} held-out rooms)")
    (out / "bench_sft.json").write_text(json.dumps({"sft": {k: v for k, v in stats.items() if k != "log"},
                                                    "eval": rows}, indent=2))
