"""Running a prompt shared by several turn samples once gives the per-sample log-probs,
entropies and gradients (the trainer's first-turn saving)."""

import torch

from arlgym.models import load_model_and_tokenizer
from arlgym.rl.batching import (
    TokenSample,
    pack,
    pack_shared,
    prompt_groups,
    response_logprobs,
    shared_prompt_logprobs,
)


def _sample(prompt, response, uid):
    return TokenSample(uid=uid, traj_id=uid, step=0, anchor="a", step_reward=0.0, episode_return=0.0,
                       format_penalty=0.0, format_valid=True, action_valid=True, won=False,
                       prompt_ids=prompt, response_ids=response)


def _samples():
    g = torch.Generator().manual_seed(0)
    rand = lambda n: torch.randint(3, 300, (n,), generator=g).tolist()  # noqa: E731
    p1, p2 = rand(23), rand(9)
    responses = [rand(n) for n in (5, 1, 7, 3, 6)]
    return [_sample(p1, responses[0], "a"), _sample(p2, responses[1], "b"), _sample(p1, responses[2], "c"),
            _sample(p2, responses[3], "d"), _sample(p1, responses[4], "e")]


def test_prompt_groups_keep_first_seen_order():
    s = _samples()
    assert prompt_groups(s, range(5)) == [[0, 2, 4], [1, 3]]
    assert prompt_groups(s, [3, 0]) == [[3], [0]]


def test_shared_prompt_logprobs_and_grads_equal_per_sample():
    model, tok = load_model_and_tokenizer("tiny", seed=3)
    s = _samples()
    groups = prompt_groups(s, range(5))
    order = [i for g in groups for i in g]
    shared = pack_shared([[s[i] for i in g] for g in groups], tok.pad_token_id)
    logp, ent = shared_prompt_logprobs(model, shared, temperature=0.7, with_entropy=True)
    (logp.sum() + ent.sum()).backward()
    fast = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    ref_logp, ref_ent = response_logprobs(model, pack([s[i] for i in order], tok.pad_token_id),
                                          temperature=0.7, with_entropy=True)
    (ref_logp.sum() + ref_ent.sum()).backward()
    assert logp.shape == ref_logp.shape == (5, 7)
    assert torch.allclose(logp, ref_logp, atol=1e-5)
    assert torch.allclose(ent, ref_ent, atol=1e-5)
    for k, p in model.named_parameters():
        assert torch.allclose(fast[k], p.grad, atol=1e-5), k
    # 2 prefixes of <= 22 tokens + 5 suffixes of 8, instead of 5 rows of 23 + 7
    assert shared.num_tokens == 2 * 22 + 5 * 8 < 5 * 30
