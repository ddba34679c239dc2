"""Every stage on SokobanVision with tiny-vl, on a few rooms: expert collection (PNGs beside the
JSONL) → SFT (TRL's VLM path) → `arlgym eval` and `arlgym patterns` on `hf:<ckpt>` → 2 SAMPO
steps from the checkpoint, with the trainer's recomputed log-probs equal to the sampler's."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")


@pytest.mark.slow
def test_collect_sft_eval_patterns_rl_on_sokoban_vision(tmp_path, capsys):
    from arlgym.cli import main as arlgym_main
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer
    from arlgym.sft.cli import main as sft_main

    data, ckpt = tmp_path / "data", tmp_path / "sft"
    assert sft_main(["collect", "--env", "arl/SokobanVision-v0", "--episodes", "6", "--out", str(data),
                     "--no-progress"]) == 0
    rows = [json.loads(line) for line in (data / "samples.jsonl").read_text().splitlines()]
    assert rows and all((data / r["images"][0]).is_file() for r in rows)
    assert sft_main(["train", "--data", str(data), "--model", "tiny-vl", "--output-dir", str(ckpt),
                     "--max-steps", "3", "--batch-size", "8", "--no-progress"]) == 0
    assert (ckpt / "processor_config.json").is_file()

    out = tmp_path / "eval.jsonl"
    assert arlgym_main(["eval", "--env", "arl/SokobanVision-v0", "--policy", f"hf:{ckpt}",
                        "--episodes", "2", "--max-new-tokens", "12", "--env-kwarg", "max_steps=2",
                        "--out", str(out), "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert arlgym_main(["patterns", str(out)]) == 0
    assert "hf:" in capsys.readouterr().out

    cfg = parse_train_config([
        "--env_id", "arl/SokobanVision-v0", "--model", str(ckpt), "--algo", "sampo",
        "--num_tasks", "2", "--group_size", "2", "--max_new_tokens", "12", "--max_steps", "2",
        "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-4", "--old_logprobs", "recompute",
        "--dynamic_sampling", "false", "--log_with", "none", "--output_dir", str(tmp_path / "rl")])
    trainer = Trainer(cfg)
    assert not trainer.share_prompts
    history = trainer.train()
    assert [m["step"] for m in history] == [1, 2]
    for m in history:
        for key in ("env/success_rate", "env/format_valid_ratio", "loss", "kl", "entropy",
                    "is/out_low_neg_adv_frac", "tokens_per_s"):
            assert key in m, key
        assert m["rollout/logprob_abs_diff_max"] < 1e-4  # recomputed with the image inputs
    assert (tmp_path / "rl" / "final" / "processor_config.json").is_file()
