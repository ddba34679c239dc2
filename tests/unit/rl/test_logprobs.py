"""selective_logprobs equals the full-vocabulary computation (values, entropies, gradients).

Run: ``pytest tests/unit/rl/test_logprobs.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from arlgym.rl import logprobs as lp_mod  # noqa: E402
from arlgym.rl.logprobs import reference_logprobs, selective_logprobs  # noqa: E402


def _case(b=3, length=6, r=5, v=257, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(b, length, v, generator=g) * 3).to(dtype)
    ids = torch.randint(0, v, (b, r), generator=g)
    w_lp = torch.randn(b, r, generator=g)
    w_ent = torch.randn(b, r, generator=g)
    return logits, ids, w_lp, w_ent


def _grads(fn, logits, ids, w_lp, w_ent, temperature, with_entropy):
    x = logits.clone().requires_grad_(True)
    logp, ent = fn(x, ids, temperature=temperature, with_entropy=with_entropy)
    loss = (logp * w_lp).sum() + ((ent * w_ent).sum() if with_entropy else 0.0)
    loss.backward()
    return logp.detach(), (ent.detach() if ent is not None else None), x.grad


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("chunk_bytes", [lp_mod.CHUNK_BYTES, 4 * 257 * 2])  # 2-row chunks too
def test_values_entropies_and_grads_equal_the_full_computation(monkeypatch, temperature,
                                                               with_entropy, chunk_bytes):
    monkeypatch.setattr(lp_mod, "CHUNK_BYTES", chunk_bytes)
    case = _case()
    lp_a, ent_a, g_a = _grads(selective_logprobs, *case, temperature, with_entropy)
    lp_b, ent_b, g_b = _grads(reference_logprobs, *case, temperature, with_entropy)
    torch.testing.assert_close(lp_a, lp_b, rtol=1e-5, atol=1e-5)
    if with_entropy:
        torch.testing.assert_close(ent_a, ent_b, rtol=1e-5, atol=1e-5)
        assert float(ent_a.min()) > 0.0
    torch.testing.assert_close(g_a, g_b, rtol=1e-4, atol=1e-5)
    assert float(g_a[:, -1].abs().max()) == 0.0  # the column past R gets no gradient
    assert float(g_a.abs().sum()) > 0.0


def test_bf16_logits_keep_their_dtype_and_match_within_bf16_rounding():
    logits, ids, w_lp, w_ent = _case(dtype=torch.bfloat16)
    lp_a, ent_a, g_a = _grads(selective_logprobs, logits, ids, w_lp, w_ent, 1.0, True)
    lp_b, ent_b, g_b = _grads(reference_logprobs, logits, ids, w_lp, w_ent, 1.0, True)
    assert lp_a.dtype == torch.float32 and g_a.dtype == torch.bfloat16
    torch.testing.assert_close(lp_a, lp_b, rtol=1e-5, atol=1e-5)  # same upcast values
    torch.testing.assert_close(ent_a, ent_b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g_a.float(), g_b.float(), rtol=1e-2, atol=1e-3)


def test_no_grad_forward_saves_nothing_and_equals():
    logits, ids, *_ = _case()
    with torch.no_grad():
        a, _ = selective_logprobs(logits, ids)
    b, _ = reference_logprobs(logits, ids)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_gradcheck_in_double():
    logits, ids, *_ = _case(b=2, length=3, r=2, v=7, dtype=torch.float64)
    x = logits.requires_grad_(True)

    def f(t):
        lp, ent = selective_logprobs(t, ids, temperature=0.8, with_entropy=True)
        return lp, ent

    # the forward runs in float32 (like every caller), so compare at float32 tolerances
    assert torch.autograd.gradcheck(f, (x,), eps=1e-3, atol=1e-3, rtol=1e-2)


def test_bad_shapes_are_refused():
    logits, ids, *_ = _case()
    with pytest.raises(ValueError, match="logits"):
        selective_logprobs(logits[:, :2], ids)
    with pytest.raises(ValueError, match="temperature"):
        selective_logprobs(logits, ids, temperature=0.0)
