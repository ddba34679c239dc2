"""Every RL preset runs on a vision env: one step of each on SokobanVision with `tiny-vl`, the
trainer's log-probs recomputed with each turn's image inputs equal to the sampler's, the usual
metrics logged, and prompt sharing off (equal prompt ids do not mean equal images)."""

from __future__ import annotations

import pytest
import torch

from arlgym.rl.cli import parse_train_config
from arlgym.rl.presets import PRESETS
from arlgym.rl.trainer import Trainer

VISION = ["--env_id", "arl/SokobanVision-v0", "--model", "tiny-vl", "--num_tasks", "2",
          "--group_size", "2", "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}',
          "--lr", "1e-3", "--old_logprobs", "recompute", "--log_with", "none", "--max_steps", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_every_preset_runs_a_step_on_sokoban_vision(tmp_path, algo):
    cfg = parse_train_config([*VISION, "--algo", algo, "--output_dir", str(tmp_path)])
    trainer = Trainer(cfg)
    assert not trainer.share_prompts
    m = trainer.train()[0]
    assert m["step"] == 1 and m["samples"] > 0
    for key in ("env/success_rate", "env/format_valid_ratio", "grad_norm", "entropy", "kl",
                "is/out_low_neg_adv_frac", "is/out_high_pos_adv_frac", "tokens_per_s"):
        assert key in m, key
    assert torch.isfinite(torch.tensor(m["loss"]))
    # the forward pass with the image inputs reproduces what was sampled, so the first update's
    # IS ratio is 1 for every preset (GSPO/SAMPO sequence ratios, CISPO/SAPO token ratios alike)
    assert m["rollout/logprob_abs_diff_max"] < 1e-4
    assert 1 - 1e-4 < m["is/ratio_min"] <= m["is/ratio_max"] < 1 + 1e-4
    assert (tmp_path / "final" / "processor_config.json").is_file()
