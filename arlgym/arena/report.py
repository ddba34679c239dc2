"""``arlgym arena report OUT...``: a grid's runs read as the paper reads them.

Writes into ``<first OUT>/report/``:

* ``table.md`` / ``table.csv`` — Table 3's layout: methods grouped by design dimension, per
  env the success rate (and WebShop's score) as mean ± standard error over seeds, the change
  against GRPO, the checkpoint each cell uses (best-on-val or last), the collapse verdicts and
  the budget actually spent (env steps, tokens);
* ``curves/<metric>.png`` — training curves, every seed of a method in one colour (mean line,
  band = ± standard error over seeds);
* ``is_analysis/<run>.png`` — the paper's IS analysis (Figs. 3c/d, 4): per step, the tokens
  split by advantage sign × IS ratio above/below 1 × entropy above/below the median, each
  group's share of the tokens and of the KL to the reference, as stacked areas;
* ``sankey/<method>.html`` + ``.png`` — action transitions of each method's test episodes, won
  vs lost (Appendix F), beside ``patterns/<method>.png`` heat maps;
* ``report.json`` (every number shown, each run's config hash, panel hash and collapse
  verdict) and ``index.html`` tying it together.

Runs are comparable only on the same evaluation panel: the report refuses (``ConfigError``)
to put runs of one env with different panel hashes in one table.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arlgym.arena.alarm import detect_collapse
from arlgym.errors import ConfigError
from arlgym.evaluation.decodings import DECODINGS
from arlgym.evaluation.patterns import pattern_report, plot_transitions
from arlgym.evaluation.sankey import plot_sankey_png, sankey_flows, write_sankey_html
from arlgym.rl import metrics as M
from arlgym.rl.losses import IS_GROUPS
from arlgym.rollout import load_jsonl

__all__ = ["RunResult", "load_runs", "pick_checkpoint", "build_table", "write_report", "DIMENSIONS", "CURVES",
           "mean_se"]

#: Table 3's rows: design dimension -> presets (paper Table 1 / §4), in the paper's order
DIMENSIONS: dict[str, list[str]] = {
    "Baseline": ["grpo"],
    "Loss aggregation": ["grpo_st"],
    "IS clipping": ["gspo", "sapo", "sapo_sm", "cispo", "cispo_sm", "grpo_sm"],
    "Advantage design": ["gigpo", "empg"],
    "Trajectory filtering": ["dapo_grpo", "dapo_gigpo"],
    "Ours": ["sampo"],
}
_DIMENSION_OF = {a: d for d, algos in DIMENSIONS.items() for a in algos}

#: curve file name -> (title, metric keys plotted in it)
CURVES: dict[str, tuple[str, list[str]]] = {
    "success": ("rollout success rate", [M.SUCCESS_RATE]),
    "val_success": ("greedy success on the validation panel", [M.EVAL_SUCCESS]),
    "format_valid": ("format-valid ratio", [M.FORMAT_VALID]),
    "kl_ref": ("KL to the reference (k3)", [M.KL_REF]),
    "kl_old_new": ("KL old/new (k3)", [M.PPO_KL_K3]),
    "entropy": ("token entropy", [M.ENTROPY]),
    "grad_norm": ("gradient norm", [M.GRAD_NORM]),
    "clip_low": ("clip fraction, low", [M.CLIP_LOW]),
    "clip_high": ("clip fraction, high", [M.CLIP_HIGH]),
    "is_low_neg": ("IS ratio < 1-ε with A < 0 (token fraction)", [M.IS_LOW_NEG]),
    "is_high_pos": ("IS ratio > 1+ε with A > 0 (token fraction)", [M.IS_HIGH_POS]),
    "response_length": ("response length (tokens)", [M.RESPONSE_LENGTH]),
    "masked_frac": ("sequence-masked fraction", [M.SEQ_MASKED]),
    "mismatch_kl": ("sampler/learner mismatch KL (k3)", [M.MISMATCH_KL]),
    "staleness": ("staleness of the trained turns (updates, mean)", [M.STALENESS_MEAN]),
    "learner_wait": ("seconds the learner waited for rollouts", [M.TIME_WAIT]),
    "rollout_busy": ("rollout workers' busy fraction", [M.ASYNC_BUSY]),
}


@dataclass
class RunResult:
    """One run folder, read back."""

    folder: Path
    label: str  # method (+ override) = the run folder's parent name
    algo: str
    seed: int
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)  # "last"/"best" -> summary
    collapse: dict[str, Any] | None = None
    #: "last"/"best" -> "greedy"/"sampled" -> test summary (the run's own eval and its companion)
    by_decoding: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: the rollbacks of ``on_collapse rollback`` (collapse.json): alarm step, step returned to, remedy
    rollbacks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def env_id(self) -> str:
        return self.config.get("env_id", "?")

    @property
    def panel_hash(self) -> str | None:
        hashes = {e.get("panel_hash") for e in self.evals.values()}
        return next(iter(hashes)) if len(hashes) == 1 else None

    @property
    def config_hash(self) -> str:
        keep = {k: v for k, v in self.config.items()
                if k not in ("output_dir", "resume", "torch_threads", "seed", "log_with")}
        text = json.dumps(keep, sort_keys=True, default=str)
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def total(self, key: str) -> float:
        return float(sum(r.get(key, 0.0) for r in self.rows))


def read_test_evals(folder: Path, config: dict[str, Any]
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, dict[str, Any]]]]:
    """A run's test summaries: (checkpoint -> its own eval's summary, checkpoint -> decoding ->
    summary). The own eval's decoding is what its summary says, or, in folders written before
    summaries said it, what ``eval_temperature`` made it; the companion
    (``test_both_decodings``) is ``test-<ckpt>.<greedy|sampled>.summary.json``."""
    evals: dict[str, dict[str, Any]] = {}
    by_decoding: dict[str, dict[str, dict[str, Any]]] = {}
    own = "sampled" if float(config.get("eval_temperature") or 0) > 0 else "greedy"
    for name in ("last", "best"):
        p = folder / "eval" / f"test-{name}.summary.json"
        if p.exists():
            evals[name] = json.loads(p.read_text())
            by_decoding.setdefault(name, {})[evals[name].get("decoding", own)] = evals[name]
        for decoding in DECODINGS:
            p = folder / "eval" / f"test-{name}.{decoding}.summary.json"
            if p.exists():
                by_decoding.setdefault(name, {})[decoding] = json.loads(p.read_text())
    return evals, by_decoding


def read_rollbacks(folder: Path) -> list[dict[str, Any]]:
    """The rollbacks recorded in a run's ``collapse.json`` (none when it never rolled back)."""
    path = folder / "collapse.json"
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("rollbacks", []))


def load_runs(outs: Sequence[str | Path], skipped: list[str] | None = None) -> list[RunResult]:
    """Every finished run folder (``*/seed-*/config.json``) under the given grid folders.

    A run that asked for a final test eval (``test_episodes``) but has none yet is still
    running (or was interrupted): it is left out, and its folder appended to ``skipped``, so a
    report of a grid in progress shows the runs that are done.
    """
    runs = []
    for out in outs:
        root = Path(out)
        if not root.is_dir():
            raise ConfigError(f"arena report: {root} is not a folder; give the --out of "
                              "`arlgym arena run`")
        for cfg_path in sorted(root.glob("*/seed-*/config.json")):
            folder = cfg_path.parent
            config = json.loads(cfg_path.read_text())["config"]
            evals, by_decoding = read_test_evals(folder, config)
            if int(config.get("test_episodes") or 0) > 0 and "last" not in evals:
                if skipped is not None:
                    skipped.append(str(folder))
                continue
            rows = M.read_metrics_jsonl(folder / "metrics.jsonl")
            runs.append(RunResult(folder=folder, label=folder.parent.name,
                                  algo=config.get("algo", folder.parent.name.split("__")[0]),
                                  seed=int(config.get("seed", 0)), config=config, rows=rows,
                                  evals=evals, collapse=detect_collapse(rows),
                                  by_decoding=by_decoding, rollbacks=read_rollbacks(folder)))
    if not runs:
        raise ConfigError(f"arena report: no finished runs under {', '.join(map(str, outs))} "
                          "(expected <out>/<method>/seed-<n>/config.json with its test eval)")
    return runs


def check_panels(runs: Sequence[RunResult]) -> dict[str, str | None]:
    """env id -> the one panel hash of its runs; ``ConfigError`` when runs of an env disagree
    (different task lists, env kwargs or arlgym versions are not comparable)."""
    by_env: dict[str, dict[str | None, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by_env[r.env_id][r.panel_hash].append(f"{r.label}/seed-{r.seed}")
    out = {}
    for env, panels in by_env.items():
        if len(panels) > 1:
            detail = "; ".join(f"panel {h or '(no test eval)'}: {', '.join(v[:4])}"
                               f"{' …' if len(v) > 4 else ''}" for h, v in panels.items())
            raise ConfigError(f"arena report: runs on {env} were evaluated on different panels "
                              f"and cannot share a table ({detail}); report them separately")
        out[env] = next(iter(panels))
    return out


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean over seeds (SE nan for one value)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n == 1:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def pick_checkpoint(run: RunResult, checkpoint: str) -> tuple[str, dict[str, Any] | None]:
    """(checkpoint used, its overall test metrics) for ``checkpoint`` = best | last | auto."""
    if checkpoint in ("best", "auto") and "best" in run.evals:
        return "best", run.evals["best"]["overall"]
    if checkpoint == "best":
        return "best", None
    if "last" in run.evals:
        return "last", run.evals["last"]["overall"]
    # no test eval: the last periodic (validation) eval, if any
    val = [r for r in run.rows if M.EVAL_SUCCESS in r]
    if val:
        return "last (val)", M.summary_of_eval_row(val[-1])
    return "none", None


def _order(labels: Sequence[str]) -> list[tuple[str, str]]:
    """(dimension, label) in Table 3's order; unknown presets go last."""
    def key(label: str) -> tuple[int, int, str]:
        algo = label.split("__")[0]
        dims = list(DIMENSIONS)
        dim = _DIMENSION_OF.get(algo)
        if dim is None:
            return len(dims), 0, label
        return dims.index(dim), DIMENSIONS[dim].index(algo), label
    return [(_DIMENSION_OF.get(lab.split("__")[0], "Other"), lab) for lab in sorted(labels, key=key)]


def build_table(runs: Sequence[RunResult], checkpoint: str = "auto") -> dict[str, Any]:
    """The table's numbers: per env, per method (label), mean ± SE over seeds and more."""
    panels = check_panels(runs)
    envs = sorted(panels)
    by = defaultdict(list)
    for r in runs:
        by[(r.env_id, r.label)].append(r)
    rows = []
    for dim, label in _order({r.label for r in runs}):
        row: dict[str, Any] = {"dimension": dim, "method": label, "envs": {}}
        for env in envs:
            group = sorted(by.get((env, label), []), key=lambda r: r.seed)
            if not group:
                continue
            picks = [pick_checkpoint(r, checkpoint) for r in group]
            succ = [p[1][M.SUMMARY_SUCCESS_RATE] for p in picks if p[1] is not None]
            score = [p[1].get(M.SUMMARY_MEAN_SCORE, float("nan")) for p in picks if p[1] is not None]
            m, se = mean_se(succ)
            sm, sse = mean_se(score)
            collapsed = [{"seed": r.seed, "step": r.collapse["step"]} for r in group if r.collapse]
            decodings = {}
            for d in DECODINGS:  # both decodings of the checkpoint each seed's cell uses
                vals = [r.by_decoding.get(p[0], {}).get(d, {}).get("overall", {}).get(M.SUMMARY_SUCCESS_RATE)
                        for r, p in zip(group, picks, strict=True)]
                vals = [v for v in vals if v is not None]
                dm, dse = mean_se(vals)
                decodings[d] = {"mean": dm, "se": dse, "n": len(vals)}
            row["envs"][env] = {
                "decodings": decodings,
                "rollbacks": [{"seed": r.seed, **x} for r in group for x in r.rollbacks],
                "success_mean": m, "success_se": se, "score_mean": sm, "score_se": sse,
                "per_seed": {r.seed: (p[1] or {}).get(M.SUMMARY_SUCCESS_RATE) for r, p in zip(group, picks, strict=True)},
                "checkpoint": sorted({p[0] for p in picks}),
                "seeds": [r.seed for r in group], "n_eval": len(succ),
                "collapsed": collapsed,
                "steps": [len(r.rows) for r in group],
                "env_steps": mean_se([r.total(M.TURNS) for r in group])[0],
                "tokens": mean_se([r.total(M.TOKENS) for r in group])[0],
            }
        rows.append(row)
    for env in envs:  # % change against GRPO (same override variant when there is one)
        for row in rows:
            cell = row["envs"].get(env)
            if cell is None:
                continue
            variant = row["method"].partition("__")[2]
            base_label = f"grpo__{variant}" if variant else "grpo"
            base = next((r["envs"].get(env) for r in rows if r["method"] == base_label), None)
            if base and base["success_mean"] and not math.isnan(base["success_mean"]):
                cell["vs_grpo_pct"] = 100.0 * (cell["success_mean"] - base["success_mean"]) / base["success_mean"]
            else:
                cell["vs_grpo_pct"] = None
    return {"envs": envs, "panels": panels, "checkpoint": checkpoint, "rows": rows}


def _fmt(m: float, se: float, pct: bool = True) -> str:
    if m is None or math.isnan(m):
        return "–"
    if pct:
        return f"{100 * m:.1f}" + ("" if math.isnan(se) else f" ± {100 * se:.1f}")
    return f"{m:.3f}" + ("" if math.isnan(se) else f" ± {se:.3f}")


def _table_lines(table: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["dimension", "method"]
    webshop = {e for e in table["envs"] if "WebShop" in e}
    for env in table["envs"]:
        short = env.split("/")[-1]
        header += [f"{short} greedy %", f"{short} sampled %", f"{short} vs GRPO"]
        if env in webshop:
            header.append(f"{short} score")
        header += [f"{short} checkpoint", f"{short} seeds", f"{short} collapsed",
                   f"{short} rollbacks", f"{short} env steps", f"{short} tokens"]
    body = []
    for row in table["rows"]:
        line = [row["dimension"], row["method"]]
        for env in table["envs"]:
            c = row["envs"].get(env)
            n = 10 if env in webshop else 9
            if c is None:
                line += ["–"] * n
                continue
            pct = c.get("vs_grpo_pct")
            dec = c.get("decodings", {})
            line += [_fmt(dec[d]["mean"], dec[d]["se"]) if d in dec else "–" for d in DECODINGS]
            line.append("–" if pct is None else f"{pct:+.1f}%")
            if env in webshop:
                line.append(_fmt(c["score_mean"], c["score_se"], pct=False))
            coll = c["collapsed"]
            line += ["/".join(c["checkpoint"]), str(len(c["seeds"])),
                     f"{len(coll)}/{len(c['seeds'])}" + (
                         " (step " + ", ".join(str(x["step"]) for x in coll) + ")" if coll else ""),
                     _rollback_cell(c.get("rollbacks", [])),
                     f"{c['env_steps']:.0f}", f"{c['tokens']:.0f}"]
        body.append(line)
    return header, body


def _rollback_cell(rollbacks: Sequence[dict[str, Any]]) -> str:
    """``0``, or the count and each rollback as seed:alarm step→step returned to (remedy)."""
    if not rollbacks:
        return "0"
    return f"{len(rollbacks)} (" + ", ".join(
        f"s{x['seed']}:{x['alarm_at']}→{x['to_step']} {x.get('remedy') or 'stop'}" for x in rollbacks) + ")"


#: what the table's columns mean (table.md and index.html)
TABLE_NOTE = ("Success on the test panel, mean ± standard error over seeds (percent), under "
              "greedy decoding (one episode a task) and sampled decoding (the runs' eval_* "
              "settings when they sample, else the paper's validation sampling: temperature 0.6, "
              "top-p 0.95, top-k 20, 4 episodes a task); '–': no eval of that decoding "
              "(test_both_decodings false). 'vs GRPO': relative change of the mean of the runs' "
              "own test eval (eval_temperature's decoding). Checkpoint: best-on-validation or "
              "last. Collapsed: seeds whose run the collapse alarm judged collapsed (and where it "
              "began). Rollbacks (on_collapse rollback): seed:alarm step→step returned to, remedy.")


def write_table(table: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    header, body = _table_lines(table)
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(line) + " |" for line in body]
    (folder / "table.md").write_text("\n".join(md) + "\n\n" + TABLE_NOTE + "\n")
    with (folder / "table.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(body)
    return folder / "table.md", folder / "table.csv"


# ------------------------------------------------------------------------------ pictures
def _colors(labels: Sequence[str]) -> dict[str, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab20" if len(labels) > 10 else "tab10"]
    return {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}


def plot_curves(runs: Sequence[RunResult], folder: Path) -> dict[str, Path]:
    """One PNG per metric of :data:`CURVES`: per method the mean over seeds and a ± SE band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    labels = [lab for _d, lab in _order({r.label for r in runs})]
    colors = _colors(labels)
    out = {}
    for name, (title, keys) in CURVES.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        drawn = rolled = False
        for label in labels:
            series = defaultdict(list)  # step -> values over seeds
            for r in runs:
                if r.label != label:
                    continue
                for row in r.rows:
                    for k in keys:
                        if isinstance(row.get(k), (int, float)):
                            series[row["step"]].append(float(row[k]))
            if not series:
                continue
            steps = sorted(series)
            mean = np.array([np.mean(series[s]) for s in steps])
            se = np.array([np.std(series[s], ddof=1) / math.sqrt(len(series[s]))
                           if len(series[s]) > 1 else 0.0 for s in steps])
            ax.plot(steps, mean, color=colors[label], label=label, lw=1.6,
                    marker="o" if len(steps) < 12 else None, ms=3)
            ax.fill_between(steps, mean - se, mean + se, color=colors[label], alpha=0.18, lw=0)
            for x in (x for r in runs if r.label == label for x in r.rollbacks):
                # a rollback: dashed at the alarm's step, dotted at the step the run went back to
                ax.axvline(x["alarm_at"], color=colors[label], ls="--", lw=0.9, alpha=0.8)
                ax.axvline(x["to_step"], color=colors[label], ls=":", lw=0.9, alpha=0.8)
                rolled = True
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set(title=title + " (mean ± SE over seeds)", xlabel="step"
               + ("; rollbacks: alarm --, back to ··" if rolled else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out[name] = path
    return out


def plot_is_analysis(run: RunResult, path: Path) -> Path | None:
    """Stacked areas of the IS groups' token share and KL share per step (one run)."""
    rows = [r for r in run.rows if any(k.startswith(M.IS_GROUPS) for k in r)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = [r[M.STEP] for r in rows]
    tok = np.array([[r.get(M.is_group_key(g, "tokens"), 0.0) for r in rows] for g in IS_GROUPS])
    kl = np.array([[r.get(M.is_group_key(g, "kl"), 0.0) for r in rows] for g in IS_GROUPS])
    kl_share = kl / np.maximum(kl.sum(axis=0, keepdims=True), 1e-12)
    cmap = matplotlib.colormaps["tab10"]
    colors = [cmap(i) for i in range(len(IS_GROUPS) - 1)] + [(0.8, 0.8, 0.8, 1.0)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharex=True)
    labels = [g.replace("_", " ").replace("ratio ", "r").replace("ent ", "H") for g in IS_GROUPS]
    axes[0].stackplot(steps, tok, labels=labels, colors=colors, alpha=0.85)
    axes[0].set(title="share of response tokens", xlabel="step", ylim=(0, 1))
    if kl.sum() > 0:
        axes[1].stackplot(steps, kl_share, colors=colors, alpha=0.85)
        axes[1].set(title="share of the KL to the reference", xlabel="step", ylim=(0, 1))
    else:
        axes[1].text(0.5, 0.5, "no reference model (kl_coef = 0)", ha="center",
                     transform=axes[1].transAxes)
    fig.suptitle(f"IS analysis — {run.label} seed {run.seed} "
                 "(advantage sign × IS ratio vs 1 × entropy vs median)", fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center right", fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_flows(runs: Sequence[RunResult], folder: Path, checkpoint: str) -> dict[str, dict[str, str]]:
    """Per method: Sankey HTML + PNG and the transition heat map of its test episodes."""
    by = defaultdict(list)
    for r in runs:
        name, _ = pick_checkpoint(r, checkpoint)
        path = r.folder / "eval" / f"test-{name}.jsonl"
        if path.exists():
            by[(r.env_id, r.label)].extend(load_jsonl(path))
    out = {}
    for (env, label), trajs in sorted(by.items()):
        stem = label if len({e for e, _ in by}) == 1 else f"{env.split('/')[-1]}__{label}"
        flows = sankey_flows(trajs)
        title = f"{label} on {env}"
        out[stem] = {
            "html": str(write_sankey_html(flows, folder / "sankey" / f"{stem}.html", title)),
            "png": str(plot_sankey_png(flows, folder / "sankey" / f"{stem}.png", title)),
            "heatmap": str(plot_transitions(pattern_report(trajs), folder / "patterns" / f"{stem}.png")),
        }
    return out


# ------------------------------------------------------------------------------ html
def _index_html(table: dict[str, Any], folder: Path, curves: dict[str, Path],
                is_plots: dict[str, Path], flows: dict[str, dict[str, str]],
                runs: Sequence[RunResult]) -> str:
    header, body = _table_lines(table)
    rel = lambda p: html.escape(str(Path(p).relative_to(folder)))  # noqa: E731
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>arlgym arena report</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 7px}th{background:#eee}img{max-width:48%;margin:4px}"
             ".bad{color:#b00}</style></head><body>",
             "<h1>arlgym arena report</h1>",
             f"<p>{len(runs)} runs; panels: " + ", ".join(
                 f"{html.escape(e)} = <code>{p}</code>" for e, p in table["panels"].items()) + "</p>",
             "<h2>Table (paper Table 3 layout)</h2><table><tr>"
             + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for line in body:
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>")
    parts.append(f"</table><p>{html.escape(TABLE_NOTE)} <a href='table.md'>table.md</a> · "
                 "<a href='table.csv'>table.csv</a> · <a href='report.json'>report.json</a></p>")
    parts.append("<h2>Collapse verdicts</h2><ul>")
    for r in sorted(runs, key=lambda r: (r.label, r.seed)):
        if r.collapse:
            parts.append(f"<li class='bad'>{html.escape(r.label)} seed {r.seed}: collapsed at step "
                         f"{r.collapse['step']} — {html.escape(r.collapse['reason'])}</li>")
        else:
            parts.append(f"<li>{html.escape(r.label)} seed {r.seed}: healthy</li>")
        for x in r.rollbacks:
            parts.append(f"<li class='bad'>{html.escape(r.label)} seed {r.seed}: rolled back at "
                         f"step {x['alarm_at']} to step {x['to_step']} "
                         f"({html.escape(str(x.get('remedy') or 'stopped'))})</li>")
    parts.append("</ul><h2>Training curves</h2>")
    parts += [f"<img src='{rel(p)}' alt='{html.escape(n)}'>" for n, p in curves.items()]
    parts.append("<h2>IS analysis (paper Figs. 3–4)</h2>")
    parts += [f"<img src='{rel(p)}' alt='{html.escape(n)}'>" for n, p in is_plots.items()]
    parts.append("<h2>Action transitions (paper Appendix F)</h2>")
    for name, f in flows.items():
        parts.append(f"<h3>{html.escape(name)}</h3><a href='{rel(f['html'])}'>interactive "
                     f"Sankey</a><br><img src='{rel(f['png'])}' alt='sankey {html.escape(name)}'>"
                     f"<img src='{rel(f['heatmap'])}' alt='heat map {html.escape(name)}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(outs: Sequence[str | Path], checkpoint: str = "auto",
                 report_dir: str | Path | None = None) -> Path:
    """Everything in the module docstring; returns the report folder."""
    if checkpoint not in ("auto", "best", "last"):
        raise ConfigError(f"--checkpoint must be auto, best or last, got {checkpoint!r}")
    skipped: list[str] = []
    runs = load_runs(outs, skipped)
    folder = Path(report_dir) if report_dir else Path(outs[0]) / "report"
    folder.mkdir(parents=True, exist_ok=True)
    table = build_table(runs, checkpoint)
    write_table(table, folder)
    curves = plot_curves(runs, folder / "curves")
    is_plots = {}
    for r in sorted(runs, key=lambda r: (r.label, r.seed)):
        p = plot_is_analysis(r, folder / "is_analysis" / f"{r.label}__seed-{r.seed}.png")
        if p is not None:
            is_plots[f"{r.label} seed {r.seed}"] = p
    flows = write_flows(runs, folder, checkpoint)
    report = {
        "table": table,
        "skipped_unfinished": skipped,
        "runs": [{"run": f"{r.label}/seed-{r.seed}", "folder": str(r.folder), "algo": r.algo,
                  "seed": r.seed, "env_id": r.env_id, "config_hash": r.config_hash,
                  "panel_hash": r.panel_hash, "steps": len(r.rows),
                  "collapse": r.collapse, "verdict": "collapsed" if r.collapse else "healthy",
                  "test": {k: v["overall"] for k, v in r.evals.items()}}
                 for r in sorted(runs, key=lambda r: (r.label, r.seed))],
        "curves": {k: str(v) for k, v in curves.items()},
        "is_analysis": {k: str(v) for k, v in is_plots.items()},
        "flows": flows,
    }
    (folder / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (folder / "index.html").write_text(_index_html(table, folder, curves, is_plots, flows, runs))
    return folder
