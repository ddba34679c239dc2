"""One command-line convention across `arlgym`, `arlgym-sft` and the trainer: options spelt
with dashes, the underscore spelling accepted as an alias; env kwargs given the same two ways
everywhere; bare boolean flags; defaults in every --help; --version; one-line errors with a
did-you-mean."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys

import pytest

import arlgym
from arlgym.cli import build_parser as arlgym_parser
from arlgym.clikit import env_kwargs_of
from arlgym.rl.cli import parse_train_config
from arlgym.sft.cli import build_parser as sft_parser


def _parse(parser, argv):
    return vars(parser.parse_args(argv))


@pytest.mark.parametrize("dashes, underscores", [
    (["eval", "--env", "arl/Sokoban-v0", "--max-new-tokens", "8", "--batch-size", "2",
      "--samples-per-task", "3", "--no-progress"],
     ["eval", "--env", "arl/Sokoban-v0", "--max_new_tokens", "8", "--batch_size=2",
      "--samples_per_task", "3", "--no_progress"]),
    (["quickstart", "--rl-lr", "1e-4", "--sft-steps", "3", "--allow-short"],
     ["quickstart", "--rl_lr", "1e-4", "--sft_steps=3", "--allow_short"]),
])
def test_arlgym_accepts_both_spellings(dashes, underscores):
    a, b = _parse(arlgym_parser(), dashes), _parse(arlgym_parser(), underscores)
    assert a.pop("func") == b.pop("func") and a == b


def test_sft_accepts_both_spellings():
    a = _parse(sft_parser(), ["train", "--output-dir", "x", "--max-steps", "2", "--lora-r", "4"])
    b = _parse(sft_parser(), ["train", "--output_dir", "x", "--max_steps", "2", "--lora_r=4"])
    assert a.pop("func") == b.pop("func") and a == b and a["output_dir"] == "x"


def test_trainer_accepts_both_spellings_bare_booleans_and_env_kwargs_like_eval():
    a = parse_train_config(["--output-dir", "x", "--save-best", "--eval-steps", "1",
                            "--env-kwargs", '{"max_steps": 3}', "--env-kwarg", "dim_room=7"])
    b = parse_train_config(["--output_dir", "x", "--save_best", "true", "--eval_steps=1",
                            "--env_kwarg", "dim_room=7", "--env_kwarg", "max_steps=3"])
    assert a == b
    assert a.save_best is True and a.output_dir == "x"
    assert a.env_kwargs == {"max_steps": 3, "dim_room": 7}
    assert parse_train_config(["--save-best", "false"]).save_best is False
    # the same two forms in `arlgym eval`, merged the same way
    args = arlgym_parser().parse_args(["eval", "--env", "arl/Sokoban-v0", "--env-kwargs",
                                       '{"max_steps": 3}', "--env-kwarg", "dim_room=7"])
    assert env_kwargs_of(args) == {"max_steps": 3, "dim_room": 7}


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120)


def test_version_of_every_command():
    for argv, prog in ((["arlgym.cli"], "arlgym"), (["arlgym.sft.cli"], "arlgym-sft"),
                       (["arlgym.cli", "train"], "arlgym train"), (["arlgym.rl"], "arlgym train")):
        proc = _run(*argv, "--version")
        assert proc.returncode == 0 and proc.stdout.strip() == f"{prog} {arlgym.__version__}", proc


def test_the_trainer_is_an_arlgym_subcommand():
    proc = _run("arlgym.cli", "train", "--help")
    assert proc.returncode == 0 and "--output-dir" in proc.stdout and "(default: runs/rl)" in proc.stdout
    assert "accelerate launch -m arlgym.rl" in " ".join(proc.stdout.split())
    bad = _run("arlgym.cli", "train", "--algo", "nope", "--log-with", "none")
    assert bad.returncode == 2 and bad.stderr.startswith("arlgym train: error:")
    assert "sampo:" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_misspelt_option_is_one_line_with_a_did_you_mean():
    for argv, hint in ((["arlgym.cli", "eval", "--env", "arl/Sokoban-v0", "--episdoes", "3"], "--episodes"),
                       (["arlgym.rl", "--lrr", "1e-4"], "--lr"),
                       (["arlgym.sft.cli", "collect", "--group-sise", "2"], "--group-size")):
        proc = _run(*argv)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert f"did you mean '{hint}'?" in lines[0]


def _walk(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def test_every_help_shows_the_defaults():
    from arlgym.rl.cli import build_parser as trainer_parser

    for root in (arlgym_parser(), sft_parser(), trainer_parser()):
        for path, parser in _walk(root):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
                root.parse_args([*path, "--help"])
            text = " ".join(out.getvalue().split())
            assert "%%" not in text, path  # a literal %% (arena report) is a slip
            for action in parser._actions:
                default = action.default
                if (not action.option_strings or action.help == argparse.SUPPRESS
                        or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
                        or default in (None, False, [])):
                    continue
                help_text = " ".join((action.help or "").split()).replace("%%", "%")
                assert "default" in help_text.lower() or f"(default: {default})" in text, \
                    (path, action.option_strings)
