"""``arlgym arena run --set env_servers=URL``: every run of the grid gets the URL in its trainer
config and plays its rollouts and its final test on a real ``arlgym serve`` on loopback (the
server's served-reset count equals the episodes the runs played), with the tiny model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two 1-step trainer runs of the tiny model (~1 min on 2 cores)

ROOT = Path(__file__).resolve().parents[3]
TASKS, GROUP, TEST = 2, 2, 2


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}


@pytest.fixture
def server():
    proc = subprocess.Popen([sys.executable, "-m", "arlgym.cli", "serve", "--port", "0",
                             "--env", "arl/Sokoban-v0", "--env-kwarg", "max_steps=3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(), cwd=ROOT)
    line = proc.stdout.readline()
    match = re.search(r"on (http://[\d.]+:\d+)", line)
    if not match:
        proc.kill()
        pytest.fail(f"arlgym serve did not start: {line}{proc.stdout.read()}")
    try:
        yield match.group(1)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        return json.loads(resp.read())


def test_every_arena_run_plays_on_the_env_server(server, tmp_path):
    out = tmp_path / "grid"
    cmd = [sys.executable, "-m", "arlgym.cli", "arena", "run", "--out", str(out),
           "--algos", "grpo", "--seeds", "0,1", "--steps", "1", "--jobs", "1",
           "--set", f"env_servers={server}", "--set", 'env_kwargs={"max_steps": 3}',
           "--set", f"num_tasks={TASKS}", "--set", f"group_size={GROUP}",
           "--set", "max_new_tokens=8", "--set", "eval_steps=0",
           "--set", f"test_episodes={TEST}", "--set", "eval_split=val"]
    assert _health(server)["resets"] == 0
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    runs = sorted(out.glob("grpo/seed-*"))
    assert [r.name for r in runs] == ["seed-0", "seed-1"]
    episodes = 0
    for run in runs:
        config = json.loads((run / "config.json").read_text())["config"]
        assert config["env_servers"] == server  # the URL reached this run's trainer
        test = (run / "eval" / "test-last.jsonl").read_text().splitlines()
        assert len(test) == TEST
        # the other decoding beside the greedy test eval: the paper's sampling, 4 a task
        companion = (run / "eval" / "test-last.sampled.jsonl").read_text().splitlines()
        assert len(companion) == 4 * TEST
        episodes += TASKS * GROUP + len(test) + len(companion)
    health = _health(server)
    # every training episode and every test episode of both runs was reset on the server
    assert health["resets"] == episodes
    assert health["steps"] >= episodes
    assert health["sessions"] == 0  # the runs closed their sessions
