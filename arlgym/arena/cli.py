"""``arlgym arena run`` and ``arlgym arena report`` (plugged into the ``arlgym`` command)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from arlgym.clikit import HelpFormatter
from arlgym.errors import ConfigError, ModelNotFound
from arlgym.rl.presets import preset_list

__all__ = ["add_subparser"]

_RUN_HELP = """\
Run a grid of presets x overrides x seeds from one env config and one start checkpoint, with
one equal budget (--steps optimizer steps) for every run. Each run is an ordinary trainer job
in <out>/<algo>[__<override>]/seed-<n>/ (train.yaml, metrics.jsonl, checkpoints, eval results).
Rerunning skips finished runs and resumes interrupted ones from their newest checkpoint, so a
grid may be killed at any moment. --print-commands writes one `accelerate launch` command per
unfinished run instead of running them, for a cluster scheduler (Slurm array, Ray jobs).
"""


class _RawHelp(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The description as written, the options with their defaults (arlgym's help style)."""


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _seeds(text: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _presets(text: str) -> list[str]:
    """``--algos``: known presets only, a misspelt one named with a did-you-mean at parse time."""
    try:
        return preset_list("--algos", text, "arlgym arena run")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).rsplit(". See ", 1)[0]) from None  # error() adds it


def _load_base(args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    from arlgym.arena.grid import parse_override, parse_value

    base: dict[str, Any] = {}
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise ConfigError(f"--config {args.config}: no such file")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"--config {args.config}: not valid YAML ({e})") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"--config {args.config}: expected a mapping of TrainConfig fields")
        arena = loaded.pop("arena", {}) or {}
        base.update(loaded)
        for key in ("algos", "seeds", "steps", "overrides"):
            if key in arena and getattr(args, key) in (None, []):
                value = arena[key]
                if key == "overrides":
                    value = [f"{k}=" + ",".join(f"{f}:{v}" for f, v in (vals or {}).items())
                             for k, vals in value.items()]
                elif key == "algos" and isinstance(value, str):
                    value = _csv(value)
                setattr(args, key, value)
    for item in args.set or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE, e.g. --set lr=1e-4")
        base[key.strip()] = parse_value(raw)
    if args.model:
        base["model"] = args.model
    if args.steps is not None:
        base["max_steps"] = int(args.steps)
    base.setdefault("max_steps", 10)
    base.setdefault("save_steps", 1)
    base.setdefault("log_with", "none")
    args.overrides_parsed = dict(parse_override(o) for o in (args.overrides or []))
    return base


def _spec(args: argparse.Namespace):
    from arlgym.arena.grid import ArenaSpec

    base = _load_base(args)
    algos = args.algos if isinstance(args.algos, list) else _csv(args.algos or "")
    seeds = args.seeds if isinstance(args.seeds, list) else [0]
    return ArenaSpec(out=args.out, algos=algos, seeds=seeds, base=base,
                     overrides=args.overrides_parsed)


def _check_start_model(name: Any) -> None:
    """The grid's start checkpoint must exist before any run starts: otherwise every run fails
    the same way, one after the other, each in its own log."""
    from arlgym.models import _pretrained_source

    if not isinstance(name, str) or name in ("tiny", "tiny-vl", "smollm2-135m"):
        return
    path = Path(name).expanduser()
    if path.is_dir():
        return
    if "/" in name and Path(name.split("/")[0]).expanduser().is_dir():  # a path, not a hub id
        raise ModelNotFound(f"--model {name}: no such directory. Fix: give the checkpoint "
                            f"folder (e.g. the --output-dir of `arlgym-sft train`)")
    _pretrained_source(name)  # a hub id: in the local cache when offline


def _cmd_run(args: argparse.Namespace) -> int:
    from arlgym.arena.grid import print_commands, run_grid

    spec = _spec(args)
    spec.validate()
    _check_start_model(spec.base.get("model", "tiny"))
    if args.print_commands:
        lines = print_commands(spec, launcher=args.launcher)
        text = "\n".join(lines) + ("\n" if lines else "")
        if args.print_commands == "-":
            sys.stdout.write(text)
        else:
            Path(args.print_commands).write_text(text)
            print(f"arena: {len(lines)} commands -> {args.print_commands}")
        return 0
    results = run_grid(spec, jobs=args.jobs)
    failed = {k: v for k, v in results.items() if v.startswith("failed")}
    print(f"arena: {len(results) - len(failed)}/{len(results)} runs finished in {args.out}"
          + (f"; failed: {', '.join(failed)} (rerun to retry)" if failed else ""))
    if not failed:
        print(f"next: arlgym arena report {args.out}")
    return 1 if failed else 0


def _cmd_report(args: argparse.Namespace) -> int:
    from arlgym.arena.report import write_report

    folder = write_report(args.outs, checkpoint=args.checkpoint, report_dir=args.report_dir)
    print((folder / "table.md").read_text())
    import json

    skipped = json.loads((folder / "report.json").read_text())["skipped_unfinished"]
    if skipped:
        print(f"left out {len(skipped)} unfinished run(s) (no test eval yet): "
              + ", ".join(Path(p).parent.name + "/" + Path(p).name for p in skipped))
    print(f"report: {folder / 'index.html'}")
    return 0


def add_subparser(sub: Any) -> None:
    arena = sub.add_parser("arena", help="compare RL designs: run a grid, report it like Table 3",
                           description="Controlled comparisons of policy-gradient designs "
                                       "(ARLArena §3-4). See docs/arena.md.")
    asub = arena.add_subparsers(dest="arena_command", required=True)
    p = asub.add_parser("run", help="run a grid of presets x seeds (resumable)",
                        description=_RUN_HELP, formatter_class=_RawHelp)
    p.add_argument("--config", default=None,
                   help="YAML of TrainConfig fields shared by every run (env, model = the start "
                        "checkpoint, batch, lr, eval panel...), optionally with an `arena:` "
                        "section holding algos/seeds/steps/overrides; e.g. "
                        "configs/arena/sokoban-tiny-cpu.yaml")
    p.add_argument("--algos", type=_presets, default=None,
                   help="comma-separated presets, e.g. grpo,gspo,cispo,sampo (see "
                        "`arlgym train --help`, --algo)")
    p.add_argument("--seeds", type=_seeds, default=None, help="comma-separated seeds (default: 0)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimizer steps of every run: the equal budget (default: the config's "
                        "max_steps, else 10)")
    p.add_argument("--model", default=None, help="start checkpoint for every run (overrides the config)")
    p.add_argument("--override", dest="overrides", action="append", default=None, metavar="NAME=F:V[,F:V]",
                   help="a variant axis, repeatable: every algo runs once per override, in "
                        "<algo>__NAME/ (e.g. the staleness axis: --override fresh=mini_batch_size:0 "
                        "--override stale4=mini_batch_size:16)")
    p.add_argument("--set", action="append", default=None, metavar="FIELD=VALUE",
                   help="override one base TrainConfig field, repeatable (e.g. --set lr=1e-4)")
    p.add_argument("--out", default="runs/arena", help="grid folder (default: runs/arena)")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at once, as separate processes; each gets cores/jobs torch threads "
                        "(default: 1). On a small CPU box use --jobs = cores: one thread per run "
                        "is fastest for tiny models and never stalls on busy cores")
    p.add_argument("--print-commands", nargs="?", const="-", default=None, metavar="FILE",
                   help="write one command per unfinished run (to FILE, or stdout) instead of "
                        "running them; each run's train.yaml is written first")
    p.add_argument("--launcher", choices=("accelerate", "python"), default="accelerate",
                   help="command style of --print-commands (default: accelerate launch)")
    p.set_defaults(func=_cmd_run)

    p = asub.add_parser("report", help="table, curves, IS analysis, Sankey and index.html of grids",
                        description="Read one or more grid folders and write OUT/report/: table.md "
                                    "and table.csv (Table 3 layout, mean ± SE over seeds, % vs "
                                    "GRPO), curves/*.png, is_analysis/*.png, sankey/*.html+png, "
                                    "report.json and index.html. Refuses runs evaluated on "
                                    "different task panels.")
    p.add_argument("outs", nargs="+", help="grid folders written by `arlgym arena run`")
    p.add_argument("--checkpoint", choices=("auto", "best", "last"), default="auto",
                   help="which checkpoint's test eval fills the table: best-on-validation, last, "
                        "or auto = best where the run kept one (default)")
    p.add_argument("--report-dir", default=None, help="default: <first OUT>/report")
    p.set_defaults(func=_cmd_report)
