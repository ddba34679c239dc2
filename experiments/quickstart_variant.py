"""One RL variant from a finished quickstart's imitation, paired against it on the same rooms.

The probes behind docs/main_job.md ("What holds RL back here"): the quickstart's own arena run
(its recipe, read from ``<from>/recipe.json``: steps, batch, lr, env, eval protocol, test rooms)
for one preset, from ``<from>/sft``, with trainer fields changed by ``--set``; then the run's test
eval paired room by room against the quickstart's SFT eval, and the plan-consistency reading of
both (the move against the first move of the plan the model wrote in its reasoning: how often
they disagree, and how often episodes without such a slip are won).

    arlgym quickstart --seed 2 --out runs/qs/s2
    python experiments/quickstart_variant.py --from runs/qs/s2 --out runs/variants/kl02 \
        --algo sampo --set kl_coef=0.2
    python experiments/quickstart_variant.py --from runs/qs/s2 --out runs/variants/action \
        --algo sampo --set credit=action

Every reported checkpoint is paired (``final``, and ``best`` where the recipe keeps one);
``<out>/variant.json`` holds the numbers. One torch thread; a rerun with the same ``--out``
resumes the run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

PLAN_AND_MOVE = re.compile(r"<think>plan: (\w+)[^<]*</think><action>(\w+)</action>")


def plan_consistency(path: Path) -> dict[str, float]:
    """Share of turns whose move differs from the first move of the written plan, and the win
    rate of episodes with and without such a slip (turns whose reply holds no plan are skipped)."""
    turns = slips = 0
    episodes = {True: [0, 0], False: [0, 0]}  # slipped -> [episodes, won]
    for line in path.read_text().splitlines():
        traj = json.loads(line)
        slipped = False
        for step in traj["steps"]:
            m = PLAN_AND_MOVE.search(step.get("response") or "")
            if m:
                turns += 1
                if m.group(1) != m.group(2):
                    slips += 1
                    slipped = True
        episodes[slipped][0] += 1
        episodes[slipped][1] += bool(traj["steps"][-1]["won"])
    rate = lambda n, w: w / n if n else float("nan")  # noqa: E731
    return {"turns": turns, "slip_share": rate(turns, slips),
            "won_without_slip": rate(*episodes[False]), "won_with_slip": rate(*episodes[True]),
            "episodes_without_slip": episodes[False][0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--from", dest="start", required=True, help="a finished quickstart's --out")
    p.add_argument("--out", required=True, help="the variant's folder")
    p.add_argument("--algo", default="sampo", help="one preset (default: sampo)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a trainer field of the run, as `arlgym arena run --set` reads it (repeatable)")
    args = p.parse_args(argv)

    from arlgym.arena.grid import parse_value, run_grid
    from arlgym.errors import ConfigError
    from arlgym.evaluation.decodings import paired_on_tasks, success_by_task
    from arlgym.quickstart import arena_spec, panel_eval, recipe_config
    from arlgym.rollout import load_jsonl

    start, out = Path(args.start), Path(args.out)
    recipe_path, sft_eval = start / "recipe.json", start / "eval_sft.jsonl"
    if not recipe_path.exists() or not sft_eval.exists() or not (start / "sft").is_dir():
        raise ConfigError(f"--from {start}: not a finished quickstart (needs recipe.json, sft/ and "
                          "eval_sft.jsonl). Fix: run `arlgym quickstart --out DIR` first")
    # rl_threads fixed, so that a busy machine gives the same numbers, later
    cfg = recipe_config(start, rl_algos=(args.algo,), rl_jobs=1, rl_threads=1)
    spec = arena_spec(cfg, start / "sft", out)
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE, e.g. --set kl_coef=0.2")
        spec.base[key.strip()] = parse_value(raw)
    spec.validate()
    status = run_grid(spec, jobs=1)
    if any(v.startswith("failed") for v in status.values()):
        print(status, file=sys.stderr)
        return 1
    run = out / "arena" / args.algo / f"seed-{cfg.seed}"
    before = success_by_task(load_jsonl(sft_eval))
    result: dict[str, Any] = {"from": str(start), "algo": args.algo, "set": args.set,
                              "sft": plan_consistency(sft_eval), "checkpoints": {}}
    for name, label in (("last", "final"), ("best", "best")):
        path = run / "eval" / f"test-{name}.jsonl"
        if not path.exists():
            continue
        effect = paired_on_tasks(before, success_by_task(load_jsonl(path)))
        result["checkpoints"][label] = {"effect": effect, **plan_consistency(path)}
        print(f"{label}: RL - SFT {100 * effect['difference']:+.1f} ± {100 * effect['se']:.1f} "
              f"(z {effect['z']:+.2f}); slips on {result['checkpoints'][label]['slip_share']:.1%} "
              f"of turns (SFT {result['sft']['slip_share']:.1%}), episodes without one won "
              f"{result['checkpoints'][label]['won_without_slip']:.1%} "
              f"(SFT {result['sft']['won_without_slip']:.1%})")
    # both decodings against the SFT's best one (chosen on val by the quickstart), where the
    # quickstart measured both (folders written before the greedy rows have no eval_sft_greedy)
    summary = json.loads((start / "quickstart.json").read_text()) if (start / "quickstart.json").exists() else {}
    best = summary.get("best_decoding")
    if best and (start / "eval_sft_greedy.jsonl").exists():
        sft_wins = {"sampled": before, "greedy": success_by_task(load_jsonl(start / "eval_sft_greedy.jsonl"))}
        checkpoint = run / "final"
        greedy = panel_eval(cfg, f"hf:{checkpoint}", out / "eval_greedy.jsonl", "greedy", progress=False)[1]
        rl_wins = {"greedy": greedy, "sampled": success_by_task(load_jsonl(run / "eval" / "test-last.jsonl"))}
        result["versus_best"] = {"best": best, **{d: paired_on_tasks(sft_wins[best], rl_wins[d]) for d in rl_wins},
                                 "rl_success": {d: sum(w.values()) / len(w) for d, w in rl_wins.items()},
                                 "sft_success": {d: sum(w.values()) / len(w) for d, w in sft_wins.items()}}
        for d in ("greedy", "sampled"):
            e = result["versus_best"][d]
            print(f"final {d}: RL - SFT {best} {100 * e['difference']:+.1f} ± {100 * e['se']:.1f} "
                  f"(z {e['z']:+.2f}; RL {result['versus_best']['rl_success'][d]:.1%})")
    (out / "variant.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    from arlgym.errors import ConfigError

    try:
        sys.exit(main())
    except ConfigError as e:
        print(f"quickstart_variant.py: error: {e}", file=sys.stderr)
        sys.exit(2)
