"""Credit: which response tokens carry the policy-gradient loss (arlgym/rl/credit.py)."""

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.models import load_tokenizer
from arlgym.rl.batching import TokenSample
from arlgym.rl.credit import action_start, apply_credit, counted_tokens, credit_masks, credit_rows
from arlgym.rl.losses import policy_loss


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


def _sample(tok, text: str) -> TokenSample:
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return TokenSample(uid="u", traj_id="t", step=0, anchor="a", step_reward=0.0,
                       episode_return=1.0, format_penalty=0.0, format_valid=True,
                       action_valid=True, won=True, prompt_ids=[1, 2, 3], response_ids=ids)


@pytest.mark.parametrize("think", ["plan: up, left, left", "x", "a much longer plan " * 5])
def test_action_start_splits_the_response_right_after_the_closing_think(tok, think):
    s = _sample(tok, f"<think>{think}</think><action>up</action>")
    k = action_start(s.response_ids, tok)
    assert tok.decode(s.response_ids[:k]) == f"<think>{think}</think>"
    assert tok.decode(s.response_ids[k:], skip_special_tokens=True) == "<action>up</action>"


def test_a_reply_without_a_closed_think_is_credited_whole(tok):
    s = _sample(tok, "<think>plan: up <action>up</action>")
    assert action_start(s.response_ids, tok) is None
    metrics = apply_credit([s], tok, "action")
    assert s.credit_from == 0 and metrics["credit/token_frac"] == 1.0


def test_apply_credit_action_counts_only_the_tokens_after_think(tok):
    a = _sample(tok, "<think>plan: up, left</think><action>up</action>")
    b = _sample(tok, "<think>no plan</think><action>left</action>")
    metrics = apply_credit([a, b], tok, "action")
    after = [len(s.response_ids) - action_start(s.response_ids, tok) for s in (a, b)]
    assert [counted_tokens(s, "action") for s in (a, b)] == after
    assert [counted_tokens(s, "action-pg") for s in (a, b)] == [len(a.response_ids), len(b.response_ids)]
    assert metrics["credit/token_frac"] == pytest.approx(sum(after) / (len(a.response_ids) + len(b.response_ids)))
    rows = credit_rows([a, b], [1, 0], width=len(a.response_ids) + 2)
    assert rows.shape == (2, len(a.response_ids) + 2)
    assert rows.sum(dim=1).tolist() == [after[1], after[0]]
    assert rows[1, : a.credit_from].sum() == 0 and rows[1, len(a.response_ids):].sum() == 0


def test_response_credit_leaves_the_samples_alone(tok):
    s = _sample(tok, "<think>p</think><action>up</action>")
    assert apply_credit([s], tok, "response") == {}
    assert s.credit_from == 0 and counted_tokens(s, "response") == len(s.response_ids)


def test_an_unknown_credit_mode_names_the_choices_and_the_fix(tok):
    with pytest.raises(ConfigError, match="credit must be one of response, action, action-pg.*Fix: --credit"):
        apply_credit([], tok, "think")


@pytest.mark.parametrize("name", ["ppo_clip", "gspo"])
def test_action_pg_trains_the_move_by_reward_and_holds_the_reasoning_by_kl(tok, name):
    """action: no gradient at all on the reasoning; action-pg: the reasoning gets the KL's
    gradient only, and the action tokens get exactly the whole-response policy gradient."""
    s = _sample(tok, "<think>plan: up, left</think><action>up</action>")
    apply_credit([s], tok, "action")
    k, width = s.credit_from, len(s.response_ids)
    torch.manual_seed(0)
    start = torch.randn(1, width)
    old, ref, adv = start - 0.05, start - 0.5, torch.tensor([1.0])

    def grad(mode, kl_coef):
        logp = start.clone().requires_grad_(True)
        mask, kw = credit_masks(mode, [s], [0], torch.ones(1, width), {})
        loss, _ = policy_loss(name, logp, old, adv, mask, ref_logp=ref, kl_coef=kl_coef, **kw)
        loss.backward()
        return logp.grad[0]

    assert torch.count_nonzero(grad("action", 0.1)[:k]) == 0
    g_pg, g_full = grad("action-pg", 0.0), grad("response", 0.0)
    assert torch.count_nonzero(g_pg[:k]) == 0 and torch.count_nonzero(g_full[:k]) == k
    torch.testing.assert_close(g_pg[k:], g_full[k:])
    kl_only = grad("action-pg", 0.1) - g_pg  # the KL's share: the whole response, reasoning too
    assert torch.count_nonzero(kl_only[:k]) == k


def test_action_pg_multiplies_the_rollout_corrections_weights(tok):
    s = _sample(tok, "<think>p</think><action>up</action>")
    apply_credit([s], tok, "action-pg")
    width = len(s.response_ids)
    mask, kw = credit_masks("action-pg", [s], [0], torch.ones(1, width), {"token_weights": torch.full((1, width), 0.5)})
    assert mask.sum() == width  # the mask (and the loss's counts) keep the whole response
    assert kw["token_weights"][0].tolist() == [0.0] * s.credit_from + [0.5] * (width - s.credit_from)
