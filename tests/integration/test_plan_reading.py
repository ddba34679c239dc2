"""experiments/plan_reading.py: the written plan read against the optimal solver, on real envs and
the real scripted teachers (the expert's plans are optimal; its slipping hand's moves are not)."""

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import arlgym  # noqa: F401  (registers the envs)
from arlgym.evaluation.runner import evaluate
from arlgym.policies.spec import seeded_policy

REPO = Path(__file__).resolve().parents[2]
ENV_KWARGS = {"dim_room": 7, "history_length": 0}


@pytest.fixture(scope="module")
def reading():
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        import plan_reading
    finally:
        sys.path.pop(0)
    return plan_reading


def _play(policy, out: Path, rooms: int = 12):
    summary, _ = evaluate("arl/Sokoban-v0", policy, episodes=rooms, split="test", out=out,
                          batch_size=rooms, env_kwargs=ENV_KWARGS, progress=False)
    return summary["overall"]


def test_the_prompt_grid_reads_back_as_the_envs_room(reading):
    env = gym.make("arl/Sokoban-v0", **ENV_KWARGS)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        room = env.unwrapped.room
        got = reading.room_from_prompt(obs)
        assert (got.walls, got.targets, got.boxes, got.player) == (room.walls, room.targets,
                                                                   room.boxes, room.player)
        # one push or walk later the reading follows the env
        best = sorted(reading.optimal_moves(room))
        assert best, "a generated room is solvable"
        obs, *_ = env.step(f"<think>plan: {best[0]}</think><action>{best[0]}</action>")
        assert reading.room_from_prompt(obs).state_key() == env.unwrapped.room.state_key()
    with pytest.raises(ValueError, match="no Sokoban grid"):
        reading.room_from_prompt("hello")


def test_the_experts_plans_are_optimal_and_its_slips_moves_are_not(reading, tmp_path):
    _play(seeded_policy("expert", 0), tmp_path / "expert.jsonl")
    expert = reading.plan_quality(tmp_path / "expert.jsonl")
    assert expert["turns"] > 12 and expert["first_turns"] == 12
    assert expert["plan_optimal"] == expert["move_optimal"] == expert["first_plan_optimal"] == 1.0
    assert expert["slip_share"] == 0.0

    _play(seeded_policy("slips:1.0:expert", 0), tmp_path / "slips.jsonl")
    slips = reading.plan_quality(tmp_path / "slips.jsonl")
    # the reasoning is still the solver's (optimal wherever the room is solvable), the hand is not
    assert slips["plan_optimal"] == slips["first_plan_optimal"] == 1.0
    assert 0.5 < slips["slip_share"] < 1.0  # a uniform random move equals the plan's 1 time in 4
    assert slips["move_optimal"] < 0.6


def test_following_the_written_plan_undoes_every_slip(reading, tmp_path):
    expert = _play(seeded_policy("expert", 0), tmp_path / "expert.jsonl")
    slipping = _play(seeded_policy("slips:1.0:expert", 0), tmp_path / "slips.jsonl")
    followed = _play(reading.FollowPlan(seeded_policy("slips:1.0:expert", 0)), tmp_path / "follow.jsonl")
    assert expert["success_rate"] == 1.0 and slipping["success_rate"] < 0.5
    assert followed["success_rate"] == 1.0
    quality = reading.plan_quality(tmp_path / "follow.jsonl")
    assert quality["slip_share"] == 0.0 and quality["move_optimal"] == 1.0


def test_a_reply_without_a_plan_passes_through(reading):
    from arlgym.policies.base import Completion

    class Fixed:  # the seam only: FollowPlan's rewrite of one reply
        def generate(self, prompts, sampling=None, **_):
            return [Completion(t) for t in prompts]

    follow = reading.FollowPlan(Fixed())
    texts = ["<think>plan: left up</think><action>down</action>", "<think>no plan</think><action>up</action>",
             "garbled"]
    assert [c.text for c in follow.generate(texts)] == [
        "<think>plan: left up</think><action>left</action>", texts[1], texts[2]]


def test_the_cli_names_what_is_missing(tmp_path):
    run = subprocess.run([sys.executable, str(REPO / "experiments" / "plan_reading.py"), "--from", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "not a finished quickstart" in run.stderr
    assert "Traceback" not in run.stderr
