"""Policy losses, seq mask, k3 KL and telemetry (paper Table 1, App. A.2).

Run: pytest tests/unit/rl/test_losses.py
"""

import math

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import RegistryError, kl_k3, loss_knobs, policy_loss

OLD = torch.tensor([[-1.0, -2.0, -0.5]])


def _logp(ratios, old=OLD):
    """logp such that exp(logp - old) = ratios; a leaf with grad."""
    return (old + torch.log(torch.tensor([ratios]))).clone().requires_grad_(True)


def _grad(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


MASK = torch.ones(1, 3)


# ------------------------------------------------------------------------- ppo_clip


def test_ppo_clip_positive_advantage():
    # r = [1.5, 0.5, 1.1], A = +1, eps = 0.2:
    #   -r         = [-1.5, -0.5, -1.1];  -clip(r) = [-1.2, -0.8, -1.1]
    #   max        = [-1.2, -0.5, -1.1]   -> token-mean = -2.8 / 3
    #   gradient   : token 0 clipped -> 0; token 1 -> -r/3 = -0.5/3; token 2 -> -1.1/3
    logp = _logp([1.5, 0.5, 1.1])
    loss, m = policy_loss("ppo_clip", logp, OLD, torch.tensor([1.0]), MASK)
    assert loss.item() == pytest.approx(-2.8 / 3)
    assert torch.allclose(_grad(loss, logp), torch.tensor([[0.0, -0.5 / 3, -1.1 / 3]]))
    assert m["clip_ratio/high_mean"].item() == pytest.approx(1 / 3)  # r=1.5 > 1.2, A>0
    assert m["clip_ratio/low_mean"].item() == 0.0  # r=0.5 < 0.8 but A>0: not clipped
    assert m["clip_ratio/region_mean"].item() == pytest.approx(1 / 3)
    assert m["is/out_high_pos_adv_frac"].item() == pytest.approx(1 / 3)
    assert m["is/out_low_neg_adv_frac"].item() == 0.0
    assert m["is/out_frac"].item() == pytest.approx(2 / 3)  # 1.5 and 0.5 out of [0.8, 1.2]
    assert m["is/ratio_mean"].item() == pytest.approx(3.1 / 3)
    assert m["is/ratio_max"].item() == pytest.approx(1.5)
    assert m["is/ratio_min"].item() == pytest.approx(0.5)


def test_ppo_clip_negative_advantage():
    # A = -1: r = [1.5, 0.5, 1.1]; clip(r) = [1.2, 0.8, 1.1]; max = [1.5, 0.8, 1.1] -> 3.4 / 3
    # gradient: token 0 -> +1.5/3 (unclipped side), token 1 clipped -> 0, token 2 -> 1.1/3
    logp = _logp([1.5, 0.5, 1.1])
    loss, m = policy_loss("ppo_clip", logp, OLD, torch.tensor([-1.0]), MASK)
    assert loss.item() == pytest.approx(3.4 / 3)
    assert torch.allclose(_grad(loss, logp), torch.tensor([[1.5 / 3, 0.0, 1.1 / 3]]))
    assert m["clip_ratio/low_mean"].item() == pytest.approx(1 / 3)
    assert m["clip_ratio/high_mean"].item() == 0.0
    assert m["is/out_low_neg_adv_frac"].item() == pytest.approx(1 / 3)
    assert m["is/out_high_pos_adv_frac"].item() == 0.0


def test_ppo_clip_asymmetric_clip_higher():
    # DAPO clip-higher eps_h = 0.28: r = 1.25 is inside [0.8, 1.28] -> loss = -1.25 (A=+1)
    logp = _logp([1.25, 1.0, 1.0])
    loss, _ = policy_loss("ppo_clip", logp, OLD, torch.tensor([1.0]), MASK, clip_high=0.28)
    assert loss.item() == pytest.approx(-(1.25 + 1 + 1) / 3)


def test_ppo_dual_clip():
    # A = -1, r = 4: max(4, clip(4)=1.2) = 4, dual clip c = 3 caps it at -c*A = 3; gradient 0.
    # r = 1 token: loss 1.  token-mean = (3 + 1 + 1) / 3
    logp = _logp([4.0, 1.0, 1.0])
    loss, m = policy_loss("ppo_clip", logp, OLD, torch.tensor([-1.0]), MASK, dual_clip=3.0)
    assert loss.item() == pytest.approx(5 / 3)
    assert _grad(loss, logp)[0, 0].item() == 0.0
    assert m["clip_ratio/dual_mean"].item() == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="dual_clip"):
        policy_loss("ppo_clip", logp, OLD, torch.tensor([-1.0]), MASK, dual_clip=0.5)


# ------------------------------------------------------------------------- gspo


def test_gspo_sequence_ratio_value_and_gradient():
    # log r = [0.2, -0.1] -> s = exp(0.05) = 1.0512711; A = +2, eps 0.2 (unclipped)
    # every token: -A*s = -2.1025422; seq-mean-token-mean -> -2.1025422
    # d/dlogp_t = (1/T) * (-A * s) = -1.0512711 for both tokens (same as clipping s once)
    old = torch.tensor([[-1.0, -1.0]])
    logp = (old + torch.tensor([[0.2, -0.1]])).requires_grad_(True)
    loss, m = policy_loss(
        "gspo",
        logp,
        old,
        torch.tensor([2.0]),
        torch.ones(1, 2),
        aggregation="seq-mean-token-mean",
        clip_low=0.2,
        clip_high=0.2,
    )
    s = math.exp(0.05)
    assert loss.item() == pytest.approx(-2 * s)
    assert torch.allclose(_grad(loss, logp), torch.full((1, 2), -s))
    assert m["is/seq_ratio_mean"].item() == pytest.approx(s)
    assert m["clip_ratio/region_mean"].item() == 0.0
    # token-level IS telemetry still sees r = e^0.2 = 1.2214 > 1.2 on token 0
    assert m["is/out_high_pos_adv_frac"].item() == pytest.approx(0.5)


def test_gspo_clipped_sequence_has_no_gradient():
    # s = 1.0512711 > 1 + 4e-3 with A > 0 -> clipped: loss = -A * 1.004, gradient 0
    old = torch.tensor([[-1.0, -1.0]])
    logp = (old + torch.tensor([[0.2, -0.1]])).requires_grad_(True)
    loss, m = policy_loss(
        "gspo", logp, old, torch.tensor([2.0]), torch.ones(1, 2), clip_low=3e-3, clip_high=4e-3
    )
    assert loss.item() == pytest.approx(-2 * 1.004)
    assert torch.count_nonzero(_grad(loss, logp)) == 0
    assert m["clip_ratio/high_mean"].item() == 1.0


def test_gspo_padding_is_ignored():
    # the padded token's log-ratio (5.0) must not enter s
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    logp = old + torch.tensor([[0.2, -0.1, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    _, m = policy_loss("gspo", logp, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.2)
    assert m["is/seq_ratio_mean"].item() == pytest.approx(math.exp(0.05))


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_gspo_gradcheck(aggregation):
    """Autograd of the GSPO-token form equals the numerical gradient of the sequence-level
    objective: the stop-gradients leave the value s_i on every token, so perturbing logp_t moves
    every token's value through s_i and finite differences see the true sequence gradient."""
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 4, generator=g, dtype=torch.float64)
    logp = (old + 0.05 * torch.randn(3, 4, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)

    def f(lp):
        return policy_loss(
            "gspo", lp, old, adv, mask, aggregation=aggregation, clip_low=0.5, clip_high=0.5
        )[0]

    assert torch.autograd.gradcheck(f, (logp,), eps=1e-6, atol=1e-6)


# ------------------------------------------------------------------------- sapo


def test_sapo_values_and_gradient():
    # token 0: r = 1, A = +1, tau_pos = 1: gate = sigma(0) * 4 = 2, loss = -2, grad = -A*r*4σ(1-σ) = -1
    # token 1: r = 2, A = +1: σ(1) = 0.7310586, gate = 2.9242344, loss = -2.9242344,
    #          grad = -4 * 0.7310586 * 0.2689414 * 2 = -1.5728954
    # token-sum over one sequence (seq-mean-token-sum) keeps per-token numbers unscaled
    old = torch.tensor([[-1.0, -1.0]])
    logp = (old + torch.log(torch.tensor([[1.0, 2.0]]))).requires_grad_(True)
    loss, m = policy_loss(
        "sapo", logp, old, torch.tensor([1.0]), torch.ones(1, 2), aggregation="seq-mean-token-sum"
    )
    assert loss.item() == pytest.approx(-2 - 2.9242344, rel=1e-6)
    assert torch.allclose(_grad(loss, logp), torch.tensor([[-1.0, -1.5728954]]), atol=1e-6)
    assert m["clip_ratio/high_mean"].item() == pytest.approx(0.5)  # r=2 > 1.2 with A>0


def test_sapo_negative_temperature():
    # r = 1, A = -1, tau_neg = 1.05: gate = 2/1.05 = 1.9047619, loss = +1.9047619; grad = +1
    old = torch.tensor([[-1.0]])
    logp = old.clone().requires_grad_(True)
    loss, _ = policy_loss("sapo", logp, old, torch.tensor([-1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(2 / 1.05)
    assert _grad(loss, logp).item() == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="tau"):
        policy_loss("sapo", logp, old, torch.tensor([-1.0]), torch.ones(1, 1), sapo_tau_neg=0.0)


def test_sapo_gradcheck():
    g = torch.Generator().manual_seed(1)
    old = torch.randn(3, 5, generator=g, dtype=torch.float64)
    logp = (old + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = (torch.rand(3, 5, generator=g) > 0.3).double()
    adv = torch.tensor([[1.0] * 5, [-1.0] * 5, [0.5, -0.5, 1.0, -2.0, 0.0]], dtype=torch.float64)

    def f(lp):
        return policy_loss("sapo", lp, old, adv, mask, sapo_tau_pos=1.0, sapo_tau_neg=1.05)[0]

    assert torch.autograd.gradcheck(f, (logp,), eps=1e-6, atol=1e-6)


# ------------------------------------------------------------------------- cispo


def test_cispo_values_and_gradient():
    # r = [1.5, 0.5], eps_low = 1 (Table 6: no lower bound), eps_high = 0.2, A = +1
    # weights sg(clip(r, 0, 1.2)) = [1.2, 0.5]
    # logp = [-1 + ln 1.5, -2 + ln 0.5] = [-0.5945349, -2.6931472]
    # loss = -w*A*logp = [0.7134419, 1.3465736] -> token-mean 1.0300078
    # gradient = -w*A/T = [-0.6, -0.25]  (the clipped token keeps a gradient)
    old = torch.tensor([[-1.0, -2.0]])
    logp = (old + torch.log(torch.tensor([[1.5, 0.5]]))).requires_grad_(True)
    loss, m = policy_loss(
        "cispo", logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_low=1.0, clip_high=0.2
    )
    assert loss.item() == pytest.approx(1.0300078, rel=1e-6)
    assert torch.allclose(_grad(loss, logp), torch.tensor([[-0.6, -0.25]]))
    assert m["clip_ratio/high_mean"].item() == pytest.approx(0.5)
    assert m["clip_ratio/low_mean"].item() == 0.0
    # two-sided: eps_low = 0.2 truncates r = 0.5 up to 0.8 -> gradient -0.8/2 = -0.4
    loss, m = policy_loss(
        "cispo", logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_low=0.2, clip_high=0.2
    )
    assert torch.allclose(_grad(loss, logp), torch.tensor([[-0.6, -0.4]]))
    assert m["clip_ratio/low_mean"].item() == pytest.approx(0.5)


def test_cispo_gradient_is_stopgrad_weight_times_score():
    """Autograd check: ∇ℓ = -sg(clip(r))·A·∇logp, on random tensors (double-variable form: the
    weight is computed from a frozen copy, the score from the live variable)."""
    g = torch.Generator().manual_seed(2)
    old = torch.randn(4, 6, generator=g, dtype=torch.float64)
    logp = (old + 0.4 * torch.randn(4, 6, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = (torch.rand(4, 6, generator=g) > 0.2).double()
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    loss, _ = policy_loss("cispo", logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    weight = torch.exp(logp.detach() - old).clamp(0.8, 1.28)
    expected = -weight * adv[:, None] * mask / mask.sum()
    assert torch.allclose(_grad(loss, logp), expected)

    # and it equals the central finite difference of the frozen-weight surrogate
    # -Σ m·w·A·logp / Σ m (the weight held at the current point: the double-variable trick)
    def frozen(lp):
        return (-weight * adv[:, None] * lp * mask).sum() / mask.sum()

    numeric = torch.zeros_like(logp)
    h = 1e-6
    for idx in range(logp.numel()):
        bump = torch.zeros(logp.numel(), dtype=logp.dtype)
        bump[idx] = h
        bump = bump.view_as(logp)
        numeric.view(-1)[idx] = (frozen(logp.detach() + bump) - frozen(logp.detach() - bump)) / (
            2 * h
        )
    loss, _ = policy_loss("cispo", logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert torch.allclose(_grad(loss, logp), numeric, atol=1e-8)


# ------------------------------------------------------------------------- seq mask


def test_seq_mask_drops_negative_offpolicy_sequences():
    # delta = 3e-3, T = 2, ppo_clip eps 0.2, token-mean over all 6 tokens:
    #   row 0: A = -1, logp = old - 0.01 -> mean(old - logp) = 0.01 > delta -> masked (0)
    #   row 1: A = +1, same drift -> kept: loss per token -r = -e^-0.01 = -0.9900498
    #   row 2: A = -1, drift 0.001 <= delta -> kept: loss per token r = e^-0.001 = 0.9990005
    #   token-mean = (0 + 2*(-0.9900498) + 2*0.9990005) / 6 = 0.0029836
    old = torch.zeros(3, 2)
    logp = old - torch.tensor([[0.01], [0.01], [0.001]])
    adv = torch.tensor([-1.0, 1.0, -1.0])
    loss, m = policy_loss("ppo_clip", logp, old, adv, torch.ones(3, 2), seq_mask_delta=3e-3)
    assert loss.item() == pytest.approx((-2 * math.exp(-0.01) + 2 * math.exp(-0.001)) / 6, rel=1e-4)
    assert m["seq_mask/masked_frac"].item() == pytest.approx(1 / 3)
    # off by default: no masking, no metric
    loss_off, m_off = policy_loss("ppo_clip", logp, old, adv, torch.ones(3, 2))
    assert "seq_mask/masked_frac" not in m_off
    assert loss_off.item() == pytest.approx(
        (2 * math.exp(-0.01) - 2 * math.exp(-0.01) + 2 * math.exp(-0.001)) / 6
    )


def test_seq_mask_sign_follows_paper():
    # ratio ABOVE 1 (logp > old) with A < 0 is not masked: Table 1 masks mean log(π_old/π_θ) > δ
    old = torch.zeros(1, 2)
    logp = old + 0.5
    _, m = policy_loss(
        "ppo_clip", logp, old, torch.tensor([-1.0]), torch.ones(1, 2), seq_mask_delta=1e-3
    )
    assert m["seq_mask/masked_frac"].item() == 0.0


# ------------------------------------------------------------------------- KL, entropy


def test_kl_k3_hand_values():
    # logp = 0: ref = ln 2 -> 2 - ln 2 - 1 = 0.3068528; ref = ln 0.5 -> 0.5 + ln 2 - 1 = 0.1931472
    logp = torch.zeros(1, 3)
    ref = torch.log(torch.tensor([[2.0, 0.5, 1.0]]))
    assert torch.allclose(kl_k3(logp, ref), torch.tensor([[0.3068528, 0.1931472, 0.0]]))
    assert (kl_k3(torch.randn(50, 7), torch.randn(50, 7)) >= 0).all()


def test_kl_term_is_explicit():
    old = torch.zeros(1, 3)
    logp = old.clone().requires_grad_(True)
    ref = torch.log(torch.tensor([[2.0, 0.5, 1.0]]))
    adv = torch.tensor([1.0])
    base, _ = policy_loss("ppo_clip", logp, old, adv, MASK)  # -1 (r = 1 everywhere)
    # ref given, coefficient 0: metric only, loss unchanged
    same, m = policy_loss("ppo_clip", logp, old, adv, MASK, ref_logp=ref)
    assert same.item() == pytest.approx(base.item())
    assert m["kl"].item() == pytest.approx((0.3068528 + 0.1931472) / 3)
    # coefficient 0.1: loss = -1 + 0.1 * 0.5 / 3
    with_kl, _ = policy_loss("ppo_clip", logp, old, adv, MASK, ref_logp=ref, kl_coef=0.1)
    assert with_kl.item() == pytest.approx(-1 + 0.1 * 0.5 / 3)
    with pytest.raises(ConfigError, match="ref_logp"):
        policy_loss("ppo_clip", logp, old, adv, MASK, kl_coef=0.01)


def test_entropy_metric_and_bonus():
    old = torch.zeros(1, 3)
    logp = old.clone().requires_grad_(True)
    ent = torch.tensor([[0.3, 0.6, 0.9]], requires_grad=True)
    loss, m = policy_loss(
        "ppo_clip", logp, old, torch.tensor([1.0]), MASK, entropy=ent, entropy_coef=0.1
    )
    assert m["entropy"].item() == pytest.approx(0.6)
    assert loss.item() == pytest.approx(-1 - 0.1 * 0.6)
    with pytest.raises(ConfigError, match="entropy"):
        policy_loss("ppo_clip", logp, old, torch.tensor([1.0]), MASK, entropy_coef=0.1)


def test_old_policy_kl_telemetry():
    # log r = [0.1, -0.1, 0]: k1 = mean(old - logp) = 0; k3 = mean(r - 1 - log r)
    old = torch.zeros(1, 3)
    lr = torch.tensor([[0.1, -0.1, 0.0]])
    _, m = policy_loss("ppo_clip", old + lr, old, torch.tensor([1.0]), MASK)
    k3 = sum(math.exp(x) - 1 - x for x in (0.1, -0.1, 0.0)) / 3
    assert m["is/ppo_kl"].item() == pytest.approx(0.0, abs=1e-7)
    assert m["is/ppo_kl_k3"].item() == pytest.approx(k3, rel=1e-5)


def test_is_band_override():
    # GSPO-sized clips but a 0.2 diagnostic band: r = 1.1 is inside [0.8, 1.2]
    logp = _logp([1.1, 1.0, 1.0])
    _, m = policy_loss(
        "gspo",
        logp,
        OLD,
        torch.tensor([1.0]),
        MASK,
        clip_low=3e-3,
        clip_high=4e-3,
        is_clip_low=0.2,
        is_clip_high=0.2,
    )
    assert m["is/out_frac"].item() == 0.0


# ------------------------------------------------------------------------- API contract


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "sapo", "cispo"])
def test_metrics_are_detached_scalars_and_advantage_shapes_agree(name):
    g = torch.Generator().manual_seed(3)
    old = torch.randn(4, 5, generator=g)
    logp = (old + 0.1 * torch.randn(4, 5, generator=g)).requires_grad_(True)
    mask = (torch.rand(4, 5, generator=g) > 0.3).float()
    adv = torch.randn(4, generator=g)
    ref = old + 0.05
    loss1, m = policy_loss(
        name, logp, old, adv, mask, ref_logp=ref, kl_coef=0.01, entropy=torch.rand(4, 5)
    )
    loss2, _ = policy_loss(
        name, logp, old, adv[:, None].expand(4, 5), mask, ref_logp=ref, kl_coef=0.01
    )
    assert loss1.requires_grad and loss1.dim() == 0
    assert loss1.item() == pytest.approx(loss2.item(), rel=1e-6)
    for key, value in m.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0 and not value.requires_grad, key
    for key in (
        "kl",
        "entropy",
        "pg_loss",
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "clip_ratio/region_mean",
        "is/out_low_neg_adv_frac",
        "is/out_high_pos_adv_frac",
    ):
        assert key in m


def test_unknown_names_and_knobs_raise():
    logp = torch.zeros(1, 3)
    adv = torch.tensor([1.0])
    with pytest.raises(RegistryError, match="ppo_clip"):
        policy_loss("grpo", logp, logp, adv, MASK)
    with pytest.raises(ConfigError, match="sapo_tau_pos"):
        policy_loss("ppo_clip", logp, logp, adv, MASK, sapo_tau_pos=1.0)
    with pytest.raises(ConfigError, match=r"\(B,\) or \(B, T\)"):
        policy_loss("ppo_clip", logp, logp, torch.ones(2), MASK)
    with pytest.raises(ConfigError, match="shape"):
        policy_loss("ppo_clip", logp, logp[:, :2], adv, MASK)
    assert loss_knobs("sapo") == {"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05}
    assert loss_knobs("ppo_clip") == {"dual_clip": None}


def test_all_masked_batch_is_finite():
    logp = torch.zeros(2, 3, requires_grad=True)
    for name in ("ppo_clip", "gspo", "sapo", "cispo"):
        loss, m = policy_loss(name, logp, logp.detach(), torch.ones(2), torch.zeros(2, 3))
        assert loss.item() == 0.0
        assert all(torch.isfinite(v) for v in m.values())
