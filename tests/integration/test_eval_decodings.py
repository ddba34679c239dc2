"""`arlgym eval` of a model policy at a temperature above 0 also plays greedily: both rows and
the paired greedy − sampled difference, from the files it wrote."""

import json
import subprocess
import sys

import pytest

from arlgym.evaluation.decodings import (
    greedy_companion,
    is_model_policy,
    paired_on_tasks,
    success_by_task,
)
from arlgym.rollout import load_jsonl


def _eval(tmp_path, *extra):
    out = tmp_path / "e.jsonl"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "eval", "--env", "arl/Sokoban-v0",
                           "--policy", "hf:tiny", "--episodes", "4", "--samples-per-task", "2",
                           "--temperature", "1.0", "--out", str(out), "--no-progress", *extra],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc.stdout


def test_a_sampled_model_eval_is_paired_with_its_greedy_eval(tmp_path):
    out, stdout = _eval(tmp_path)
    greedy_path = greedy_companion(out)
    assert greedy_path == tmp_path / "e.greedy.jsonl"
    sampled, greedy = load_jsonl(out), load_jsonl(greedy_path)
    assert len(sampled) == 8 and len(greedy) == 4  # one greedy episode a task
    assert [t.task_id for t in greedy] == list(dict.fromkeys(t.task_id for t in sampled))
    settings = json.loads(greedy_path.with_suffix(".settings.json").read_text())
    assert settings["temperature"] == 0.0
    effect = paired_on_tasks(success_by_task(sampled), success_by_task(greedy))
    assert f"greedy − sampled (same tasks): {effect['difference']:+.1%}" in stdout
    assert ", greedy" in stdout


def test_sampled_only_and_scripted_policies_play_one_decoding(tmp_path):
    out, stdout = _eval(tmp_path, "--sampled-only")
    assert not greedy_companion(out).exists() and "greedy − sampled" not in stdout
    assert is_model_policy("hf:tiny") and is_model_policy("openai:http://x#m")
    assert not is_model_policy("expert") and not is_model_policy("slips:0.7:expert")


def test_paired_on_tasks_refuses_different_task_lists():
    with pytest.raises(ValueError, match="did not play the same tasks"):
        paired_on_tasks({"a": 1.0, "b": 0.0}, {"a": 1.0})
    got = paired_on_tasks({"a": 1.0, "b": 0.0, "c": 0.5}, {"a": 1.0, "b": 1.0, "c": 0.0})
    assert got["difference"] == pytest.approx((0 + 1 - 0.5) / 3) and got["gained"] == 1 and got["lost"] == 1
