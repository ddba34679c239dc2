"""The README is for users and stays true: at most 250 lines, links only inside the repository
(and to files that exist), every Python example runs as written, and (slow) every command of
its tour, its CPU training and its arena runs on tiny settings, in order, in a fresh folder."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def _section(title: str) -> str:
    """The README text from the heading ``title`` to the next heading of the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", README, flags=re.M)
    assert match, title
    level = len(match.group(1))
    rest = README[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, flags=re.M)
    return rest[: end.start()] if end else rest


def test_readme_is_short_and_links_only_inside_the_repository():
    assert len(README.splitlines()) <= 250
    # URLs only of this machine (an env server on loopback), never of another host
    assert not re.search(r"https?://(?!127\.0\.0\.1[:/])", README)
    for target in re.findall(r"\]\(([^)]+)\)", README):
        path = target.split("#")[0]
        assert not re.match(r"^[a-z]+:", path), target
        assert (ROOT / path).exists(), target


def test_readme_and_docs_speak_of_the_software_alone():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for word in (r"\bissue\b", r"\bsessions? of\b", r"this session", r"\bhelper engineer",
                     r"\.\./shared"):
            assert not re.search(word, text, flags=re.I), (path.name, word)


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_every_python_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = _blocks("python")[index]
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "readme"})


# ------------------------------------------------------------------ the tour's commands (slow)
#: each flag's value on tiny settings (the README's values are the real ones)
TINY = {"--episodes": {"2000": "8", "20": "2", "50": "4", "200": "4", "1": "1"},
        "--max-steps": "2", "--seeds": "0"}
#: added to a command by its first words, to keep it to a minute
EXTRA = {
    ("arlgym", "train"): ["--max-steps", "1", "--num-tasks", "2", "--group-size", "2"],
    ("arlgym", "arena"): ["--steps", "1", "--set", "num_tasks=2", "--set", "group_size=2",
                          "--set", "eval_steps=1", "--set", "eval_episodes=2",
                          "--set", "test_episodes=2", "--jobs", "1"],
}
PROGRAMS = {"arlgym": [sys.executable, "-m", "arlgym.cli"],
            "arlgym-sft": [sys.executable, "-m", "arlgym.sft.cli"]}


def _commands(section: str) -> list[list[str]]:
    out = []
    for block in _blocks("bash", _section(section)):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append(argv)
    return out


def _tiny(argv: list[str]) -> list[str]:
    argv = list(argv)
    for i, token in enumerate(argv[:-1]):
        rule = TINY.get(token)
        if isinstance(rule, dict):
            argv[i + 1] = rule.get(argv[i + 1], argv[i + 1])
        elif rule is not None:
            argv[i + 1] = rule
    if argv[:1] == ["arlgym"] and argv[1:2] == ["arena"] and argv[2:3] == ["run"]:
        argv += EXTRA[("arlgym", "arena")]
    elif argv[:2] == ["arlgym", "train"]:
        argv += EXTRA[("arlgym", "train")]
    argv = [str(ROOT / a) if a.startswith("configs/") else a for a in argv]
    return PROGRAMS[argv[0]] + argv[1:]


@pytest.mark.slow
def test_the_tour_training_and_arena_commands_run_on_tiny_settings(tmp_path):
    commands = [*_commands("A 5-minute tour"), *_commands("On a CPU, with the tiny model (minutes)"),
                *_commands("The arena")]
    assert len(commands) >= 10
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    for argv in commands:
        assert argv[0] in PROGRAMS, argv
        proc = subprocess.run(_tiny(argv), cwd=tmp_path, env=env, capture_output=True, text=True,
                              input="up\n" * 20, timeout=900)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-3000:])
    assert (tmp_path / "runs" / "sft-tiny" / "model.safetensors").exists()
    assert (tmp_path / "runs" / "rl-sampo" / "final").is_dir()
    assert (tmp_path / "runs" / "arena" / "report" / "index.html").exists()
