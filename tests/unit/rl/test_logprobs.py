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


# --------------------------------------------------------------------------- the fused path
def _tiny_model(vocab: int = 300, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg)


def _packed(vocab: int, seed: int = 1):
    from arlgym.rl.batching import TokenSample, pack

    g = torch.Generator().manual_seed(seed)

    def sample(p, r):
        return TokenSample(uid="u", traj_id="t", step=0, anchor="a", step_reward=0.0,
                           episode_return=0.0, format_penalty=0.0, format_valid=True,
                           action_valid=True, won=False,
                           prompt_ids=torch.randint(0, vocab, (p,), generator=g).tolist(),
                           response_ids=torch.randint(0, vocab, (r,), generator=g).tolist())

    return pack([sample(7, 5), sample(4, 2), sample(9, 0), sample(5, 5)], pad_id=0)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_fused_path_equals_the_materialized_one_in_values_and_weight_grads(temperature):
    from arlgym.rl.batching import response_logprobs

    batch = _packed(300)
    results = []
    for fused in (False, True):
        model = _tiny_model()
        logp, ent = response_logprobs(model, batch, temperature=temperature, with_entropy=True,
                                      fused=fused)
        w = torch.linspace(-1, 1, logp.numel()).reshape(logp.shape)
        ((logp * w).sum() + 0.3 * (ent * w).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((logp.detach(), ent.detach(), grads))
        assert model.get_output_embeddings().forward.__name__ == "forward"  # head restored
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    torch.testing.assert_close(lp_b, lp_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, rtol=1e-5, atol=1e-5)
    assert float(lp_b[2].abs().sum()) == 0.0  # an empty response scores nothing
    for name in g_a:
        torch.testing.assert_close(g_b[name], g_a[name], rtol=1e-4, atol=1e-5, msg=name)
    assert float(g_b["model.embed_tokens.weight"].abs().sum()) > 0


def test_fused_path_with_shared_prompts_equals_materialized():
    from arlgym.rl.batching import TokenSample, pack_shared, shared_prompt_logprobs

    def sample(resp):
        return TokenSample(uid="u", traj_id="t", step=0, anchor="a", step_reward=0.0,
                           episode_return=0.0, format_penalty=0.0, format_valid=True,
                           action_valid=True, won=False, prompt_ids=[5, 9, 11, 40],
                           response_ids=resp)

    batch = pack_shared([[sample([3, 4, 5]), sample([7])]], pad_id=0)
    out = []
    for fused in (False, True):
        model = _tiny_model()
        lp, ent = shared_prompt_logprobs(model, batch, with_entropy=True, fused=fused)
        lp.sum().backward()
        out.append((lp.detach(), model.model.embed_tokens.weight.grad.clone()))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=1e-4, atol=1e-5)


def test_models_with_rescaled_logits_fall_back_with_a_warning():
    from arlgym.rl.logprobs import fused_head_unsupported, resolve_lm_head

    model = _tiny_model()
    assert fused_head_unsupported(model) is None
    assert resolve_lm_head("fused", model) and not resolve_lm_head("materialized", model)
    model.config.final_logit_softcapping = 30.0
    assert "final_logit_softcapping" in fused_head_unsupported(model)
    with pytest.warns(UserWarning, match="materialized"):
        assert resolve_lm_head("fused", model) is False


def test_logit_rows_budget_scales_with_the_vocabulary():
    from arlgym.rl.logprobs import logit_rows_budget

    assert logit_rows_budget(1024, _tiny_model(vocab=151_936)) == 1766
    assert logit_rows_budget(1024, _tiny_model(vocab=600)) == 447_392


def test_micro_batches_respect_the_logit_rows_bound():
    from arlgym.rl.batching import TokenSample
    from arlgym.rl.update import micro_batches

    samples = [TokenSample(uid=str(i), traj_id=str(i), step=0, anchor="a", step_reward=0.0,
                           episode_return=0.0, format_penalty=0.0, format_valid=True,
                           action_valid=True, won=False, prompt_ids=[1] * 10,
                           response_ids=[2] * 9) for i in range(10)]
    order = list(range(10))
    assert len(micro_batches(samples, order, 10_000)) == 1
    cut = micro_batches(samples, order, 10_000, logit_rows=30)  # 3 samples x (9 + 1) rows
    assert [len(mb) for mb in cut] == [3, 3, 3, 1]
    assert sorted(i for mb in cut for i in mb) == order
    assert [len(mb) for mb in micro_batches(samples, order, 10_000, logit_rows=5)] == [1] * 10
