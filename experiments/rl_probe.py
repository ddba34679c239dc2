"""One RL probe: a weak behaviour-cloned start → a trainer run → greedy test eval, paired.

The probes behind the quickstart's RL recipe (README, "Why a weak start, and why these batches"): the same
start as ``experiments/arena_cpu.py`` (2,000 expert rooms, ``--sft-steps`` SFT steps, cached in
``<out>/start<N>/``), then ``python -m arlgym.rl`` with any trainer flags, then a greedy eval of
``final/`` on the same ``--test`` held-out rooms as the start; prints and writes ``probe.json``
with the paired effect (rooms gained/lost, SE, z) and the per-step rollout success.

    python experiments/rl_probe.py --name big_batch --algo sampo --lr 2e-4 --num_tasks 16 \\
        --group_size 8 --mini_batch_size 256 --max_steps 8 --cold_start_steps 2
    python experiments/rl_probe.py --name small_batch --algo sampo --lr 5e-4 --num_tasks 8 \\
        --group_size 4 --mini_batch_size 64 --max_steps 24 --cold_start_steps 2

Unknown flags go to the trainer (``python trainers/sampo.py --help``); the probe fixes
``--model`` (the start), ``--output_dir`` (``<out>/<name>``), ``--max_new_tokens 24`` and
``--log_with none``, and runs one torch thread unless ``--torch_threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="the run's folder under --out")
    ap.add_argument("--out", default="runs/rl_probe")
    ap.add_argument("--sft-steps", type=int, default=250, help="SFT steps of the start (250: ~14%%)")
    ap.add_argument("--demos", type=int, default=2000)
    ap.add_argument("--test", type=int, default=200, help="held-out rooms, before and after")
    args, trainer_flags = ap.parse_known_args(argv)

    import torch

    torch.set_num_threads(1)
    from arlgym.quickstart import greedy_eval, paired_difference
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from arena_cpu import weak_start  # the arena's start, built the same way

    out = Path(args.out)
    start_dir = out / f"start{args.sft_steps}"
    start_dir.mkdir(parents=True, exist_ok=True)
    sft_dir, _ = weak_start(start_dir, args.demos, args.sft_steps, 0, args.test)
    before, won_before = greedy_eval(f"hf:{sft_dir}", args.test, start_dir / "eval_start.jsonl")
    run = out / args.name
    cfg = parse_train_config(["--model", str(sft_dir), "--output_dir", str(run), "--log_with", "none",
                              "--torch_threads", "1", "--max_new_tokens", "24", *trainer_flags])
    t = time.perf_counter()
    log = Trainer(cfg).train()
    minutes = (time.perf_counter() - t) / 60
    after, won_after = greedy_eval(f"hf:{run / 'final'}", args.test, run / "eval_final.jsonl")
    result = {"name": args.name, "trainer_flags": trainer_flags, "sft_steps": args.sft_steps,
              "start": before["success_rate"], "final": after["success_rate"],
              "effect": paired_difference(won_before, won_after), "rl_minutes": minutes,
              "rollout_success": [round(h["env/success_rate"], 3) for h in log],
              "step_s": [round(h.get("time/step_s", 0.0), 1) for h in log]}
    (run / "probe.json").write_text(json.dumps(result, indent=1))
    e = result["effect"]
    print(f"{args.name}: greedy {before['success_rate']:.1%} -> {after['success_rate']:.1%} on "
          f"{args.test} rooms, {e['difference']:+.1%} ± {e['se']:.1%} (z = {e['z']:+.1f}, "
          f"{e['gained']} gained / {e['lost']} lost); RL {minutes:.1f} min")
    return result


if __name__ == "__main__":
    main()
