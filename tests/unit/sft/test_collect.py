"""arlgym-sft collect: sample content, byte-identical prompts, exactly-once resume after kill -9."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.errors import ConfigError
from arlgym.sft.collect import CollectConfig, collect_sft, read_jsonl_lines


def _cmd(out, episodes, extra=()):
    return [sys.executable, "-m", "arlgym.sft.cli", "collect", "--episodes", str(episodes),
            "--batch-tasks", "4", "--out", str(out), "--no-progress", *extra]


def test_samples_cover_every_step_and_prompts_match_the_env(tmp_path):
    stats = collect_sft(CollectConfig(episodes=40, batch_tasks=8), tmp_path, progress=False)
    samples = read_jsonl_lines(tmp_path / "samples.jsonl")
    episodes = read_jsonl_lines(tmp_path / "episodes.jsonl")
    assert stats["episodes"] == 40 and stats["kept_episodes"] == 40
    assert len(samples) == sum(e["steps"] for e in episodes) == stats["samples"]
    # replay episode e in a fresh env with seed e (group size 1): identical prompts, step by step
    for e in (0, 7, 39):
        mine = [s for s in samples if s["episode"] == e]
        env = gym.make("arl/Sokoban-v0")
        prompt, _ = env.reset(seed=e)
        for s in mine:
            assert s["messages"][0] == {"role": "user", "content": prompt}
            assert s["messages"][1]["role"] == "assistant"
            prompt, *_ = env.step(s["messages"][1]["content"])
        assert mine[-1]["won"] and [s["step"] for s in mine] == list(range(len(mine)))
    card = (tmp_path / "README.md").read_text()
    assert "expert" in card and f"| samples | {len(samples)} |" in card


def test_min_score_filters_episodes(tmp_path):
    collect_sft(CollectConfig(policy="random", episodes=30, batch_tasks=10), tmp_path, progress=False)
    episodes = read_jsonl_lines(tmp_path / "episodes.jsonl")
    samples = read_jsonl_lines(tmp_path / "samples.jsonl")
    kept = {e["episode"] for e in episodes if e["kept"]}
    assert 0 < len(kept) < 30 and all(e["kept"] == e["won"] for e in episodes)
    assert {s["episode"] for s in samples} == kept


def test_changed_settings_refuse_to_mix(tmp_path):
    collect_sft(CollectConfig(episodes=4), tmp_path, progress=False)
    with pytest.raises(ConfigError, match=r"other settings \(seed 0 -> 1\)"):
        collect_sft(CollectConfig(episodes=4, seed=1), tmp_path, progress=False)
    with pytest.raises(ConfigError, match="multiple of"):
        CollectConfig(episodes=5, group_size=2)


def test_kill_and_resume_gives_exactly_the_uninterrupted_files(tmp_path):
    ref = tmp_path / "ref"
    subprocess.run(_cmd(ref, 300), check=True, timeout=300)
    expected = (ref / "samples.jsonl").read_bytes()
    rng = random.Random(os.getpid())
    for trial in range(3):
        out = tmp_path / f"run{trial}"
        proc = subprocess.Popen(_cmd(out, 300))
        # wait until some data is on disk, then kill at a random moment
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "episodes.jsonl").exists():
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        subprocess.run(_cmd(out, 300), check=True, timeout=300)
        assert (out / "samples.jsonl").read_bytes() == expected
        episodes = read_jsonl_lines(out / "episodes.jsonl")
        assert [e["episode"] for e in episodes] == list(range(300))


def test_torn_lines_and_orphan_samples_are_repaired(tmp_path):
    collect_sft(CollectConfig(episodes=8, batch_tasks=4), tmp_path, progress=False)
    expected = (tmp_path / "samples.jsonl").read_bytes()
    # simulate a crash: drop the last episode's log line, leave a torn sample line behind
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "episodes.jsonl").write_text("".join(lines[:-1]) + lines[-1][:10])
    with (tmp_path / "samples.jsonl").open("a") as fh:
        fh.write(json.dumps({"episode": 99})[:-3])
    collect_sft(CollectConfig(episodes=8, batch_tasks=4), tmp_path, progress=False)
    assert (tmp_path / "samples.jsonl").read_bytes() == expected


def test_collect_reports_no_held_out_task_played(tmp_path, capsys):
    from arlgym.sft.cli import main

    assert main(["collect", "--episodes", "8", "--batch-tasks", "4", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    line = "held out: 0 of 200 test and 0 of 200 val tasks were trained on (by content)"
    assert line in capsys.readouterr().out
    report = json.loads((tmp_path / "held_out.json").read_text())
    assert report == {"env_id": "arl/Sokoban-v0", "trained_tasks": 8,
                      "panels": {"test": {"tasks": 200, "trained_on": 0},
                                 "val": {"tasks": 200, "trained_on": 0}}}
    assert f"- {line}" in (tmp_path / "README.md").read_text()
