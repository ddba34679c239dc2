"""Loss aggregation (paper App. A.1, Eqs. 10-13). Run: pytest tests/unit/rl/test_aggregation.py"""

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import AGGREGATION_MODES, RegistryError, aggregate

# Shared worked example:
#   loss_mat = [[1, 2, 3],      mask = [[1, 1, 0],
#               [4, 5, 6]]              [1, 0, 0]]
#   unmasked tokens: row 0 -> 1, 2 (T_0 = 2), row 1 -> 4 (T_1 = 1); Σ = 7, Σ T_i = 3, N = 2
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_token_mean():
    # Eq. 10: 7 / 3
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx(7 / 3)


def test_seq_mean_token_mean():
    # Eq. 11: row means 3/2 = 1.5 and 4/1 = 4 -> (1.5 + 4) / 2 = 2.75
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(2.75)


def test_seq_mean_token_sum():
    # Eq. 12: row sums 3 and 4 -> 7 / 2 = 3.5
    assert aggregate(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx(3.5)


def test_seq_mean_token_sum_norm():
    # Eq. 13 with T_max = 4: 7 / (2 * 4) = 0.875
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", max_len=4).item() == pytest.approx(
        0.875
    )


def test_sum_norm_needs_max_len():
    with pytest.raises(ConfigError, match="max_len"):
        aggregate(LOSS, MASK, "seq-mean-token-sum-norm")


def test_global_counts_override_local():
    # token-mean with 6 global tokens: 7 / 6; seq-mean-token-mean over 4 global seqs: 5.5 / 4
    assert aggregate(LOSS, MASK, "token-mean", global_tokens=6).item() == pytest.approx(7 / 6)
    got = aggregate(LOSS, MASK, "seq-mean-token-mean", num_seqs=4).item()
    assert got == pytest.approx(1.375)
    # seq-mean-token-sum over 4 seqs: 7 / 4; sum-norm: 7 / (4 * 4)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum", num_seqs=4).item() == pytest.approx(1.75)
    got = aggregate(LOSS, MASK, "seq-mean-token-sum-norm", num_seqs=4, max_len=4).item()
    assert got == pytest.approx(7 / 16)


def test_empty_rows_and_empty_mask():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # the empty row adds nothing and is not counted: 1.5 / 1
    assert aggregate(LOSS, mask, "seq-mean-token-mean").item() == pytest.approx(1.5)
    zero = torch.zeros_like(MASK)
    for mode in AGGREGATION_MODES:
        out = aggregate(LOSS, zero, mode, max_len=3)
        assert out.item() == 0.0 and torch.isfinite(out)


def test_unknown_mode_lists_options():
    with pytest.raises(RegistryError, match="token-mean") as err:
        aggregate(LOSS, MASK, "token_mean")
    assert "Did you mean 'token-mean'" in str(err.value)


def test_bad_shapes_and_counts():
    with pytest.raises(ConfigError, match="same"):
        aggregate(LOSS, MASK[:, :2], "token-mean")
    with pytest.raises(ConfigError, match="global_tokens"):
        aggregate(LOSS, MASK, "token-mean", global_tokens=0)


def _loop_reference(loss, mask, mode, max_len):
    rows = [
        [float(v) for v, m in zip(lr, mr, strict=True) if m]
        for lr, mr in zip(loss, mask, strict=True)
    ]
    total = sum(sum(r) for r in rows)
    if mode == "token-mean":
        return total / max(1, sum(len(r) for r in rows))
    if mode == "seq-mean-token-mean":
        means = [sum(r) / len(r) for r in rows if r]
        return sum(means) / max(1, len(means))
    if mode == "seq-mean-token-sum":
        return total / len(rows)
    return total / (len(rows) * max_len)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_vectorised_matches_loop(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(7, 9, generator=g)
    mask = (torch.rand(7, 9, generator=g) > 0.4).float()
    mask[3] = 0  # one empty row
    got = aggregate(loss, mask, mode, max_len=12).item()
    assert got == pytest.approx(_loop_reference(loss.tolist(), mask.tolist(), mode, 12), rel=1e-5)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_micro_batches_with_global_counts_equal_full_batch(mode):
    """Summing micro-batch losses normalised by mini-batch totals gives the full-batch loss and
    gradient (the trainer's gradient-accumulation contract, aggregation module docstring)."""
    g = torch.Generator().manual_seed(1)
    base = torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    mask[:, 0] = 1  # no empty rows, so num_seqs = 6 for every mode
    full_x = base.clone().requires_grad_(True)
    full = aggregate(full_x, mask, mode, max_len=5)
    full.backward()
    micro_x = base.clone().requires_grad_(True)
    kw = {"global_tokens": mask.sum(), "num_seqs": 6, "max_len": 5}
    total = sum(aggregate(micro_x[s], mask[s], mode, **kw) for s in (slice(0, 2), slice(2, 6)))
    total.backward()
    assert total.item() == pytest.approx(full.item(), rel=1e-6)
    assert torch.allclose(micro_x.grad, full_x.grad, atol=1e-7)
