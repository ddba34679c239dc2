"""The metric vocabulary: reductions across ranks, the tolerant metrics.jsonl reader, and that
every key the loss, advantage, filter and collector code emits is defined."""

import json

import pytest
import torch

from arlgym.rl import metrics as M
from arlgym.rl.advantages import advantage_metrics
from arlgym.rl.losses import policy_loss


def test_counts_add_up_rates_average_worst_cases_take_the_extreme():
    assert M.reduction(M.TURNS) == "sum" and M.reduction(M.TOKENS) == "sum"
    assert M.reduction(M.SAMPLES) == "sum" and M.reduction(M.LOSS) == "sum"
    assert M.reduction(M.SUCCESS_RATE) == "mean" and M.reduction(M.FORMAT_VALID) == "mean"
    assert M.reduction(M.IS_RATIO_MAX) == "max" and M.reduction(M.IS_RATIO_MIN) == "min"
    assert M.reduction(M.TIME_STEP) == "max" and M.reduction(M.LOGPROB_DIFF_MAX) == "max"
    assert M.reduction("is_groups/neg_low_high/tokens") == "mean"  # a family
    assert M.reduction("staleness/hist_2") == "sum"
    assert M.reduction("something/new") == "mean"  # unknown keys average
    assert M.undefined(["env/turns", "is_groups/x/kl", "something/new"]) == ["something/new"]


def _two_ranks(rank0, rank1):
    """reduce_across as two ranks would see it, with the collective simulated."""
    ranks = [rank0, rank1]
    calls = []

    def run(me):
        def collective(values, how):
            calls.append(how)
            keys = sorted(k for k in ranks[me] if M.reduction(k) == how)
            cols = [[r[k] for k in keys] for r in ranks]
            assert cols[me] == values
            op = {"mean": lambda c: sum(c) / len(c), "sum": sum, "max": max, "min": min}[how]
            return [op(c) for c in zip(*cols, strict=True)]
        return M.reduce_across(ranks[me], collective)

    a, b = run(0), run(1)
    assert a == b
    return a, calls


def test_reduce_across_ranks_by_key():
    r0 = {M.TURNS: 10.0, M.TOKENS: 300.0, M.SUCCESS_RATE: 0.5, M.IS_RATIO_MAX: 1.2,
          M.IS_RATIO_MIN: 0.9, M.TIME_STEP: 3.0}
    r1 = {M.TURNS: 14.0, M.TOKENS: 500.0, M.SUCCESS_RATE: 0.25, M.IS_RATIO_MAX: 1.1,
          M.IS_RATIO_MIN: 0.7, M.TIME_STEP: 5.0}
    out, calls = _two_ranks(r0, r1)
    # the budget a 2-rank run spent is the sum (a mean would under-count it by the world size)
    assert out[M.TURNS] == 24.0 and out[M.TOKENS] == 800.0
    assert out[M.SUCCESS_RATE] == pytest.approx(0.375)
    assert out[M.IS_RATIO_MAX] == 1.2 and out[M.IS_RATIO_MIN] == 0.7 and out[M.TIME_STEP] == 5.0
    assert calls == ["mean", "sum", "max", "min"] * 2  # same collectives, same order, each rank


def test_reader_skips_a_torn_last_line_and_non_objects(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert M.read_metrics_jsonl(path) == []
    path.write_text(json.dumps({"step": 1}) + "\n\n[1, 2]\n" + json.dumps({"step": 2}) + "\n"
                    + '{"step": 3, "env/succ')
    assert M.read_metrics_jsonl(path) == [{"step": 1}, {"step": 2}]


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "sapo", "cispo"])
def test_every_loss_metric_is_defined(name):
    torch.manual_seed(0)
    logp = torch.randn(3, 5) * 0.1 - 1
    old = logp + torch.randn(3, 5) * 0.05
    mask = torch.ones(3, 5)
    _, metrics = policy_loss(name, logp, old, torch.tensor([1.0, -1.0, 0.5]), mask,
                             ref_logp=old, entropy=torch.rand(3, 5), seq_mask_delta=0.1)
    assert M.undefined(metrics) == []


def test_advantage_filter_and_collector_metrics_are_defined():
    from arlgym.rl.batching import rollout_mismatch_metrics

    assert M.undefined(advantage_metrics(torch.tensor([0.0, 1.0]))) == []
    keys = ["filter/kept_group_fraction", "filter/num_tries", "rollout/groups_retried",
            "rollout/groups_dropped"]
    assert M.undefined(keys) == []
    from arlgym.rl.batching import TokenSample

    s = TokenSample(uid="u", traj_id="t", step=0, anchor="a", step_reward=0.0,
                    episode_return=0.0, format_penalty=0.0, format_valid=True,
                    action_valid=True, won=False, prompt_ids=[1], response_ids=[2, 3],
                    rollout_logprobs=[-1.0, -2.0], old_logprobs=torch.tensor([-1.1, -2.0]))
    assert M.undefined(rollout_mismatch_metrics([s])) == []


def test_metric_keys_are_unique_and_reductions_known():
    assert all(m.reduce in M.REDUCTIONS for m in M.METRICS.values())
    assert all(m.meaning for m in [*M.METRICS.values(), *M.FAMILIES.values()])
