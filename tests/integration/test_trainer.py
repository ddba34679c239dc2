"""The RL trainer end to end on CPU with the tiny model: every preset runs a step, resume is
exact, `accelerate launch` with 2 processes completes, the CLI validates its input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl.cli import parse_train_config
from arlgym.rl.presets import PRESETS
from arlgym.rl.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3",
        "--log_with", "none"]


def _run(tmp_path, *extra):
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), *extra])
    trainer = Trainer(cfg)
    history = trainer.train()
    return trainer, history


@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_every_preset_runs_one_step(tmp_path, algo):
    trainer, history = _run(tmp_path, "--algo", algo, "--max_steps", "1")
    m = history[0]
    assert m["step"] == 1 and m["samples"] > 0
    for key in ("env/success_rate", "env/format_valid_ratio", "grad_norm", "entropy",
                "is/out_low_neg_adv_frac", "is/out_high_pos_adv_frac", "tokens_per_s"):
        assert key in m, key
    assert torch.isfinite(torch.tensor(m["loss"]))
    assert (tmp_path / "final" / "config.json").exists()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[0]["step"] == 1


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "final" / "model.safetensors"))


def test_kill_and_resume_gives_identical_weights(tmp_path):
    a, b = tmp_path / "straight", tmp_path / "resumed"
    _run(a, "--algo", "grpo", "--max_steps", "4", "--kl_coef", "0.01")
    _run(b, "--algo", "grpo", "--max_steps", "2", "--save_steps", "2", "--kl_coef", "0.01")
    _run(b, "--algo", "grpo", "--max_steps", "4", "--resume", "true", "--kl_coef", "0.01")
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    steps = [json.loads(line)["step"] for line in (b / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown preset"):
        Trainer(parse_train_config([*TINY, "--algo", "nope", "--output_dir", str(tmp_path)]))
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: sampo\nlearning_rate: 3\n")
    with pytest.raises(ConfigError, match="unknown field"):
        parse_train_config(["--config", str(bad)])
    with pytest.raises(SystemExit):  # argparse: "invalid loads value", exit code 2
        parse_train_config([*TINY, "--output_dir", str(tmp_path), "--loss_kwargs", "{oops"])
    with pytest.raises(ConfigError, match="rollout_engine"):
        parse_train_config([*TINY, "--rollout_engine", "tpu"])


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes(tmp_path):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs/accelerate/cpu.yaml"), str(ROOT / "trainers/sampo.py"),
           "--config", str(ROOT / "configs/sokoban-tiny-cpu.yaml"), "--algo", "sampo",
           "--max_steps", "3", "--output_dir", str(tmp_path), "--num_tasks", "2",
           "--group_size", "2", "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 3}',
           "--save_steps", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]
    assert (tmp_path / "final" / "model.safetensors").exists()
    # really two ranks (each saves its own task-stream position), one group each
    ckpt = tmp_path / "checkpoints" / "step-000003"
    assert sorted(p.name for p in ckpt.glob("collector_rank*.json")) == [
        "collector_rank0.json", "collector_rank1.json"]


def test_shared_prompts_change_compute_not_results(tmp_path):
    """Every group's first turn shares its prompt; running it once must not change the step."""
    _, on = _run(tmp_path / "on", "--algo", "grpo", "--max_steps", "2", "--kl_coef", "0.01",
                 "--share_prompts", "true")
    _, off = _run(tmp_path / "off", "--algo", "grpo", "--max_steps", "2", "--kl_coef", "0.01",
                  "--share_prompts", "false")
    for a, b in zip(on, off, strict=True):
        assert a["samples"] == b["samples"]
        for key in ("loss", "grad_norm", "kl/ref", "entropy"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    wa, wb = _weights(tmp_path / "on"), _weights(tmp_path / "off")
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k


def test_logged_loss_does_not_depend_on_micro_batching(tmp_path):
    """A mini-batch's loss is the sum of its micro-batch losses (global denominators)."""
    _, whole = _run(tmp_path / "whole", "--algo", "grpo", "--max_steps", "1", "--kl_coef", "0.01")
    _, split = _run(tmp_path / "split", "--algo", "grpo", "--max_steps", "1", "--kl_coef", "0.01",
                    "--micro_batch_tokens", "64")
    assert whole[0]["samples"] == split[0]["samples"]
    for key in ("loss", "pg_loss", "grad_norm", "kl"):
        assert split[0][key] == pytest.approx(whole[0][key], rel=1e-4, abs=1e-7), key


def test_max_minutes_stops_early(tmp_path):
    _, history = _run(tmp_path, "--algo", "grpo", "--max_steps", "50", "--max_minutes", "0.0001")
    assert len(history) == 1
