"""Read an async arena grid: does staleness hurt, does a rollout correction recover it, and does
the sampler/learner mismatch KL rise before a collapse?

The grid is an ordinary ``arlgym arena run`` with the async axes as overrides (docs/async.md,
"Measured: the CPU arena"); this script only reads its run folders and writes

* ``table.md`` — per variant, mean ± standard error over seeds of: greedy test success of the
  final and of the best-on-validation model, rollout success over the last 3 steps, mismatch KL (mean over the run's steps where it
  is logged), staleness of the trained turns, the learner's and the rollout side's idle
  fractions, seconds per step, and the collapse alarm's verdicts;
* ``leads.md`` — for every run the alarm flags: the step at which ``mismatch/kl`` first
  exceeds its early-run level (rule below) against the alarm's ``step`` (where the collapse
  began) and ``detected_at``; and for every run the same first-exceed step, flagged or not,
  so a rise that predicts nothing shows as well;
* ``curves.png`` — rollout success, greedy validation success, mismatch KL and format validity
  per step, mean ± SE over seeds (staleness is in the table);
* ``result.json`` — every number above.

Idle fractions, one definition for both kinds of run:
* learner idle = Σ ``time/learner_wait_s`` / Σ ``time/step_s`` for async runs; for the
  synchronous trainer the learner idles while the batch is collected, Σ ``time/rollout_s`` /
  Σ ``time/step_s``;
* rollout idle = 1 − ``async/rollout_busy_frac`` (mean over steps) for async runs; for the
  synchronous trainer the sampler idles for the rest of the step,
  1 − Σ ``time/rollout_s`` / Σ ``time/step_s``.

Early-run level of ``mismatch/kl``: its largest value over steps 1..``--early`` (default 3: with
``max_staleness: 2`` the staleness ramps 0, 1, 2 over those steps, so the level already holds a
full-staleness batch; a run without a correction logs no value at step 1, whose batch is fresh
and keeps the sampler's log-probs); "exceeds" means above twice that level and above it by
``--kl-abs`` (so that a near-zero early level does not make every wobble a rise).

    python experiments/async_arena.py runs/async_arena/grid --figures docs/figures/async_arena
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arlgym.arena.alarm import detect_collapse
from arlgym.arena.report import RunResult, load_runs
from arlgym.rl import metrics as M

ORDER = ["sync", "async2", "async2tis", "async2mis", "async2icepop"]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean over the values that are not nan (nan when
    undefined): the arena report's rule."""
    from arlgym.arena.report import mean_se as report_mean_se

    return report_mean_se([v for v in values if v == v])


def _col(rows: Sequence[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(int(r[M.STEP]), float(r[key])) for r in rows
            if isinstance(r.get(key), (int, float)) and M.STEP in r]


def _total(rows: Sequence[dict[str, Any]], key: str) -> float:
    return sum(v for _s, v in _col(rows, key))


def first_exceed(rows: Sequence[dict[str, Any]], early: int, kl_abs: float) -> dict[str, Any]:
    """The early-run level of ``mismatch/kl`` and the first later step above it (module doc)."""
    kl = _col(rows, M.MISMATCH_KL)
    head = [v for s, v in kl if s <= early]
    tail = [(s, v) for s, v in kl if s > early]
    if not head or not tail:
        return {"early_level": None, "first_exceed_step": None, "logged_steps": len(kl)}
    level = max(head)
    for step, v in tail:
        if v > 2 * level and v > level + kl_abs:
            return {"early_level": level, "first_exceed_step": step, "logged_steps": len(kl)}
    return {"early_level": level, "first_exceed_step": None, "logged_steps": len(kl)}


def _test_success(run: RunResult, which: str) -> float:
    """Greedy test success of the ``last`` (final) or ``best`` model; nan when not evaluated."""
    return float(((run.evals.get(which) or {}).get("overall") or {}).get("success_rate", "nan"))


def run_figures(run: RunResult, early: int, kl_abs: float) -> dict[str, Any]:
    """Every per-run number of the table and the lead analysis."""
    rows = run.rows
    is_async = bool(run.config.get("async_rollouts"))
    step_s = _total(rows, M.TIME_STEP)
    rollout_s = _total(rows, M.TIME_ROLLOUT)
    if is_async:
        learner_idle = _total(rows, M.TIME_WAIT) / step_s if step_s else float("nan")
        busy = [v for _s, v in _col(rows, M.ASYNC_BUSY)]
        rollout_idle = 1 - sum(busy) / len(busy) if busy else float("nan")
    else:
        learner_idle = rollout_s / step_s if step_s else float("nan")
        rollout_idle = 1 - learner_idle
    kl = [v for _s, v in _col(rows, M.MISMATCH_KL)]
    stale = [v for _s, v in _col(rows, M.STALENESS_MEAN)]
    verdict = detect_collapse(rows)
    success = [v for _s, v in _col(rows, M.SUCCESS_RATE)]
    return {
        "run": f"{run.label}/seed-{run.seed}",
        "variant": run.label.split("__", 1)[-1],
        "seed": run.seed,
        "test_last": _test_success(run, "last"),
        "test_best": _test_success(run, "best"),
        "rollout_last3": sum(success[-3:]) / len(success[-3:]) if success else float("nan"),
        "mismatch_kl": sum(kl) / len(kl) if kl else float("nan"),
        "mismatch_kl_max": max(kl) if kl else float("nan"),
        "staleness": sum(stale) / len(stale) if stale else 0.0,
        "learner_idle": learner_idle,
        "rollout_idle": rollout_idle,
        "step_s": step_s / max(1, len(_col(rows, M.TIME_STEP))),
        "steps": len(rows),
        "collapse": verdict,
        **first_exceed(rows, early, kl_abs),
    }


def _fmt(m: float, se: float, digits: int = 3, pct: bool = False) -> str:
    if m != m:
        return "—"
    if pct:
        return f"{100 * m:.1f} ± {100 * se:.1f}" if se == se else f"{100 * m:.1f}"
    return f"{m:.{digits}f} ± {se:.{digits}f}" if se == se else f"{m:.{digits}f}"


def build_tables(per_run: list[dict[str, Any]]) -> tuple[str, str, dict[str, Any]]:
    by_variant: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in per_run:
        by_variant[r["variant"]].append(r)
    variants = sorted(by_variant, key=lambda v: (ORDER.index(v) if v in ORDER else 99, v))
    head = ("| variant | seeds | test success, final (%) | test success, best (%) | rollout "
            "success, last 3 steps (%) | mismatch KL (mean) | staleness (mean) | learner idle | "
            "rollout idle | s / step | collapsed |")
    lines = [head, "|" + "---|" * 11]
    summary = {}
    for v in variants:
        rs = by_variant[v]
        cells = {k: mean_se([r[k] for r in rs]) for k in
                 ("test_last", "test_best", "rollout_last3", "mismatch_kl", "staleness", "learner_idle",
                  "rollout_idle", "step_s")}
        collapsed = [r for r in rs if r["collapse"]]
        summary[v] = {k: {"mean": m, "se": se} for k, (m, se) in cells.items()}
        summary[v]["seeds"] = sorted(r["seed"] for r in rs)
        summary[v]["collapsed"] = [r["run"] for r in collapsed]
        lines.append(
            f"| {v} | {len(rs)} | {_fmt(*cells['test_last'], pct=True)} | "
            f"{_fmt(*cells['test_best'], pct=True)} | {_fmt(*cells['rollout_last3'], pct=True)} | "
            f"{_fmt(*cells['mismatch_kl'], digits=4)} | "
            f"{_fmt(*cells['staleness'], digits=2)} | {_fmt(*cells['learner_idle'], digits=2)} | "
            f"{_fmt(*cells['rollout_idle'], digits=2)} | {_fmt(*cells['step_s'], digits=1)} | "
            f"{len(collapsed)}/{len(rs)} |")
    lead = ["| run | alarm: began / detected | mismatch KL early level | first step above it |",
            "|---|---|---|---|"]
    for r in sorted(per_run, key=lambda r: (ORDER.index(r["variant"]) if r["variant"] in ORDER
                                            else 99, r["seed"])):
        c = r["collapse"]
        alarm = f"{c['step']} / {c['detected_at']}" if c else "healthy"
        level = "—" if r["early_level"] is None else f"{r['early_level']:.4f}"
        first = r["first_exceed_step"] if r["first_exceed_step"] is not None else "never"
        if r["early_level"] is None:
            first = "not logged" if not r["logged_steps"] else "too few steps"
        lead.append(f"| {r['run']} | {alarm} | {level} | {first} |")
    return "\n".join(lines) + "\n", "\n".join(lead) + "\n", summary


def plot(runs: list[RunResult], path: Path) -> None:
    """Four panels, mean ± SE over seeds per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(M.SUCCESS_RATE, "rollout success"), (M.EVAL_SUCCESS, "greedy val success"),
              (M.MISMATCH_KL, "mismatch KL (k3)"), (M.FORMAT_VALID, "format-valid ratio")]
    variants = sorted({r.label.split("__", 1)[-1] for r in runs},
                      key=lambda v: (ORDER.index(v) if v in ORDER else 99, v))
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.0))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for i, v in enumerate(variants):
            series: dict[int, list[float]] = defaultdict(list)
            for r in runs:
                if r.label.split("__", 1)[-1] == v:
                    for step, val in _col(r.rows, key):
                        series[step].append(val)
            if not series:
                continue
            steps = sorted(series)
            ms = [mean_se(series[s]) for s in steps]
            m = [a for a, _ in ms]
            se = [b if b == b else 0.0 for _, b in ms]
            ax.plot(steps, m, marker="o", ms=3, lw=1.4, color=f"C{i}", label=v)
            ax.fill_between(steps, [a - b for a, b in zip(m, se, strict=True)],
                            [a + b for a, b in zip(m, se, strict=True)], color=f"C{i}",
                            alpha=0.18, lw=0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grid", help="the folder of `arlgym arena run --out`")
    ap.add_argument("--figures", default="docs/figures/async_arena")
    ap.add_argument("--early", type=int, default=3,
                    help="steps 1..EARLY set mismatch KL's early-run level")
    ap.add_argument("--kl-abs", type=float, default=0.01,
                    help="least absolute rise over the early level that counts")
    args = ap.parse_args(argv)
    skipped: list[str] = []
    runs = load_runs([args.grid], skipped)
    per_run = [run_figures(r, args.early, args.kl_abs) for r in runs]
    table, leads, summary = build_tables(per_run)
    out = Path(args.figures)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    (out / "leads.md").write_text(leads)
    plot(runs, out / "curves.png")
    result = {"summary": summary, "runs": per_run, "skipped_unfinished": skipped,
              "early": args.early, "kl_abs": args.kl_abs}
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    print(table)
    print(leads)
    if skipped:
        print(f"left out {len(skipped)} unfinished run(s): {', '.join(skipped)}")
    return result


if __name__ == "__main__":
    main()
