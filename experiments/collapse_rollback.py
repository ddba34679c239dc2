"""Runs that survive their own collapse, measured on CPU: warn vs rollback, false alarms, leads.

From the CPU arena's weak start (experiments/arena_cpu.py: 2,000 expert rooms, 250 SFT steps),
at the arena's recipe (lr 5e-4, 12 steps of 8 rooms x 4, PPO mini-batches of 64):

1. **Collapse-prone**: CISPO (tolerant clipping) at a high learning rate (``--collapse-lr``,
   2e-3) with ``on_collapse warn`` and with ``on_collapse rollback`` (remedy ``halve_lr``, up to
   3 rollbacks, each halving again), seeds 0-4, a greedy val eval every 2 steps.
2. **Healthy presets**: GRPO and SAMPO with ``on_collapse rollback`` and the degradation alarm,
   seeds 0-4: every rollback there is a false alarm.
3. **Analysis**: per collapsed run the pre-collapse validation peak against the final greedy test
   success; rollback against warn, paired by seed; which training signals rise *before* the
   format falls, with lead times, and how often the same rule fires on the healthy runs.

Every stage is resumable (the grids skip finished runs). Writes ``<out>/result.json`` and
``<out>/result.md``; with ``--figures`` the report's table and curves too.

    python experiments/collapse_rollback.py                  # the study (~1-2 h on 2 cores)
    python experiments/collapse_rollback.py --seeds 0 --steps 6   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arena_cpu import weak_start  # noqa: E402  (a sibling script)

from arlgym.arena.alarm import detect_collapse  # noqa: E402
from arlgym.evaluation.decodings import paired_difference  # noqa: E402
from arlgym.rl import metrics as M  # noqa: E402

#: signals read for an early warning, and the direction in which each warns
SIGNALS = {M.IS_LOW_NEG: +1, M.GRAD_NORM: +1, M.ENTROPY: -1, M.CLIP_LOW: +1, M.CLIP_REGION: +1,
           M.PPO_KL_K3: +1, M.KL_REF: +1, M.IS_OUT: +1}
FORMAT_DROP = 0.15  # the collapse alarm's fall: format validity this far below its peak


def base_config(sft_dir: Path, steps: int, val: int, test: int, lr: float = 5e-4) -> dict[str, Any]:
    """The CPU arena's recipe (configs/arena/sokoban-tiny-cpu.yaml) with a val eval every 2 steps,
    so that a pre-collapse peak exists and the degradation alarm has evals to read."""
    return {
        "env_id": "arl/Sokoban-v0", "model": str(sft_dir.resolve()), "num_tasks": 8,
        "group_size": 4, "max_new_tokens": 24, "temperature": 1.0, "lr": lr,
        "mini_batch_size": 64, "max_steps": steps, "cold_start_steps": 2,
        "micro_batch_tokens": 8192, "generation_batch_size": 64, "log_with": "none",
        "save_steps": 1, "save_total_limit": 3, "eval_steps": 2, "eval_split": "val",
        "eval_episodes": val, "save_best": False, "test_episodes": test,
        "test_both_decodings": False, "degradation_alarm": True,
    }


def read_run(folder: Path) -> dict[str, Any]:
    """One finished run: its rows (abandoned ones included, in step order), rollbacks, the
    collapse verdict of its kept rows, and its final greedy test success ± SE."""
    kept = M.read_metrics_jsonl(folder / "metrics.jsonl")
    abandoned = (M.read_metrics_jsonl(folder / "rolled_back.jsonl")
                 if (folder / "rolled_back.jsonl").exists() else [])
    record = json.loads((folder / "collapse.json").read_text()) if (folder / "collapse.json").exists() else {}
    test = json.loads((folder / "eval" / "test-last.summary.json").read_text())["overall"]
    return {"folder": str(folder), "kept": kept, "abandoned": abandoned,
            "rollbacks": record.get("rollbacks", []), "collapse": detect_collapse(kept),
            "test": test["success_rate"], "test_se": test["success_se"]}


def val_peak_before(rows: list[dict[str, Any]], step: int) -> tuple[float, float] | None:
    """The best periodic val eval at or before ``step`` (success, its SE)."""
    evals = [r for r in rows if M.EVAL_SUCCESS in r and r[M.STEP] <= step]
    if not evals:
        return None
    best = max(evals, key=lambda r: r[M.EVAL_SUCCESS])
    return best[M.EVAL_SUCCESS], best.get(M.EVAL_SUCCESS_SE, 0.0)


def fall_step(rows: list[dict[str, Any]]) -> int | None:
    """First step whose 3-step trailing format validity is ``FORMAT_DROP`` below its peak so far."""
    peak, window = -1.0, []
    for r in rows:
        window = (window + [r.get(M.FORMAT_VALID, 1.0)])[-3:]
        mean = sum(window) / len(window)
        peak = max(peak, mean)
        if mean < peak - FORMAT_DROP:
            return int(r[M.STEP])
    return None


def _values(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(int(r[M.STEP]), float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]


def envelope(runs: list[list[dict]], key: str, sign: int) -> float | None:
    """The most extreme value of ``key`` in the warning direction over ``runs`` (None: absent)."""
    values = [sign * v for rows in runs for _, v in _values(rows, key)]
    return max(values) if values else None


def rise_step(rows: list[dict[str, Any]], key: str, sign: int, limit: float) -> int | None:
    """First step where ``key`` goes beyond ``limit`` (in sign-space) in the warning direction."""
    return next((step for step, v in _values(rows, key) if sign * v > limit), None)


def lead_times(collapsed: list[list[dict]], healthy: list[list[dict]]) -> dict[str, dict[str, Any]]:
    """Per signal, a rule a healthy run never trips: "beyond every value the healthy runs showed".
    Over the collapsing runs: how often it trips before the format falls, and the leads
    (fall − trip, steps); over the healthy runs, leave-one-out (the envelope of the others): how
    often it would have tripped there — its false-alarm rate."""
    out = {}
    for key, sign in SIGNALS.items():
        limit = envelope(healthy, key, sign)
        if limit is None:
            continue
        leads, before = [], 0
        for rows in collapsed:
            fall = fall_step(rows)
            if fall is None:
                continue
            rise = rise_step(rows, key, sign, limit)
            leads.append(None if rise is None else fall - rise)
            before += rise is not None and rise < fall
        fired = 0
        for i, rows in enumerate(healthy):
            others = envelope(healthy[:i] + healthy[i + 1:], key, sign)
            fired += others is not None and rise_step(rows, key, sign, others) is not None
        out[key] = {"healthy_envelope": sign * limit, "rose_before_fall": before,
                    "collapsed_runs": len(leads), "leads": leads,
                    "fired_on_healthy": fired, "healthy_runs": len(healthy)}
    return out


def start_val(out: Path, episodes: int) -> dict[str, float]:
    """The start checkpoint's greedy eval on the runs' val panel: the step-0 eval of every run
    (a rollback to the start reaches back before the first periodic eval)."""
    path = out / "eval_start_val.summary.json"
    if not path.exists():
        from arlgym.evaluation.runner import evaluate
        from arlgym.policies import SamplingParams, make_policy

        summary, _ = evaluate("arl/Sokoban-v0", make_policy(f"hf:{out / 'sft'}"), episodes=episodes,
                              split="val", out=out / "eval_start_val.jsonl", batch_size=64,
                              sampling=SamplingParams(temperature=0.0, max_new_tokens=24), progress=False)
    o = json.loads(path.read_text())["overall"]
    return {M.STEP: 0, M.EVAL_SUCCESS: o["success_rate"], M.EVAL_SUCCESS_SE: o["success_se"]}


def analyse(out: Path, val_episodes: int = 40) -> dict[str, Any]:
    grid = out / "grid"
    start = start_val(out, val_episodes)
    warn = {int(p.name.split("-")[1]): read_run(p) for p in sorted((grid / "cispo__warn").glob("seed-*"))
            if (p / "eval" / "test-last.summary.json").exists()}
    roll = {int(p.name.split("-")[1]): read_run(p) for p in sorted((grid / "cispo__rollback").glob("seed-*"))
            if (p / "eval" / "test-last.summary.json").exists()}
    healthy = {f"{p.parent.name}/{p.name}": read_run(p) for p in sorted(grid.glob("*__healthy/seed-*"))
               if (p / "eval" / "test-last.summary.json").exists()}
    recovered = []
    for seed, r in sorted(roll.items()):
        if not r["rollbacks"]:
            continue
        first = r["rollbacks"][0]
        rows = [start, *sorted(r["kept"] + r["abandoned"], key=lambda x: x[M.STEP])]
        peak = val_peak_before(rows, first["to_step"])
        if peak is None:
            continue
        se = math.sqrt(peak[1] ** 2 + r["test_se"] ** 2)
        recovered.append({"seed": seed, "alarm_at": first["alarm_at"], "to_step": first["to_step"],
                          "rollbacks": len(r["rollbacks"]), "val_peak": peak[0], "val_peak_se": peak[1],
                          "final_test": r["test"], "final_test_se": r["test_se"],
                          "kept_peak": r["test"] >= peak[0] - 2 * se})
    common = sorted(set(warn) & set(roll))
    versus = (paired_difference([warn[s]["test"] for s in common], [roll[s]["test"] for s in common])
              if len(common) >= 2 else None)
    false_alarms = {name: len(r["rollbacks"]) for name, r in healthy.items()}
    warn_rows = [r["kept"] for r in warn.values() if r["collapse"]]
    healthy_rows = [r["kept"] for r in healthy.values()]
    return {
        "warn": {s: {"test": r["test"], "collapse": r["collapse"]} for s, r in warn.items()},
        "rollback": {s: {"test": r["test"], "rollbacks": r["rollbacks"]} for s, r in roll.items()},
        "start_val": start,
        "warn_collapsed": sum(bool(r["collapse"]) for r in warn.values()),
        "recovered": recovered,
        "kept_peak_frac": (sum(x["kept_peak"] for x in recovered) / len(recovered)) if recovered else None,
        "rollback_minus_warn": versus,
        "healthy_rollbacks": false_alarms,
        "leads": lead_times(warn_rows, healthy_rows),
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def write_markdown(result: dict[str, Any], path: Path) -> str:
    lines = ["| seed | warn: collapsed at | warn: final test | rollback: rollbacks (alarm→back) | "
             "rollback: pre-collapse val peak | rollback: final test | kept the peak (−2 SE) |",
             "|---|---|---|---|---|---|---|"]
    rec = {x["seed"]: x for x in result["recovered"]}
    for seed in sorted(set(result["warn"]) | set(result["rollback"]), key=int):
        w, r = result["warn"].get(seed, {}), result["rollback"].get(seed, {})
        c = w.get("collapse")
        rb = ", ".join(f"{x['alarm_at']}→{x['to_step']}" for x in r.get("rollbacks", [])) or "0"
        x = rec.get(seed)
        lines.append(f"| {seed} | {c['step'] if c else 'healthy'} | {_pct(w.get('test'))} | {rb} | "
                     f"{_pct(x['val_peak']) + ' ± ' + _pct(x['val_peak_se']) if x else '–'} | "
                     f"{_pct(r.get('test'))} | {('yes' if x['kept_peak'] else 'no') if x else '–'} |")
    v = result["rollback_minus_warn"]
    lines += ["", "Rollback − warn, final greedy test success paired by seed: "
              + (f"{100 * v['difference']:+.1f} ± {100 * v['se']:.1f} points (z {v['z']:.1f})" if v else "–"),
              "Collapsed runs that kept their pre-collapse val peak (−2 SE): "
              + (f"{sum(x['kept_peak'] for x in result['recovered'])}/{len(result['recovered'])}"
                 if result["recovered"] else "–"),
              f"Healthy runs (GRPO, SAMPO; rollback + degradation alarm): "
              f"{sum(1 for n in result['healthy_rollbacks'].values() if n)} of "
              f"{len(result['healthy_rollbacks'])} rolled back", "",
              "| signal | beyond every healthy value (envelope) | before the format fell | "
              "leads (steps) | fired on healthy runs (leave-one-out) |",
              "|---|---|---|---|---|"]
    for key, s in result["leads"].items():
        lines.append(f"| `{key}` | {s['healthy_envelope']:.4g} | {s['rose_before_fall']}/{s['collapsed_runs']} | "
                     f"{', '.join('–' if x is None else str(x) for x in s['leads']) or '–'} | "
                     f"{s['fired_on_healthy']}/{s['healthy_runs']} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/collapse_rollback")
    ap.add_argument("--figures", default="", help="copy the tables and the report's figures here")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--val", type=int, default=40, help="val rooms of the periodic eval")
    ap.add_argument("--test", type=int, default=100, help="test rooms of the final greedy eval")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--collapse-lr", type=float, default=2e-3,
                    help="CISPO's learning rate in the collapse-prone grid (the healthy grid: 5e-4)")
    ap.add_argument("--stage", choices=("all", "collapse", "healthy", "analyse"), default="all")
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.stage != "analyse":
        import torch

        torch.set_num_threads(1)
        from arlgym.arena.grid import ArenaSpec, run_grid

        sft_dir, start = weak_start(out, 2000, 250, 0, args.test)
        print(f"weak start: {start['success_rate']:.1%} greedy on {args.test} test rooms")
        base = base_config(sft_dir, args.steps, args.val, args.test)
        rollback = {"on_collapse": "rollback", "rollback_remedy": "halve_lr", "max_rollbacks": 3}
        if args.stage in ("all", "collapse"):
            prone = base_config(sft_dir, args.steps, args.val, args.test, lr=args.collapse_lr)
            run_grid(ArenaSpec(out=str(out / "grid"), algos=["cispo"], seeds=seeds, base=prone,
                               overrides={"warn": {"on_collapse": "warn"}, "rollback": rollback}),
                     jobs=args.jobs)
        if args.stage in ("all", "healthy"):
            run_grid(ArenaSpec(out=str(out / "grid"), algos=["grpo", "sampo"], seeds=seeds, base=base,
                               overrides={"healthy": rollback}), jobs=args.jobs)
    result = analyse(out, args.val)
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    text = write_markdown(result, out / "result.md")
    print(text)
    if args.figures:
        from arlgym.arena.report import write_report

        folder = write_report([str(out / "grid")])
        fig = Path(args.figures)
        fig.mkdir(parents=True, exist_ok=True)
        for name in ("result.json", "result.md"):
            shutil.copy(out / name, fig / name)
        shutil.copy(folder / "table.md", fig / "table.md")
        shutil.copytree(folder / "curves", fig / "curves", dirs_exist_ok=True)
    return result


if __name__ == "__main__":
    main()
