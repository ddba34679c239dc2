"""arlgym-sft train: TRL SFTTrainer with assistant-only loss; the output loads as hf:<dir>."""

import json
import subprocess
import sys

import pytest

from arlgym.errors import ConfigError
from arlgym.sft.collect import CollectConfig, collect_sft
from arlgym.sft.train import SFTRunConfig, load_samples, train_sft


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    collect_sft(CollectConfig(episodes=24, batch_tasks=8), out, progress=False)
    return out


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no samples found"):
        load_samples([str(tmp_path / "missing")])
    with pytest.raises(ConfigError, match="--lr"):
        SFTRunConfig(lr=0)


@pytest.mark.slow
def test_tiny_sft_lowers_loss_and_output_loads_as_hf_policy(data, tmp_path):
    out = tmp_path / "model"
    stats = train_sft(SFTRunConfig(data=(str(data),), model="tiny", output_dir=str(out),
                                   max_steps=6, batch_size=8, lr=3e-3, logging_steps=1,
                                   progress=False))
    losses = [h["loss"] for h in stats["log"]]
    assert stats["steps"] == 6 and losses[-1] < losses[0]
    assert json.loads((out / "sft_stats.json").read_text())["steps"] == 6

    from arlgym.policies import SamplingParams, make_policy
    from arlgym.rollout import collect

    policy = make_policy(f"hf:{out}")
    trajs = collect("arl/Sokoban-v0", policy, num_tasks=1, group_size=1, seed=0,
                    sampling=SamplingParams(temperature=0.0, max_new_tokens=16),
                    env_kwargs={"max_steps": 2})
    assert trajs[0].length == 2 and trajs[0].steps[0].response_token_ids


@pytest.mark.slow
def test_cli_train_smollm2_few_steps(data, tmp_path):
    out = tmp_path / "smol"
    proc = subprocess.run([sys.executable, "-m", "arlgym.sft.cli", "train", "--data", str(data),
                           "--model", "smollm2-135m", "--output-dir", str(out), "--max-steps", "2",
                           "--batch-size", "2", "--lr", "1e-5", "--max-length", "768",
                           "--no-progress"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "load with hf:" in proc.stdout
    from arlgym.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(out))
    assert model.config.model_type == "llama" and tok.chat_template


@pytest.mark.slow
def test_accelerate_launch_two_processes_trains_one_model(data, tmp_path):
    """Multi-process SFT (`accelerate launch -m arlgym.sft.cli train`) on 2 CPU processes with gloo:
    both ranks train one model (DDP), rank 0 saves it once, and it loads as hf:<dir>."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "ddp"
    proc = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
         str(root / "configs/accelerate/cpu.yaml"), "-m", "arlgym.sft.cli", "train",
         "--data", str(data), "--model", "tiny", "--output-dir", str(out), "--max-steps", "3",
         "--batch-size", "4", "--lr", "3e-3", "--logging-steps", "1", "--no-progress"],
        capture_output=True, text=True, timeout=900, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("load with hf:") == 1  # only the main process reports and saves
    stats = json.loads((out / "sft_stats.json").read_text())
    assert stats["steps"] == 3
    # 2 ranks x batch 4: each optimizer step sees 8 samples, so 3 steps cover 24 samples
    assert stats["epochs_done"] == pytest.approx(3 * 8 / stats["samples"], rel=0.05)
    from arlgym.policies import make_policy

    assert make_policy(f"hf:{out}") is not None


def test_cli_train_reports_the_held_out_tasks_of_its_data(data, tmp_path, capsys):
    from arlgym.sft.cli import main

    out = tmp_path / "model"
    assert main(["train", "--data", str(data), "--model", "tiny", "--output-dir", str(out),
                 "--max-steps", "1", "--batch-size", "4", "--engine", "prefix",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert ("arl/Sokoban-v0: held out: 0 of 200 test and 0 of 200 val tasks were trained on "
            "(by content)") in printed
    [report] = json.loads((out / "held_out.json").read_text())
    assert report["trained_tasks"] == 24 and report["panels"]["test"]["trained_on"] == 0


def test_data_held_out_counts_data_collected_on_a_held_out_split(tmp_path):
    from arlgym.sft.train import data_held_out

    collect_sft(CollectConfig(episodes=4, split="test", batch_tasks=4, min_score=-100.0),
                tmp_path / "leak", progress=False)
    ids = [json.loads(line)["task_id"] for line in
           (tmp_path / "leak" / "episodes.jsonl").read_text().splitlines()]
    # the collected test rooms are random test draws; make two of them the panel's own
    from arlgym.envs.content import TaskContent

    with TaskContent("arl/Sokoban-v0") as content:
        panel = content.panel("test", 200)
    with (tmp_path / "leak" / "episodes.jsonl").open("a") as fh:
        for episode, task in enumerate(panel[:2], start=len(ids)):
            fh.write(json.dumps({"episode": episode, "task_id": task, "won": False, "score": 0.0,
                                 "steps": 1, "kept": True, "samples": 0}) + "\n")
    [report] = data_held_out([str(tmp_path)])
    assert report["panels"]["test"]["trained_on"] >= 2
