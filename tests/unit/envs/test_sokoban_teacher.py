"""The greedy Sokoban teacher: deterministic, its mistakes systematic, its success measured.

Run: pytest tests/unit/envs/test_sokoban_teacher.py
"""

import json
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import arlgym  # noqa: F401
from arlgym.envs.sokoban.env import SPLIT_SEED_RANGES, SokobanEnv
from arlgym.envs.sokoban.room import MOVE_NAMES, parse_xsb
from arlgym.envs.sokoban.solver import solve
from arlgym.envs.sokoban.teacher import STUCK_MOVE, greedy_plan, greedy_response
from arlgym.errors import ConfigError
from arlgym.policies import GreedyTeacherPolicy, make_policy
from arlgym.sft.collect import CollectConfig, collect_sft

# the player must go around a wall to reach the cell below the box; walking straight bumps it
BUMP = "#######\n#.    #\n#$    #\n#  #@ #\n#######"
# a wall between the box and its target: the box must first move sideways (away from it)
STUCK = "#######\n#  .  #\n#  #  #\n# @$  #\n#     #\n#######"


def _play(room, steps=15):
    for _ in range(steps):
        plan = greedy_plan(room)
        if not plan:
            break
        room, _ = room.move(plan[0])
        if room.solved:
            break
    return room.solved


def test_straight_push_is_taken():
    room = parse_xsb("#####\n#@$.#\n#####")
    assert greedy_plan(room) == ("right",)
    assert greedy_response(room) == "<think>plan: right</think><action>right</action>"
    assert _play(room)


def test_walks_straight_into_a_wall_where_the_solver_walks_around():
    room = parse_xsb(BUMP)
    assert greedy_plan(room)[0] == "left"  # (3, 3) is a wall: a no-op
    assert room.move("left")[0] == room
    assert not _play(room)  # it repeats the bump until the step limit
    assert solve(room) is not None and len(solve(room).moves) <= 15


def test_stuck_when_the_box_must_move_away_first():
    room = parse_xsb(STUCK)
    assert greedy_plan(room) == ()
    assert greedy_response(room) == f"<think>plan: {STUCK_MOVE}</think><action>{STUCK_MOVE}</action>"
    assert not _play(room)
    assert len(solve(room).moves) == 8  # right, down, right, up, up, right, up, left
    assert greedy_response(parse_xsb("###\n#*#\n#@#\n###")).startswith("<think>all boxes")


def test_success_on_the_held_out_panel_is_between_random_and_the_solver():
    """Greedy success on the first 200 test rooms (the quickstart's panel): 106 won (53.0%),
    random moves win 28.0% there, the solver 100%."""
    env = SokobanEnv()
    low = SPLIT_SEED_RANGES["test"][0]
    wins = sum(_play(env.room_for_seed(low + k)) for k in range(200))
    assert wins == 106
    assert 0.45 <= wins / 200 <= 0.62


def test_the_policy_plays_through_the_env_deterministically():
    policy = make_policy("greedy")
    assert isinstance(policy, GreedyTeacherPolicy)
    runs = []
    for _ in range(2):
        env = gym.make("arl/Sokoban-v0")
        prompt, _ = env.reset(seed=7)
        moves, done = [], False
        while not done:
            reply = policy.generate([prompt], envs=[env])[0].text
            moves.append(reply)
            prompt, _, term, trunc, _ = env.step(reply)
            done = term or trunc
        runs.append(moves)
    assert runs[0] == runs[1] and len(runs[0]) <= 15


def test_never_crashes_on_any_position():
    """Random positions of 6x6/1-box and 7x7/2-box rooms (boxes in corners included): always a
    well-formed response with a real move."""
    rng = np.random.default_rng(0)
    for dims, boxes in (((6, 6), 1), ((7, 7), 2)):
        env = SokobanEnv(dim_room=dims, num_boxes=boxes)
        for seed in range(40):
            room = env.room_for_seed(seed)
            for _ in range(12):
                reply = greedy_response(room)
                action = reply.split("<action>")[1].split("</action>")[0]
                assert reply.startswith("<think>plan: ") or room.solved
                assert action in MOVE_NAMES
                room, _ = room.move(MOVE_NAMES[int(rng.integers(4))])


def test_collect_keeps_the_teachers_won_episodes(tmp_path):
    stats = collect_sft(CollectConfig(policy="greedy", episodes=20, batch_tasks=10), tmp_path,
                        progress=False)
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert lines and all(x["policy"] == "greedy" and x["won"] for x in lines)
    kept = len({x["episode"] for x in lines})
    assert 0 < kept < 20, stats  # a teacher that loses some rooms


def test_an_env_without_a_teacher_is_refused():
    env = SimpleNamespace(unwrapped=object())
    with pytest.raises(ConfigError, match="--policy expert"):
        GreedyTeacherPolicy().generate(["p"], envs=[env])


def test_teacher_response_needs_a_reset():
    with pytest.raises(ConfigError, match="reset"):
        SokobanEnv().teacher_response()
