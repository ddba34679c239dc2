"""make_group_vec: group semantics, per-group task ids, partial stepping, async == sync."""

import pytest

from arlgym import make_group_vec
from arlgym.errors import ConfigError

OK = "<think>t</think><action>{}</action>"


def _play(vec, moves):
    obs, infos = vec.reset()
    trace = [(tuple(obs), tuple(i["anchor"] for i in infos))]
    for move in moves:
        actions = [OK.format(move) if k % 2 == 0 else OK.format("left") for k in range(vec.num_envs)]
        obs, rew, term, trunc, infos = vec.step(actions)
        trace.append((tuple(obs), tuple(rew), tuple(term), tuple(trunc),
                      tuple(i["anchor"] for i in infos)))
    return trace


def test_groups_share_task_and_first_anchor():
    vec = make_group_vec("arl/Sokoban-v0", num_tasks=3, group_size=4, seed=11)
    _, infos = vec.reset()
    for g in range(3):
        members = infos[g * 4:(g + 1) * 4]
        assert len({m["task_id"] for m in members}) == 1
        assert len({m["anchor"] for m in members}) == 1
    assert len({infos[g * 4]["task_id"] for g in range(3)}) == 3
    # the next reset continues with fresh tasks
    _, infos2 = vec.reset()
    assert not {i["task_id"] for i in infos} & {i["task_id"] for i in infos2}
    vec.close()


def test_task_ids_per_group_and_skipping():
    vec = make_group_vec("arl/Sokoban-v0", num_tasks=2, group_size=2, seed=0)
    ids = ["6x6-1b-5", "6x6-1b-9"]
    _, infos = vec.reset(task_ids=ids)
    assert [i["task_id"] for i in infos] == [ids[0], ids[0], ids[1], ids[1]]
    obs, rew, term, trunc, step_infos = vec.step([OK.format("up"), None, None, OK.format("down")])
    assert obs[1] is None and step_infos[1] is None and step_infos[2] is None
    assert step_infos[0]["step"] == 1 and step_infos[3]["step"] == 1
    with pytest.raises(ConfigError):
        vec.reset(task_ids=["only-one"])
    with pytest.raises(ConfigError):
        vec.step([None])


def test_async_matches_sync():
    moves = ["up", "left", "down", "right", "up", "up"]
    sync = make_group_vec("arl/Sokoban-v0", num_tasks=3, group_size=2, seed=4, mode="sync")
    asyn = make_group_vec("arl/Sokoban-v0", num_tasks=3, group_size=2, seed=4, mode="async",
                          num_workers=2)
    try:
        assert _play(sync, moves) == _play(asyn, moves)
        assert sync.call("to_xsb") == asyn.call("to_xsb")
        assert asyn.handles()[3].unwrapped.expert_response() == sync.envs[3].unwrapped.expert_response()
    finally:
        asyn.close()


def test_bad_arguments():
    with pytest.raises(ConfigError, match="unknown env id"):
        make_group_vec("arl/Nope-v0", 1, 1)
    with pytest.raises(ConfigError, match="group_size"):
        make_group_vec("arl/Sokoban-v0", 1, 0)
    with pytest.raises(ConfigError, match="mode"):
        make_group_vec("arl/Sokoban-v0", 1, 1, mode="threads")
