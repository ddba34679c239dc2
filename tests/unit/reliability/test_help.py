"""``--help`` of every command and subcommand works and prints every option.

The parsers are walked (so a new subcommand or flag is covered without editing this file);
each ``--help`` is run through ``parse_args`` as a user would, and the trainer's entry script
once in a real subprocess (``python trainers/sampo.py --help`` crashed on a ``%`` in a help
text).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _parsers():
    from arlgym.cli import build_parser as arlgym_parser
    from arlgym.rl.cli import build_parser as sampo_parser
    from arlgym.sft.cli import build_parser as sft_parser

    return {"arlgym": arlgym_parser(), "arlgym-sft": sft_parser(), "sampo": sampo_parser()}


def _walk(name, parser, path=()):
    """(command words, parser) for a parser and all its subcommands, depth first."""
    yield name, path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _walk(name, subparser, (*path, sub))


def _all_commands():
    return [(name, path, p) for name, parser in _parsers().items()
            for name, path, p in _walk(name, parser)]


def _help_of(parser, path, root):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        root.parse_args([*path, "--help"])
    assert exit_info.value.code == 0
    return out.getvalue()


def test_every_command_and_subcommand_prints_every_option():
    roots = _parsers()
    commands = _all_commands()
    names = {" ".join((name, *path)) for name, path, _ in commands}
    # the commands the README documents are all there (more may come)
    assert {"arlgym", "arlgym play", "arlgym eval", "arlgym envs", "arlgym patterns",
            "arlgym quickstart", "arlgym-sft", "arlgym-sft collect", "arlgym-sft stats",
            "arlgym-sft train", "sampo", "arlgym train"} <= names
    for name, path, parser in commands:
        text = _help_of(parser, path, roots[name])
        label = " ".join((name, *path))
        assert "usage:" in text, label
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices:
                    assert sub in text, f"{label} --help does not list subcommand {sub}"
            elif action.help != argparse.SUPPRESS:
                shown = action.option_strings or [action.metavar or action.dest]
                for opt in shown:
                    assert opt in text, f"{label} --help does not show {opt}"


def test_trainer_help_shows_every_config_field():
    import dataclasses

    from arlgym.rl.config import TrainConfig

    text = _help_of(None, [], _parsers()["sampo"])
    for f in dataclasses.fields(TrainConfig):
        assert f"--{f.name.replace('_', '-')}" in text
    assert "~30% more" in text or "%" in text  # a literal % in a help text prints as itself


def test_trainer_entry_script_help_in_a_subprocess():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "trainers" / "sampo.py"), "--help"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--max-steps" in proc.stdout and "Traceback" not in proc.stderr
