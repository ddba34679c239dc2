"""Failure patterns: action types per env family, failure modes in order of precedence, exact
transition counts, and the `arlgym patterns` command on an eval JSONL."""

import json

import pytest

from arlgym.cli import main
from arlgym.evaluation.patterns import LOST, START, WON, action_type, failure_mode, pattern_report
from arlgym.rollout import StepRecord, Trajectory, save_jsonl


def _step(action, *, anchor="s", fmt=True, valid=True, term=False, trunc=False, won=False, executed=None):
    return StepRecord(uid="u", traj_id="t", step=0, task_id="x", task_type="", prompt="", response="",
                      anchor=anchor, step_reward=0.0, task_reward=0.0, format_penalty=0.0,
                      format_valid=fmt, action_valid=valid, action=action,
                      executed_action=executed if executed is not None else (action if valid else None),
                      terminated=term, truncated=trunc, won=won, score=float(won))


def _traj(env_id, steps):
    return Trajectory(uid="u", traj_id="t", env_id=env_id, task_id="x", task_type="", group_index=0,
                      member=0, steps=steps)


@pytest.mark.parametrize("env_id, action, kind", [
    ("arl/WebShop-v0", "search[red shoes]", "search"),
    ("arl/WebShop-v0", "click[b0abc12345]", "product"),
    ("arl/WebShop-v0", "click[x-large]", "option"),
    ("arl/WebShop-v0", "click[Features]", "inspect"),
    ("arl/WebShop-v0", "click[next >]", "navigate"),
    ("arl/WebShop-v0", "click[back to search]", "back"),
    ("arl/WebShop-v0", "click[buy now]", "buy"),
    ("arl/WebShopBrowser-v0", "click[buy now]", "buy"),
    ("arl/TIRMath-v0", "print(1)", "code"),
    ("arl/TIRMath-v0", "\\boxed{3}", "answer"),
    ("arl/ALFWorld-v0", "go to fridge 1", "go"),
    ("arl/ALFWorld-v0", "heat egg 1 with microwave 1", "heat"),
    ("arl/Sokoban-v0", "up", "up"),
])
def test_action_types(env_id, action, kind):
    assert action_type(env_id, _step(action)) == kind


def test_invalid_steps_have_their_own_types():
    assert action_type("arl/Sokoban-v0", _step(None, fmt=False, valid=False)) == "invalid format"
    assert action_type("arl/Sokoban-v0", _step("jump", valid=False)) == "invalid action"


def test_failure_modes_in_order_of_precedence():
    won = _traj("arl/Sokoban-v0", [_step("up", term=True, won=True)])
    assert failure_mode(won) is None
    # 2 of 4 responses broke the format: format collapse, even though it also loops
    fmt = [_step(None, fmt=False, valid=False), _step(None, fmt=False, valid=False), _step("up"), _step("up")]
    assert failure_mode(_traj("arl/Sokoban-v0", fmt)) == "format collapse"
    bad = [_step("jump", valid=False), _step("fly", valid=False), _step("up", anchor="a")]
    assert failure_mode(_traj("arl/Sokoban-v0", bad)) == "invalid actions"
    loop = [_step("up", anchor="a"), _step("down", anchor="b"), _step("up", anchor="a"),
            _step("down", anchor="a", trunc=True)]
    assert failure_mode(_traj("arl/Sokoban-v0", loop)) == "loop"
    wrong = [_step("search[x]", anchor="a"), _step("click[buy now]", anchor="b", term=True)]
    assert failure_mode(_traj("arl/WebShop-v0", wrong)) == "wrong final"
    slow = [_step("up", anchor="a"), _step("up", anchor="b", trunc=True)]
    assert failure_mode(_traj("arl/Sokoban-v0", slow)) == "out of steps"


def test_report_counts_transitions_with_start_and_end():
    a = _traj("arl/WebShop-v0", [_step("search[tea]", anchor="1"), _step("click[b0abc12345]", anchor="2"),
                                 _step("click[buy now]", anchor="3", term=True, won=True)])
    b = _traj("arl/WebShop-v0", [_step("search[tea]", anchor="1"), _step("click[buy now]", valid=False, anchor="1"),
                                 _step("search[tea]", anchor="1", trunc=True)])
    r = pattern_report([a, b])
    assert (r["episodes"], r["won"]) == (2, 1)
    assert r["transitions"]["won"] == {(START, "search"): 1, ("search", "product"): 1,
                                       ("product", "buy"): 1, ("buy", WON): 1}
    assert r["transitions"]["lost"] == {(START, "search"): 1, ("search", "invalid action"): 1,
                                        ("invalid action", "search"): 1, ("search", LOST): 1}
    assert r["action_types"]["lost"] == {"search": 2, "invalid action": 1}
    assert r["failure_modes"] == {"loop": 1}  # anchor "1" three times; 1 of 3 actions invalid


def test_patterns_command_prints_and_saves(tmp_path, capsys):
    path = tmp_path / "eps.jsonl"
    save_jsonl([_traj("arl/Sokoban-v0", [_step("up", anchor="a"), _step("left", anchor="b", term=True, won=True)]),
                _traj("arl/Sokoban-v0", [_step("up", anchor="a"), _step("up", anchor="a"),
                                         _step("up", anchor="a", trunc=True)])], path)
    assert main(["patterns", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 episodes, 1 won (50.0%)" in out and "failure modes: loop 1 (100%)" in out
    assert (tmp_path / "eps.patterns.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "eps.patterns.json").read_text())
    assert saved["transitions"]["lost"] == {"(start) -> up": 1, "up -> up": 2, "up -> (lost)": 1}
    assert main(["patterns", str(tmp_path / "missing.jsonl")]) == 2
