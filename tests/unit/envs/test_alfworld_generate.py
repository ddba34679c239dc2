"""Generated ALFWorld data on disk: planner-checked, and loaded by ALFWorld's OWN loader.

``arlgym alfworld generate`` writes games in ALFWorld's layout; here alfworld 0.4.2's
``AlfredTWEnv`` (the class its training and eval scripts use; TextWorld's ``PddlEnv`` inside,
unmodified) finds them and plays them to a win, offline, with a config dict built in the test.

Run: ``pytest tests/unit/envs/test_alfworld_generate.py`` (``-m "not slow"`` skips the games
played through ALFWorld's env).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arlgym.envs.alfworld.catalog import TASK_TYPES  # noqa: E402
from arlgym.envs.alfworld.cli import main  # noqa: E402
from arlgym.envs.alfworld.engine import AlfredGame, ReferenceGame  # noqa: E402
from arlgym.envs.alfworld.expert import play_plan  # noqa: E402
from arlgym.envs.alfworld.generator import generate_game  # noqa: E402

#: split -> ALFWorld's folder, and the ``train_eval`` name AlfredTWEnv takes for it
_SPLITS = {"train": "train", "eval_out_of_distribution": "valid_unseen"}
_PER_SPLIT = 6  # one game of each task type (types cycle with the game index)


def _index_of(task_type: str, split: str = "train") -> int:
    return next(i for i in range(12) if generate_game(split, i).task_type == task_type)


def _keep_one_instance(problem: str, obj: str) -> str:
    """``problem`` without all but one instance of object type ``obj`` (every fact about them)."""
    instances = sorted(line.split()[1] for line in problem.splitlines()
                       if line.startswith("(objectType ") and line.endswith(f" {obj}Type)"))
    drop = set(instances[1:])
    assert drop, "the test needs a problem with two or more instances"
    kept = [line for line in problem.splitlines()
            if not drop & set(line.replace("(", " ").replace(")", " ").split())]
    return "\n".join(kept) + "\n"


def _play_in_reference(game: dict[str, Any], commands: list[str]) -> bool:
    """Play ``commands`` in the unmodified TextWorld engine; whether the game is won."""
    ref = ReferenceGame()
    ref.load(game)
    ref.reset()
    for command in commands:
        assert command in ref.admissible_commands, command
        ref.step(command)
    return ref.won


def test_planner_check_accepts_a_solvable_game_and_rejects_an_unsolvable_one():
    """The planner's plan wins in the unmodified engine; one object can't make a pick-two."""
    game = generate_game("train", _index_of("pick_two_obj_and_place"))
    engine = AlfredGame()
    plan = play_plan(engine, game.game_json(), game.planning_problem())
    assert plan and _play_in_reference(game.game_json(), plan)

    game.pddl_problem = _keep_one_instance(game.pddl_problem, game.pddl_params["object_target"])
    assert play_plan(engine, game.game_json(), game.planning_problem()) is None
    engine.close()


def test_planning_problem_keeps_only_what_the_goal_needs():
    game = generate_game("train", _index_of("pick_cool_then_place_in_recep"))
    full, cut = game.pddl_problem, game.planning_problem()
    facts = [line.replace("(", " ").replace(")", " ").split() for line in cut.splitlines()]
    target, goal = game.pddl_params["object_target"], game.pddl_params["parent_target"]
    assert {f[2] for f in facts if f[:1] == ["objectType"]} == {f"{target}Type"}
    holders = {f[2] for f in facts if f[:1] == ["inReceptacle"]}
    goal_receptacles = {f[1] for f in facts if f[:1] == ["receptacleType"] and f[2] == f"{goal}Type"}
    openable = {f[1] for f in facts if f[:1] == ["openable"]}
    assert openable and openable <= holders | goal_receptacles
    assert full.count("(openable ") > len(openable)
    assert cut.split("(:goal", 1)[1] == full.split("(:goal", 1)[1]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six games (one per type) of train and of the OOD split, written by the CLI's defaults."""
    root = tmp_path_factory.mktemp("alfworld-data")
    for split in _SPLITS:
        assert main(["generate", "--split", split, "--num", str(_PER_SPLIT), "--out", str(root),
                     "--quiet"]) == 0
    return root


def _game_folders(root: Path, split: str) -> list[Path]:
    return sorted(p.parent for p in (root / "json_2.1.1" / _SPLITS[split]).rglob("game.tw-pddl"))


def test_generate_checks_every_game_with_the_planner_by_default(data_root: Path):
    """Each of the six types passes the planner check on its first draw, and says so on disk."""
    for split in _SPLITS:
        folders = _game_folders(data_root, split)
        assert len(folders) == _PER_SPLIT
        by_index = {}
        for folder in folders:
            traj = json.loads((folder / "traj_data.json").read_text())
            data = json.loads((folder / "game.tw-pddl").read_text())
            assert traj["generator"]["checks"] == ["expert", "planner"]
            assert data["solvable"] is True and data["walkthrough"]
            assert (folder / "initial_state.pddl").read_text() == data["pddl_problem"]
            by_index[int(traj["task_id"].rsplit("-", 1)[1])] = (traj, data)
        assert sorted(by_index) == list(range(_PER_SPLIT))
        assert {traj["task_type"] for traj, _ in by_index.values()} == set(TASK_TYPES)
        # No draw was rejected: the planner solved the first problem drawn for every slot.
        for index, (_, data) in by_index.items():
            assert data["pddl_problem"] == generate_game(split, index).pddl_problem


# ------------------------------------------------------------------ ALFWorld's own loader
def _alfworld_config(root: Path, training_method: str) -> dict[str, Any]:
    """The smallest config ``AlfredTWEnv`` reads (the keys of alfworld's base_config.yaml)."""
    split_dir = root / "json_2.1.1"
    return {
        "dataset": {"data_path": str(split_dir / "train"),
                    "eval_id_data_path": str(split_dir / "valid_seen"),
                    "eval_ood_data_path": str(split_dir / "valid_unseen"),
                    "num_train_games": -1, "num_eval_games": -1},
        "logic": {"domain": str(root / "logic" / "alfred.pddl"),
                  "grammar": str(root / "logic" / "alfred.twl2")},
        "env": {"type": "AlfredTWEnv", "goal_desc_human_anns_prob": 0.0,
                "task_types": [1, 2, 3, 4, 5, 6], "domain_randomization": False,
                "expert_type": "handcoded"},
        "general": {"training_method": training_method},
        "rl": {"training": {"max_nb_steps_per_episode": 50}},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }


def _alfworld_env(root: Path, split: str, training_method: str,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """ALFWorld's loader over ``root`` and the TextWorld gym env it makes (batch of one)."""
    monkeypatch.setenv("ALFWORLD_DATA", str(root))  # `import alfworld` creates this folder
    from alfworld.agents.environment import get_environment

    loader = get_environment("AlfredTWEnv")(_alfworld_config(root, training_method),
                                            train_eval=split)
    return loader, loader.init_env(batch_size=1)


@pytest.mark.slow
@pytest.mark.parametrize("split", list(_SPLITS))
def test_alfworld_own_loader_plays_generated_games_to_a_win(data_root, split, monkeypatch):
    """AlfredTWEnv collects every generated game; each walkthrough wins through its env."""
    loader, env = _alfworld_env(data_root, split, "dqn", monkeypatch)
    try:
        expected = {str(f / "game.tw-pddl") for f in _game_folders(data_root, split)}
        assert set(loader.game_files) == expected and loader.num_games == _PER_SPLIT
        played = set()
        for _ in range(loader.num_games):  # the env cycles through a shuffled game list
            obs, infos = env.reset()
            gamefile = infos["extra.gamefile"][0]
            played.add(gamefile)
            assert obs[0].startswith("-= Welcome to TextWorld, ALFRED! =-")
            walkthrough = json.loads(Path(gamefile).read_text())["walkthrough"]
            for command in walkthrough:
                assert command in infos["admissible_commands"][0], (gamefile, command)
                obs, _, dones, infos = env.step([command])
            assert infos["won"][0] and dones[0], gamefile
        assert played == expected
    finally:
        env.close()


@pytest.mark.slow
def test_alfworld_handcoded_expert_wins_generated_games(data_root, monkeypatch):
    """ALFWorld's own handcoded expert (DAgger training) wins our games of five types.

    ``pick_two_obj_and_place`` is left out for an upstream reason: in alfworld 0.4.2 the expert
    tracks a placed object only when the command contains "put", but the 0.4.2 grammar's command
    is "move X to Y", so after placing the first object it still believes it holds it and loops
    on "look" (with "move" rewritten to "put" it wins our pick-two games too).
    """
    loader, env = _alfworld_env(data_root, "train", "dagger", monkeypatch)
    try:
        results = {}
        for _ in range(loader.num_games):
            obs, infos = env.reset()
            gamefile = infos["extra.gamefile"][0]
            task_type = json.loads((Path(gamefile).parent / "traj_data.json").read_text())[
                "task_type"]
            if task_type == "pick_two_obj_and_place":
                continue
            dones = [False]
            for _ in range(50):
                obs, _, dones, infos = env.step([infos["extra.expert_plan"][0][0]])
                if dones[0]:
                    break
            results[task_type] = bool(infos["won"][0])
        assert results == {t: True for t in TASK_TYPES if t != "pick_two_obj_and_place"}
    finally:
        env.close()
