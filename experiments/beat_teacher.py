"""Behaviour cloning of the greedy Sokoban teacher, then RL from it: can RL beat its teacher?

Phases (each cached in ``<out>``; rerun to continue):

1. ``teacher`` / ``random``: greedy evals of the teacher (``greedy`` policy) and of random moves
   on the first ``--test`` held-out rooms.
2. ``sft<N>``: ``--episodes`` teacher episodes (won ones kept: ``arlgym-sft collect --policy
   greedy``), the tiny model trained ``N`` steps on them, then evaluated greedily on the same
   rooms; each is paired against the teacher.
3. with ``--rl-from N``: one trainer run from ``sft<N>`` (or from ``--rl-start DIR``, e.g. an
   earlier run's ``final/`` to continue it; unknown flags go to the trainer, as in
   ``experiments/rl_probe.py``), evaluated greedily on the same rooms, paired against the SFT
   ``sft<N>`` and against the teacher.

    python experiments/beat_teacher.py --out runs/beat_teacher --sft-steps 600
    python experiments/beat_teacher.py --out runs/beat_teacher --sft-steps 600 --rl-from 600 \\
        --rl-name sampo --algo sampo --lr 5e-4 --num_tasks 8 --group_size 4 \\
        --mini_batch_size 64 --max_steps 12 --cold_start_steps 2

One torch thread throughout: the step counts are fixed, so a busy machine gives the same numbers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

#: the paper's validation sampling (ARLArena: temperature 0.6, top-p 0.95, top-k 20)
PAPER_EVAL = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
EVAL: dict[str, Any] = {"mode": "greedy", "samples": 1, "env_kwargs": {}}


def _eval(name: str, policy: Any, rooms: int, out: Path) -> list[float]:
    from arlgym.evaluation.runner import evaluate
    from arlgym.policies import SamplingParams, make_policy

    tag = "" if EVAL["mode"] == "greedy" else f"-{EVAL['mode']}{EVAL['samples']}"
    if EVAL["env_kwargs"]:
        tag += "-" + "-".join(f"{k}{v}" for k, v in sorted(EVAL["env_kwargs"].items()))
    path = out / f"eval_{name}{tag}.json"
    if path.exists():
        return json.loads(path.read_text())["wins"]
    t = time.process_time()
    sp = (SamplingParams(temperature=0.0, max_new_tokens=24) if EVAL["mode"] == "greedy" else
          SamplingParams(max_new_tokens=24, seed=1234, **PAPER_EVAL))
    pol = make_policy(policy) if isinstance(policy, str) else policy
    summary, trajs = evaluate("arl/Sokoban-v0", pol, episodes=rooms, split="test",
                              out=out / f"eval_{name}{tag}.jsonl", batch_size=64,
                              samples_per_task=EVAL["samples"], sampling=sp, progress=True,
                              env_kwargs=EVAL["env_kwargs"] or None)
    summary = summary["overall"]
    by_room: dict[str, list[float]] = {}
    for tr in trajs:
        by_room.setdefault(tr.task_id, []).append(float(tr.won))
    wins = [sum(v) / len(v) for v in by_room.values()]
    record = {"success_rate": summary["success_rate"], "wins": [float(w) for w in wins],
              "format_valid_ratio": summary.get("format_valid_ratio"),
              "cpu_s": time.process_time() - t}
    path.write_text(json.dumps(record))
    return record["wins"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/beat_teacher")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=3000, help="teacher episodes collected")
    ap.add_argument("--keep-all", action="store_true",
                    help="keep every teacher episode, lost ones too (default: won ones only, the "
                         "collector's default, which drops the teacher's stuck loops)")
    ap.add_argument("--sft-steps", type=int, nargs="*", default=[600])
    ap.add_argument("--test", type=int, default=200, help="held-out rooms")
    ap.add_argument("--teacher", default="greedy",
                    help="demonstration policy: greedy (the heuristic teacher), expert (optimal), or "
                         "either with slips or mistakes (e.g. slips:0.75:expert); use one --out a teacher")
    ap.add_argument("--eval", dest="eval_mode", choices=("greedy", "paper"), default="greedy",
                    help="greedy decoding, or the paper's validation sampling (T 0.6, top-p 0.95, "
                         "top-k 20) with --eval-samples episodes a room")
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--eval-env-kwargs", default="{}",
                    help="JSON env kwargs of every eval (e.g. larger rooms than the demonstrations')")
    ap.add_argument("--demo-env-kwargs", default="{}",
                    help="JSON env kwargs of the teacher's demonstrations (e.g. '{\"dim_room\": 7}'); "
                         "the data and SFT folders are named after them")
    ap.add_argument("--rl-from", type=int, default=None, metavar="N", help="RL from sft<N>")
    ap.add_argument("--rl-name", default="rl")
    ap.add_argument("--rl-start", default=None, metavar="DIR",
                    help="continue from this model instead of sft<N> (e.g. an earlier run's final/); "
                         "still paired against sft<N>")
    args, trainer_flags = ap.parse_known_args(argv)

    import torch

    torch.set_num_threads(1)
    from arlgym.policies.spec import draws_its_own, seeded_policy
    from arlgym.quickstart import paired_difference
    from arlgym.sft.collect import CollectConfig, collect_sft
    from arlgym.sft.train import SFTRunConfig, train_sft

    EVAL.update(mode=args.eval_mode, samples=1 if args.eval_mode == "greedy" else args.eval_samples,
                env_kwargs=json.loads(args.eval_env_kwargs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    # a policy with an RNG of its own plays other episodes with another seed: its eval is per seed
    def name(spec: str, what: str) -> str:
        return f"{what}-s{args.seed}" if draws_its_own(spec) else what

    teacher = _eval(name(args.teacher, "teacher"), seeded_policy(args.teacher, args.seed), args.test, out)
    random = _eval(name("random", "random"), seeded_policy("random", args.seed), args.test, out)
    result["teacher"] = sum(teacher) / len(teacher)
    result["random"] = sum(random) / len(random)
    print(f"teacher {result['teacher']:.1%}  random {result['random']:.1%}", flush=True)

    demo_kwargs = json.loads(args.demo_env_kwargs)
    demo = "".join(f"-{k}{v}" for k, v in sorted(demo_kwargs.items()))  # folder-name suffix
    data = out / f"data-s{args.seed}{demo}"
    collect_sft(CollectConfig(policy=args.teacher, episodes=args.episodes, seed=args.seed,
                              batch_tasks=64, min_score=0.0 if args.keep_all else None,
                              env_kwargs=demo_kwargs or None), data)
    for steps in args.sft_steps:
        sft_dir = out / f"sft{steps}-s{args.seed}{demo}"
        stats_path = out / f"sft{steps}-s{args.seed}{demo}.stats.json"
        if not stats_path.exists():
            t = time.process_time()
            stats = train_sft(SFTRunConfig(data=(str(data),), model="tiny", output_dir=str(sft_dir),
                                           engine="prefix", max_steps=steps, lr=1e-3,
                                           batch_size=32, seed=args.seed, logging_steps=50))
            stats_path.write_text(json.dumps({"steps": stats["steps"], "cpu_s": time.process_time() - t}))
        wins = _eval(f"sft{steps}-s{args.seed}{demo}", f"hf:{sft_dir}", args.test, out)
        effect = paired_difference(teacher, wins)
        result[f"sft{steps}"] = {"success": sum(wins) / len(wins), "vs_teacher": effect,
                                 **json.loads(stats_path.read_text())}
        print(f"SFT {steps} steps: {sum(wins) / len(wins):.1%}; vs teacher "
              f"{effect['difference']:+.1%} ± {effect['se']:.1%} (z {effect['z']:+.2f})", flush=True)

    if args.rl_from is not None:
        from arlgym.rl.cli import parse_train_config
        from arlgym.rl.trainer import Trainer

        start = out / f"sft{args.rl_from}-s{args.seed}{demo}"
        start_wins = _eval(f"sft{args.rl_from}-s{args.seed}{demo}", f"hf:{start}", args.test, out)
        run_dir = out / f"{args.rl_name}-s{args.seed}"
        model = Path(args.rl_start) if args.rl_start else start
        flags = ["--model", str(model), "--output_dir", str(run_dir), "--max_new_tokens", "24",
                 "--log_with", "none", "--seed", str(args.seed), "--torch_threads", "1",
                 *trainer_flags]
        t = time.process_time()
        if not (run_dir / "final").exists():
            Trainer(parse_train_config(flags)).train()
        rl_cpu = time.process_time() - t
        final = run_dir / "final" if (run_dir / "final").exists() else run_dir
        wins = _eval(f"{args.rl_name}-s{args.seed}", f"hf:{final}", args.test, out)
        result["rl"] = {"name": args.rl_name, "flags": trainer_flags, "cpu_s": rl_cpu,
                        "success": sum(wins) / len(wins),
                        "vs_sft": paired_difference(start_wins, wins),
                        "vs_teacher": paired_difference(teacher, wins)}
        for k in ("vs_sft", "vs_teacher"):
            e = result["rl"][k]
            print(f"RL {args.rl_name}: {sum(wins) / len(wins):.1%}; {k} {e['difference']:+.1%} ± "
                  f"{e['se']:.1%} (z {e['z']:+.2f}; {e['gained']} gained, {e['lost']} lost)", flush=True)
    (out / f"result-{args.rl_name}-s{args.seed}.json").write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
