"""The main job's table over seeds, from the ``quickstart.json`` each ``arlgym quickstart`` wrote.

    for s in 0 1 2 3 4; do arlgym quickstart --seed $s --out runs/qs/seed-$s; done
    python experiments/main_job_table.py runs/qs/seed-*

Prints one markdown row per seed and the mean ± SE over seeds: random and the teacher, the
SFT and each RL preset under greedy and sampled decoding, the SFT's best decoding (chosen on
val rooms), each preset's effect against it under both decodings (paired by room, ± SE), the
panel rooms the demonstrations played, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def _mean_se(values: list[float]) -> str:
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else float("nan")
    return f"{mean:+.1f} ± {se:.1f}" if any(v < 0 for v in values) else f"{mean:.1f} ± {se:.1f}"


def _effect(e: dict) -> str:
    text = f"{100 * e['difference']:+.1f} ± {100 * e['se']:.1f}"
    return f"**{text}**" if not math.isnan(e["z"]) and abs(e["z"]) > 2 else text


def table(folders: list[Path]) -> str:
    results = [(f, json.loads((f / "quickstart.json").read_text())) for f in folders]
    algos = list(results[0][1]["rl_effects"])
    head = (["seed", "random", "teacher", "SFT greedy / sampled", "best (val: greedy / sampled)"]
            + [f"{a.upper()} greedy / sampled" for a in algos]
            + [f"{a.upper()} − SFT best, greedy / sampled" for a in algos] + ["trained on", "wall"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cols: dict[str, list[float]] = {}

    def rate(r: dict) -> float:
        return 100 * r["success_rate"]

    for folder, r in results:
        rows, choice = r["rows"], r["decoding_choice"]
        seed = json.loads((folder / "recipe.json").read_text())["seed"]
        cells = [str(seed), f"{rate(rows['random']):.1f}", f"{rate(rows['teacher']):.1f}",
                 f"{rate(rows['SFT']['greedy']):.1f} / {rate(rows['SFT']['sampled']):.1f}",
                 f"{r['best_decoding']} ({rate(choice['greedy']):.1f} / {rate(choice['sampled']):.1f})"]
        for key in ("random", "teacher"):
            cols.setdefault(key, []).append(rate(rows[key]))
        for d in ("greedy", "sampled"):
            cols.setdefault(f"SFT {d}", []).append(rate(rows["SFT"][d]))
        for a in algos:
            row = rows[f"SFT+{a.upper()}"]
            cells.append(f"{rate(row['greedy']):.1f} / {rate(row['sampled']):.1f}")
            for d in ("greedy", "sampled"):
                cols.setdefault(f"{a} {d}", []).append(rate(row[d]))
        for a in algos:
            eff = r["rl_effects"][a]
            cells.append(f"{_effect(eff['greedy'])} / {_effect(eff['sampled'])}")
            for d in ("greedy", "sampled"):
                cols.setdefault(f"{a} − best {d}", []).append(100 * eff[d]["difference"])
        cells += [f"{r['trained_on_panel']['overlap']} / {r['trained_on_panel']['panel']}",
                  f"{r['timings']['total_s'] / 60:.1f} min"]
        lines.append("| " + " | ".join(cells) + " |")
    mean = ["mean ± SE", _mean_se(cols["random"]), _mean_se(cols["teacher"]),
            f"{_mean_se(cols['SFT greedy'])} / {_mean_se(cols['SFT sampled'])}", ""]
    mean += [f"{_mean_se(cols[f'{a} greedy'])} / {_mean_se(cols[f'{a} sampled'])}" for a in algos]
    mean += [f"{_mean_se(cols[f'{a} − best greedy'])} / {_mean_se(cols[f'{a} − best sampled'])}"
             for a in algos]
    lines.append("| " + " | ".join(mean + ["", ""]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="finished quickstart folders")
    args = p.parse_args(argv)
    missing = [f for f in args.folders if not (f / "quickstart.json").exists()]
    if missing:
        print(f"main_job_table.py: error: {missing[0]} holds no quickstart.json (a finished "
              "`arlgym quickstart --out DIR`)", file=sys.stderr)
        return 2
    print(table(args.folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
