"""experiments/beat_teacher.py end to end on tiny settings: the greedy teacher's demonstrations,
SFT, one RL step and every paired eval (docs/main_job.md quotes its output, so a broken script
would make the page lie)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_beat_teacher_runs_every_phase(tmp_path):
    out = tmp_path / "bt"
    cmd = [sys.executable, str(REPO / "experiments" / "beat_teacher.py"), "--out", str(out),
           "--episodes", "40", "--sft-steps", "5", "--test", "8", "--rl-from", "5", "--rl-name", "r",
           "--algo", "sampo", "--num_tasks", "2", "--group_size", "2", "--mini_batch_size", "0",
           "--cold_start_steps", "1", "--max_steps", "1", "--lr", "1e-4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result-r-s0.json").read_text())
    # the teacher's and random play's wins on the first 8 held-out rooms (the 200-room panel's
    # start: the teacher wins 53.0% of 200, random 28.0%)
    teacher = json.loads((out / "eval_teacher.json").read_text())["wins"]
    assert len(teacher) == 8 and result["teacher"] == sum(teacher) / 8
    assert result["sft5"]["steps"] == 5 and result["sft5"]["vs_teacher"]["rooms"] == 8
    assert result["rl"]["vs_sft"]["rooms"] == 8 and result["rl"]["vs_teacher"]["rooms"] == 8
    assert 0.0 <= result["rl"]["success"] <= 1.0
    samples = [json.loads(x) for x in (out / "data-s0" / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["policy"] == "greedy" and s["won"] for s in samples)
    assert "RL r:" in proc.stdout and "vs_teacher" in proc.stdout


@pytest.mark.slow
def test_demonstrations_on_other_rooms_get_their_own_folders(tmp_path):
    out = tmp_path / "bt"
    cmd = [sys.executable, str(REPO / "experiments" / "beat_teacher.py"), "--out", str(out),
           "--episodes", "16", "--sft-steps", "2", "--test", "4",
           "--demo-env-kwargs", '{"dim_room": 7}', "--eval-env-kwargs", '{"dim_room": 7}']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((out / "data-s0-dim_room7" / "meta.json").read_text())
    assert meta["identity"]["env_kwargs"] == {"dim_room": 7}
    assert (out / "sft2-s0-dim_room7").is_dir() and not (out / "data-s0").exists()
    assert (out / "eval_sft2-s0-dim_room7-dim_room7.json").exists()
