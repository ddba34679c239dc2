"""Held-out tasks are never training tasks, by content: ALFWorld games, WebShop goals, TIR Math
problems (the audit behind docs/guide.md, "Splits: what keeps held-out tasks unseen").

Run: pytest tests/unit/envs/test_split_disjointness.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from arlgym.envs.alfworld.generator import game_content_key, generate_game
from arlgym.envs.split_audit import (
    SplitOverlap,
    audit_alfworld,
    audit_tir,
    audit_webshop,
    count_overlap,
    format_table,
    main,
)
from arlgym.envs.tir_math.problems import (
    CONTENT_SPLIT_FRACTIONS,
    FAMILIES,
    SPLIT_SEED_RANGES,
    MathProblem,
    content_split,
    generate_problem,
    panel_seeds,
    problem_content_key,
    without_held_out,
)
from arlgym.envs.webshop.env import WebShopEnv, load_shop
from arlgym.envs.webshop.splits import HeldOutGoals, goal_content_key, split_range
from arlgym.errors import ConfigError


def test_count_overlap_counts_held_out_items_with_a_train_key():
    assert count_overlap(["a", "b", "b", "c"], ["b", "z"]) == 2
    assert count_overlap([], ["a"]) == 0
    row = SplitOverlap("x", "test", 4, 3, 2, "whole split", 2, None)
    assert "| x | test | 4 (3) | 2 (whole split) | **2** | — |" in format_table([row])


# ------------------------------------------------------------------------------------ ALFWorld
def test_alfworld_no_held_out_game_is_a_train_game_over_the_whole_splits():
    seen, unseen = audit_alfworld()
    assert (seen.items, seen.train_items, unseen.items) == (140, 3553, 134)
    assert seen.same == 0 and unseen.same == 0
    assert seen.distinct == 140 and unseen.distinct == 134
    # ALFWorld's seen-scene protocol: same scene and goal as some train game, another layout
    assert seen.near == 43 and unseen.near == 0


def test_alfworld_content_key_ignores_naming_and_sees_layout():
    game = generate_game("train", 3)
    assert game.content_key == generate_game("train", 3).content_key  # the same game, the same key
    # renaming an object (its THOR coordinates, hence its number) leaves the game the same
    line = next(x for x in game.pddl_problem.splitlines() if x.startswith("(objectType "))
    old = line.split()[1]
    renamed = game.pddl_problem.replace(old, old + "_9")
    assert game_content_key(game.task_type, game.floor_plan, game.task_text, renamed) == game.content_key
    # moving that object into another receptacle is another game
    place = next(x for x in game.pddl_problem.splitlines() if x.startswith(f"(inReceptacle {old} "))
    other = next(x.split()[1] for x in game.pddl_problem.splitlines()
                 if x.startswith("(receptacleType ") and x.split()[1] != place.split()[2].rstrip(")"))
    moved = game.pddl_problem.replace(place, f"(inReceptacle {old} {other})")
    assert game_content_key(game.task_type, game.floor_plan, game.task_text, moved) != game.content_key
    assert game_content_key(game.task_type, game.floor_plan, "Put X in Y.", game.pddl_problem) \
        != game.content_key


# ------------------------------------------------------------------------------------ WebShop
def test_webshop_train_shares_no_request_or_product_with_test_or_val():
    test, val = audit_webshop()
    assert (test.items, val.items, test.train_items) == (500, 100, 956)
    assert test.same == val.same == 0 and test.near == val.near == 0
    # what the exclusion removes: the raw train range buys 421 held-out products again
    catalog, _ = load_shop(None)
    held = HeldOutGoals.of(catalog)
    low, high = split_range("train", len(catalog.goals))
    assert (low, high) == (600, 1977)
    assert sum(held.overlaps(catalog.goals[j]) for j in range(low, high)) == 1377 - 956


def test_webshop_content_key_is_the_request_as_read():
    catalog, _ = load_shop(None)
    goal = catalog.goals[0]
    assert goal_content_key(goal) == goal_content_key(catalog.goals[0])
    shouted = type(goal)(**{**goal.__dict__, "instruction": "  " + goal.instruction.upper().replace(" ", "  ")})
    assert goal_content_key(shouted) == goal_content_key(goal)
    cheaper = type(goal)(**{**goal.__dict__, "instruction": goal.instruction.replace(
        f"lower than {goal.price_upper:.2f}", "lower than 990.00")})
    assert cheaper.instruction != goal.instruction and goal_content_key(cheaper) == goal_content_key(goal)
    assert HeldOutGoals.of(catalog).overlaps(goal)


def test_webshop_env_train_draws_and_list_avoid_held_out_goals():
    env = WebShopEnv()
    held = env.held_out
    train = env.list_tasks("train")
    assert len(train) == 956 and int(train[0].split("-")[1]) >= 600
    assert env.list_tasks("test")[:2] == ["goal-0", "goal-1"] and len(env.list_tasks("val")) == 100
    for seed in range(200):
        _, info = env.reset(seed=seed, options={"split": "train"})
        index = int(info["task_id"].split("-")[1])
        assert index >= 600 and not held.overlaps(env.catalog.goals[index])
    env.close()


def test_webshop_tiny_catalog_without_train_goals_says_so():
    env = WebShopEnv(num_products=5)  # 10 goals: 5 test, 1 val, and 4 that buy their products
    with pytest.raises(ConfigError, match="no WebShop train goal left.*num_products="):
        env.reset(seed=0, options={"split": "train"})
    assert env.list_tasks("train") == []
    env.close()


# ------------------------------------------------------------------------------------ TIR Math
def test_tir_held_out_panels_share_no_problem_with_train():
    test, val = audit_tir(train_seeds=5000)
    assert (test.items, test.distinct, val.items, val.distinct) == (500, 500, 500, 500)
    assert test.same == val.same == 0
    assert test.near == val.near == 0  # no held-out key is owned by train: no train seed reaches it


def test_tir_every_seed_yields_a_problem_its_split_owns():
    assert sum(CONTENT_SPLIT_FRACTIONS.values()) == pytest.approx(1.0)
    for split, (low, _) in SPLIT_SEED_RANGES.items():
        for seed in range(low, low + 300):
            p = generate_problem(seed)
            assert content_split(problem_content_key(p.question, p.family)) == split
    for family in FAMILIES:  # every family has problems in every split
        for low, _ in SPLIT_SEED_RANGES.values():
            assert generate_problem(low, (family,)).family == family


def test_tir_content_key_would_catch_reintroduced_overlap():
    a, b = generate_problem(7), generate_problem(7)
    assert problem_content_key(a.question, a.family) == problem_content_key(b.question, b.family)
    q = "How many integers from 1 to 500 inclusive are divisible by 3 or by 5, but not by 7?"
    swapped = "How many integers from 1 to 500 inclusive are divisible by 5 or by 3, but not by 7?"
    assert problem_content_key(q, "inclusion_exclusion") == problem_content_key(swapped, "inclusion_exclusion")
    assert problem_content_key("What is 1,000 +  2.50?") == problem_content_key("what is 1000 + 2.5?")
    assert problem_content_key("What is 1000 + 3?") != problem_content_key("What is 1000 + 2.5?")
    # seed-disjoint draws that ignore the content rule (seeds beyond every split) do overlap:
    # 68 factorial questions exist, so 300 draws repeat the train split's questions
    train = {problem_content_key(p.question, p.family)
             for p in (generate_problem(s, ("factorial_digit_sum",)) for s in range(300))}
    beyond = SPLIT_SEED_RANGES["val"][1]
    raw = [generate_problem(beyond + s, ("factorial_digit_sum",)) for s in range(100)]
    assert count_overlap([problem_content_key(p.question, p.family) for p in raw], train) > 50


def test_tir_panels_take_each_question_once():
    seeds = panel_seeds("test", 60, ("factorial_digit_sum",))
    keys = [problem_content_key(generate_problem(s, ("factorial_digit_sum",)).question,
                                "factorial_digit_sum") for s in seeds]
    assert len(keys) == len(set(keys)) and 1 <= len(keys) < 60  # the split owns few of the 68


def test_tir_dataset_train_file_loses_problems_its_test_file_holds(tmp_path):
    from arlgym.envs.tir_math.env import TIRMathEnv

    rows = [{"problem": "What is 1,000 + 1?", "answer": "1001"}, {"problem": "What is 2+2?", "answer": "4"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text(json.dumps({"problem": "what is 1000 + 1?", "answer": "1001"}) + "\n")
    env = TIRMathEnv(data_path=str(tmp_path), sandbox="unisolated", use_math_verify=False)
    assert [p.question for p in env._dataset("train")] == ["What is 2+2?"]
    for seed in range(5):
        env.reset(seed=seed)
        assert env.problem.question == "What is 2+2?"
    env.close()
    kept = without_held_out([MathProblem("a", "1+1?", "2"), MathProblem("b", "2+2?", "4")],
                            [MathProblem("t", " 1+1? ", "2")])
    assert [p.problem_id for p in kept] == ["b"]


def test_audit_cli_prints_the_table_and_fails_on_overlap(capsys, monkeypatch):
    import arlgym.envs.split_audit as audit

    assert main(["--env", "webshop"]) == 0
    assert "| webshop | test | 500 (500) | 956 (whole split) | **0** |" in capsys.readouterr().out
    leak = [SplitOverlap("webshop", "test", 1, 1, 1, "whole split", 1, None)]
    monkeypatch.setattr(audit, "audit_webshop", lambda *a, **k: leak)
    assert main(["--env", "webshop"]) == 1


def test_rng_draw_order_is_unchanged_for_train_seeds_whose_first_draw_is_train():
    # a train seed whose first draw its split owns keeps that draw (ids name the same problem)
    seed = next(s for s in range(100) if content_split(problem_content_key(
        *_first_draw(s))) == "train")
    p = generate_problem(seed)
    assert (p.question, p.family) == _first_draw(seed)


def _first_draw(seed: int) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    names = tuple(FAMILIES)
    family = names[int(rng.integers(len(names)))]
    return FAMILIES[family](rng)[0], family
