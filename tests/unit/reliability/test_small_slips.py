"""Small things a new user meets: a misspelt reset option, the human player's feedback, the
quickstart's own flags checked before anything is printed, `arlgym arena report --help`."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.errors import ConfigError


@pytest.mark.parametrize("env_id, key, meant", [("arl/Sokoban-v0", "taskid", "task_id"),
                                                ("arl/Sokoban-v0", "levle", "level"),
                                                ("arl/WebShop-v0", "splt", "split")])
def test_a_misspelt_reset_option_is_refused_with_a_did_you_mean(env_id, key, meant):
    env = gym.make(env_id)
    with pytest.raises(ConfigError, match=rf"options key '{key}' is unknown \(did you mean '{meant}'\?\)"):
        env.reset(options={key: "x"})
    env.reset(options={"split": "test"})  # the known keys still work
    env.close()


def test_the_human_player_hears_about_an_unknown_move_and_sees_steps_and_return():
    proc = subprocess.run(
        [sys.executable, "-m", "arlgym.cli", "play", "arl/Sokoban-v0", "--policy", "human",
         "--episodes", "1", "--no-progress", "--env-kwarg", "max_steps=3"],
        input="up\njump\nleft\n", capture_output=True, text=True, timeout=120, check=True)
    out = proc.stdout
    assert "--- step 1 of 3 ---" in out and "--- step 3 of 3 ---" in out
    assert "'jump' is not a possible move here; nothing happened" in out
    assert "'up' done; reward -0.10, return so far -0.10" in out
    assert "return so far -0.20" in out and "episode over" in out


@pytest.mark.parametrize("flag, value", [("--episodes", "-5"), ("--rl-lr", "-1"),
                                         ("--rl-jobs", "0"), ("--eval-episodes", "0"),
                                         ("--rl-temperature", "0"), ("--rl-kl-coef", "-0.1")])
def test_quickstart_names_its_own_flag_before_printing_anything(tmp_path, flag, value):
    out = tmp_path / "qs"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", flag, value,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith(f"arlgym quickstart: error: {flag}={float(value) if flag in ('--rl-lr', '--rl-temperature', '--rl-kl-coef') else int(value)} is invalid")
    assert "YAML" not in proc.stderr and not out.exists()


def test_arena_report_help_prints_a_plain_percent():
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "arena", "report", "--help"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert "% vs GRPO" in " ".join(proc.stdout.split()) and "%%" not in proc.stdout
