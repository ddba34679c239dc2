"""Credit: which response tokens carry the policy-gradient loss (arlgym/rl/credit.py)."""

import pytest

from arlgym.errors import ConfigError
from arlgym.models import load_tokenizer
from arlgym.rl.batching import TokenSample
from arlgym.rl.credit import action_start, apply_credit, credit_rows, credited_tokens


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
    assert s.extra["credit_from"] == 0 and metrics["credit/token_frac"] == 1.0


def test_apply_credit_action_counts_only_the_tokens_after_think(tok):
    a = _sample(tok, "<think>plan: up, left</think><action>up</action>")
    b = _sample(tok, "<think>no plan</think><action>left</action>")
    metrics = apply_credit([a, b], tok, "action")
    after = [len(s.response_ids) - action_start(s.response_ids, tok) for s in (a, b)]
    assert [credited_tokens(s) for s in (a, b)] == after
    assert metrics["credit/token_frac"] == pytest.approx(sum(after) / (len(a.response_ids) + len(b.response_ids)))
    rows = credit_rows([a, b], [1, 0], width=len(a.response_ids) + 2)
    assert rows.shape == (2, len(a.response_ids) + 2)
    assert rows.sum(dim=1).tolist() == [after[1], after[0]]
    assert rows[1, : a.extra["credit_from"]].sum() == 0 and rows[1, len(a.response_ids):].sum() == 0


def test_response_credit_leaves_the_samples_alone(tok):
    s = _sample(tok, "<think>p</think><action>up</action>")
    assert apply_credit([s], tok, "response") == {}
    assert "credit_from" not in s.extra and credited_tokens(s) == len(s.response_ids)


def test_an_unknown_credit_mode_names_the_choices_and_the_fix(tok):
    with pytest.raises(ConfigError, match="credit must be one of response, action.*Fix: --credit"):
        apply_credit([], tok, "think")
