"""Presets of the 13 methods (paper Table 1, Table 6). Run: pytest tests/unit/rl/test_presets.py"""

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import (
    ADVANTAGES,
    AGGREGATIONS,
    ENVS,
    FILTERS,
    LOSSES,
    PRESETS,
    DynamicSampler,
    advantage_kwargs,
    compute_advantages,
    get_preset,
    make_sampler,
    policy_loss,
    policy_loss_kwargs,
)

METHODS = [
    "sampo",
    "grpo",
    "grpo_st",
    "grpo_sm",
    "sapo",
    "sapo_sm",
    "cispo",
    "cispo_sm",
    "gspo",
    "gigpo",
    "empg",
    "dapo_grpo",
    "dapo_gigpo",
]
NOT_ON_MATH = {"gigpo", "empg", "dapo_gigpo", "sampo"}  # Table 6 / Table 3 "–"


def test_all_thirteen_methods():
    assert sorted(PRESETS) == sorted(METHODS)


@pytest.mark.parametrize("name", METHODS)
def test_names_resolve_in_registries(name):
    p = get_preset(name)
    assert p["advantage"]["name"] in ADVANTAGES
    assert p["loss"]["name"] in LOSSES
    assert p["aggregation"] in AGGREGATIONS
    assert p["filter"]["name"] in FILTERS


def test_get_preset_is_a_deep_copy():
    p = get_preset("sampo")
    p["loss"]["clip_high"] = 99.0
    p["filter"]["max_tries"] = 99
    assert PRESETS["sampo"]["loss"]["clip_high"] == 4e-3
    assert get_preset("sampo")["filter"]["max_tries"] == 3


def test_unknown_and_not_applicable():
    with pytest.raises(ConfigError, match="sampo") as err:
        get_preset("ppo")
    assert "dapo_gigpo" in str(err.value)
    with pytest.raises(ConfigError, match="alfworld"):
        get_preset("grpo", env="minecraft")
    for name in NOT_ON_MATH:
        with pytest.raises(ConfigError, match="not applicable"):
            get_preset(name, env="tir_math")


def test_sampo_composition():
    # SAMPO = GiGPO advantage + GSPO sequence clipping + dynamic filtering (ARLArena paper, Eq. 8)
    p = get_preset("sampo")
    assert p["advantage"]["name"] == "gigpo"
    assert p["advantage"]["gamma"] == 0.95 and p["advantage"]["step_weight"] == 1.0
    assert p["loss"] == {"name": "gspo", "clip_low": 3e-3, "clip_high": 4e-3}
    assert p["filter"]["enabled"] and p["filter"]["max_tries"] == 3
    assert p["filter"]["cold_start_steps"] == 15
    assert get_preset("sampo", env="webshop")["filter"]["cold_start_steps"] == 5
    assert p["kl_coef"] == 0.01 and p["lr"] == 1e-6 and p["group_size"] == 8


def test_table6_method_values():
    assert get_preset("grpo")["loss"]["clip_low"] == 0.2
    assert get_preset("grpo")["loss"]["clip_high"] == 0.2
    assert get_preset("grpo", env="tir_math")["loss"]["clip_high"] == 0.28
    assert get_preset("cispo")["loss"] == {"name": "cispo", "clip_low": 1.0, "clip_high": 0.2}
    assert get_preset("cispo", env="tir_math")["loss"]["clip_high"] == 0.28
    sapo = get_preset("sapo")["loss"]
    assert (sapo["sapo_tau_pos"], sapo["sapo_tau_neg"]) == (1.0, 1.05)
    gspo = {env: get_preset("gspo", env=env)["loss"] for env in ENVS}
    assert (gspo["alfworld"]["clip_low"], gspo["alfworld"]["clip_high"]) == (3e-3, 4e-3)
    assert (gspo["webshop"]["clip_low"], gspo["webshop"]["clip_high"]) == (3e-2, 4e-2)
    assert (gspo["sokoban"]["clip_low"], gspo["sokoban"]["clip_high"]) == (3e-3, 4e-3)
    assert (gspo["tir_math"]["clip_low"], gspo["tir_math"]["clip_high"]) == (3e-4, 4e-4)
    empg = get_preset("empg")["advantage"]
    assert (empg["empg_k"], empg["empg_k_future"], empg["empg_zeta"]) == (1.0, 1.0, 0.05)
    for name in ("dapo_grpo", "dapo_gigpo"):
        assert get_preset(name)["filter"]["max_tries"] == 3
    assert get_preset("dapo_grpo", env="tir_math")["loss"]["clip_high"] == 0.28


def test_table1_dimensions():
    assert get_preset("grpo")["aggregation"] == "token-mean"
    assert get_preset("grpo_st")["aggregation"] == "seq-mean-token-mean"
    for name in ("grpo_sm", "sapo_sm", "cispo_sm"):
        assert get_preset(name)["seq_mask"]["enabled"]
    for name in ("grpo", "sapo", "cispo", "gspo", "gigpo", "empg", "dapo_grpo", "sampo"):
        assert not get_preset(name)["seq_mask"]["enabled"]
    for name in METHODS:
        assert get_preset(name)["filter"]["enabled"] == (
            name in ("dapo_grpo", "dapo_gigpo", "sampo")
        )


def test_table6_env_columns():
    rows = {env: get_preset("grpo", env=env) for env in ENVS}
    assert [rows[e]["group_size"] for e in ENVS] == [8, 8, 8, 5]
    assert [rows[e]["mini_batch_size"] for e in ENVS] == [256, 128, 64, 128]
    assert [rows[e]["kl_coef"] for e in ENVS] == [0.01, 0.01, 0.01, 0.0]
    assert [rows[e]["max_steps"] for e in ENVS] == [50, 15, 15, 5]
    assert [rows[e]["tasks_per_step"] for e in ENVS] == [16, 16, 32, 512]
    assert [rows[e]["max_response_len"] for e in ENVS] == [512, 512, 512, 4096]
    assert all(rows[e]["advantage"]["norm"] == "mean_std_norm" for e in ENVS)
    assert all(rows[e]["format_penalty"] == 0.1 and rows[e]["lr"] == 1e-6 for e in ENVS)


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("name", METHODS)
def test_preset_runs_end_to_end(name, env):
    """Every preset's parameters are accepted by compute_advantages, policy_loss, the sampler."""
    if env == "tir_math" and name in NOT_ON_MATH:  # Table 6 '–': refused with a clear error
        with pytest.raises(ConfigError, match="not applicable"):
            get_preset(name, env=env)
        return
    p = get_preset(name, env=env)
    samples = [
        {
            "uid": "g",
            "traj_id": t,
            "step": k,
            "anchor": f"s{k}",
            "step_reward": float(t == "a" and k == 1),
            "episode_return": float(t == "a"),
            "entropy": 0.1 * (k + 1),
        }
        for t in ("a", "b")
        for k in range(2)
    ]
    adv = compute_advantages(**advantage_kwargs(p), samples=samples)
    assert adv.shape == (4,) and torch.isfinite(adv).all()
    old = torch.randn(4, 3)
    logp = (old + 0.01 * torch.randn(4, 3)).requires_grad_(True)
    loss, metrics = policy_loss(
        **policy_loss_kwargs(p),
        logp=logp,
        old_logp=old,
        advantages=adv,
        mask=torch.ones(4, 3),
        ref_logp=old,
        entropy=torch.rand(4, 3, requires_grad=True),
    )
    loss.backward()
    assert torch.isfinite(loss) and logp.grad is not None
    sampler = make_sampler(p)
    assert (sampler is not None) == p["filter"]["enabled"]
    if sampler is not None:
        assert isinstance(sampler, DynamicSampler) and sampler.target_groups == p["tasks_per_step"]
