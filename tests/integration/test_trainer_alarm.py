"""The trainer's collapse-alarm hook, resume hygiene and final test eval, with the tiny model.

The alarm's rule itself is tested in tests/unit/arena/test_alarm.py; here the verdict is
forced (the seam: ``arlgym.rl.alarm.detect_collapse``) so that the trainer's side — the
metric, collapse.json, stopping and restoring the last healthy checkpoint — runs for real."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from arlgym.rl.cli import parse_train_config
from arlgym.rl.trainer import Trainer

TINY = ["--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3",
        "--log_with", "none", "--algo", "grpo", "--torch_threads", "1"]


def _fire_from_row(n, began):
    def fake(rows, **_):
        return ({"step": began, "detected_at": rows[-1]["step"], "reason": "forced", "evidence": {}}
                if len(rows) >= n else None)
    return fake


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line]


def test_alarm_warns_logs_and_stops_on_the_last_healthy_checkpoint(tmp_path, monkeypatch):
    import arlgym.rl.alarm as alarm

    monkeypatch.setattr(alarm, "detect_collapse", _fire_from_row(3, began=2))
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--max_steps", "6",
                              "--save_steps", "1", "--stop_on_collapse", "true"])
    with pytest.warns(UserWarning, match="collapse alarm at step 3"):
        history = Trainer(cfg).train()
    assert [h["step"] for h in history] == [1, 2, 3]  # stopped at the alarm
    assert [r["alarm/collapse"] for r in _rows(tmp_path)] == [0.0, 0.0, 1.0]
    record = json.loads((tmp_path / "collapse.json").read_text())
    assert record["stopped"] and record["step"] == 2 and record["final_from_step"] == 1
    final = load_file(tmp_path / "final" / "model.safetensors")
    healthy = load_file(tmp_path / "checkpoints" / "step-000001" / "model.safetensors")
    later = load_file(tmp_path / "checkpoints" / "step-000002" / "model.safetensors")
    shared = [k for k in final if k in healthy]
    assert shared and all(torch.equal(final[k], healthy[k]) for k in shared)
    assert any(not torch.equal(final[k], later[k]) for k in shared)  # step 2 did change it


def test_alarm_without_stop_only_warns(tmp_path, monkeypatch):
    import arlgym.rl.alarm as alarm

    monkeypatch.setattr(alarm, "detect_collapse", _fire_from_row(2, began=1))
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--max_steps", "3"])
    with pytest.warns(UserWarning, match="collapse alarm"):
        history = Trainer(cfg).train()
    assert len(history) == 3 and [h["alarm/collapse"] for h in history] == [0.0, 1.0, 1.0]
    assert not json.loads((tmp_path / "collapse.json").read_text()).get("stopped")


def test_resume_drops_rows_after_the_checkpoint_and_tmp_checkpoints(tmp_path):
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--max_steps", "2",
                              "--save_steps", "1"])
    Trainer(cfg).train()
    # a crash after step 3 was logged but before its checkpoint was complete
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 3, "loss": 123.0}) + "\n")
    (tmp_path / "checkpoints" / "step-000003.tmp").mkdir()
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--max_steps", "3",
                              "--save_steps", "1", "--resume", "true"])
    trainer = Trainer(cfg)
    assert trainer.step == 2
    assert [r["step"] for r in _rows(tmp_path)] == [1, 2]
    trainer.train()
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["loss"] != 123.0
    assert not (tmp_path / "checkpoints" / "step-000003.tmp").exists()


def test_final_test_eval_carries_the_panel(tmp_path):
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--max_steps", "1",
                              "--test_episodes", "3", "--save_total_limit", "1", "--save_steps", "1"])
    Trainer(cfg).train()
    summary = json.loads((tmp_path / "eval" / "test-last.summary.json").read_text())
    panel = summary["panel"]
    assert summary["panel_hash"] == panel["hash"] and len(panel["hash"]) == 16
    assert panel["env_id"] == "arl/Sokoban-v0" and panel["split"] == "test"
    assert len(panel["task_ids"]) == 3 and summary["episodes"] == 3
    assert len((tmp_path / "eval" / "test-last.jsonl").read_text().splitlines()) == 3
    assert summary["decoding"] == "greedy"
    # the other decoding beside it (test_both_decodings): the paper's sampling, 4 episodes a room
    companion = json.loads((tmp_path / "eval" / "test-last.sampled.summary.json").read_text())
    assert companion["decoding"] == "sampled" and companion["panel_hash"] == panel["hash"]
    sampled = [json.loads(x) for x in (tmp_path / "eval" / "test-last.sampled.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in sampled] == [t for t in panel["task_ids"] for _ in range(4)]
    from arlgym.evaluation.panel import make_panel, panel_hash

    assert make_panel("arl/Sokoban-v0", "test", 3, {"max_steps": 2})["hash"] == panel["hash"]
    assert panel_hash({**panel, "task_ids": panel["task_ids"][:2]}) != panel["hash"]


def test_sampled_evals_follow_the_eval_protocol(tmp_path):
    """eval_temperature/top_p/top_k/eval_samples reach the periodic and the final eval: the
    final eval plays eval_samples episodes a room, and the draws are seeded by the run's seed,
    so a rerun of the same checkpoint's eval gives the same episodes."""
    flags = [*TINY, "--max_steps", "1", "--test_episodes", "3", "--eval_steps", "1",
             "--eval_episodes", "2", "--eval_split", "val", "--eval_temperature", "0.6",
             "--eval_top_p", "0.95", "--eval_top_k", "20", "--eval_samples", "2"]
    runs = []
    for name in ("a", "b"):
        trainer = Trainer(parse_train_config([*flags, "--output_dir", str(tmp_path / name)]))
        assert trainer.eval_sampling().temperature == 0.6 and trainer.eval_sampling().top_k == 20
        trainer.train()
        rows = [json.loads(x) for x in (tmp_path / name / "eval" / "test-last.jsonl").read_text().splitlines()]
        runs.append([(r["task_id"], [st["response"] for st in r["steps"]]) for r in rows])
        assert any("eval/success_rate" in r for r in _rows(tmp_path / name))
    assert len(runs[0]) == 6 and [t for t, _ in runs[0]].count(runs[0][0][0]) == 2  # 2 a room
    assert runs[0] == runs[1]                      # seeded: the same draws
    greedy = [json.loads(x) for x in (tmp_path / "a" / "eval" / "test-last.greedy.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in greedy] == [runs[0][i][0] for i in (0, 2, 4)]  # one a room
    summary = json.loads((tmp_path / "a" / "eval" / "test-last.greedy.summary.json").read_text())
    assert summary["decoding"] == "greedy" and summary["episodes"] == 3
    first, second = runs[0][0][1], runs[0][1][1]   # the two episodes of one room differ: sampled
    assert first != second


def test_sampled_eval_settings_are_checked():
    from arlgym.errors import ConfigError

    with pytest.raises(ConfigError, match="eval_samples=3 repeats a greedy eval"):
        parse_train_config([*TINY, "--eval_samples", "3"])
    with pytest.raises(ConfigError, match="eval_top_p"):
        parse_train_config([*TINY, "--eval_top_p", "1.5"])
