"""A policy with slips (``slips:<p>:<spec>``): the base's reasoning, a random action at rate p.

Run: pytest tests/unit/envs/test_sokoban_slips.py
"""

import json
import re

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.errors import UnknownPolicyError
from arlgym.evaluation.runner import evaluate
from arlgym.policies import make_policy
from arlgym.policies.scripted import SlipPolicy
from arlgym.policies.spec import seeded_policy
from arlgym.sft.collect import CollectConfig, collect_sft

ACTION = re.compile(r"<think>(.*)</think><action>(.*)</action>")


def _envs(n, seed=0):
    envs = [gym.make("arl/Sokoban-v0") for _ in range(n)]
    prompts = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    return envs, prompts


def test_spec_builds_the_wrapper_and_refuses_bad_specs():
    pol = make_policy("slips:0.3:greedy", seed=1)
    assert isinstance(pol, SlipPolicy) and pol.p == 0.3 and pol.base.name == "greedy"
    for bad in ("slips:1.5:expert", "slips:x:expert", "slips:0.3", "slips:0.3:"):
        with pytest.raises(UnknownPolicyError, match="slips:<p>:<spec>"):
            make_policy(bad)
    with pytest.raises(UnknownPolicyError, match="unknown policy spec"):
        make_policy("slips:0.3:nonsense")


def test_slip_rate_is_p_and_keeps_the_reasoning():
    envs, prompts = _envs(64)
    base = [c.text for c in make_policy("expert").generate(prompts, envs=envs)]
    changed = turns = 0
    pol = seeded_policy("slips:0.4:expert", 7)
    for _ in range(40):  # the same positions asked again: each ask draws its slips anew
        for b, c in zip(base, pol.generate(prompts, envs=envs), strict=True):
            (think_b, act_b), (think_c, act_c) = ACTION.match(b).groups(), ACTION.match(c.text).groups()
            assert think_c == think_b and act_c in ("up", "down", "left", "right")
            changed += act_c != act_b
            turns += 1
    # a slip picks among 4 moves, one of them the base's: 0.4 × 3/4 = 0.30 of the turns change
    assert abs(changed / turns - 0.30) < 0.03, changed / turns


def test_p_zero_is_the_base_and_a_seed_repeats_the_slips():
    envs, prompts = _envs(16)
    base = [c.text for c in make_policy("expert").generate(prompts, envs=envs)]
    assert [c.text for c in seeded_policy("slips:0:expert", 0).generate(prompts, envs=envs)] == base
    a = [c.text for c in seeded_policy("slips:0.5:expert", 3).generate(prompts, envs=envs)]
    b = [c.text for c in seeded_policy("slips:0.5:expert", 3).generate(prompts, envs=envs)]
    assert a == b and a != base


def test_the_optimal_expert_with_slips_plays_on_after_a_slip_loses_the_room():
    # slips deadlock some rooms; the expert cannot plan there and the wrapper moves at random
    summary, trajs = evaluate("arl/Sokoban-v0", seeded_policy("slips:0.6:expert", 0), episodes=60,
                              split="test", out=None, batch_size=30, progress=False)
    rate = summary["overall"]["success_rate"]
    assert 0.5 < rate < 1.0, rate  # the expert alone wins every room
    assert any(not t.won and t.length == 15 for t in trajs)  # lost rooms are played to the limit


def test_collected_demonstrations_with_slips_are_reproducible(tmp_path):
    cfg = CollectConfig(policy="slips:0.4:greedy", episodes=24, batch_tasks=12, seed=5)
    for folder in ("a", "b"):
        collect_sft(cfg, tmp_path / folder, progress=False)
    a, b = ((tmp_path / f / "samples.jsonl").read_text() for f in ("a", "b"))
    assert a == b
    lines = [json.loads(x) for x in a.splitlines()]
    assert lines and all(x["won"] for x in lines)


def test_a_mistake_names_the_move_made_in_its_reasoning():
    """mistakes:<p>:<spec> rewrites the reasoning with the random move (a wrong decision, not a
    fumble): with one-move plans, think and action always agree, and a quarter of the turns
    at p = 1 keep the expert's move (the random pick equals it)."""
    envs = [gym.make("arl/Sokoban-v0", expert_plan_length=1) for _ in range(64)]
    prompts = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    base = [ACTION.match(c.text).group(2) for c in make_policy("expert").generate(prompts, envs=envs)]
    pol = seeded_policy("mistakes:1:expert", 2)
    assert pol.name == "mistakes:1:expert"
    same = turns = 0
    for _ in range(10):
        for b, c in zip(base, pol.generate(prompts, envs=envs), strict=True):
            think, act = ACTION.match(c.text).groups()
            assert think == f"plan: {act}"
            same += act == b
            turns += 1
    assert abs(same / turns - 0.25) < 0.06, same / turns
    # longer plans: every mention of the replaced move is rewritten, other moves stay
    multi = gym.make("arl/Sokoban-v0")
    prompt = multi.reset(seed=0)[0]
    text = make_policy("expert").generate([prompt], envs=[multi])[0].text
    for _ in range(20):
        c = seeded_policy("mistakes:1:expert", _).generate([prompt], envs=[multi])[0].text
        think, act = ACTION.match(c).groups()
        assert think.split()[1] == act and len(think.split()) == len(ACTION.match(text).group(1).split())
