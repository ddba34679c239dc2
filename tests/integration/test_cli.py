"""`arlgym` command line: play, eval (resumable), envs, errors — run as real subprocesses."""

import json
import subprocess
import sys

import pytest

from arlgym.rollout import load_jsonl


def run(*args, check=True):
    return subprocess.run([sys.executable, "-m", "arlgym.cli", *args], capture_output=True,
                          text=True, check=check, timeout=300)


def test_play_expert_prints_success_table():
    out = run("play", "arl/Sokoban-v0", "--policy", "expert", "--episodes", "20", "--no-progress").stdout
    row = next(line for line in out.splitlines() if line.startswith("overall"))
    assert row.split()[1:3] == ["20", "100.0%"]


def test_random_baseline_is_reproducible_and_follows_seed():
    def table(seed):
        out = run("play", "arl/Sokoban-v0", "--policy", "random", "--episodes", "40", "--no-progress",
                  "--seed", seed).stdout
        return [line for line in out.splitlines() if line.startswith("overall")]

    assert table("0") == table("0")
    assert table("0") != table("5")  # other rooms and other moves: the steps column differs


def test_eval_expert_random_and_resume(tmp_path):
    out = tmp_path / "expert.jsonl"
    first = run("eval", "--env", "arl/Sokoban-v0", "--policy", "expert", "--episodes", "50",
                "--out", str(out), "--no-progress").stdout
    assert "100.0%" in first
    trajs = load_jsonl(out)
    assert len(trajs) == 50 and len({t.task_id for t in trajs}) == 50
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["overall"]["success_rate"] == 1.0 and summary["split"] == "test"
    # rerun: nothing is redone (the file does not grow), same summary
    run("eval", "--env", "arl/Sokoban-v0", "--policy", "expert", "--episodes", "50",
        "--out", str(out), "--no-progress")
    assert len(out.read_text().splitlines()) == 50
    # extend to 60: only the 10 new episodes are played
    run("eval", "--env", "arl/Sokoban-v0", "--policy", "expert", "--episodes", "60",
        "--out", str(out), "--no-progress")
    assert len(out.read_text().splitlines()) == 60

    rnd = tmp_path / "random.jsonl"
    run("eval", "--env", "arl/Sokoban-v0", "--policy", "random", "--episodes", "50",
        "--out", str(rnd), "--no-progress")
    rate = json.loads(rnd.with_suffix(".summary.json").read_text())["overall"]["success_rate"]
    assert 0.0 < rate < 0.6


def test_user_errors_are_one_line_messages():
    bad = run("play", "arl/Nope-v0", check=False)
    assert bad.returncode == 2 and "unknown env id" in bad.stderr and "Traceback" not in bad.stderr
    bad = run("play", "arl/Sokoban-v0", "--policy", "gpt5", check=False)
    assert bad.returncode == 2 and "valid specs" in bad.stderr
    assert "arl/Sokoban-v0" in run("envs").stdout
    assert "resumable" in run("eval", "--help").stdout.lower() or "skips" in run("eval", "--help").stdout


def test_human_policy_plays_from_stdin():
    proc = subprocess.run(
        [sys.executable, "-m", "arlgym.cli", "play", "arl/Sokoban-v0", "--policy", "human",
         "--episodes", "1", "--no-progress", "--env-kwarg", "max_steps=3"],
        input="up\nleft\n<think>x</think><action>down</action>\n", capture_output=True, text=True,
        timeout=120, check=True)
    assert proc.stdout.count("your move>") == 3 and "episode over" in proc.stdout


@pytest.mark.slow
def test_eval_untrained_tiny_model_offline(tmp_path):
    out = tmp_path / "tiny.jsonl"
    run("eval", "--env", "arl/Sokoban-v0", "--policy", "hf:tiny", "--episodes", "8",
        "--max-new-tokens", "16", "--out", str(out), "--no-progress")
    trajs = load_jsonl(out)
    assert len(trajs) == 8
    for t in trajs:
        assert t.length >= 1 and all(s.response_token_ids and s.logprobs for s in t.steps)
        assert all(len(s.response_token_ids) == len(s.logprobs) <= 16 for s in t.steps)
