"""Generated ALFWorld games as ALFRED/ALFWorld make them: names, goal rules, splits, density.

Checks the generator against the facts it copies: ALFWorld's own ``Demangler`` names every sink
"sinkbasin N" (never "sinkbasinbasin"), ALFRED's goal exclusions (pick-two never into a coffee
machine, toilet-paper hanger or hand-towel holder; no toaster goals; task types by scene type),
ALFWorld's scene protocol (valid_unseen = FloorPlan 10/219/308/424 only), ALFRED's instance counts
and ALFWorld's ``domain_randomization``. The generated games are loaded and won in ALFWorld's own
``AlfredTWEnv`` in ``test_alfworld_floorplans.py``.

Run: ``pytest tests/unit/envs/test_alfworld_fidelity.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from types import SimpleNamespace

import gymnasium as gym
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

import arlgym  # noqa: E402,F401
from arlgym.envs.alfworld.catalog import (  # noqa: E402
    PICK_TWO_EXCLUDED_RECEPTACLES,
    TASK_TYPES,
    UNSEEN_SCENE_NUMBERS,
    floor_plans,
    tables,
)
from arlgym.envs.alfworld.generator import (  # noqa: E402
    SPLITS,
    generate_game,
    mangle,
    split_floor_plans,
)
from arlgym.errors import ConfigError, TaskNotFound  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ARLGYM_CACHE", str(tmp_path_factory.mktemp("arlgym-cache")))
    mp.delenv("ALFWORLD_DATA", raising=False)
    yield
    mp.undo()


def _games(split: str, n: int, task_type: str | None = None) -> list:
    idx = [i for i in range(n) if task_type is None or TASK_TYPES[i % 6] == task_type]
    return [generate_game(split, i) for i in idx]


def _object_counts(problem: str) -> Counter:
    return Counter(line.split()[2].rstrip(")").removesuffix("Type")
                   for line in problem.splitlines() if line.startswith("(objectType "))


# ------------------------------------------------------------------ names
def test_alfworld_demangler_names_every_receptacle_of_every_floor_plan():
    """ALFWorld's Demangler on each plan's (lower-cased, as Fast Downward gives) PDDL ids:
    "<type> <n>", numbered 1..count per type; sinks are "sinkbasin N" (not "sinkbasinbasin")."""
    from alfworld.agents.utils.misc import Demangler

    plans = floor_plans()
    assert len(plans) == 120
    for fp in plans.values():
        ids = [mangle(r.thor_id).lower() for r in fp.receptacles]
        infos = {i: SimpleNamespace(id=i) for i in ids}
        demangler = Demangler(game_infos=infos)
        names = [demangler.demangle_alfred_name(i) for i in ids]
        assert all(re.fullmatch(r"[a-z]+ \d+", n) for n in names), (fp.name, names)
        assert not any("basinbasin" in n for n in names), fp.name
        # The name is the id's first part, plus "basin" for basins ("Sink|..|SinkBasin"; THOR
        # also has a "Bathtub|..|SinkBasin", which ALFWorld calls "bathtubbasin").
        by_name = Counter(r.thor_id.split("|")[0].lower() + ("basin" if "Basin" in r.thor_id
                                                              else "") for r in fp.receptacles)
        assert Counter(n.split()[0] for n in names) == by_name, fp.name
        for n in names:
            assert 1 <= int(n.split()[1]) <= by_name[n.split()[0]]
    for name in ("FloorPlan418", "FloorPlan425", "FloorPlan429"):
        sinks = [r.thor_id for r in plans[name].receptacles if r.rtype == "SinkBasin"]
        assert len(sinks) == 1 and sinks[0].startswith("Sink|") and sinks[0].endswith("|SinkBasin")


# ------------------------------------------------------------------ goal rules
def test_goal_rules_follow_alfreds_generator():
    tab = tables()
    games = _games("train", 300) + _games("eval_out_of_distribution", 60)
    assert {g.task_type for g in games} == set(TASK_TYPES)
    for g in games:
        p = g.pddl_params
        fp = floor_plans()[g.floor_plan]
        assert fp.scene_type in tab.goals_valid[g.task_type], (g.task_id, fp.scene_type)
        assert p["parent_target"] != "Toaster"
        if g.task_type == "pick_two_obj_and_place":
            assert p["parent_target"] not in PICK_TWO_EXCLUDED_RECEPTACLES, g.task_id
    assert PICK_TWO_EXCLUDED_RECEPTACLES == {"CoffeeMachine", "ToiletPaperHanger",
                                             "HandTowelHolder"}


# ------------------------------------------------------------------ splits
def test_splits_follow_alfworlds_scene_protocol():
    unseen = {f"FloorPlan{n}" for n in (10, 219, 308, 424)}
    assert UNSEEN_SCENE_NUMBERS == {10, 219, 308, 424}
    assert set(split_floor_plans("eval_out_of_distribution")) == unseen
    for split in ("train", "eval_in_distribution"):
        plans = set(split_floor_plans(split))
        assert len(plans) == 116 and not plans & unseen
    ood = _games("eval_out_of_distribution", 134)
    assert {g.floor_plan for g in ood} == unseen
    assert {g.task_type for g in ood} == set(TASK_TYPES)
    assert not {g.floor_plan for g in _games("train", 300)} & unseen
    assert set(SPLITS) == {"train", "eval_in_distribution", "eval_out_of_distribution"}


# ------------------------------------------------------------------ density
def test_every_receptacle_instance_and_alfreds_object_counts():
    plans = floor_plans()
    fp10 = Counter(r.rtype for r in plans["FloorPlan10"].receptacles)
    assert fp10["StoveBurner"] == 4 and fp10["Shelf"] == 3 and fp10["CounterTop"] == 3
    for fp in plans.values():
        if fp.scene_type == "Kitchen":
            assert Counter(r.rtype for r in fp.receptacles)["StoveBurner"] == 4, fp.name
    tab = tables()
    for g in _games("train", 120) + _games("eval_out_of_distribution", 24):
        fp = plans[g.floor_plan]
        counts = _object_counts(g.pddl_problem)
        rtypes = fp.receptacle_types()
        target = g.pddl_params["object_target"]
        placeable = {t for t in fp.object_types
                     if any(t in tab.can_contain[r] for r in rtypes)}
        # every pickup type that has a home in this floor plan is placed ...
        assert placeable <= set(counts), (g.task_id, placeable - set(counts))
        for t, n in counts.items():
            if t in ("DeskLamp", "FloorLamp"):
                continue
            low = 2 if t == target and g.task_type == "pick_two_obj_and_place" else 1
            high = tab.pickup_repeat_max if t == target else tab.max_instances
            assert low <= n <= high, (g.task_id, t, n)  # ... in ALFRED's counts
        # and every receptacle instance of the floor plan is in the problem
        init = [line for line in g.pddl_problem.splitlines() if line.startswith("(receptacleType ")]
        assert len(init) == len(fp.receptacles)


# ------------------------------------------------------------------ domain randomization
def test_domain_randomization_shuffles_numbering_like_alfworld():
    from arlgym.envs.alfworld.engine import AlfredGame

    game = generate_game("train", 0)
    engine = AlfredGame()
    try:
        engine.load(game.game_json())
        engine.reset()
        plain = engine.entity_names()
        shuffled = []
        for seed in range(3):
            engine.reset(shuffle_seed=seed)
            shuffled.append(engine.entity_names())
        engine.reset(shuffle_seed=0)
        assert engine.entity_names() == shuffled[0]  # a seed names the same way every time
        for names in shuffled:
            assert sorted(names.values()) == sorted(plain.values())  # same names, permuted
        assert any(names != plain for names in shuffled)
        engine.reset()
        assert engine.entity_names() == plain  # and the default numbering is back
    finally:
        engine.close()


def test_domain_randomization_env_expert_still_wins():
    env = gym.make("arl/ALFWorld-v0", data_source="generated", domain_randomization=True,
                   task_types=["pick_and_place_simple"])
    try:
        _, info = env.reset(seed=4)
        for _ in range(50):
            _, _, term, trunc, info = env.step(env.unwrapped.expert_response())
            if term or trunc:
                break
        assert info["won"]
    finally:
        env.close()


def test_domain_randomization_leaves_eval_splits_numbered_as_generated():
    """ALFWorld shuffles the numbering of training games only: an eval episode of a randomising
    env reads exactly as the same episode of a plain env, whatever the reset seed, while a train
    episode's first observation changes with the seed."""
    kw = {"data_source": "generated", "task_types": ["pick_and_place_simple"]}
    rand = gym.make("arl/ALFWorld-v0", domain_randomization=True, **kw)
    plain = gym.make("arl/ALFWorld-v0", domain_randomization=False, **kw)
    try:
        for split in ("eval_in_distribution", "eval_out_of_distribution"):
            opts = {"split": split, "task_id": plain.unwrapped.list_tasks(split)[0]}
            reference = plain.reset(seed=0, options=opts)[1]["raw_observation"]
            for seed in (1, 2, 3):
                assert rand.reset(seed=seed, options=opts)[1]["raw_observation"] == reference
        opts = {"split": "train", "task_id": plain.unwrapped.list_tasks("train")[0]}
        train_obs = {rand.reset(seed=s, options=opts)[1]["raw_observation"] for s in range(6)}
        assert len(train_obs) > 1
    finally:
        rand.close()
        plain.close()


# ------------------------------------------------------------------ kwargs and data
@pytest.mark.parametrize(("kwargs", "names"), [
    ({"split_sizes": {"train": "many"}}, "split_sizes['train']"),
    ({"split_sizes": {"train": 0}}, "split_sizes['train']"),
    ({"split_sizes": [("train", 5)]}, "split_sizes"),
    ({"split_sizes": {"trian": 5}}, "split_sizes key"),
    ({"generator_seed": "x"}, "generator_seed"),
    ({"generator_seed": -1}, "generator_seed"),
    ({"generator_seed": 1.5}, "generator_seed"),
    ({"data_source": "offical"}, "data_source"),
    ({"split": "valid"}, "split"),
    ({"task_types": "pick_and_place_simple"}, "task_types"),
    ({"task_types": ["pick_and_place"]}, "task_types[0]"),
    ({"task_types": []}, "task_types"),
    ({"domain_randomization": "no"}, "domain_randomization"),
    ({"data_dir": 3}, "data_dir"),
])
def test_bad_kwargs_raise_config_error_naming_the_parameter(kwargs, names):
    with pytest.raises(ConfigError) as err:
        gym.make("arl/ALFWorld-v0", **kwargs)
    message = str(err.value)
    assert f"{names}=" in message or f"{names} " in message, message
    assert "Fix:" in message


def test_task_id_beyond_its_split_and_bad_options():
    env = gym.make("arl/ALFWorld-v0", data_source="generated", split_sizes={"train": 10})
    try:
        with pytest.raises(TaskNotFound, match="beyond split 'train', which has 10 games"):
            env.reset(options={"task_id": "gen-train-00010"})
        with pytest.raises(ConfigError, match=r"options\['split'\]"):
            env.reset(options={"split": "nope"})
        with pytest.raises(ConfigError, match=r"options\['task_id'\]"):
            env.reset(options={"task_id": {"id": 1}})
    finally:
        env.close()


def test_auto_source_says_when_alfworld_data_holds_no_games(tmp_path, monkeypatch):
    empty = tmp_path / "alfworld-data"
    (empty / "json_2.1.1" / "train").mkdir(parents=True)
    monkeypatch.setenv("ALFWORLD_DATA", str(empty))
    env = gym.make("arl/ALFWorld-v0")
    with pytest.warns(UserWarning, match=r"ALFWORLD_DATA=.* holds no ALFWorld games"):
        ids = env.unwrapped.list_tasks()
    assert ids[0] == "gen-train-00000"  # it did fall back, and said so
    env.close()
    env = gym.make("arl/ALFWorld-v0", data_dir=str(empty))
    with pytest.raises(ConfigError, match="data_dir=.*data_source='generated'"):
        env.unwrapped.list_tasks()
    env.close()
    monkeypatch.delenv("ALFWORLD_DATA")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing pointed at data: the quiet fallback stays
        env = gym.make("arl/ALFWorld-v0", split="eval_out_of_distribution")
        assert len(env.unwrapped.list_tasks()) == 134
        env.close()
