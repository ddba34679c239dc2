"""The vision configs: paper-scale Qwen3-VL with Table 6's Sokoban column; the CPU smoke config."""

from pathlib import Path

from arlgym.rl.cli import parse_train_config
from arlgym.rl.presets import ENV_SETTINGS
from arlgym.rl.trainer import env_family, resolve_algorithm

ROOT = Path(__file__).resolve().parents[3]


def test_paper_vision_config_carries_the_sokoban_column():
    cfg = parse_train_config(["--config", str(ROOT / "configs/paper/sokoban-vision-qwen3-vl-4b.yaml")])
    t6 = ENV_SETTINGS["sokoban"]
    assert env_family(cfg.env_id) == "sokoban" and "VL" in cfg.model
    assert (cfg.num_tasks, cfg.group_size, cfg.max_new_tokens) == (t6["tasks_per_step"], t6["group_size"],
                                                                   t6["max_response_len"])
    assert (cfg.lr, cfg.mini_batch_size, cfg.temperature) == (t6["lr"], t6["mini_batch_size"], t6["temperature"])
    assert cfg.env_kwargs["max_steps"] == t6["max_steps"] and not cfg.share_prompts
    assert resolve_algorithm(cfg)["kl_coef"] == t6["kl_coef"]


def test_cpu_vision_config_uses_tiny_vl():
    cfg = parse_train_config(["--config", str(ROOT / "configs/sokoban-vision-tiny-cpu.yaml")])
    assert (cfg.env_id, cfg.model) == ("arl/SokobanVision-v0", "tiny-vl")
