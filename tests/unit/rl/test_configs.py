"""Every shipped config loads: RL YAMLs into TrainConfig with each preset resolved for their env,
accelerate YAMLs through accelerate's own config loader; sharded set-ups refuse HF rollouts."""

from pathlib import Path

import pytest

from arlgym.errors import ConfigError
from arlgym.rl.cli import parse_train_config
from arlgym.rl.presets import PRESETS
from arlgym.rl.trainer import env_family, resolve_algorithm

ROOT = Path(__file__).resolve().parents[3]
RL_CONFIGS = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "configs/paper").glob("*.yaml"))
ACCELERATE_CONFIGS = sorted((ROOT / "configs/accelerate").glob("*.yaml"))


@pytest.mark.parametrize("path", RL_CONFIGS, ids=lambda p: p.name)
def test_rl_config_parses_and_every_applicable_preset_resolves(path):
    cfg = parse_train_config(["--config", str(path)])
    resolved = 0
    for algo in sorted(PRESETS):
        cfg.algo = algo
        try:
            algo_cfg = resolve_algorithm(cfg)
        except ConfigError as e:  # Table 6 marks some methods "not applicable" to an env
            assert "not applicable" in str(e)
            continue
        resolved += 1
        assert algo_cfg["max_response_len"] == cfg.max_new_tokens
        if cfg.lr is not None:
            assert algo_cfg["lr"] == cfg.lr
    assert resolved >= 9


def test_paper_configs_carry_table6_values():
    alf = parse_train_config(["--config", str(ROOT / "configs/paper/alfworld-qwen3-4b.yaml")])
    assert (alf.num_tasks, alf.group_size, alf.max_new_tokens, alf.lr, alf.mini_batch_size) == (16, 8, 512, 1e-6, 256)
    assert env_family(alf.env_id) == "alfworld" and alf.env_kwargs["max_steps"] == 50
    sok = parse_train_config(["--config", str(ROOT / "configs/paper/sokoban-qwen3-4b.yaml")])
    assert (sok.num_tasks, sok.mini_batch_size, sok.env_kwargs["max_steps"]) == (32, 64, 15)
    assert resolve_algorithm(sok)["kl_coef"] == 0.01
    tir = parse_train_config(["--config", str(ROOT / "configs/paper/tir-math-qwen3-4b.yaml")])
    assert (tir.num_tasks, tir.group_size, tir.max_new_tokens, tir.mini_batch_size) == (512, 5, 4096, 128)
    assert env_family(tir.env_id) == "tir_math" and tir.algo == "grpo" and tir.env_kwargs["max_steps"] == 5
    assert resolve_algorithm(tir)["kl_coef"] == 0.0
    shop = parse_train_config(["--config", str(ROOT / "configs/paper/webshop-qwen3-4b.yaml")])
    assert (shop.num_tasks, shop.group_size, shop.max_new_tokens, shop.mini_batch_size) == (16, 8, 512, 128)
    assert env_family(shop.env_id) == "webshop" and shop.env_kwargs["max_steps"] == 15
    shop.algo = "sampo"
    assert resolve_algorithm(shop)["filter"]["cold_start_steps"] == 5


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_loads_with_accelerate(path):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(path))
    assert cfg.num_processes >= 1 and cfg.compute_environment.value == "LOCAL_MACHINE"
    if path.stem == "fsdp2":
        assert cfg.fsdp_config["fsdp_version"] == 2
    if path.stem.startswith("zero"):
        assert cfg.deepspeed_config["zero_stage"] == int(path.stem[-1])


class _Plugin:
    zero_stage = 3


class _State:
    deepspeed_plugin = _Plugin()


class _FakeAccelerator:
    """The two attributes :mod:`arlgym.rl.distributed` reads (a seam; no GPUs here)."""

    def __init__(self, kind):
        from accelerate.utils import DistributedType

        self.distributed_type = getattr(DistributedType, kind)
        self.state = _State()


def test_sharded_runs_refuse_hf_rollouts_and_lora():
    from arlgym.rl.distributed import check_rollout_support, sharding

    assert sharding(_FakeAccelerator("FSDP")) == "fsdp"
    assert sharding(_FakeAccelerator("DEEPSPEED")) == "zero3"
    assert sharding(_FakeAccelerator("MULTI_GPU")) is None
    check_rollout_support(_FakeAccelerator("MULTI_GPU"), "hf", lora=True)  # full weights: fine
    with pytest.raises(ConfigError, match="rollout_engine vllm"):
        check_rollout_support(_FakeAccelerator("FSDP"), "hf", lora=False)
    with pytest.raises(ConfigError, match="LoRA"):
        check_rollout_support(_FakeAccelerator("DEEPSPEED"), "vllm", lora=True)
    check_rollout_support(_FakeAccelerator("DEEPSPEED"), "vllm", lora=False)


def test_lm_head_and_logits_budget_are_checked():
    from arlgym.rl.config import TrainConfig

    assert TrainConfig().lm_head == "fused"
    assert TrainConfig(lm_head="materialized").micro_batch_logits_mb == 1024.0
    with pytest.raises(ConfigError, match="lm_head must be fused or materialized"):
        TrainConfig(lm_head="liger")
