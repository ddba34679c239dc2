"""arl/ALFWorld-v0 on the real TextWorld engine (no mocks).

Run: ``pytest tests/unit/envs/test_alfworld.py`` (``-m "not slow"`` skips the long soak and the
300-game expert run). Generated games are cached under a per-session temporary $ARLGYM_CACHE.
"""

from __future__ import annotations

import json
import random
import shutil

import gymnasium as gym
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

import arlgym  # noqa: E402,F401
from arlgym.envs.alfworld.catalog import TASK_TYPES, floor_plans  # noqa: E402
from arlgym.envs.alfworld.generator import (  # noqa: E402
    generate_game,
    problem_key,
    split_floor_plans,
    task_ids,
)


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ARLGYM_CACHE", str(tmp_path_factory.mktemp("arlgym-cache")))
    mp.delenv("ALFWORLD_DATA", raising=False)
    yield
    mp.undo()


def _make(**kw):
    return gym.make("arl/ALFWorld-v0", data_source="generated", **kw)


def test_make_reset_prompt_and_info():
    env = _make()
    prompt, info = env.reset(seed=0)
    assert prompt.startswith("You are an expert agent operating in the ALFRED Embodied Environment.")
    assert "-= Welcome to TextWorld, ALFRED! =-" in prompt and "Your task is to: " in prompt
    assert info["task_type"] in TASK_TYPES
    assert info["admissible_actions"] and "help" not in info["admissible_actions"]
    assert "look" in info["admissible_actions"] and "inventory" in info["admissible_actions"]
    assert set(info) >= set(arlgym.INFO_KEYS)
    # Same seed, same task; pinning by id works.
    _, info2 = env.reset(seed=0)
    assert info2["task_id"] == info["task_id"] and info2["anchor"] == info["anchor"]
    _, info3 = env.reset(options={"task_id": info["task_id"]})
    assert info3["anchor"] == info["anchor"]
    env.close()


def test_check_env_passes():
    from gymnasium.utils.env_checker import check_env

    env = _make()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_later_prompt_has_history_and_task():
    env = _make()
    _, info = env.reset(seed=3)
    prompt, reward, term, trunc, info = env.step("<think>look</think><action>look</action>")
    assert "Your task is to: " in prompt and "Prior to this step, you have already taken 1 step(s)" in prompt
    assert info["executed_action"] == "look" and info["action_valid"] and reward == 0.0
    env.close()


def test_inadmissible_is_noop_and_anchor_is_state():
    env = _make()
    _, info0 = env.reset(seed=1)
    _, r, term, trunc, info = env.step("<think>x</think><action>fly to the moon</action>")
    assert info["raw_observation"] == "Nothing happens." and not info["action_valid"]
    assert r == 0.0 and not term and info["anchor"] == info0["anchor"]
    # Move somewhere, then "Nothing happens." again: same text, different state -> other anchor.
    go = next(a for a in info["admissible_actions"] if a.startswith("go to"))
    env.step(f"<think>go</think><action>{go}</action>")
    _, _, _, _, info2 = env.step("<think>x</think><action>fly to the moon</action>")
    assert info2["raw_observation"] == "Nothing happens." and info2["anchor"] != info["anchor"]
    env.close()


def test_format_penalty_and_max_steps():
    env = _make(max_steps=2)
    env.reset(seed=2)
    _, r, _, _, info = env.step("look")  # no tags: invalid format, no action
    assert r == pytest.approx(-0.1) and info["format_penalty"] == pytest.approx(0.1)
    _, _, term, trunc, _ = env.step("<think>a</think><action>look</action>")
    assert trunc and not term
    env.close()


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_wins_each_type(task_type):
    env = _make(task_types=[task_type])
    for seed in range(2):
        _, info = env.reset(seed=seed)
        assert info["task_type"] == task_type
        for _ in range(50):
            _, r, term, trunc, info = env.step(env.unwrapped.expert_response())
            assert info["format_valid"] and info["action_valid"]
            if term or trunc:
                break
        assert info["won"] and term and r == 10.0 and info["score"] == 1.0
    env.close()


def test_generator_is_deterministic_and_valid():
    a, b = generate_game("train", 7), generate_game("train", 7)
    assert a.pddl_problem == b.pddl_problem and a.task_text == b.task_text
    assert generate_game("train", 8).pddl_problem != a.pddl_problem
    types = [generate_game("train", i).task_type for i in range(12)]
    assert set(types) == set(TASK_TYPES)
    assert len(floor_plans()) >= 100


def test_split_sizes_and_disjointness():
    assert len(task_ids("eval_in_distribution")) == 140
    assert len(task_ids("eval_out_of_distribution")) == 134
    assert len(task_ids("train", 50)) == 50
    train_plans = set(split_floor_plans("train"))
    assert train_plans == set(split_floor_plans("eval_in_distribution"))
    assert not train_plans & set(split_floor_plans("eval_out_of_distribution"))
    train = [generate_game("train", i) for i in range(600)]
    seen = [generate_game("eval_in_distribution", i) for i in range(140)]
    unseen = [generate_game("eval_out_of_distribution", i) for i in range(134)]
    keys = {problem_key(g.pddl_problem) for g in train}
    assert not keys & {problem_key(g.pddl_problem) for g in seen + unseen}
    assert {g.floor_plan for g in seen} <= train_plans
    assert not {g.floor_plan for g in unseen} & {g.floor_plan for g in train}
    env = _make()
    assert len(env.unwrapped.list_tasks("eval_in_distribution")) == 140
    assert len(env.unwrapped.list_tasks("eval_out_of_distribution")) == 134
    env.close()


def test_official_layout_via_alfworld_data(tmp_path, monkeypatch):
    """A tiny hand-made data folder in ALFWorld's layout loads through $ALFWORLD_DATA."""
    from arlgym.envs.alfworld.cli import main

    assert main(["generate", "--split", "eval_out_of_distribution", "--num", "2",
                 "--out", str(tmp_path), "--quiet"]) == 0
    split_dir = tmp_path / "json_2.1.1" / "valid_unseen"
    games = sorted(p.parent for p in split_dir.rglob("game.tw-pddl"))
    assert len(games) == 2
    # A skipped folder (ALFWorld ignores "Sliced"/"movable" and unsolvable games).
    skipped = split_dir / "pick_and_place_simple-AppleSliced-None-Fridge-1" / "trial_x"
    shutil.copytree(games[0], skipped)
    data = json.loads((games[1] / "game.tw-pddl").read_text())
    traj = json.loads((games[1] / "traj_data.json").read_text())
    assert set(data) >= {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
    assert traj["task_type"] in TASK_TYPES and "object_target" in traj["pddl_params"]
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    env = gym.make("arl/ALFWorld-v0", split="eval_out_of_distribution")
    ids = env.unwrapped.list_tasks()
    assert len(ids) == 2 and all("Sliced" not in i for i in ids)
    _, info = env.reset(options={"task_id": ids[1]})
    assert info["task_type"] == traj["task_type"]
    for command in data["walkthrough"]:
        _, r, term, _, info = env.step(f"<think>plan</think><action>{command}</action>")
    assert info["won"] and term and r == 10.0
    with pytest.raises(arlgym.errors.TaskNotFound):
        env.reset(options={"task_id": "nope"})
    env.close()
    with pytest.raises(arlgym.errors.ConfigError):
        gym.make("arl/ALFWorld-v0", data_source="official", split="train").reset(seed=0)


def test_group_vec_runs_in_worker_processes():
    from arlgym.core.vector import make_group_vec

    vec = make_group_vec("arl/ALFWorld-v0", num_tasks=2, group_size=2, seed=5, mode="auto",
                         num_workers=2, data_source="generated")
    try:
        assert type(vec).__name__ == "AsyncGroupVecEnv"
        _, infos = vec.reset()
        assert infos[0]["anchor"] == infos[1]["anchor"] and infos[0]["task_id"] == infos[1]["task_id"]
        acts = [f"<think>a</think><action>{i['admissible_actions'][0]}</action>" for i in infos]
        out = vec.step(acts)
        assert len(out[0]) == 4
    finally:
        vec.close()


@pytest.mark.slow
def test_expert_wins_300_generated_games():
    env = _make()
    ids = env.unwrapped.list_tasks("train")[:300]
    wins = 0
    for task_id in ids:
        env.reset(options={"task_id": task_id})
        for _ in range(50):
            _, _, term, trunc, info = env.step(env.unwrapped.expert_response())
            if term or trunc:
                break
        wins += bool(info["won"])
    assert wins / len(ids) >= 0.99, wins
    env.close()


@pytest.mark.slow
def test_random_admissible_soak_1000_episodes():
    env = _make(max_steps=12, split_sizes={"train": 60})
    rng = random.Random(0)
    for episode in range(1000):
        _, info = env.reset(seed=episode)
        done = False
        while not done:
            action = rng.choice(info["admissible_actions"])
            _, _, term, trunc, info = env.step(f"<think>r</think><action>{action}</action>")
            done = term or trunc
    env.close()
