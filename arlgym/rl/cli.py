"""Command line of the RL trainer: every :class:`TrainConfig` field is a flag; ``--config``
loads a YAML file of the same fields first, flags override it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from arlgym.core.validation import did_you_mean
from arlgym.errors import ArlgymError, ConfigError
from arlgym.rl.config import TrainConfig

__all__ = ["parse_train_config", "main"]


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


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
        return json.loads
    return str


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trainers/sampo.py",
        description="RL training of LLM agents with SAMPO or a baseline preset (arlgym). "
                    "Run under `accelerate launch` for several processes.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default=None, help="YAML file with TrainConfig fields")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        # argparse %-formats help texts: a literal % (e.g. "~30% more compute") must be doubled
        p.add_argument(f"--{f.name}", type=_converter(hints[f.name]), default=argparse.SUPPRESS,
                       help=f.metadata.get("help", "").replace("%", "%%"))
    return p


def parse_train_config(argv: list[str] | None = None) -> TrainConfig:
    args = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    config = args.pop("config", None)
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
                                  "Fix: see `trainers/sampo.py --help` for the fields")
        values.update(loaded)
    values.update(args)
    return TrainConfig(**values)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_train_config(argv)
        from arlgym.rundir import check_train_dir, record_train_settings

        check_train_dir(cfg)  # a folder holding a run of other settings: refused before any work
        from arlgym.rl.trainer import Trainer  # checks the env kwargs before it loads a model

        trainer = Trainer(cfg)
        if trainer.accelerator.is_main_process:
            record_train_settings(cfg)
        history = trainer.train()
    except ArlgymError as e:
        print(f"arlgym train: error: {' '.join(str(e).split())}", file=sys.stderr)  # one line
        return 2
    if trainer.accelerator.is_main_process and history:
        last = history[-1]
        print(f"done: {len(history)} steps this run; last step success "
              f"{last['env/success_rate']:.3f}, format-valid {last['env/format_valid_ratio']:.3f} "
              f"-> {cfg.output_dir}")
    return 0
