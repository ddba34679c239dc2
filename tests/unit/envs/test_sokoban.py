"""arl/Sokoban-v0 and arl/SokobanVision-v0: rooms, rewards, format handling, XSB, expert, vision.

Run: pytest tests/unit/envs/test_sokoban.py
"""

import subprocess
import sys
from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import arlgym  # noqa: F401
from arlgym.envs.sokoban.generator import generate_room
from arlgym.envs.sokoban.room import Room, parse_xsb, read_xsb_collection
from arlgym.envs.sokoban.solver import solve
from arlgym.errors import ConfigError, LevelFormatError, ResetNeeded, TaskNotFound

OK = "<think>t</think><action>{}</action>"


def make(**kw):
    return gym.make("arl/Sokoban-v0", **kw)


def test_reset_prints_a_complete_prompt():
    prompt, info = make().reset(seed=0)
    assert prompt.startswith("You are an expert agent operating in the Sokoban environment.")
    assert info["raw_observation"] in prompt
    assert prompt.rstrip().endswith("<action> </action> tags.")
    assert info["admissible_actions"] == ["up", "down", "left", "right"]


def test_same_seed_same_room_and_anchors():
    a, b = make(), make()
    pa, ia = a.reset(seed=123)
    pb, ib = b.reset(seed=123)
    assert pa == pb and ia["anchor"] == ib["anchor"] and ia["task_id"] == ib["task_id"]
    for move in ["up", "left", "down", "right", "up"]:
        ra = a.step(OK.format(move))
        rb = b.step(OK.format(move))
        assert ra[0] == rb[0] and ra[4]["anchor"] == rb[4]["anchor"] and ra[1] == rb[1]
        if ra[2] or ra[3]:
            break
    _, other = make().reset(seed=124)
    assert other["anchor"] != ia["anchor"]


def test_anchors_agree_across_processes():
    code = ("import gymnasium as gym, arlgym; e = gym.make('arl/Sokoban-v0'); _, i = e.reset(seed=5); "
            "_, _, _, _, j = e.step('<think>t</think><action>left</action>'); print(i['anchor'], j['anchor'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    env = make()
    _, i = env.reset(seed=5)
    *_, j = env.step(OK.format("left"))
    assert out.stdout.split() == [i["anchor"], j["anchor"]]


def test_anchor_is_state_not_prompt():
    env = make()
    _, info = env.reset(seed=1)
    room = env.unwrapped.room
    # walking into a wall leaves the state (and so the anchor) unchanged, but the prompt changes
    wall_move = next(m for m in ["up", "down", "left", "right"] if room.player + room.offset(m) in room.walls)
    prompt2, _, _, _, info2 = env.step(OK.format(wall_move))
    assert info2["anchor"] == info["anchor"]
    assert info2["executed_action"] == wall_move and info2["action_valid"]


def test_task_id_pins_a_room_and_splits_are_disjoint():
    env = make()
    _, info = env.reset(seed=7)
    pinned, info2 = make().reset(options={"task_id": info["task_id"]})
    assert info2["anchor"] == info["anchor"]
    train_ids = {make().reset(seed=s)[1]["task_id"] for s in range(30)}
    test_ids = set(env.unwrapped.list_tasks("test", 30))
    seeds = lambda ids: {int(t.rsplit("-", 1)[1]) for t in ids}  # noqa: E731
    assert max(seeds(train_ids)) < 2**30 <= min(seeds(test_ids))
    _, t_info = make().reset(seed=3, options={"split": "test"})
    assert int(t_info["task_id"].rsplit("-", 1)[1]) >= 2**30
    val_ids = env.unwrapped.list_tasks("val", 30)  # for checkpoint choice: disjoint from test
    assert max(seeds(test_ids)) < 2**31 <= min(seeds(val_ids))
    assert env.unwrapped.list_tasks("validation", 3) == val_ids[:3]
    val_room, _ = make().reset(options={"task_id": val_ids[0]})
    assert val_room == make().reset(options={"task_id": val_ids[0]})[0]
    with pytest.raises(TaskNotFound):
        make().reset(options={"task_id": "7x7-1b-5"})
    with pytest.raises(ConfigError, match="unknown split"):
        make().reset(options={"split": "nope"})


def test_splits_are_disjoint_by_room_content_from_any_seed():
    """At 7x7 with one box, rooms repeat across seeds (10% of a 200-room seed-range test panel sat
    verbatim in 3,000 training rooms): the split is a function of the puzzle, so no training draw
    from any seed lands on a test or val puzzle, and each panel holds each puzzle once."""
    from arlgym.envs.sokoban.env import SokobanEnv, room_content_key, room_split

    env = SokobanEnv(dim_room=7, history_length=0)
    panels = {s: env.list_tasks(s, 200) for s in ("test", "val")}
    keys = {s: {room_content_key(env.room_for_seed(int(t.rsplit("-", 1)[1]))) for t in ids}
            for s, ids in panels.items()}
    assert all(len(k) == 200 for k in keys.values())  # no puzzle twice in a panel
    assert not keys["test"] & keys["val"]
    train = set()
    for seed in range(3000):  # the quickstart's SFT draws 3,000 training rooms like these
        env.reset(seed=seed)
        assert room_split(env.room) == "train"
        train.add(room_content_key(env.room))
    assert not train & keys["test"] and not train & keys["val"]
    # the seed-range rule alone would have let the test puzzles in: training seeds reach them
    leaked = sum(room_content_key(env.room_for_seed(s)) in keys["test"] for s in range(3000))
    assert leaked > 0
    # a pinned id is checked against the split's content rule too
    train_id = env.task_id_for(next(s for s in range(100) if room_split(env.room_for_seed(s)) != "train"))
    with pytest.raises(TaskNotFound):
        env.reset(options={"task_id": train_id, "split": "train"})


def test_rewards_match_gym_sokoban():
    level = "#######\n#@ $ .#\n#######"
    env = make()
    env.reset(options={"level": level})
    _, r, term, trunc, info = env.step(OK.format("right"))  # walk
    assert r == pytest.approx(-0.1) and not term and info["task_reward"] == pytest.approx(-0.1)
    _, r, term, _, info = env.step(OK.format("right"))  # push box next to target
    assert r == pytest.approx(-0.1) and info["score"] == 0.0
    _, r, term, _, info = env.step(OK.format("right"))  # onto target: +1 +10 -0.1
    assert r == pytest.approx(10.9) and term and info["won"] and info["score"] == 1.0

    env.reset(options={"level": "#######\n#@*  .#\n#  $  #\n#######"})
    _, r, *_ = env.step(OK.format("right"))  # push box off its target
    assert r == pytest.approx(-1.1)


def test_format_penalty_and_malformed_responses():
    env = make()
    env.reset(seed=0)
    cases = {
        "": ("empty", None, False),
        "up": ("missing_think", None, False),
        "<think>a</think><action>up</action><action>down</action>": ("multiple_action", "up", True),
        "hi <think>a</think><action>left</action>": ("text_outside_tags", "left", True),
        "<think>a</think><action>jump</action>": (None, "jump", False),
        "x" * 100_000: ("missing_think", None, False),
    }
    for text, (error, action, valid_action) in cases.items():
        env.reset(seed=0)
        _, reward, term, trunc, info = env.step(text)
        assert info["format_error"] == error, text[:40]
        assert info["action"] == action
        assert info["action_valid"] is valid_action
        penalty = 0.0 if error is None else 0.1
        assert info["format_penalty"] == pytest.approx(penalty)
        assert reward == pytest.approx(info["task_reward"] - penalty)
        if not valid_action:  # no-op still pays the step cost, like gym-sokoban's action 0
            assert info["task_reward"] == pytest.approx(-0.1) and info["executed_action"] is None
        assert not term
    # lenient mode accepts text outside tags
    lenient = make(strict_format=False)
    lenient.reset(seed=0)
    assert lenient.step("hi <think>a</think><action>left</action>")[4]["format_valid"]


def test_on_format_error_terminate_and_custom_coef():
    env = make(on_format_error="terminate", format_penalty_coef=0.5)
    env.reset(seed=0)
    _, reward, term, _, info = env.step("<action>up</action>")
    assert term and info["executed_action"] is None and reward == pytest.approx(-0.1 - 0.5)
    with pytest.raises(ResetNeeded):
        env.step(OK.format("up"))


def test_truncation_at_max_steps_and_step_before_reset():
    env = make(max_steps=3)
    with pytest.raises(ResetNeeded):
        env.unwrapped.step(OK.format("up"))
    env.reset(seed=0)
    env.unwrapped.room = parse_xsb("#####\n#@  #\n#$. #\n#####")  # solvable but we walk away
    out = [env.step(OK.format("up"))[2:4] for _ in range(3)]
    assert out == [(False, False), (False, False), (False, True)]


def test_bad_kwargs_raise_clear_errors():
    with pytest.raises(ConfigError, match="dim_room"):
        make(dim_room=(2, 9))
    with pytest.raises(ConfigError, match="on_format_error"):
        make(on_format_error="explode")
    with pytest.raises(ConfigError, match="render_mode"):
        make(render_mode="bogus")


def test_expert_solves_200_rooms_within_15_steps():
    env = make()
    for seed in range(200):
        env.reset(seed=seed)
        for _ in range(15):
            _, _, term, trunc, info = env.step(env.unwrapped.expert_response())
            assert info["format_valid"] and info["action_valid"]
            if term or trunc:
                break
        assert info["won"], f"seed {seed}"


def _bfs_optimal_length(room: Room) -> int | None:
    """Loop reference: plain BFS over (player, boxes) with single moves."""
    start = room.state_key()
    seen = {start}
    queue = deque([(room, 0)])
    while queue:
        r, d = queue.popleft()
        if r.solved:
            return d
        for m in ["up", "down", "left", "right"]:
            nxt, _ = r.move(m)
            key = nxt.state_key()
            if key not in seen:
                seen.add(key)
                queue.append((nxt, d + 1))
    return None


@pytest.mark.parametrize("dims, boxes", [((6, 6), 1), ((7, 7), 2)])
def test_generated_rooms_are_solvable_and_solver_is_optimal(dims, boxes):
    for seed in range(25):
        gen = generate_room(np.random.default_rng(seed), dims, boxes)
        room = gen.room
        assert not room.solved and len(room.boxes) == boxes
        ref = _bfs_optimal_length(room)
        assert ref is not None and len(gen.solution) == ref
        r = room
        for m in gen.solution.moves:
            r, _ = r.move(m)
        assert r.solved


def test_generation_is_deterministic_and_respects_solution_budget():
    a = generate_room(np.random.default_rng(42), (7, 7), 2, max_solution_length=12)
    b = generate_room(np.random.default_rng(42), (7, 7), 2, max_solution_length=12)
    assert a.room == b.room and len(a.solution) <= 12


def test_unsolvable_position_is_detected():
    assert solve(parse_xsb("#####\n#$ .#\n#@  #\n#####")) is None  # box in a corner
    assert solve(parse_xsb("#####\n#@$.#\n#####")).moves == ("right",)


XSB_CLASSIC = """; 1
  ####
###  ####
#     $ #
# #  #$ #
# . .#@ #
#########

; 2
########
#      #
# .**$@#
#      #
#####  #
    ####
"""


def test_xsb_roundtrip_and_expert_on_classic_levels():
    levels = read_xsb_collection(XSB_CLASSIC)
    assert [t for t, _ in levels] == ["1", "2"]
    env = make(max_steps=200)
    for _, text in levels:
        _, info = env.reset(options={"level": text})
        assert env.unwrapped.to_xsb() == text.rstrip("\n")
        assert info["task_id"].startswith("xsb-")
        for _ in range(200):
            *_, term, trunc, info = env.step(env.unwrapped.expert_response())
            if term or trunc:
                break
        assert info["won"]
    # a levels= collection is played by title
    coll = make(levels=[t for _, t in levels], max_steps=200)
    _, info = coll.reset(options={"task_id": "level-2"})
    assert info["task_id"] == "level-2"
    assert coll.unwrapped.list_tasks() == ["level-1", "level-2"]


@pytest.mark.parametrize("bad, msg", [
    ("#####\n#@$ #\n#####", "goals"),
    ("#####\n# $.#\n#####", "exactly one player"),
    ("#####\n#@ x#\n#####", "unknown XSB symbol"),
    ("#@$.\n####", "not closed"),
    ("", "empty"),
])
def test_bad_xsb_levels(bad, msg):
    with pytest.raises(LevelFormatError, match=msg):
        make().reset(options={"level": bad})


def test_vision_env_observation_and_tiles():
    env = gym.make("arl/SokobanVision-v0")
    obs, info = env.reset(seed=0)
    assert set(obs) == {"text", "image"}
    assert obs["image"].shape == (96, 96, 3) and obs["image"].dtype == np.uint8
    assert "green alien-like figure" in obs["text"] and "<image>" in obs["text"]
    assert np.array_equal(env.render(), obs["image"])
    room = env.unwrapped.room
    r, c = room.coords(room.player)
    tile = obs["image"][r * 16:(r + 1) * 16, c * 16:(c + 1) * 16]
    assert tile[..., 1].mean() > tile[..., 0].mean()  # the player tile is mostly green
    obs2, *_ = env.step(OK.format("up"))
    assert "(image)" in obs2["text"] or "Prior to this step" in obs2["text"]
    big = gym.make("arl/SokobanVision-v0", tile_size=32).reset(seed=0)[0]["image"]
    assert big.shape == (192, 192, 3)


def test_text_grid_symbols_and_separator():
    env = make(cell_separator="\t")
    _, info = env.reset(options={"level": "#####\n#@$.#\n#####"})
    assert info["raw_observation"] == "#\t#\t#\t#\t#\n#\tP\tX\tO\t#\n#\t#\t#\t#\t#"
    env.step(OK.format("right"))
    assert env.unwrapped.raw_observation.split("\n")[1] == "#\t_\tP\t√\t#"
