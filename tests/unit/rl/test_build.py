"""The trainer's builders (arlgym.rl.build), each on its own: the checks refuse what the
trainer cannot run, the model builder's derived settings, the reference model, the warm-up
schedule and the dynamic sampler's return reader."""

from types import SimpleNamespace

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import build
from arlgym.rl.cli import parse_train_config
from arlgym.rl.presets import get_preset

BASE = ["--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "4", "--group_size", "2",
        "--log_with", "none"]


def _cfg(*extra: str):
    return parse_train_config([*BASE, *extra])


def test_check_setup_gives_each_rank_whole_groups_and_refuses_the_rest():
    assert build.check_setup(_cfg(), 1, "grpo") == 4
    assert build.check_setup(_cfg(), 2, "grpo") == 2
    with pytest.raises(ConfigError, match="num_tasks=4 must be a multiple"):
        build.check_setup(_cfg(), 3, "grpo")
    with pytest.raises(ConfigError, match="EMPG needs the entropies"):
        build.check_setup(_cfg("--old_logprobs", "rollout"), 1, "empg")
    assert build.check_setup(_cfg("--async_rollouts", "true"), 2, "grpo") == 2  # workers per rank


def test_build_model_turns_shared_prompts_off_under_gradient_checkpointing():
    plain = build.build_model(_cfg())
    assert plain.share_prompts and not plain.lora and plain.processor is None
    assert plain.model.training
    with pytest.warns(UserWarning, match="share_prompts is turned off"):
        ckpt = build.build_model(_cfg("--gradient_checkpointing", "true"))
    assert not ckpt.share_prompts and ckpt.model.is_gradient_checkpointing
    # the same seed gives the same tiny weights, whatever was built before
    for (name, a), b in zip(plain.model.state_dict().items(), ckpt.model.state_dict().values(),
                               strict=True):
        assert torch.equal(a, b), name


def test_build_model_with_lora_trains_adapters_only():
    parts = build.build_model(_cfg("--lora_r", "4"))
    trainable = [n for n, p in parts.model.named_parameters() if p.requires_grad]
    assert parts.lora and trainable and all("lora_" in n for n in trainable)


def test_reference_model_is_a_frozen_copy_only_with_a_kl_term_and_no_lora():
    cfg = _cfg()
    assert build.build_reference(cfg, 0.0, lora=False, device="cpu") is None
    assert build.build_reference(cfg, 0.1, lora=True, device="cpu") is None
    ref = build.build_reference(cfg, 0.1, lora=False, device="cpu")
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    policy = build.build_model(cfg).model
    for (name, a), b in zip(ref.state_dict().items(), policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_optimizer_warms_up_linearly_over_warmup_steps():
    model = torch.nn.Linear(2, 2)
    opt, sched = build.build_optimizer(model, 1e-2, _cfg("--warmup_steps", "4"))
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])


def test_sampler_filters_on_the_task_return_not_the_penalised_return():
    assert build.build_sampler(get_preset("grpo"), 2) is None  # grpo does not filter
    sampler = build.build_sampler(get_preset("dapo_gigpo"), 2)
    # equal task returns, unequal penalised returns: the group carries no signal
    group = [SimpleNamespace(task_return=1.0, episode_return=1.0 - 0.1 * i) for i in range(2)]
    assert sampler._returns([group]) == [[1.0, 1.0]]


def test_env_server_kwargs_and_env_seeds():
    assert build.env_server_kwargs("") == {}
    assert build.env_server_kwargs(" http://a:1 , http://b:2 ")["servers"] == ["http://a:1",
                                                                               "http://b:2"]
    seeds = {build.env_seed(s, r) for s in range(3) for r in range(4)}
    assert len(seeds) == 12  # every (seed, rank) starts its own task stream


def test_vllm_server_engine_settings_are_checked_before_anything_starts():
    with pytest.raises(ConfigError, match="vllm_server_urls has 1, expected 2"):
        _cfg("--rollout_engine", "vllm_server", "--async_rollouts", "true",
             "--rollout_workers", "2", "--vllm_server_urls", "http://a:8000")
    with pytest.raises(ConfigError, match="vllm_server_urls has 0, expected 1"):
        _cfg("--rollout_engine", "vllm_server")
    with pytest.raises(ConfigError, match="Fix: --rollout_engine vllm_server"):
        _cfg("--vllm_server_urls", "http://a:8000")
    cfg = _cfg("--rollout_engine", "vllm_server", "--vllm_server_urls", "http://a:8000")
    with pytest.raises(ConfigError, match="one process"):
        build.check_setup(cfg, 2, "grpo")
    if not torch.cuda.is_available():  # weight sync is NCCL: refused up front on CPU
        with pytest.raises(ConfigError, match="needs a CUDA device here"):
            build.resolve_engine(cfg)
