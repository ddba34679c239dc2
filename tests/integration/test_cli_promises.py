"""The README's promises for every command line, checked on every (sub)command there is:
``--version`` everywhere, one-line mistakes with a did-you-mean drawn from *that* command's own
options or values and a pointer to its own ``--help``, no silent abbreviations, every default
shown (zeros included), descriptions true to the defaults.

The walk builds the real parser trees (``arlgym``, ``arlgym-sft``, ``python -m arlgym.rl``), so
a subcommand added later is checked without a line here."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys

import pytest

from arlgym import __version__
from arlgym.cli import build_parser as arlgym_parser
from arlgym.clikit import HelpFormatter
from arlgym.rl.cli import build_parser as train_parser
from arlgym.sft.cli import build_parser as sft_parser

ROOTS = {"arlgym": arlgym_parser, "arlgym-sft": sft_parser, "arlgym-train": train_parser}
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(argv prefix that reaches a parser, that parser) for the root and every subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _tree(sub, (*path, name))


COMMANDS = [(root, path) for root, build in ROOTS.items() for path, _ in _tree(build())]


def _ids(case):
    return " ".join((case[0], *case[1]))


def _parser(root: str, path: tuple[str, ...]) -> argparse.ArgumentParser:
    return dict(_tree(ROOTS[root]()))[path]


def _exit(root: str, argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        ROOTS[root]().parse_args(argv)
    out, err = capsys.readouterr()
    return e.value.code, out, err


def _own_long_options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({o for a in parser._actions for o in a.option_strings
                   if o.startswith("--") and o not in ("--help", "--version")})


def _required_fill(parser: argparse.ArgumentParser) -> list[str] | None:
    """Values for the parser's required arguments (so the parse reaches the misspelt option),
    or None where a subcommand is required (that parser's own mistakes are its choices)."""
    fill: list[str] = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction) or a.nargs == argparse.REMAINDER:
            return None
        if not a.required:
            continue
        value = str(next(iter(a.choices))) if a.choices else "x"
        fill += [value] if not a.option_strings else [a.option_strings[0], value]
    return fill


def test_the_walk_covers_every_command_the_issue_names():
    names = {_ids(c) for c in COMMANDS}
    for must in ("arlgym", "arlgym eval", "arlgym play", "arlgym envs", "arlgym patterns",
                 "arlgym quickstart", "arlgym train", "arlgym arena", "arlgym arena run",
                 "arlgym arena report", "arlgym serve", "arlgym-sft collect",
                 "arlgym-sft train", "arlgym-sft stats", "arlgym-train"):
        assert must in names, sorted(names)


@pytest.mark.parametrize("case", COMMANDS, ids=_ids)
def test_version_on_every_command(case, capsys):
    root, path = case
    code, out, _ = _exit(root, [*path, "--version"], capsys)
    assert code == 0
    assert out == f"{_parser(root, path).prog} {__version__}\n"


@pytest.mark.parametrize("case", COMMANDS, ids=_ids)
def test_help_on_every_command_shows_every_default(case, capsys):
    root, path = case
    code, out, _ = _exit(root, [*path, "--help"], capsys)
    assert code == 0 and out.startswith("usage: ")
    parser = _parser(root, path)
    formatter = HelpFormatter(parser.prog)
    for a in parser._actions:
        if (not a.option_strings or a.nargs == 0 or a.default is None or a.default is False
                or a.default is argparse.SUPPRESS or a.default == []):
            continue  # a flag, or no default to show
        text = formatter._get_help_string(a)
        assert "default" in text.lower(), (a.option_strings, a.default, text)


#: commands that take options of their own (a command made only of subcommands, or `envs`, has
#: none: a group's mistakes are its choices, tested below)
OPTION_COMMANDS = [c for c in COMMANDS if _required_fill(_parser(*c)) is not None
                   and _own_long_options(_parser(*c))]


@pytest.mark.parametrize("case", OPTION_COMMANDS, ids=_ids)
def test_a_misspelt_option_is_that_commands_mistake(case, capsys):
    root, path = case
    parser = _parser(root, path)
    own = _own_long_options(parser)
    fill = _required_fill(parser)
    option = max(own, key=len)
    typo = option[:4] + option[5:]  # one letter dropped: --episodes -> --epsodes
    code, out, err = _exit(root, [*path, *fill, typo], capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{parser.prog}: error: unrecognized arguments: {typo}")
    assert lines[0].endswith(f"See `{parser.prog} --help`")
    suggested = re.search(r"did you mean '([^']+)'", lines[0])
    assert suggested and suggested.group(1) in own, lines[0]

    # abbreviations are off: a prefix of an option is a mistake, not that option
    prefix = next((o[:-1] for o in own if o[:-1] not in own and len(o) > 4), None)
    if prefix:
        code, _, err = _exit(root, [*path, *fill, prefix, "1"], capsys)
        assert code == 2 and "unrecognized arguments" in err and "did you mean" in err


def test_did_you_mean_never_names_another_commands_option(capsys):
    # serve has no --episodes; train has --test-episodes but no --episodes
    _, _, err = _exit("arlgym", ["serve", "--episods"], capsys)
    assert "--episodes" not in err and "See `arlgym serve --help`" in err
    _, _, err = _exit("arlgym", ["train", "--episods"], capsys)
    assert "'--episodes'" not in err and "See `arlgym train --help`" in err
    _, _, err = _exit("arlgym", ["train", "--max-step", "3"], capsys)
    assert "did you mean '--max-steps'" in err


@pytest.mark.parametrize("argv, guess", [
    (["trian"], "train"),
    (["arena", "rn"], "run"),
    (["arena", "run", "--algos", "grpo,sampoo"], "sampo"),
    (["arena", "report", "x", "--checkpoint", "bset"], "best"),
])
def test_a_misspelt_choice_gets_a_did_you_mean(argv, guess, capsys):
    code, _, err = _exit("arlgym", argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"did you mean '{guess}'" in err and err.strip().endswith("--help`")


def _cli(*args: str, module: str = "arlgym.cli") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=300, env=ENV)


@pytest.mark.parametrize("argv, wants", [
    (["play", "arl/Sokoban-v0", "--policy", "rando"], ["did you mean 'random'", "See `arlgym play --help`"]),
    (["eval", "--env", "arl/Sokoban-v0", "--policy", "expret"], ["did you mean 'expert'"]),
    (["quickstart", "--teacher", "foo"], ["greedy", "expert", "slips:<p>:greedy|expert"]),
    (["quickstart", "--teacher", "expret"], ["did you mean 'expert'"]),
    (["quickstart", "--rl-algos", "grpo,sampoo"], ["did you mean 'sampo'"]),
    (["play", "arl/Sokobn-v0"], ["did you mean 'arl/Sokoban-v0'"]),
])
def test_a_misspelt_value_is_one_short_line(argv, wants):
    proc = _cli(*argv)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, proc.stderr
    assert lines[0].startswith(f"arlgym {argv[0]}: error: ")
    for want in wants:
        assert want in lines[0], lines[0]


def test_sft_collect_policy_mistake_is_one_line(tmp_path):
    proc = _cli("collect", "--policy", "gredy", "--out", str(tmp_path / "d"), module="arlgym.sft.cli")
    assert proc.returncode == 2 and "did you mean 'greedy'" in proc.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was written


def test_version_through_the_real_commands():
    for module, argv, prog in (("arlgym.cli", ["eval", "--version"], "arlgym eval"),
                               ("arlgym.cli", ["arena", "run", "--version"], "arlgym arena run"),
                               ("arlgym.sft.cli", ["collect", "--version"], "arlgym-sft collect")):
        proc = _cli(*argv, module=module)
        assert proc.returncode == 0 and proc.stdout == f"{prog} {__version__}\n", proc.stderr


def test_quickstart_help_is_true_to_its_defaults():
    from arlgym.quickstart import QuickstartConfig

    d = QuickstartConfig()
    parser = _parser("arlgym", ("quickstart",))
    text = " ".join(parser.description.split())
    assert f"{d.episodes} Sokoban episodes" in text and f"{d.eval_episodes} held-out rooms" in text
    p = float(d.teacher.split(":")[1])
    assert f"{p:.0%}" in text and "75%" not in text
    assert ("validation rooms" in text) == bool(d.rl_val_episodes)
    assert ("won episodes" in text) == (d.demos == "won")
    fields = {f.name for f in dataclasses.fields(QuickstartConfig)}
    checked = 0
    for a in parser._actions:
        if a.dest not in fields or not a.help or "default:" not in a.help:
            continue
        said = a.help.split("default:")[1].strip().split()[0].rstrip(";,):")
        value = getattr(d, a.dest)
        if isinstance(value, tuple):
            value = ",".join(value)
        try:
            same = float(said) == float(value)
        except (TypeError, ValueError):
            same = said == str(value).lower()
        assert same, (a.dest, said, value)
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize("argv, flag", [
    (["serve", "--port", "-5"], "--port"), (["serve", "--port", "70000"], "--port"),
    (["serve", "--port", "80a"], "--port"), (["serve", "--host", "http://0.0.0.0:8000"], "--host"),
    (["serve", "--host", "localhost:8000"], "--host"),
    (["webshop", "serve", "--port", "65536"], "--port"),
])
def test_port_and_host_are_checked_in_one_line(argv, flag):
    proc = _cli(*argv)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"argument {flag}:" in lines[0] and lines[0].endswith("--help`")


def test_port_bounds_are_accepted(capsys):
    for port in ("0", "65535"):
        assert ROOTS["arlgym"]().parse_args(["serve", "--port", port]).port == int(port)
    assert ROOTS["arlgym"]().parse_args(["serve", "--host", "::1"]).host == "::1"


def test_serve_without_its_extra_names_the_command_envs_would(monkeypatch, capsys):
    from arlgym.cli import main
    from arlgym.envs.requirements import pip_install

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # find_spec: not installed
    assert main(["serve", "--env", "arl/Sokoban-v0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("arlgym serve: error: the env server needs uvicorn")
    assert err.endswith(pip_install("serve")) and len(err.splitlines()) == 1


def test_play_plays_exactly_the_episodes_asked_for(monkeypatch, capsys):
    from arlgym.cli import main
    from arlgym.rollout import RolloutCollector

    played: list[str] = []
    real = RolloutCollector.collect

    def counting(self, **kwargs):
        batch = real(self, **kwargs)
        played.extend(t.task_id for t in batch)
        return batch

    monkeypatch.setattr(RolloutCollector, "collect", counting)
    assert main(["play", "arl/Sokoban-v0", "--episodes", "20", "--batch-size", "16",
                 "--no-progress"]) == 0
    split = capsys.readouterr().out
    assert len(played) == 20 and len(set(played)) == 20  # 16 + 4, not 2 x 16
    # the same 20 rooms as one batch of 20: the table is the same
    rooms = list(played)
    played.clear()
    assert main(["play", "arl/Sokoban-v0", "--episodes", "20", "--batch-size", "20",
                 "--no-progress"]) == 0
    assert played == rooms and capsys.readouterr().out == split


UNREACHABLE = "http://127.0.0.1:1"  # a closed port: the command fails after its first writes


def test_a_failed_eval_leaves_nothing_behind(tmp_path):
    out = tmp_path / "ev.jsonl"
    proc = _cli("eval", "--env", "arl/Sokoban-v0", "--episodes", "2", "--out", str(out),
                "--env-servers", UNREACHABLE, "--no-progress")
    assert proc.returncode == 2 and "cannot be reached" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    # a later run with other settings is not refused by a record of the failed one
    proc = _cli("eval", "--env", "arl/Sokoban-v0", "--episodes", "2", "--out", str(out),
                "--temperature", "0.5", "--policy", "random", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 2


def test_a_failed_eval_keeps_what_an_earlier_run_wrote(tmp_path):
    out = tmp_path / "ev.jsonl"
    assert _cli("eval", "--env", "arl/Sokoban-v0", "--episodes", "2", "--out", str(out),
                "--no-progress").returncode == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = _cli("eval", "--env", "arl/Sokoban-v0", "--episodes", "4", "--out", str(out),
                "--env-servers", UNREACHABLE, "--no-progress")
    assert proc.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert len(out.read_text().splitlines()) == 2


def test_a_failed_sft_collect_leaves_no_record(tmp_path):
    out = tmp_path / "data"
    proc = _cli("collect", "--episodes", "2", "--out", str(out), "--env-servers", UNREACHABLE,
                "--no-progress", module="arlgym.sft.cli")
    assert proc.returncode == 2 and not out.exists()
