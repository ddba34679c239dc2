"""The CPU arena: the paper's comparison of policy-gradient designs at small scale (Sokoban, tiny).

1. a *weak* behaviour-cloned start (expert Sokoban 6x6/1-box demonstrations, a short SFT) so
   that RL has headroom, evaluated greedily on the test panel;
2. ``arlgym arena run``: every preset × seed from that one checkpoint, one equal budget
   (``--steps`` optimizer steps of ``num_tasks × group_size`` episodes each), several
   PPO mini-batches per rollout batch so that later mini-batches are off-policy and the IS
   clipping designs actually differ (with one on-policy update every ratio is exactly 1);
3. ``arlgym arena report``: Table 3, curves, IS analysis, Sankey diagrams, collapse verdicts;
   the table, a few figures and ``result.json`` are copied to ``--figures``.

Every stage is resumable (rerun the same command; the grid skips finished runs and resumes the
others from their newest checkpoint).

    python experiments/arena_cpu.py                          # the README grid
    python experiments/arena_cpu.py --algos grpo,cispo --seeds 0 --steps 4   # a quick look
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from arlgym.rl import metrics as M

ALGOS = "grpo,grpo_st,gspo,cispo,cispo_sm,sapo,gigpo,dapo_gigpo,sampo"


def weak_start(out: Path, demos: int, sft_steps: int, seed: int, eval_episodes: int) -> tuple[Path, dict]:
    from arlgym.evaluation.runner import evaluate
    from arlgym.policies import SamplingParams, make_policy
    from arlgym.sft.collect import CollectConfig, collect_sft
    from arlgym.sft.train import SFTRunConfig, train_sft

    sft_dir = out / "sft"
    if not (sft_dir / "sft_stats.json").exists():
        collect_sft(CollectConfig(episodes=demos, batch_tasks=64, seed=seed), out / "demos", progress=True)
        train_sft(SFTRunConfig(data=(str(out / "demos"),), output_dir=str(sft_dir), engine="prefix",
                               max_steps=sft_steps, lr=1e-3, seed=seed, logging_steps=25))
    summary, _ = evaluate("arl/Sokoban-v0", make_policy(f"hf:{sft_dir}"), episodes=eval_episodes,
                          split="test", out=out / "eval_start.jsonl", batch_size=100,
                          sampling=SamplingParams(temperature=0.0, max_new_tokens=24))
    return sft_dir, summary["overall"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/arena_cpu")
    ap.add_argument("--figures", default="docs/figures/arena_cpu",
                    help="where the table, figures and result.json are copied")
    ap.add_argument("--algos", default=ALGOS)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps of every run (the budget)")
    ap.add_argument("--demos", type=int, default=2000)
    ap.add_argument("--sft-steps", type=int, default=250, help="short on purpose: a weak start")
    ap.add_argument("--lr", type=float, default=5e-4,
                    help="5e-4: at 2e-4 the IS ratio hardly leaves the band and no design separates")
    ap.add_argument("--num-tasks", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--mini-batch-size", type=int, default=64,
                    help="turn samples per optimizer update (~4 updates per rollout batch)")
    ap.add_argument("--cold-start-steps", type=int, default=2,
                    help="dynamic-sampling cold start (the paper's 15 of 150+ steps, scaled)")
    ap.add_argument("--val", type=int, default=40, help="validation rooms of the periodic eval")
    ap.add_argument("--test", type=int, default=100, help="test rooms of the final eval")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="seed of the demos and the SFT start")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from arlgym.arena.grid import ArenaSpec, run_grid
    from arlgym.arena.report import write_report

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    sft_dir, start = weak_start(out, args.demos, args.sft_steps, args.seed, args.test)
    t_start = time.perf_counter() - t0
    print(f"weak start: {start['success_rate']:.1%} ± {start['success_se']:.1%} greedy on "
          f"{args.test} test rooms ({t_start / 60:.1f} min)")
    base = {
        "env_id": "arl/Sokoban-v0", "model": str(sft_dir.resolve()), "num_tasks": args.num_tasks,
        "group_size": args.group_size, "max_new_tokens": 24, "temperature": 1.0, "lr": args.lr,
        "mini_batch_size": args.mini_batch_size, "max_steps": args.steps,
        "cold_start_steps": args.cold_start_steps, "micro_batch_tokens": 8192,
        "generation_batch_size": 64, "log_with": "none", "save_steps": 1, "save_total_limit": 8,
        "eval_steps": max(1, args.steps // 2), "eval_split": "val", "eval_episodes": args.val,
        "save_best": True, "test_episodes": args.test,
    }
    spec = ArenaSpec(out=str(out / "grid"), algos=[a for a in args.algos.split(",") if a],
                     seeds=[int(s) for s in args.seeds.split(",") if s], base=base)
    t1 = time.perf_counter()
    results = run_grid(spec, jobs=args.jobs)
    t_grid = time.perf_counter() - t1
    folder = write_report([spec.out])
    report = json.loads((folder / "report.json").read_text())
    per_run = [sum(row.get(M.TIME_STEP, 0.0)
                   for row in M.read_metrics_jsonl(Path(r["folder"]) / "metrics.jsonl"))
               for r in report["runs"]]
    result = {"start": start, "grid_results": results, "args": vars(args),
              "minutes": {"start": t_start / 60, "grid_wall": t_grid / 60,
                          "train_per_run_mean": sum(per_run) / max(1, len(per_run)) / 60},
              "table": report["table"], "verdicts": {r["run"]: r["verdict"] for r in report["runs"]}}
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    fig = Path(args.figures)
    if fig.parent.exists():
        fig.mkdir(parents=True, exist_ok=True)
        for name in ("table.md", "table.csv", "index.html"):
            shutil.copy(folder / name, fig / name)
        for sub in ("curves", "is_analysis", "sankey"):
            if (folder / sub).exists():
                shutil.copytree(folder / sub, fig / sub, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.html"))
        (fig / "result.json").write_text(json.dumps(result, indent=2, default=str))
    print((folder / "table.md").read_text())
    print(f"start {start['success_rate']:.1%}; grid {t_grid / 60:.1f} min wall; report {folder / 'index.html'}")
    return result


if __name__ == "__main__":
    main()
