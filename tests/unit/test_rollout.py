"""The shared rollout collector: group semantics, active-only prompting, records, JSONL."""

import pytest

from arlgym.policies import Completion, ExpertPolicy, RandomPolicy
from arlgym.rollout import RolloutCollector, collect, load_jsonl, save_jsonl


class CountingPolicy:
    """Wraps a policy and records how many prompts each generate call received."""

    name = "counting"

    def __init__(self, inner):
        self.inner = inner
        self.batch_sizes = []

    def generate(self, prompts, sampling=None, *, envs=None):
        self.batch_sizes.append(len(prompts))
        return self.inner.generate(prompts, sampling, envs=envs)


def test_finished_envs_are_never_prompted_again():
    policy = CountingPolicy(RandomPolicy(seed=0))
    with RolloutCollector("arl/Sokoban-v0", policy, num_tasks=3, group_size=4, seed=1,
                          progress=False) as col:
        trajs = col.collect()
    lengths = [t.length for t in trajs]
    # each turn prompts exactly the envs whose episode is still running
    expected = [sum(length > k for length in lengths) for k in range(max(lengths))]
    assert policy.batch_sizes == expected
    assert sum(policy.batch_sizes) == sum(lengths) == col.prompts_sent
    assert col.generate_calls == max(lengths)


def test_group_members_share_task_and_first_anchor_and_records_are_complete():
    trajs = collect("arl/Sokoban-v0", RandomPolicy(seed=3), num_tasks=2, group_size=3, seed=9)
    for g in range(2):
        group = [t for t in trajs if t.group_index == g]
        assert len({t.uid for t in group}) == 1 and len({t.task_id for t in group}) == 1
        assert len({t.steps[0].anchor for t in group}) == 1
        assert len({t.traj_id for t in group}) == 3
    t = trajs[0]
    assert [s.step for s in t.steps] == list(range(t.length))
    assert t.steps[-1].done and not any(s.done for s in t.steps[:-1])
    assert t.episode_return == pytest.approx(sum(s.step_reward for s in t.steps))
    # the anchor of step k+1 differs from step k only if the state changed, never None
    assert all(isinstance(s.anchor, str) and len(s.anchor) == 32 for s in t.steps)


def test_expert_rollouts_win_and_are_deterministic():
    a = collect("arl/Sokoban-v0", ExpertPolicy(), num_tasks=5, group_size=2, seed=0)
    b = collect("arl/Sokoban-v0", ExpertPolicy(), num_tasks=5, group_size=2, seed=0)
    assert all(t.won for t in a)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]


def test_async_collection_with_remote_expert():
    a = collect("arl/Sokoban-v0", ExpertPolicy(), num_tasks=3, group_size=2, seed=5, mode="async")
    b = collect("arl/Sokoban-v0", ExpertPolicy(), num_tasks=3, group_size=2, seed=5, mode="sync")
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]


def test_token_fields_are_carried(tmp_path):
    class TokenPolicy:
        name = "tok"

        def generate(self, prompts, sampling=None, *, envs=None):
            return [Completion("<think>t</think><action>up</action>", [1, 2, 3], [4, 5],
                               [-0.5, -0.25], "stop") for _ in prompts]

    trajs = collect("arl/Sokoban-v0", TokenPolicy(), num_tasks=1, group_size=2, seed=0)
    s = trajs[0].steps[0]
    assert (s.prompt_token_ids, s.response_token_ids, s.logprobs, s.finish_reason) == (
        [1, 2, 3], [4, 5], [-0.5, -0.25], "stop")
    path = tmp_path / "t.jsonl"
    save_jsonl(trajs, path)
    with path.open("a") as fh:
        fh.write('{"torn": ')  # a crash mid-write leaves a torn last line
    back = load_jsonl(path)
    assert [t.to_dict() for t in back] == [t.to_dict() for t in trajs]


def test_collector_checkpoints_its_task_stream():
    """state_dict()/load_state_dict(): a fresh collector continues where another one stopped."""
    def make():
        return RolloutCollector("arl/Sokoban-v0", ExpertPolicy(), num_tasks=2, group_size=2,
                                seed=3, mode="sync", progress=False)

    with make() as a:
        a.collect()
        state = a.state_dict()
        assert state == {"next_seed": 5, "batches": 1}
        expected = a.collect()
    with make() as b:
        b.load_state_dict(state)
        got = b.collect()
        assert b.state_dict() == {"next_seed": 7, "batches": 2}
    assert [t.uid for t in got] == [t.uid for t in expected]
    assert [[s.anchor for s in t.steps] for t in got] == [[s.anchor for s in t.steps] for t in expected]
