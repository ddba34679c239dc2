"""Reruns never mix settings: every command that writes into a folder records the settings that
determine its results and refuses (exit 2, one line naming each difference and the fix) to
continue a folder made with other settings, before it does any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arlgym.rundir import SettingsMismatch, check_settings, settings_diff, write_settings

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=600, env=ENV)


def _one_line_refusal(proc: subprocess.CompletedProcess, *names: str) -> str:
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert "Fix:" in lines[0]
    return lines[0]


def test_record_helper_names_each_difference(tmp_path):
    record = tmp_path / "settings.json"
    assert check_settings(record, {"lr": 1e-3}, what="x", flag="--out") is False  # no record
    write_settings(record, {"lr": 3e-5, "max_steps": 2, "threads": 1})
    assert check_settings(record, {"lr": 3e-5, "max_steps": 2, "threads": 1}, what="x", flag="--out")
    with pytest.raises(SettingsMismatch, match=r"\(lr 3e-05 -> 0.001; max_steps 2 -> 3\)"):
        check_settings(record, {"lr": 1e-3, "max_steps": 3, "threads": 1}, what="x", flag="--out")
    assert settings_diff({"a": 1}, {"b": 2}) == ["a 1 -> null", "b null -> 2"]


# ------------------------------------------------------------------ arlgym eval
def test_eval_rerun_with_other_sampling_is_refused(tmp_path):
    out = tmp_path / "ev.jsonl"
    base = ["eval", "--env", "arl/Sokoban-v0", "--policy", "random", "--episodes", "4",
            "--out", str(out), "--no-progress"]
    first = _run("arlgym.cli", *base)
    assert first.returncode == 0, first.stderr[-2000:]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["settings"]["temperature"] == 0.0 and summary["settings"]["seed"] == 0
    before = out.read_text()
    line = _one_line_refusal(_run("arlgym.cli", *base, "--temperature", "1.0", "--seed", "5"),
                             "temperature 0.0 -> 1.0", "seed 0 -> 5", "--out")
    assert "choose another --out" in line
    assert out.read_text() == before  # nothing played, nothing appended
    # the same settings extend the list (episodes is not a setting of the results)
    again = _run("arlgym.cli", *[a if a != "4" else "6" for a in base])
    assert again.returncode == 0 and len(out.read_text().splitlines()) == 6


def test_eval_refuses_episodes_without_a_record(tmp_path):
    out = tmp_path / "old.jsonl"
    out.write_text('{"task_id": "x"}\n')
    _one_line_refusal(_run("arlgym.cli", "eval", "--env", "arl/Sokoban-v0", "--episodes", "2",
                           "--out", str(out), "--no-progress"), "without a record")


# ------------------------------------------------------------------ arlgym-sft collect / train
def test_sft_collect_rerun_with_other_settings_is_refused(tmp_path):
    out = tmp_path / "data"
    base = ["collect", "--episodes", "2", "--batch-tasks", "2", "--out", str(out), "--no-progress"]
    assert _run("arlgym.sft.cli", *base).returncode == 0
    before = (out / "samples.jsonl").read_text()
    _one_line_refusal(_run("arlgym.sft.cli", *base, "--temperature", "0.5", "--split", "val"),
                      "temperature 0.0 -> 0.5", "split \"train\" -> \"val\"")
    assert (out / "samples.jsonl").read_text() == before


def test_sft_train_into_a_checkpoint_of_other_settings_is_refused(tmp_path):
    data, out = tmp_path / "data", tmp_path / "model"
    assert _run("arlgym.sft.cli", "collect", "--episodes", "2", "--batch-tasks", "2", "--out",
                str(data), "--no-progress").returncode == 0
    base = ["train", "--data", str(data), "--output-dir", str(out), "--max-steps", "1",
            "--batch-size", "2", "--engine", "prefix", "--no-progress"]
    first = _run("arlgym.sft.cli", *base)
    assert first.returncode == 0, first.stderr[-2000:]
    weights = (out / "model.safetensors").read_bytes()
    _one_line_refusal(_run("arlgym.sft.cli", *base, "--lr", "5e-4"), "lr 0.001 -> 0.0005",
                      "--output-dir")
    assert (out / "model.safetensors").read_bytes() == weights


def test_sft_collect_rerun_finished_does_nothing_and_partial_continues(tmp_path):
    out = tmp_path / "data"
    base = ["collect", "--episodes", "4", "--batch-tasks", "2", "--out", str(out), "--no-progress"]
    assert _run("arlgym.sft.cli", *base).returncode == 0
    files = {name: ((out / name).read_bytes(), (out / name).stat().st_mtime_ns)
             for name in ("samples.jsonl", "episodes.jsonl", "meta.json", "README.md")}
    again = _run("arlgym.sft.cli", *base)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.startswith(f"finished: {out} holds this collection, done (4 episodes")
    assert "nothing to do" in again.stdout
    assert {name: ((out / name).read_bytes(), (out / name).stat().st_mtime_ns) for name in files} == files
    # as if killed after the first batch: its log and samples on disk, no dataset card yet
    episodes = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    (out / "episodes.jsonl").write_text("".join(episodes[:2]))
    (out / "README.md").unlink()
    resumed = _run("arlgym.sft.cli", *base)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"continuing the collection in {out}: 2/4 episodes done" in resumed.stdout
    assert (out / "samples.jsonl").read_bytes() == files["samples.jsonl"][0]
    assert (out / "episodes.jsonl").read_bytes() == files["episodes.jsonl"][0]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same_weights(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_sft_train_rerun_finished_does_nothing_and_unfinished_prefix_run_starts_over(tmp_path):
    data, out = tmp_path / "data", tmp_path / "model"
    assert _run("arlgym.sft.cli", "collect", "--episodes", "2", "--batch-tasks", "2", "--out",
                str(data), "--no-progress").returncode == 0
    base = ["train", "--data", str(data), "--output-dir", str(out), "--max-steps", "2",
            "--batch-size", "2", "--engine", "prefix", "--logging-steps", "1", "--no-progress"]
    assert _run("arlgym.sft.cli", *base).returncode == 0
    stats = json.loads((out / "sft_stats.json").read_text())
    weights, stamp = _weights(out), (out / "model.safetensors").stat().st_mtime_ns
    again = _run("arlgym.sft.cli", *base)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == (f"finished: {out} holds this SFT run, done (2 steps); nothing "
                                    "to do. To train again, choose another --output-dir")
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp  # nothing trained or saved
    # killed before its end: the prefix engine keeps no checkpoint, so the rerun starts over
    (out / "sft_stats.json").unlink()
    (out / "model.safetensors").unlink()
    restart = _run("arlgym.sft.cli", *base)
    assert restart.returncode == 0, restart.stderr[-2000:]
    assert ("holds an unfinished SFT run that cannot be continued (the prefix engine keeps no "
            "checkpoints): training it again from the start") in restart.stdout
    redo = json.loads((out / "sft_stats.json").read_text())
    assert [row["step"] for row in redo["log"]] == [1, 2]  # each step logged once
    assert [row["loss"] for row in redo["log"]] == [row["loss"] for row in stats["log"]]
    assert _same_weights(_weights(out), weights)


@pytest.mark.slow
def test_sft_train_rerun_of_an_interrupted_trl_run_continues_from_its_checkpoint(tmp_path):
    data, out = tmp_path / "data", tmp_path / "model"
    assert _run("arlgym.sft.cli", "collect", "--episodes", "4", "--batch-tasks", "4", "--out",
                str(data), "--no-progress").returncode == 0
    base = ["train", "--data", str(data), "--output-dir", str(out), "--max-steps", "4",
            "--batch-size", "2", "--save-steps", "2", "--logging-steps", "1", "--lr", "3e-3",
            "--no-progress"]
    first = _run("arlgym.sft.cli", *base)
    assert first.returncode == 0, first.stderr[-2000:]
    stats = json.loads((out / "sft_stats.json").read_text())
    weights = _weights(out)
    # the folder of a run killed between its checkpoints at steps 2 and 4
    import shutil

    shutil.rmtree(out / "checkpoint-4")
    for name in ("sft_stats.json", "model.safetensors"):
        (out / name).unlink()
    resumed = _run("arlgym.sft.cli", *base)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"continuing the SFT run in {out} from its newest checkpoint (checkpoint-2)" in resumed.stdout
    assert "trained 4 steps" in resumed.stdout
    again = json.loads((out / "sft_stats.json").read_text())
    assert again["resumed_from"] == "checkpoint-2" and again["steps"] == 4
    assert [row["step"] for row in again["log"]] == [1, 2, 3, 4]  # no step twice
    assert [round(row["loss"], 5) for row in again["log"]] == [round(row["loss"], 5) for row in stats["log"]]
    assert _same_weights(_weights(out), weights)  # the same model as the uninterrupted run


# ------------------------------------------------------------------ the RL trainer
TINY = ["--model", "tiny", "--num_tasks", "2", "--group_size", "2", "--max_new_tokens", "8",
        "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3", "--log_with", "none", "--algo", "grpo"]


@pytest.mark.slow  # a real trainer run (~15 s)
def test_trainer_rerun_with_other_settings_is_refused(tmp_path):
    out = tmp_path / "rl"
    first = _run("arlgym.rl", *TINY, "--max_steps", "1", "--save_steps", "1", "--output_dir", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    recorded = json.loads((out / "settings.json").read_text())
    assert recorded["lr"] == 1e-3 and "torch_threads" not in recorded and "output_dir" not in recorded
    log = (out / "metrics.jsonl").read_text()
    line = _one_line_refusal(_run("arlgym.rl", *TINY, "--max_steps", "2", "--lr", "1e-4",
                                  "--resume", "true", "--output_dir", str(out)),
                             "lr 0.001 -> 0.0001", "max_steps 1 -> 2")
    assert line.startswith("arlgym train: error:")
    assert (out / "metrics.jsonl").read_text() == log
    # threads and logging are not settings of the results: the same run resumes
    same = _run("arlgym.rl", *TINY, "--max_steps", "1", "--torch_threads", "1", "--output_dir", str(out))
    assert same.returncode == 0, same.stderr[-2000:]


def test_a_setting_added_after_a_run_continues_it_at_its_default(tmp_path):
    """A run recorded before a TrainConfig field existed continues when the field is at its
    default (new fields default to the behaviour before them) and is refused when it is not."""
    from arlgym.rl.cli import parse_train_config
    from arlgym.rundir import check_train_dir, record_train_settings, train_settings

    cfg = parse_train_config([*TINY, "--max_steps", "1", "--output_dir", str(tmp_path)])
    record_train_settings(cfg)
    older = {k: v for k, v in train_settings(cfg).items() if not k.startswith("eval_t")}
    assert len(older) < len(train_settings(cfg))          # the record lacks eval_temperature/top_*
    write_settings(tmp_path / "settings.json", older)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    assert check_train_dir(cfg) is True
    sampled = parse_train_config([*TINY, "--max_steps", "1", "--output_dir", str(tmp_path),
                                  "--eval_temperature", "0.6"])
    with pytest.raises(SettingsMismatch, match=r"eval_temperature 0.0 -> 0.6"):
        check_train_dir(sampled)
    # where the rollout engine's server is, like where the envs are, is not a setting; a record
    # written while it still was one continues too
    assert "vllm_server_urls" not in train_settings(cfg) and "env_servers" not in train_settings(cfg)
    write_settings(tmp_path / "settings.json", {**train_settings(cfg), "vllm_server_urls": ""})
    assert check_train_dir(cfg) is True


# ------------------------------------------------------------------ arlgym arena run
def _fake_finished_run(folder: Path, settings: dict) -> None:
    """A run folder as a finished run leaves it: final/ and its settings record."""
    (folder / "final").mkdir(parents=True)
    write_settings(folder / "settings.json", settings)


def test_arena_rerun_with_other_settings_is_refused_before_anything(tmp_path):
    from arlgym.arena.grid import ArenaSpec, plan_runs
    from arlgym.rl.config import TrainConfig
    from arlgym.rundir import train_settings

    out = tmp_path / "grid"
    spec = ArenaSpec(out=str(out), algos=["grpo", "sampo"], seeds=[0],
                     base={"max_steps": 2, "lr": 3e-5, "save_steps": 1, "log_with": "none"})
    for run in plan_runs(spec):
        _fake_finished_run(run.folder, train_settings(TrainConfig(**run.config)))
    proc = _run("arlgym.cli", "arena", "run", "--algos", "grpo,sampo", "--steps", "3", "--set",
                "lr=1e-3", "--out", str(out))
    line = _one_line_refusal(proc, "grpo/seed-0, sampo/seed-0", "lr 3e-05 -> 0.001",
                             "max_steps 2 -> 3")
    assert "--out" in line
    assert not (out / "arena.json").exists()  # the record of the grid was not rewritten
    assert not list(out.glob("*/seed-0/train.yaml"))
    # --print-commands refuses the same way
    _one_line_refusal(_run("arlgym.cli", "arena", "run", "--algos", "grpo,sampo", "--steps", "3",
                           "--set", "lr=1e-3", "--out", str(out), "--print-commands"), "lr")
    # the grid's own settings: every run is finished, nothing to do
    same = _run("arlgym.cli", "arena", "run", "--algos", "grpo,sampo", "--steps", "2", "--set",
                "lr=3e-5", "--out", str(out), "--print-commands")
    assert same.returncode == 0 and same.stdout == "", same.stderr


def test_arena_refuses_negative_seeds_and_misspelt_fields(tmp_path):
    _one_line_refusal(_run("arlgym.cli", "arena", "run", "--algos", "grpo", "--seeds", "-1",
                           "--out", str(tmp_path / "g")), "--seeds", "[-1]")
    _one_line_refusal(_run("arlgym.cli", "arena", "run", "--algos", "grpo", "--set", "lrr=1e-4",
                           "--out", str(tmp_path / "g")), "'lrr'", "did you mean 'lr'")
    assert not (tmp_path / "g").exists()


def test_a_missing_start_checkpoint_is_refused_before_any_run(tmp_path):
    (tmp_path / "runs").mkdir()
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "arena", "run", "--algos", "grpo",
                           "--model", "runs/sft", "--out", "g"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    _one_line_refusal(proc, "--model runs/sft: no such directory")
    assert not (tmp_path / "g").exists()


@pytest.mark.slow  # a real trainer run (~15 s)
def test_a_failing_arena_run_prints_the_end_of_its_log(tmp_path):
    broken = tmp_path / "broken-checkpoint"  # a folder, but no model in it: the run fails
    broken.mkdir()
    proc = _run("arlgym.cli", "arena", "run", "--algos", "grpo", "--steps", "1", "--model",
                str(broken), "--out", str(tmp_path / "g"))
    assert proc.returncode == 1
    text = proc.stdout + proc.stderr
    assert "grpo/seed-0 failed" in text and "its last lines:" in text
    tail = text.split("its last lines:")[1]
    assert "arlgym train: error:" in tail and "broken-checkpoint" in tail  # the trainer's own error
