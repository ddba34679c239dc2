"""Rollout correction: each method's weights against hand-computed values, the mismatch
diagnostics, the loss hook, the per-sample hook and the config errors."""

import math

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl.batching import TokenSample
from arlgym.rl.correction import RolloutCorrection, correction_weights, mismatch_metrics
from arlgym.rl.losses import policy_loss

# token ratios ρ = π_learner / π_sampler: sequence 1 = (3, 0.25, 1.5), sequence 2 = (0.8, pad)
RATIOS = [[3.0, 0.25, 1.5], [0.8, 1.0, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
SAMPLER = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -3.0, -3.0]])
LEARNER = SAMPLER + torch.log(torch.tensor(RATIOS))


def _w(method, **kw):
    w, m = correction_weights(method, LEARNER, SAMPLER, MASK, **kw)
    return w, {k: float(v) for k, v in m.items()}


def test_tis_token_truncates_each_token_at_c():
    w, m = _w("tis_token")  # C = 2 (Yao et al. 2025)
    assert torch.allclose(w, torch.tensor([[2.0, 0.25, 1.5], [0.8, 0.0, 0.0]]))
    assert m["mismatch/truncated_frac"] == pytest.approx(1 / 4)
    assert m["mismatch/masked_frac"] == 0.0
    assert m["mismatch/weight_mean"] == pytest.approx((2 + 0.25 + 1.5 + 0.8) / 4)


def test_tis_seq_uses_the_product_of_the_token_ratios():
    w, _ = _w("tis_seq")  # 3 * 0.25 * 1.5 = 1.125 < 2; 0.8
    assert torch.allclose(w, torch.tensor([[1.125] * 3, [0.8, 0.0, 0.0]]))
    w, m = _w("tis_seq", cap=1.1)
    assert torch.allclose(w, torch.tensor([[1.1] * 3, [0.8, 0.0, 0.0]]))
    assert m["mismatch/truncated_frac"] == pytest.approx(3 / 4)


def test_mis_drops_instead_of_truncating():
    w, m = _w("mis_token")  # keep ρ <= 2 with its weight ρ, drop the 3
    assert torch.allclose(w, torch.tensor([[0.0, 0.25, 1.5], [0.8, 0.0, 0.0]]))
    assert m["mismatch/masked_frac"] == pytest.approx(1 / 4)
    w, m = _w("mis_seq", cap=1.1)  # 1.125 > 1.1: the whole first sequence goes
    assert torch.allclose(w, torch.tensor([[0.0] * 3, [0.8, 0.0, 0.0]]))
    assert m["mismatch/masked_frac"] == pytest.approx(3 / 4)
    w, _ = _w("mis_token", floor=0.5)  # a band: 0.25 goes too
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 1.5], [0.8, 0.0, 0.0]]))


def test_icepop_masks_both_sides():
    w, m = _w("icepop")  # α = 0.5, β = 5: 0.25 is dropped, 3 is kept with its ratio
    assert torch.allclose(w, torch.tensor([[3.0, 0.0, 1.5], [0.8, 0.0, 0.0]]))
    assert m["mismatch/masked_frac"] == pytest.approx(1 / 4)
    w, _ = _w("icepop", cap=2.0)
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 1.5], [0.8, 0.0, 0.0]]))


def test_none_is_all_ones_on_the_tokens():
    w, _ = _w("none")
    assert torch.equal(w, MASK)


def test_mismatch_kl_is_k3_and_quantiles_of_the_token_ratio():
    m = {k: float(v) for k, v in mismatch_metrics(LEARNER, SAMPLER, MASK).items()}
    rs = [3.0, 0.25, 1.5, 0.8]
    assert m["mismatch/kl"] == pytest.approx(sum(r - 1 - math.log(r) for r in rs) / 4, rel=1e-5)
    assert m["mismatch/ratio_q50"] == pytest.approx((0.8 + 1.5) / 2, rel=1e-5)  # linear interp.
    assert m["mismatch/ratio_q05"] < 0.8 and m["mismatch/ratio_q95"] > 1.5
    same = mismatch_metrics(SAMPLER, SAMPLER, MASK)
    assert float(same["mismatch/kl"]) == 0.0 and float(same["mismatch/ratio_q50"]) == 1.0


def test_the_loss_hook_weights_each_token_and_keeps_the_denominator():
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    adv = torch.tensor([1.0, -2.0])
    base, _ = policy_loss("ppo_clip", logp, logp.detach(), adv, MASK)
    ones, _ = policy_loss("ppo_clip", logp, logp.detach(), adv, MASK, token_weights=MASK)
    assert torch.equal(base, ones)
    w = torch.tensor([[2.0, 0.0, 0.5], [0.8, 0.0, 0.0]])
    loss, _ = policy_loss("ppo_clip", logp, logp.detach(), adv, MASK, token_weights=w)
    # on-policy ppo_clip: ℓ_t = -A; token-mean over the 4 tokens, whatever was zeroed
    assert float(loss.detach()) == pytest.approx(-(1.0 * (2.0 + 0.0 + 0.5) + -2.0 * 0.8) / 4)


def _sample(rollout, old):
    return TokenSample(uid="u", traj_id="t", step=0, anchor="a", step_reward=0.0,
                       episode_return=0.0, format_penalty=0.0, format_valid=True,
                       action_valid=True, won=False, prompt_ids=[1],
                       response_ids=list(range(len(rollout))), rollout_logprobs=rollout,
                       old_logprobs=torch.tensor(old))


def test_the_sample_hook_stores_each_samples_weights():
    a = _sample([-1.0, -2.0], [-1.0 + math.log(3.0), -2.0])
    b = _sample([-0.5], [-0.5 + math.log(0.8)])
    metrics = RolloutCorrection("tis_token").apply([a, b])
    assert torch.allclose(a.rollout_weight, torch.tensor([2.0, 1.0]))
    assert torch.allclose(b.rollout_weight, torch.tensor([0.8]))
    assert metrics["mismatch/truncated_frac"] == pytest.approx(1 / 3)
    c = _sample([-1.0], [-1.0])
    assert c.rollout_weight is None and RolloutCorrection("none").apply([c])["mismatch/kl"] == 0.0
    c.rollout_logprobs = None
    with pytest.raises(ConfigError, match="no sampler"):
        RolloutCorrection("icepop").apply([c])


def test_config_errors_name_the_parameter_and_the_fix():
    from arlgym.rl.config import TrainConfig

    with pytest.raises(ConfigError, match="rollout_correction='tis'.*tis_token"):
        TrainConfig(rollout_correction="tis")
    with pytest.raises(ConfigError, match="floor < 1 < cap"):
        TrainConfig(rollout_correction="icepop", rollout_correction_cap=0.9)
    with pytest.raises(ConfigError, match="old_logprobs recompute"):
        TrainConfig(rollout_correction="tis_token", old_logprobs="rollout")
