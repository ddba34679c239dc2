"""Command line of the RL trainer: every :class:`TrainConfig` field is a flag; ``--config``
loads a YAML file of the same fields first, flags override it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

from arlgym.clikit import ArgumentParser, add_version, parse_kwarg_pairs
from arlgym.core.validation import did_you_mean
from arlgym.errors import ArlgymError, ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.config import TrainConfig

__all__ = ["parse_train_config", "main", "add_subparser"]


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({e.msg}); write e.g. "
                                         "'{\"max_steps\": 10}'") from None


def _converter(tp: Any):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _converter(args[0])
    if tp is bool:
        return _bool
    if tp in (int, float, str):
        return tp
    if tp is dict or origin is dict:
        return _json
    return str


PROG = "arlgym train"


def _default_text(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    return "preset's" if value is None else str(value)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """Every TrainConfig field as ``--field-name`` (``--field_name`` accepted too); a bool
    field given alone (``--save-best``) means true."""
    p = ArgumentParser(
        prog=prog,
        description="RL training of LLM agents with SAMPO or a baseline preset (arlgym). The same "
                    "trainer runs as `arlgym train`, `python -m arlgym.rl` or "
                    "`accelerate launch -m arlgym.rl` (several processes or GPUs). Flags are "
                    "spelt --like-this or --like_this (the YAML field names); a --config YAML "
                    "file is read first and flags override it.")
    add_version(p)
    p.add_argument("--config", default=None, help="YAML file with TrainConfig fields (default: none)")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="one env keyword, repeatable; added to env_kwargs (as in `arlgym eval`)")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        # argparse %-formats help texts: a literal % (e.g. "~30% more compute") must be doubled
        text = f.metadata.get("help", "").replace("%", "%%")
        text += f" (default: {_default_text(default)})".replace("%", "%%")
        converter = _converter(hints[f.name])
        extra: dict[str, Any] = {}
        if converter is _bool:
            extra = {"nargs": "?", "const": True, "metavar": "BOOL"}
        elif hints[f.name] is dict or typing.get_origin(hints[f.name]) is dict:
            extra = {"metavar": "JSON"}
        p.add_argument(f"--{f.name}", dest=f.name, type=converter, default=argparse.SUPPRESS,
                       help=text, **extra)
    return p


def parse_train_config(argv: list[str] | None = None, prog: str = PROG) -> TrainConfig:
    return config_from_args(vars(build_parser(prog).parse_args(argv)))


def config_from_args(args: dict[str, Any]) -> TrainConfig:
    """The TrainConfig of parsed flags: ``--config``'s YAML first, the flags given over it."""
    args = {k: v for k, v in args.items() if k not in ("command", "func")}
    values: dict[str, Any] = {}
    config = args.pop("config", None)
    pairs = args.pop("env_kwarg", [])
    if config:
        import yaml

        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"--config {config}: no such file. Fix: give the path of a YAML "
                              "file of TrainConfig fields (see configs/)")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as e:
            raise ConfigError(f"{config}: not a UTF-8 text file ({e.reason}). Fix: give a YAML "
                              "file") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"{config}: YAML syntax error{where}: {problem}. Fix: write one "
                              "`field: value` per line (see configs/ for examples)") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{config}: expected a mapping of TrainConfig fields (`field: "
                              f"value` lines), got a {type(loaded).__name__}")
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        for key in loaded:
            if key not in known:
                raise ConfigError(f"{config}: unknown field {key!r}{did_you_mean(key, known)}. "
                                  f"Fix: see `{PROG} --help` for the fields")
        values.update(loaded)
    values.update(args)
    if pairs:
        values["env_kwargs"] = {**(values.get("env_kwargs") or {}), **parse_kwarg_pairs(pairs)}
    return TrainConfig(**values)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_training(lambda: parse_train_config(argv, prog), prog)


def run_training(make_config: Any, prog: str = PROG) -> int:
    """Build the config, refuse a folder of other settings, train; user errors as one line."""
    try:
        cfg = make_config()
        from arlgym.rundir import check_train_dir, record_train_settings

        check_train_dir(cfg)  # a folder holding a run of other settings: refused before any work
        from arlgym.rundir import no_trace_on_failure, prepare_train_rerun

        status = prepare_train_rerun(cfg)  # the same command continues, or says it is finished
        speaks = os.environ.get("RANK", "0") == "0"  # under accelerate launch: one line, not one a rank
        if status == "finished":
            if speaks:
                print(f"finished: {cfg.output_dir} holds this run, done ({cfg.max_steps} steps); "
                      "nothing to do. To train again, choose another --output-dir")
            return 0
        if status == "partial" and speaks:
            print(f"continuing the run in {cfg.output_dir} from its newest checkpoint",
                  flush=True)
        from arlgym.rl.trainer import Trainer  # checks the env kwargs before it loads a model

        with no_trace_on_failure(cfg.output_dir):
            trainer = Trainer(cfg)
            if trainer.accelerator.is_main_process:
                record_train_settings(cfg)
            history = trainer.train()
    except ArlgymError as e:
        print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)  # one line
        return 2
    if trainer.accelerator.is_main_process and history:
        last = history[-1]
        print(f"done: {len(history)} steps this run; last step success "
              f"{last[M.SUCCESS_RATE]:.3f}, format-valid {last[M.FORMAT_VALID]:.3f} "
              f"-> {cfg.output_dir}")
    return 0


def add_subparser(sub: Any) -> None:
    """``arlgym train ...``: the trainer under the installed ``arlgym`` command, with the same
    flags as ``python -m arlgym.rl`` (the trainer's parser is its parent)."""
    trainer = build_parser()
    p = sub.add_parser("train", parents=[trainer], add_help=False, description=trainer.description,
                       help="RL-train a model with SAMPO or a baseline preset (`arlgym train --help`)")
    p.set_defaults(func=lambda args: run_training(lambda: config_from_args(vars(args))))
