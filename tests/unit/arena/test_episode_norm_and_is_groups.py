"""The one episode-statistics switch shared by every preset, and the IS-group telemetry."""

from __future__ import annotations

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import policy_loss
from arlgym.rl.config import TrainConfig
from arlgym.rl.losses import IS_GROUPS, is_group_metrics, kl_k3
from arlgym.rl.presets import EPISODE_NORM, PRESETS, get_preset
from arlgym.rl.trainer import resolve_algorithm


def test_every_preset_shares_one_episode_norm():
    assert EPISODE_NORM == "turns"
    assert {get_preset(n)["advantage"]["cross_steps"] for n in PRESETS} == {True}


@pytest.mark.parametrize("algo", ["grpo", "gigpo", "empg", "sampo"])
def test_episode_norm_override(algo):
    cfg = TrainConfig(algo=algo, episode_norm="trajectories")
    assert resolve_algorithm(cfg)["advantage"]["cross_steps"] is False
    assert resolve_algorithm(TrainConfig(algo=algo))["advantage"]["cross_steps"] is True


def test_episode_norm_checked():
    with pytest.raises(ConfigError, match="episode_norm"):
        TrainConfig(episode_norm="steps")


def test_is_groups_partition_tokens_and_kl():
    g = torch.Generator().manual_seed(0)
    b, t = 6, 9
    logp = -torch.rand(b, t, generator=g) * 3
    old = logp + 0.3 * torch.randn(b, t, generator=g)
    ref = logp + 0.5 * torch.randn(b, t, generator=g)
    adv = torch.tensor([1.0, -1.0, 0.0, 2.0, -0.5, 0.0]).unsqueeze(-1).expand(b, t)
    mask = torch.ones(b, t)
    mask[0, 5:] = 0
    ent = torch.rand(b, t, generator=g)
    ratio = torch.exp(logp - old)
    kl = kl_k3(logp, ref)
    m = is_group_metrics(ratio, adv, mask, ent, kl)
    assert sum(float(m[f"is_groups/{x}/tokens"]) for x in IS_GROUPS) == pytest.approx(1.0)
    total_kl = float((kl * mask).sum() / mask.sum())
    assert sum(float(m[f"is_groups/{x}/kl"]) for x in IS_GROUPS) == pytest.approx(total_kl, rel=1e-5)
    # hand count of one group: positive advantage, ratio above 1, entropy above the median
    valid = mask.bool()
    sel = (adv > 0) & (ratio > 1) & (ent > ent[valid].median()) & valid
    assert float(m["is_groups/pos_ratio_hi_ent_hi/tokens"]) == pytest.approx(float(sel.sum()) / float(valid.sum()))
    assert float(m["is_groups/zero_adv/tokens"]) == pytest.approx(18 / float(valid.sum()))


def test_policy_loss_logs_is_groups_when_given_entropy():
    logp = torch.log(torch.full((2, 3), 0.5))
    _, metrics = policy_loss("ppo_clip", logp, logp, torch.tensor([1.0, -1.0]), torch.ones(2, 3),
                             entropy=torch.rand(2, 3), ref_logp=logp)
    assert {f"is_groups/{x}/tokens" for x in IS_GROUPS} <= set(metrics)
    _, metrics = policy_loss("ppo_clip", logp, logp, torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    assert not any(k.startswith("is_groups/") for k in metrics)


def test_is_band_is_common_and_checked():
    assert TrainConfig().is_band == 0.2
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ConfigError, match="is_band"):
            TrainConfig(is_band=bad)
    # CISPO's own lower clip (1.0) would never count a token below the band
    logp = torch.log(torch.full((1, 4), 0.1))
    old = torch.log(torch.full((1, 4), 0.5))  # ratio 0.2 < 1 - 0.2
    adv = torch.tensor([-1.0])
    _, own = policy_loss("cispo", logp, old, adv, torch.ones(1, 4), clip_low=1.0, clip_high=0.2)
    _, common = policy_loss("cispo", logp, old, adv, torch.ones(1, 4), clip_low=1.0, clip_high=0.2,
                            is_clip_low=0.2, is_clip_high=0.2)
    assert float(own["is/out_low_neg_adv_frac"]) == 0.0
    assert float(common["is/out_low_neg_adv_frac"]) == 1.0
