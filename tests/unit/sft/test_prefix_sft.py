"""The shared-prefix SFT engine computes exactly the loss and gradients of plain per-sample
cross-entropy over assistant tokens, and trains."""

import torch

from arlgym.models import load_model_and_tokenizer
from arlgym.sft.collect import CollectConfig, collect_sft, read_jsonl_lines
from arlgym.sft.prefix_sft import _batch_loss, common_prefix_length, tokenize_samples
from arlgym.sft.train import SFTRunConfig, train_sft


def _samples(tmp_path, n=12):
    collect_sft(CollectConfig(episodes=6, batch_tasks=6), tmp_path, progress=False)
    return [{"messages": s["messages"]} for s in read_jsonl_lines(tmp_path / "samples.jsonl")][:n]


def test_shared_prefix_loss_and_grads_equal_full_forward(tmp_path):
    model, tok = load_model_and_tokenizer("tiny", seed=1)
    data = tokenize_samples(_samples(tmp_path), tok)
    L = common_prefix_length(data)
    # the ChatML header is shared by every prompt (the tiny tokenizer folds each template's
    # instruction block into one token, so the first-turn and later-turn blocks differ)
    assert 2 <= L < min(len(d.prompt_ids) for d in data)
    assert tok.decode(data[0].response_ids).endswith("</action><|im_end|>")
    loss, n = _batch_loss(model, torch.tensor([data[0].prompt_ids[:L]]), data)
    loss.backward()
    fast = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    total, count = 0.0, 0
    for d in data:
        logits = model(input_ids=torch.tensor([d.prompt_ids + d.response_ids])).logits[0]
        p = len(d.prompt_ids)
        total = total + torch.nn.functional.cross_entropy(
            logits[p - 1 : p - 1 + len(d.response_ids)], torch.tensor(d.response_ids), reduction="sum")
        count += len(d.response_ids)
    ref = total / count
    ref.backward()
    assert n == count
    assert abs(float(loss) - float(ref)) < 1e-5
    for k, p in model.named_parameters():
        assert torch.allclose(fast[k], p.grad, atol=1e-6), k


def test_prefix_engine_trains_and_saves(tmp_path):
    _samples(tmp_path / "data")
    out = tmp_path / "model"
    stats = train_sft(SFTRunConfig(data=(str(tmp_path / "data"),), output_dir=str(out), engine="prefix",
                                   max_steps=8, batch_size=4, lr=3e-3, logging_steps=2, progress=False))
    losses = [h["loss"] for h in stats["log"]]
    assert stats["steps"] == 8 and losses[-1] < losses[0] and stats["shared_prefix_tokens"] >= 2
    model, _ = load_model_and_tokenizer(str(out))
    assert model.config.model_type == "qwen3"


def test_budget_horizon_keeps_a_run_that_fits_and_shrinks_one_that_does_not():
    from arlgym.sft.prefix_sft import budget_horizon

    # 50 steps in 28 s at 0.56 s/step: 28 + 565 * 0.56 = 344.4 s, inside 360 s: unchanged
    assert budget_horizon(50, 28.0, 0.56, 360.0, 615, 615) == 615
    # 0.63 s/step: 31.5 + 565 * 0.63 = 387.5 s, over 360 s but within its 10% slack (396 s):
    # still unchanged, so timing noise near the edge never nudges the schedule
    assert budget_horizon(50, 31.5, 0.63, 360.0, 615, 615) == 615
    # a slow start does not count against the run: 50 steps took 60 s (the first ones were
    # slow) but the pace is now 0.5 s/step: 60 + 565 * 0.5 = 342.5 s: unchanged
    assert budget_horizon(50, 60.0, 0.5, 360.0, 615, 615) == 615
    # 1 s/step, far over: shrunk to what the remaining 310 s allow: 50 + 310 = 360 steps
    assert budget_horizon(50, 50.0, 1.0, 360.0, 615, 615) == 360
    # never below the steps already done, even past the budget
    assert budget_horizon(400, 4000.0, 10.0, 360.0, 615, 615) == 401
