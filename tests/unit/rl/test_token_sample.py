"""TokenSample's per-turn training annotations are typed fields with defaults: the cut at a
VLM image slot, the staleness of an async turn, the credited span and the correction weights."""

from __future__ import annotations

import dataclasses

import pytest

from arlgym.rollout import StepRecord, Trajectory

torch = pytest.importorskip("torch")

from arlgym.rl.batching import TokenSample, token_samples  # noqa: E402
from arlgym.rl.update import old_from_rollout  # noqa: E402

SLOT = 99  # an image-slot token id


def _trajectory(responses: list[list[int]]) -> Trajectory:
    traj = Trajectory(uid="g0", traj_id="g0-0", env_id="arl/Sokoban-v0", task_id="0",
                      task_type="room", group_index=0, member=0)
    for k, ids in enumerate(responses):
        traj.steps.append(StepRecord(
            uid="g0", traj_id="g0-0", step=k, task_id="0", task_type="room", prompt="p",
            response="r", anchor=f"a{k}", step_reward=0.5, task_reward=0.5, format_penalty=0.0,
            format_valid=True, action_valid=True, action="up", executed_action="up",
            terminated=k == len(responses) - 1, truncated=False, won=True, score=1.0,
            prompt_token_ids=[1, 2], response_token_ids=ids,
            logprobs=[-0.1 * (j + 1) for j in range(len(ids))]))
    return traj


def test_the_annotations_are_declared_fields_with_their_neutral_defaults():
    fields = {f.name: f for f in dataclasses.fields(TokenSample)}
    assert "extra" not in fields
    defaults = {name: fields[name].default for name in
                ("staleness", "rollout_weight", "credit_from", "cut_at_image_slot")}
    assert defaults == {"staleness": 0, "rollout_weight": None, "credit_from": 0,
                        "cut_at_image_slot": False}


def test_a_response_holding_an_image_slot_is_cut_there_and_marked():
    cut, whole = token_samples([_trajectory([[5, 6, SLOT, 7], [5, 6, 7]])],
                               stop_ids=frozenset({SLOT}))
    assert (cut.response_ids, cut.cut_at_image_slot) == ([5, 6], True)
    assert cut.rollout_logprobs == pytest.approx([-0.1, -0.2])
    assert (whole.response_ids, whole.cut_at_image_slot) == ([5, 6, 7], False)
    assert (cut.staleness, cut.credit_from, cut.rollout_weight) == (0, 0, None)


def test_a_stale_sample_rules_out_the_samplers_log_probs_as_the_old_ones():
    samples = token_samples([_trajectory([[5, 6], [7]])])
    kw = dict(engine="hf", need_entropy=False, correcting=False)
    assert old_from_rollout(samples, "auto", **kw) is True
    samples[1].staleness = 1
    assert old_from_rollout(samples, "auto", **kw) is False
    assert old_from_rollout(samples, "rollout", **kw) is True
