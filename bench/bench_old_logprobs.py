"""What taking the old log-probs from the sampler saves (``old_logprobs: auto`` with HF generate).

verl recomputes ``old_log_prob`` with a forward pass over every turn sample; with HF generate on
the live fp32 model the sampler's own log-probs are the same numbers (to ~1e-6, tested), so
``auto`` skips that pass. This runs the same SAMPO steps (same seeds, same rollouts) both ways and
prints the non-rollout part of a step (old/ref log-probs + update) and the whole step.

    python bench/bench_old_logprobs.py             # 16 tasks x 8, 3 steps each way (~4 min)
    python bench/bench_old_logprobs.py --kl 0.01   # with the k3 reference pass kept in both
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(mode: str, args: argparse.Namespace, out: Path) -> list[dict[str, float]]:
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config([
        "--algo", "sampo", "--model", args.model, "--output_dir", str(out / mode),
        "--num_tasks", str(args.tasks), "--group_size", str(args.group), "--max_steps", str(args.steps),
        "--max_new_tokens", "24", "--env_kwargs", json.dumps({"max_steps": args.env_steps}),
        "--kl_coef", str(args.kl), "--lr", "1e-5", "--log_with", "none", "--torch_threads", "1",
        "--old_logprobs", mode])
    return Trainer(cfg).train()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="model path or alias (default: tiny)")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--env-steps", type=int, default=8, help="Sokoban turns per episode")
    ap.add_argument("--kl", type=float, default=0.0, help="k3 KL coefficient (a reference pass in both)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = {mode: run(mode, args, Path(tmp)) for mode in ("recompute", "auto")}
    print(f"\n{args.tasks} tasks x {args.group} rollouts, model {args.model}, kl {args.kl}, "
          f"{args.steps} steps each (median per step)")
    print(f"{'old log-probs':14s} {'samples':>8s} {'logp+update s':>14s} {'step s':>8s}")
    med = {}
    for mode, log in rows.items():
        non_rollout = statistics.median(m["time/step_s"] - m["time/rollout_s"] for m in log)
        step = statistics.median(m["time/step_s"] for m in log)
        med[mode] = (non_rollout, step)
        print(f"{mode:14s} {statistics.median(m['samples'] for m in log):8.0f} {non_rollout:14.2f} {step:8.2f}")
    (a, sa), (b, sb) = med["recompute"], med["auto"]
    print(f"auto / recompute: logp+update {b / a:.2f}x time, whole step {sb / sa:.2f}x time")


if __name__ == "__main__":
    main()
