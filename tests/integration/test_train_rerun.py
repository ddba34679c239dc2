"""`arlgym train` rerun in the same folder (README: "continues an interrupted run on the same
command"): a finished run says so and does no work, an interrupted one continues from its
newest checkpoint (the default checkpoints every step), and ``metrics.jsonl`` never holds a
step twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TINY = ["train", "--model", "tiny", "--num_tasks", "2", "--group_size", "2", "--max_new_tokens",
        "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3", "--log_with", "none",
        "--algo", "grpo", "--max_steps", "2", "--torch_threads", "1"]


def _train(out, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", *TINY, "--output_dir", str(out),
                           *extra], capture_output=True, text=True, timeout=900, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _steps(out) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def _checkpoints(out) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints").glob("step-*"))


@pytest.mark.slow  # three short trainer runs of the tiny model
def test_train_rerun_finishes_continues_and_never_duplicates_a_row(tmp_path):
    out = tmp_path / "rl"
    _train(out, "--save_total_limit", "0")  # keep every checkpoint, to stage a kill below
    assert _steps(out) == [1, 2]
    assert _checkpoints(out) == ["step-000001", "step-000002"]  # save_steps defaults to 1
    rows = (out / "metrics.jsonl").read_text()

    # the identical command: finished, nothing done, nothing appended
    again = _train(out)
    assert "finished" in again.stdout and (out / "metrics.jsonl").read_text() == rows

    # killed after logging step 2, before its checkpoint and final/: the same command continues
    # from step 1's checkpoint and replays step 2 (its row replaced, not appended)
    shutil.rmtree(out / "final")
    shutil.rmtree(out / "checkpoints" / "step-000002")
    resumed = _train(out)
    assert "continuing" in resumed.stdout and "done: 1 steps this run" in resumed.stdout
    assert _steps(out) == [1, 2] and (out / "final").is_dir()
    assert _checkpoints(out) == ["step-000002"]  # by default only the newest is kept
    timing = ("time/", "tokens_per_s")
    replayed, original = (json.loads(text.splitlines()[1]) for text in
                          ((out / "metrics.jsonl").read_text(), rows))
    assert {k: v for k, v in replayed.items() if not k.startswith(timing)} == \
        {k: v for k, v in original.items() if not k.startswith(timing)}  # the same step again

    # killed before its first checkpoint: the same command starts over, the old rows go
    shutil.rmtree(out / "final")
    shutil.rmtree(out / "checkpoints")
    fresh = _train(out)
    assert "done: 2 steps this run" in fresh.stdout and _steps(out) == [1, 2]
    assert _checkpoints(out) == ["step-000002"]


def test_checkpoint_defaults_lose_at_most_one_step():
    from arlgym.rl.config import TrainConfig

    cfg = TrainConfig()
    assert cfg.save_steps == 1 and cfg.checkpoints_kept == 1
    assert TrainConfig(stop_on_collapse=True).checkpoints_kept == 0  # all: reach back before it
    assert TrainConfig(save_total_limit=3).checkpoints_kept == 3
