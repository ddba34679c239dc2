"""Does RL improve a behaviour-cloned policy? The experiment behind the README's RL claim.

1. collect expert Sokoban 6x6/1-box demonstrations (``--demos`` episodes);
2. behaviour-clone the ``tiny`` model on them, deliberately short (``--sft-steps``), so the
   starting policy is *weak* (20–60% greedy success) and RL has room to act;
3. evaluate it greedily on ``--eval`` held-out rooms (the fixed test list);
4. run SAMPO (or ``--algo``) from that checkpoint for at most ``--rl-minutes``, with a greedy
   eval on ``--val`` rooms of the *val* split every ``--eval-every`` steps, keeping the best
   model (``rl/best/``): the choice never sees the test rooms;
5. evaluate the final policy, and the best-on-val one, on the same held-out test rooms and
   report each difference in units of its standard error (two independent binomial
   proportions on the same rooms).

Writes ``result.json`` and ``rl_curve.png`` under ``--out``; every stage is resumable: rerunning
skips the stages whose outputs exist (delete the folder to start over).

    python experiments/sokoban_rl.py                      # the README numbers (~35 min, 2 cores)
    python experiments/sokoban_rl.py --rl-minutes 5 --eval 100   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from arlgym.rl import metrics as M


def _greedy_eval(spec: str, episodes: int, out: Path) -> dict[str, Any]:
    from arlgym.evaluation.runner import evaluate
    from arlgym.policies import SamplingParams, make_policy

    summary, _ = evaluate("arl/Sokoban-v0", make_policy(spec), episodes=episodes, split="test",
                          out=out, batch_size=100, progress=True,
                          sampling=SamplingParams(temperature=0.0, max_new_tokens=24))
    return summary["overall"]


def _difference(before: dict, after: dict) -> tuple[float, float, float]:
    """after - before, its standard error and the ratio (z)."""
    diff = after["success_rate"] - before["success_rate"]
    se = math.sqrt(before["success_se"] ** 2 + after["success_se"] ** 2)
    return diff, se, (diff / se if se > 0 else float("nan"))


def _plot(log: list[dict[str, float]], before: dict, after: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [h["step"] for h in log]
    ax.plot(steps, [h[M.SUCCESS_RATE] for h in log], alpha=0.5, label="rollout success (T=1)")
    ax.plot(steps, [h[M.FORMAT_VALID] for h in log], alpha=0.5, label="format valid (T=1)")
    ev = [h for h in log if M.EVAL_SUCCESS in h]
    if ev:
        ax.errorbar([h["step"] for h in ev], [h[M.EVAL_SUCCESS] for h in ev],
                    yerr=[h["eval/success_se"] for h in ev], marker="o", label="greedy eval (val split)")
    last = steps[-1] if steps else 0
    for x, r, name in ((0, before, "SFT"), (last, after, "SFT+RL")):
        ax.errorbar([x], [r["success_rate"]], yerr=[r["success_se"]], fmt="s", color="k", capsize=4)
        ax.annotate(f"{name} {r['success_rate']:.1%}", (x, r["success_rate"]),
                    textcoords="offset points", xytext=(6, -12))
    ax.set(xlabel="RL step", ylabel="rate", ylim=(0, 1.05),
           title="Sokoban 6x6/1 box, tiny model: RL from a weak BC checkpoint")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/sokoban_rl")
    ap.add_argument("--demos", type=int, default=2000, help="expert episodes for BC")
    ap.add_argument("--sft-steps", type=int, default=250, help="BC optimizer steps (short on purpose)")
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--algo", default="sampo")
    ap.add_argument("--rl-minutes", type=float, default=25.0)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--mini-batch-size", type=int, default=256,
                    help="turn samples per optimizer step (~6 updates per RL step of ~1,500 turns)")
    ap.add_argument("--num-tasks", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--eval", type=int, default=500, help="held-out rooms for before/after")
    ap.add_argument("--eval-every", type=int, default=2,
                    help="greedy eval on the val split every N steps, best model kept (0: off)")
    ap.add_argument("--val", type=int, default=100, help="val-split rooms of the periodic eval")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="further trainers/sampo.py flags, e.g. --extra --kl_coef 0")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (0: torch's default; 1 is as fast for the tiny model "
                         "and robust on busy cores)")
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer
    from arlgym.sft.collect import CollectConfig, collect_sft
    from arlgym.sft.train import SFTRunConfig, train_sft

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    t = time.perf_counter()
    collect_sft(CollectConfig(episodes=args.demos, batch_tasks=64, seed=args.seed), out / "demos", progress=True)
    timings["collect_s"] = time.perf_counter() - t

    sft_dir = out / "sft"
    if not (sft_dir / "sft_stats.json").exists():
        t = time.perf_counter()
        train_sft(SFTRunConfig(data=(str(out / "demos"),), output_dir=str(sft_dir), engine="prefix",
                               max_steps=args.sft_steps, lr=args.sft_lr, seed=args.seed, logging_steps=25))
        timings["sft_s"] = time.perf_counter() - t
    t = time.perf_counter()
    before = _greedy_eval(f"hf:{sft_dir}", args.eval, out / "eval_sft.jsonl")
    timings["eval_before_s"] = time.perf_counter() - t
    print(f"weak BC checkpoint: {before['success_rate']:.1%} ± {before['success_se']:.1%} greedy")

    rl_dir = out / "rl"
    final = rl_dir / "final"
    if not (final / "config.json").exists():
        t = time.perf_counter()
        cfg = parse_train_config([
            "--algo", args.algo, "--model", str(sft_dir), "--output_dir", str(rl_dir),
            "--max_steps", "100000", "--max_minutes", str(args.rl_minutes),
            "--num_tasks", str(args.num_tasks), "--group_size", str(args.group_size),
            "--lr", str(args.rl_lr), "--mini_batch_size", str(args.mini_batch_size),
            "--max_new_tokens", "24", "--log_with", "none",
            "--eval_steps", str(args.eval_every), "--eval_episodes", str(args.val),
            "--eval_split", "val", "--save_best", str(args.eval_every > 0).lower(),
            "--seed", str(args.seed), *args.extra])
        Trainer(cfg).train()
        timings["rl_s"] = time.perf_counter() - t
    log = M.read_metrics_jsonl(rl_dir / "metrics.jsonl")
    t = time.perf_counter()
    after = _greedy_eval(f"hf:{final}", args.eval, out / "eval_rl.jsonl")
    timings["eval_after_s"] = time.perf_counter() - t

    diff, se, z = _difference(before, after)
    best = None
    if (rl_dir / "best" / "best.json").exists():
        best = _greedy_eval(f"hf:{rl_dir / 'best'}", args.eval, out / "eval_best.jsonl")
        best.update(json.loads((rl_dir / "best" / "best.json").read_text()))
        best["difference"], best["difference_se"], best["z"] = _difference(before, best)
    _plot(log, before, after, out / "rl_curve.png")
    result = {"before": before, "after": after, "difference": diff, "difference_se": se, "z": z,
              "best_on_val": best, "rl_steps": len(log), "args": vars(args), "timings": timings,
              "rl_seconds": sum(h["time/step_s"] for h in log)}
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(f"\n{args.eval} held-out rooms, greedy: SFT {before['success_rate']:.1%} ± {before['success_se']:.1%}"
          f" -> SFT+{args.algo} {after['success_rate']:.1%} ± {after['success_se']:.1%}  "
          f"(diff {diff:+.1%}, {z:+.1f} SE) after {len(log)} RL steps "
          f"({result['rl_seconds'] / 60:.1f} min); format valid {after['format_valid_ratio']:.1%}")
    if best is not None:
        print(f"best on val (step {best['step']}, val {best['eval/success_rate']:.1%}): test "
              f"{best['success_rate']:.1%} ± {best['success_se']:.1%} (diff {best['difference']:+.1%}, "
              f"{best['z']:+.1f} SE)")
    print(f"curve: {out / 'rl_curve.png'}")
    return result


if __name__ == "__main__":
    main()
