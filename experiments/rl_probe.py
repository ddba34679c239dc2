"""One RL probe: a weak behaviour-cloned start → a trainer run → greedy (and sampled) test evals, paired.

The probes behind the former one-run quickstart (docs/quickstart_one_run.md, "Why a weak start, and why these batches"): the same
start as ``experiments/arena_cpu.py`` (2,000 expert rooms, ``--sft-steps`` SFT steps, cached in
``<out>/start<N>/``) or a quickstart's own (``--start runs/quickstart``: its ``sft/``), then the
trainer with any trainer flags, then a greedy eval of the model on the same ``--test`` held-out
rooms as the start — at the end, or at each of ``--eval-at`` steps — and with ``--sampled K`` also
K episodes a room at T = 1 (the policy RL optimises; ``arlgym.quickstart.sampled_eval``). Prints
and writes ``probe.json`` with each paired effect (rooms gained/lost, SE, z) and the per-step
rollout success.

    python experiments/rl_probe.py --name big_batch --algo sampo --lr 2e-4 --num_tasks 16 \\
        --group_size 8 --mini_batch_size 256 --max_steps 8 --cold_start_steps 2
    python experiments/rl_probe.py --start runs/quickstart --name long --sampled 2 \\
        --eval-at 6 12 20 30 --algo sampo --lr 2e-4 --num_tasks 16 --group_size 8 \\
        --mini_batch_size 256 --cold_start_steps 100

Unknown flags go to the trainer (``python trainers/sampo.py --help``); the probe fixes
``--model`` (the start), ``--output_dir`` (``<out>/<name>``), ``--max_new_tokens 24``,
``--log_with none`` and, with ``--eval-at``, ``--max_steps`` (the last of them), and runs one
torch thread unless ``--torch_threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from arlgym.rl import metrics as M


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="the run's folder under --out")
    ap.add_argument("--out", default="runs/rl_probe")
    ap.add_argument("--start", default=None,
                    help="a quickstart's output folder: start from its sft/ (default: build a start)")
    ap.add_argument("--sft-steps", type=int, default=250, help="SFT steps of the start (250: ~14%%)")
    ap.add_argument("--demos", type=int, default=2000)
    ap.add_argument("--test", type=int, default=200, help="held-out rooms, before and after")
    ap.add_argument("--sampled", type=int, default=0, metavar="K",
                    help="also K episodes a room at T = 1, before and after (0: greedy only)")
    ap.add_argument("--eval-at", type=int, nargs="+", default=None, metavar="STEP",
                    help="evaluate at these steps (default: once, after the run)")
    args, trainer_flags = ap.parse_known_args(argv)

    import torch

    torch.set_num_threads(1)
    from arlgym.quickstart import greedy_eval, paired_difference, sampled_eval
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    out = Path(args.out)
    if args.start:
        start_dir = Path(args.start)
        sft_dir = start_dir / "sft"
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from arena_cpu import weak_start  # the arena's start, built the same way

        start_dir = out / f"start{args.sft_steps}"
        start_dir.mkdir(parents=True, exist_ok=True)
        sft_dir, _ = weak_start(start_dir, args.demos, args.sft_steps, 0, args.test)
    # the start's evals live beside the probe (a quickstart's own eval_sft.jsonl follows its
    # eval protocol, the paper's sampling by default, not this probe's greedy one)
    evals_dir = out if args.start else start_dir
    evals_dir.mkdir(parents=True, exist_ok=True)
    before = {"greedy": greedy_eval(f"hf:{sft_dir}", args.test, evals_dir / "eval_start.jsonl")}
    if args.sampled:
        before["sampled"] = sampled_eval(f"hf:{sft_dir}", args.test, args.sampled,
                                         evals_dir / f"eval_start_sampled{args.sampled}.jsonl")
    run = out / args.name
    steps = ["--max_steps", str(max(args.eval_at))] if args.eval_at else []
    cfg = parse_train_config(["--model", str(sft_dir), "--output_dir", str(run), "--log_with", "none",
                              "--torch_threads", "1", "--max_new_tokens", "24", *trainer_flags, *steps])
    trainer = Trainer(cfg)
    evals: list[dict[str, Any]] = []

    evaluators = {"greedy": lambda d: greedy_eval(f"hf:{d}", args.test, d / "eval_greedy.jsonl"),
                  "sampled": lambda d: sampled_eval(f"hf:{d}", args.test, args.sampled, d / "eval_sampled.jsonl")}

    def evaluate(model_dir: Path, step: int) -> None:
        row: dict[str, Any] = {"step": step}
        for kind, (summary, per_room) in before.items():
            after, after_rooms = evaluators[kind](model_dir)
            row[kind] = {"start": summary["success_rate"], "after": after["success_rate"],
                         "effect": paired_difference(per_room, after_rooms)}
            e = row[kind]["effect"]
            print(f"{args.name} step {step}: {kind} {summary['success_rate']:.1%} -> "
                  f"{after['success_rate']:.1%} on {args.test} rooms, {e['difference']:+.1%} ± "
                  f"{e['se']:.1%} (z = {e['z']:+.1f}, {e['gained']} gained / {e['lost']} lost)", flush=True)
        evals.append(row)

    t = time.perf_counter()
    if args.eval_at:  # step by step, a model saved and evaluated at each chosen step
        log = []
        while trainer.step < max(args.eval_at):
            log.append(trainer.train_step())
            if trainer.step in args.eval_at:
                trainer.save_model(run / f"step-{trainer.step}")
                evaluate(run / f"step-{trainer.step}", trainer.step)
        trainer.collector.close()
    else:
        log = trainer.train()
        evaluate(run / "final", trainer.step)
    minutes = (time.perf_counter() - t) / 60
    result = {"name": args.name, "trainer_flags": trainer_flags, "start_dir": str(start_dir),
              "evals": evals, "minutes": minutes,
              "rollout_success": [round(h[M.SUCCESS_RATE], 3) for h in log],
              "step_s": [round(h.get("time/step_s", 0.0), 1) for h in log]}
    (run / "probe.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
