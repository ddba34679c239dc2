"""Play generated games in ALFWorld's own ``AlfredTWEnv`` (the official loader and engine).

Used by ``tests/unit/envs/test_alfworld_floorplans.py`` (a few floor plans in CI) and
``bench/alfworld_floorplans.py`` (all 120). Two checks:

* :func:`replay_walkthroughs`: ``AlfredTWEnv`` (TextWorld's unmodified ``PddlEnv`` inside) finds
  every game of a data folder, and each stored walkthrough wins there;
* :func:`run_handcoded_expert`: ALFWorld's handcoded expert (its DAgger expert) plays each game.

:func:`write_floor_plan_games` writes one checked game per floor plan in ALFWorld's layout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from arlgym.envs.alfworld.cli import CHECKS, _passes_checks
from arlgym.envs.alfworld.engine import AlfredGame
from arlgym.envs.alfworld.generator import (
    domain_text,
    generate_in_floor_plan,
    grammar_template,
    write_game,
)
from arlgym.errors import UnsolvableError

__all__ = ["alfworld_config", "write_floor_plan_games", "replay_walkthroughs",
           "run_handcoded_expert"]


def alfworld_config(root: str | Path, training_method: str = "dqn") -> dict[str, Any]:
    """The smallest config ``AlfredTWEnv`` reads (the keys of alfworld's base_config.yaml)."""
    split_dir = Path(root) / "json_2.1.1"
    return {
        "dataset": {"data_path": str(split_dir / "train"),
                    "eval_id_data_path": str(split_dir / "valid_seen"),
                    "eval_ood_data_path": str(split_dir / "valid_unseen"),
                    "num_train_games": -1, "num_eval_games": -1},
        "logic": {"domain": str(Path(root) / "logic" / "alfred.pddl"),
                  "grammar": str(Path(root) / "logic" / "alfred.twl2")},
        "env": {"type": "AlfredTWEnv", "goal_desc_human_anns_prob": 0.0,
                "task_types": [1, 2, 3, 4, 5, 6], "domain_randomization": False,
                "expert_type": "handcoded"},
        "general": {"training_method": training_method},
        "rl": {"training": {"max_nb_steps_per_episode": 50}},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }


def write_floor_plan_games(out: str | Path, floor_plans: Iterable[str], *, seed: int = 0,
                           check: str = "expert") -> list[Path]:
    """One checked game per floor plan, all under ``out/json_2.1.1/train`` (ALFWorld's layout).

    Each game is drawn by :func:`.generator.generate_in_floor_plan` and must pass ``check``
    (see :data:`.cli.CHECKS`) in our engine before it is written; a draw that fails is replaced
    by the next one. Also writes ``out/logic/alfred.{pddl,twl2}``.
    """
    out = Path(out)
    (out / "logic").mkdir(parents=True, exist_ok=True)
    (out / "logic" / "alfred.pddl").write_text(domain_text())
    (out / "logic" / "alfred.twl2").write_text(grammar_template())
    engine = AlfredGame()
    written = []
    try:
        for name in floor_plans:
            for attempt in range(8):
                game = generate_in_floor_plan(name, seed=seed, attempt=attempt)
                if _passes_checks(engine, game, CHECKS[check]):
                    written.append(write_game(game, out / "json_2.1.1" / "train" / game.dirname))
                    break
            else:
                raise UnsolvableError(f"no solvable draw in {name}")
    finally:
        engine.close()
    return written


def _alfworld_env(root: Path, training_method: str) -> tuple[Any, Any]:
    os.environ["ALFWORLD_DATA"] = str(root)  # `import alfworld` wants a data folder
    from alfworld.agents.environment import get_environment

    loader = get_environment("AlfredTWEnv")(alfworld_config(root, training_method),
                                            train_eval="train")
    return loader, loader.init_env(batch_size=1)


def replay_walkthroughs(root: str | Path,
                        on_result: Callable[[str, bool], None] | None = None) -> dict[str, bool]:
    """Game file -> whether its stored walkthrough won in ``AlfredTWEnv`` (``on_result`` is
    called after each game).

    Every command must be in ``AlfredTWEnv``'s admissible list before it is sent; a game whose
    command is not is recorded as lost. ``AlfredTWEnv`` must find exactly the games on disk
    (checked by the caller through the returned keys).
    """
    root = Path(root)
    loader, env = _alfworld_env(root, "dqn")
    results: dict[str, bool] = {}
    try:
        for _ in range(loader.num_games):  # the env cycles through a shuffled game list
            obs, infos = env.reset()
            gamefile = infos["extra.gamefile"][0]
            if not obs[0].startswith("-= Welcome to TextWorld, ALFRED! =-"):
                results[gamefile] = False
                if on_result is not None:
                    on_result(gamefile, False)
                continue
            walkthrough = json.loads(Path(gamefile).read_text())["walkthrough"]
            ok = True
            for command in walkthrough:
                if command not in infos["admissible_commands"][0]:
                    ok = False
                    break
                obs, _, dones, infos = env.step([command])
            results[gamefile] = ok and bool(infos["won"][0])
            if on_result is not None:
                on_result(gamefile, results[gamefile])
    finally:
        env.close()
    return results


def run_handcoded_expert(root: str | Path, max_steps: int = 50) -> dict[str, tuple[str, bool]]:
    """Game file -> (task type, won) for ALFWorld's handcoded expert (``training_method:
    dagger``), following ``infos["extra.expert_plan"]`` for up to ``max_steps`` steps."""
    root = Path(root)
    loader, env = _alfworld_env(root, "dagger")
    results: dict[str, tuple[str, bool]] = {}
    try:
        for _ in range(loader.num_games):
            obs, infos = env.reset()
            gamefile = infos["extra.gamefile"][0]
            task_type = json.loads((Path(gamefile).parent / "traj_data.json").read_text())[
                "task_type"]
            won = False
            for _ in range(max_steps):
                obs, _, dones, infos = env.step([infos["extra.expert_plan"][0][0]])
                won = bool(infos["won"][0])
                if dones[0]:
                    break
            results[gamefile] = (task_type, won)
    finally:
        env.close()
    return results
