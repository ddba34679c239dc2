"""Advantage estimators GRPO / GiGPO / EMPG (paper Table 1, App. A.3).

Run: pytest tests/unit/rl/test_advantages.py
"""

import math
import random
import statistics
from dataclasses import dataclass

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import (
    RegistryError,
    TurnSample,
    advantage_metrics,
    compute_advantages,
    discounted_returns,
    samples_from_trajectories,
    step_group_metrics,
)
from arlgym.rl.advantages import _step_returns

EPS = 1e-6


def turn(uid, traj, step, anchor, reward=0.0, ret=0.0, entropy=None, penalty=0.0):
    return {
        "uid": uid,
        "traj_id": traj,
        "step": step,
        "anchor": anchor,
        "step_reward": reward,
        "episode_return": ret,
        "entropy": entropy,
        "format_penalty": penalty,
    }


def approx(values, rel=1e-5, abs=1e-6):
    return pytest.approx(values, rel=rel, abs=abs)


# ------------------------------------------------------------------------- GRPO

# one task group "g": trajectory a (2 turns, return 1), b (1 turn, return 0), c (1 turn, return 2)
GRPO_BATCH = [
    turn("g", "a", 0, "s0", ret=1.0),
    turn("g", "a", 1, "s1", ret=1.0),
    turn("g", "b", 0, "s0", ret=0.0),
    turn("g", "c", 0, "s0", ret=2.0),
]


def test_grpo_per_trajectory():
    # returns over the G = 3 trajectories [1, 0, 2]: mean 1, unbiased std sqrt((0+1+1)/2) = 1
    # -> a: 0, b: -1/(1+eps), c: +1/(1+eps); both turns of a share its advantage
    adv = compute_advantages("grpo", GRPO_BATCH)
    assert adv.tolist() == approx([0.0, 0.0, -1 / (1 + EPS), 1 / (1 + EPS)])
    adv = compute_advantages("grpo", GRPO_BATCH, norm="mean_norm")
    assert adv.tolist() == approx([0.0, 0.0, -1.0, 1.0])


def test_grpo_cross_steps():
    # over the 4 turn samples [1, 1, 0, 2]: mean 1, unbiased var (0+0+1+1)/3 = 2/3, std 0.8164966
    # -> [0, 0, -1.2247449, 1.2247449]
    adv = compute_advantages("grpo", GRPO_BATCH, cross_steps=True)
    assert adv.tolist() == approx([0.0, 0.0, -1.2247449, 1.2247449])


def test_grpo_groups_are_independent_and_edge_cases():
    batch = GRPO_BATCH + [
        turn("h", "x", 0, "s", ret=3.0),  # singleton group: keeps its raw value (verl: μ=0, σ=1)
        turn("k", "y", 0, "s", ret=1.0),  # all-equal group: 0
        turn("k", "z", 0, "s", ret=1.0),
    ]
    adv = compute_advantages("grpo", batch)
    assert adv[:4].tolist() == approx([0.0, 0.0, -1.0, 1.0])
    assert adv[4:].tolist() == approx([3.0, 0.0, 0.0])


# ------------------------------------------------------------------------- GiGPO

# Worked example, gamma = 0.5, one task group "g":
#   trajectory A: anchors s0, s1, s2, step rewards [0, 0, 1], return 1
#       discounted step returns R = [0.25, 0.5, 1.0]
#   trajectory B: anchors s0, s1, step rewards [0, 0], return 0  -> R = [0, 0]
GIGPO_BATCH = [
    turn("g", "A", 0, "s0", 0.0, 1.0),
    turn("g", "A", 1, "s1", 0.0, 1.0),
    turn("g", "A", 2, "s2", 1.0, 1.0),
    turn("g", "B", 0, "s0", 0.0, 0.0),
    turn("g", "B", 1, "s1", 0.0, 0.0),
]


def test_gigpo_mean_std_norm():
    # episode part (cross steps): values [1,1,1,0,0], mean 0.6, unbiased var (3*.16+2*.36)/4 = 0.3,
    #   std 0.5477226 -> A: 0.4/0.5477226 = 0.7302967, B: -0.6/0.5477226 = -1.0954451
    # step groups: s0 {A0: .25, B0: 0}, s1 {A1: .5, B1: 0}: any two-member group -> ±1/sqrt(2)
    #   = ±0.7071068; s2 {A2} is a singleton -> 0
    # total (ω = 1): A0 = A1 = 1.4374035, A2 = 0.7302967, B0 = B1 = -1.8025519
    adv = compute_advantages("gigpo", GIGPO_BATCH, gamma=0.5, step_weight=1.0)
    assert adv.tolist() == approx([1.4374035, 1.4374035, 0.7302967, -1.8025519, -1.8025519])


def test_gigpo_mean_norm_and_weight():
    # mean_norm: episode A: +0.4, B: -0.6; steps s0: ±0.125, s1: ±0.25, s2: 0
    # ω = 1: A = [0.525, 0.65, 0.4], B = [-0.725, -0.85]
    adv = compute_advantages("gigpo", GIGPO_BATCH, norm="mean_norm", gamma=0.5)
    assert adv.tolist() == approx([0.525, 0.65, 0.4, -0.725, -0.85])
    # ω = 2: A = [0.65, 0.9, 0.4], B = [-0.85, -1.1]
    adv = compute_advantages("gigpo", GIGPO_BATCH, norm="mean_norm", gamma=0.5, step_weight=2.0)
    assert adv.tolist() == approx([0.65, 0.9, 0.4, -0.85, -1.1])
    # ω = 0 is plain episode-level (cross-step) GRPO
    adv = compute_advantages("gigpo", GIGPO_BATCH, norm="mean_norm", step_weight=0.0)
    assert adv.tolist() == approx([0.4, 0.4, 0.4, -0.6, -0.6])


def test_gigpo_anchor_groups_stay_inside_task_groups():
    # same anchor string in another task group "h" must not join g's step groups
    other = [turn("h", "C", 0, "s2", 5.0, 5.0), turn("h", "D", 0, "s2", 0.0, 0.0)]
    adv = compute_advantages("gigpo", GIGPO_BATCH + other, norm="mean_norm", gamma=0.5)
    assert adv[:5].tolist() == approx([0.525, 0.65, 0.4, -0.725, -0.85])
    # h: episode ±2.5, step group s2 {5, 0} -> ±2.5: totals +5, -5
    assert adv[5:].tolist() == approx([5.0, -5.0])


def test_gigpo_order_invariant():
    order = [3, 0, 4, 2, 1]
    shuffled = [GIGPO_BATCH[i] for i in order]
    base = compute_advantages("gigpo", GIGPO_BATCH, gamma=0.5)
    got = compute_advantages("gigpo", shuffled, gamma=0.5)
    assert got.tolist() == approx(base[order].tolist())


def test_discounted_returns_and_penalty():
    # gamma 0.5, rewards [0, 0, 1] -> [0.25, 0.5, 1]
    assert discounted_returns(torch.tensor([0.0, 0.0, 1.0]), 0.5).tolist() == [0.25, 0.5, 1.0]
    # step rewards include a 0.1 format penalty at step 1: [0, -0.1, 1]
    #   discount_penalty=False (verl-agent): discount task rewards [0, 0, 1] -> [0.25, 0.5, 1],
    #     then subtract each turn's own penalty -> [0.25, 0.4, 1.0]
    #   discount_penalty=True: plain discount of [0, -0.1, 1] -> [0.2, 0.4, 1.0]
    turns = [
        TurnSample("g", "A", 0, "s0", 0.0, 0.9, format_penalty=0.0),
        TurnSample("g", "A", 1, "s1", -0.1, 0.9, format_penalty=0.1),
        TurnSample("g", "A", 2, "s2", 1.0, 0.9, format_penalty=0.0),
    ]
    assert _step_returns(turns, 0.5, discount_penalty=False).tolist() == approx([0.25, 0.4, 1.0])
    assert _step_returns(turns, 0.5, discount_penalty=True).tolist() == approx([0.2, 0.4, 1.0])


def _gigpo_loop_reference(batch, norm, gamma, weight):
    """Plain-Python GiGPO (statistics.stdev is the unbiased std)."""

    def normalise(xs, singleton_zero):
        if len(xs) == 1:
            return [0.0] if singleton_zero else list(xs)
        mu = sum(xs) / len(xs)
        if norm == "mean_norm":
            return [x - mu for x in xs]
        sd = statistics.stdev(xs)
        return [(x - mu) / (sd + EPS) for x in xs]

    n = len(batch)
    episode, step_ret, step_adv = [0.0] * n, [0.0] * n, [0.0] * n
    for uid in {b["uid"] for b in batch}:
        idx = [i for i in range(n) if batch[i]["uid"] == uid]
        for i, v in zip(
            idx, normalise([batch[i]["episode_return"] for i in idx], False), strict=True
        ):
            episode[i] = v
    for key in {(b["uid"], b["traj_id"]) for b in batch}:
        idx = sorted(
            (i for i in range(n) if (batch[i]["uid"], batch[i]["traj_id"]) == key),
            key=lambda i: batch[i]["step"],
        )
        for pos, i in enumerate(idx):
            step_ret[i] = sum(
                gamma ** (m - pos) * batch[idx[m]]["step_reward"] for m in range(pos, len(idx))
            )
    for key in {(b["uid"], b["anchor"]) for b in batch}:
        idx = [i for i in range(n) if (batch[i]["uid"], batch[i]["anchor"]) == key]
        for i, v in zip(idx, normalise([step_ret[i] for i in idx], True), strict=True):
            step_adv[i] = v
    return [e + weight * s for e, s in zip(episode, step_adv, strict=True)]


@pytest.mark.parametrize("norm", ["mean_std_norm", "mean_norm"])
def test_gigpo_matches_loop_reference(norm):
    rng = random.Random(0)
    batch = []
    for g in range(4):
        for t in range(5):
            length = rng.randint(1, 6)
            rewards = [rng.choice([0.0, 0.0, -0.1, 1.0]) for _ in range(length)]
            for k in range(length):
                batch.append(
                    turn(f"g{g}", f"t{t}", k, f"s{rng.randint(0, 3)}", rewards[k], sum(rewards))
                )
    rng.shuffle(batch)
    got = compute_advantages("gigpo", batch, norm=norm, gamma=0.9, step_weight=0.7)
    assert got.tolist() == approx(_gigpo_loop_reference(batch, norm, 0.9, 0.7), rel=1e-4)


# ------------------------------------------------------------------------- EMPG


def test_empg_hand_computed():
    # group g: a (return 1, turns 0 and 1, entropies 0.2 and 1.0), b (return 0, turn 0, entropy 0.6)
    # 1. GRPO: returns [1, 0], std 0.7071068 -> a: +0.7071058, b: -0.7071058 (eps 1e-6)
    # 2. batch min-max: H̃ = [a0: 0, a1: 1, b0: 0.5]
    # 3. exp(-H̃) = [1, 0.3678794, 0.6065307], mean 0.6581367 -> g = [1.5194441, 0.5589710, 0.9215849]
    # 4. future clarity at the next turn: a0 gets f(a1) = 0.3678794; a1 and b0 have no next turn
    # 5. A_mod = [1.5194441*0.7071058 + 0.05*0.3678794, 0.5589710*0.7071058, -0.9215849*0.7071058]
    #          = [1.0927946, 0.3952517, -0.6516586]; batch mean 0.2787959
    #    final = [0.8139987, 0.1164558, -0.9304545]
    batch = [  # deliberately out of step order: the next turn is found by `step`, not position
        turn("g", "a", 1, "x", ret=1.0, entropy=1.0),
        turn("g", "b", 0, "x", ret=0.0, entropy=0.6),
        turn("g", "a", 0, "y", ret=1.0, entropy=0.2),
    ]
    adv = compute_advantages("empg", batch)
    assert adv.tolist() == approx([0.1164558, -0.9304545, 0.8139987], abs=1e-5)
    assert abs(adv.sum().item()) < 1e-6  # final batch-mean removal


def test_empg_zeta_zero_is_scaled_grpo_minus_mean():
    batch = [
        turn("g", "a", 0, "x", ret=1.0, entropy=0.5),
        turn("g", "b", 0, "x", ret=0.0, entropy=0.5),
    ]
    # equal entropies: g = 1 everywhere, no next turns -> GRPO advantages (mean already 0)
    adv = compute_advantages("empg", batch, empg_zeta=0.0)
    assert adv.tolist() == approx([0.7071058, -0.7071058])


def test_empg_needs_entropy():
    with pytest.raises(ConfigError, match="entropy"):
        compute_advantages("empg", GRPO_BATCH)


# ------------------------------------------------------------------------- API


def test_unknown_names_and_knobs():
    with pytest.raises(RegistryError, match="gigpo"):
        compute_advantages("gae", GRPO_BATCH)
    with pytest.raises(ConfigError, match="empg_zeta"):
        compute_advantages("grpo", GRPO_BATCH, empg_zeta=0.1)
    with pytest.raises(ConfigError, match="mean_std_norm"):
        compute_advantages("grpo", GRPO_BATCH, norm="std")
    with pytest.raises(ConfigError, match="duplicate step"):
        compute_advantages("gigpo", [turn("g", "a", 0, "x"), turn("g", "a", 0, "y")])


@dataclass
class _Rec:  # a StepRecord-like object: attributes, but no episode_return
    uid: str
    traj_id: str
    step: int
    anchor: str
    step_reward: float


def test_objects_and_missing_fields():
    with pytest.raises(ConfigError, match="samples_from_trajectories"):
        compute_advantages("grpo", [_Rec("g", "a", 0, "x", 1.0)])
    objs = [TurnSample(**{k: v for k, v in d.items() if k != "entropy"}) for d in GRPO_BATCH]
    assert (
        compute_advantages("grpo", objs).tolist() == compute_advantages("grpo", GRPO_BATCH).tolist()
    )


def test_samples_from_real_trajectories():
    from arlgym.rollout import StepRecord, Trajectory

    def rec(step, reward, penalty, anchor):
        return StepRecord(
            uid="g",
            traj_id="t0",
            step=step,
            task_id="x",
            task_type="y",
            prompt="p",
            response="r",
            anchor=anchor,
            step_reward=reward,
            task_reward=reward + penalty,
            format_penalty=penalty,
            format_valid=penalty == 0,
            action_valid=True,
            action="a",
            executed_action="a",
            terminated=step == 1,
            truncated=False,
            won=step == 1,
            score=1.0,
        )

    traj = Trajectory(
        uid="g",
        traj_id="t0",
        env_id="e",
        task_id="x",
        task_type="y",
        group_index=0,
        member=0,
        steps=[rec(0, -0.1, 0.1, "s0"), rec(1, 1.0, 0.0, "s1")],
    )
    samples = samples_from_trajectories([traj], entropies=[0.3, 0.4])
    assert [s.episode_return for s in samples] == approx([0.9, 0.9])  # Σ step rewards
    assert [s.entropy for s in samples] == [0.3, 0.4]
    assert samples[0].format_penalty == 0.1 and samples[1].step == 1
    tasks = samples_from_trajectories([traj], episode_return="task_return")
    assert tasks[0].episode_return == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="entropies"):
        samples_from_trajectories([traj], entropies=[0.1])


def test_telemetry():
    m = advantage_metrics(torch.tensor([1.0, -1.0, 0.0, 0.0]))
    assert m["adv/mean"].item() == 0.0 and m["adv/zero_frac"].item() == 0.5
    assert m["adv/max"].item() == 1.0 and m["adv/min"].item() == -1.0
    assert m["adv/std"].item() == pytest.approx(math.sqrt(2 / 3))
    # GiGPO batch: step groups s0 (2), s1 (2), s2 (1): mean size 5/3, singleton samples 1/5
    s = step_group_metrics(GIGPO_BATCH)
    assert s["adv/step_group_size_mean"].item() == pytest.approx(5 / 3)
    assert s["adv/step_singleton_frac"].item() == pytest.approx(0.2)
