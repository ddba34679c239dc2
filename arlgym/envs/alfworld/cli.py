"""``arlgym alfworld generate``: write generated games in ALFWorld's on-disk layout.

``arlgym alfworld generate --split train --num 3500 --out DIR`` writes
``DIR/json_2.1.1/train/<type>-<obj>-None-<recep>-<scene>/trial_<id>/`` with
``traj_data.json``, ``initial_state.pddl`` and ``game.tw-pddl``, and copies
``alfred.pddl``/``alfred.twl2`` to ``DIR/logic/``, so ``DIR`` can be used as ``$ALFWORLD_DATA``
by arlgym (``data_source="official"``) and by the official alfworld tools (``AlfredTWEnv``
loads and plays these games; see ``tests/unit/envs/test_alfworld_generate.py``).

Every game is checked solvable before it is written; by default by both our expert and the
Fast Downward planner (``--check planner``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from arlgym.envs.alfworld.engine import AlfredGame
from arlgym.envs.alfworld.expert import play_expert, play_plan
from arlgym.envs.alfworld.generator import (
    DEFAULT_SPLIT_SIZES,
    OFFICIAL_SPLIT_DIRS,
    SPLITS,
    domain_text,
    generate_game,
    grammar_template,
    write_game,
)
from arlgym.errors import ConfigError, UnsolvableError

if TYPE_CHECKING:
    from arlgym.envs.alfworld.engine import AlfredGame
    from arlgym.envs.alfworld.generator import GeneratedGame

__all__ = ["CHECKS", "add_subparser", "generate_split", "main"]


#: What ``--check`` runs on each draw before it is written, in order.
CHECKS = {"expert": ("expert",), "planner": ("expert", "planner")}


def generate_split(split: str, num: int, out: str | Path, *, seed: int = 0,
                   check: str = "planner", start: int = 0, progress: bool = True) -> list[Path]:
    """Generate ``num`` games of ``split`` into ``out`` (see the module docstring).

    Every written game is solvable, and ``traj_data.json`` records how it was checked
    (``generator.checks``). ``check="expert"`` plays the expert to a win in the engine (its
    commands become the ``walkthrough``). ``check="planner"`` (default) also requires Fast
    Downward to find a plan from the initial state that wins when played in the full game
    (:func:`.expert.play_plan`, ~0.3 s per game): data written for other tools should not rest
    on our expert alone. A draw that fails is replaced by the next draw for the same slot.
    """
    if check not in CHECKS:
        raise ConfigError(f"check must be one of {sorted(CHECKS)}, got {check!r}")
    out = Path(out)
    logic = out / "logic"
    logic.mkdir(parents=True, exist_ok=True)
    (logic / "alfred.pddl").write_text(domain_text())
    (logic / "alfred.twl2").write_text(grammar_template())
    split_dir = out / "json_2.1.1" / OFFICIAL_SPLIT_DIRS[split]
    engine = AlfredGame()
    indices = range(start, start + num)
    try:
        from tqdm import tqdm

        iterator = tqdm(indices, desc=f"alfworld {split}", disable=not progress)
    except ImportError:  # pragma: no cover
        iterator = indices
    written: list[Path] = []
    try:
        for index in iterator:
            for attempt in range(8):
                game = generate_game(split, index, seed=seed, attempt=attempt)
                if _passes_checks(engine, game, CHECKS[check]):
                    written.append(write_game(game, split_dir / game.dirname))
                    break
            else:
                raise UnsolvableError(f"no solvable draw for {split}[{index}]")
    finally:
        engine.close()
    return written


def _passes_checks(engine: AlfredGame, game: GeneratedGame, checks: tuple[str, ...]) -> bool:
    """Run ``checks`` on ``game`` in ``engine``; on success, fill its walkthrough and checks."""
    engine.load(game.game_json())
    walkthrough = play_expert(engine, game.task_type, game.pddl_params)
    if walkthrough is None:
        return False
    if "planner" in checks and play_plan(engine, game.game_json(),
                                         game.planning_problem()) is None:
        return False
    game.walkthrough = walkthrough
    game.checks = checks
    return True


def _run_generate(args: argparse.Namespace) -> int:
    paths = generate_split(args.split, args.num, args.out, seed=args.seed, check=args.check,
                           start=args.start, progress=not args.quiet)
    print(f"wrote {len(paths)} {args.split} games under {Path(args.out) / 'json_2.1.1'}")
    return 0


def add_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``alfworld`` (with its ``generate`` subcommand) on ``subparsers``."""
    parser = subparsers.add_parser(
        "alfworld", help="ALFWorld tools (generate games offline)",
        description="ALFWorld tools. Games are generated from the THOR floor plans shipped "
                    "in the alfworld package; nothing is downloaded.")
    sub = parser.add_subparsers(dest="alfworld_command", required=True)
    gen = sub.add_parser(
        "generate", help="write generated games in ALFWorld's json_2.1.1 layout",
        description="Write generated ALFWorld games (traj_data.json, initial_state.pddl and "
                    "game.tw-pddl per game) "
                    "to OUT/json_2.1.1/<train|valid_seen|valid_unseen>/, usable as "
                    "$ALFWORLD_DATA. Game i of a split is the same for every run with the "
                    "same --seed.")
    gen.add_argument("--split", choices=SPLITS, default="train",
                     help="train, eval_in_distribution (held-out problems, seen floor plans) "
                          "or eval_out_of_distribution (unseen floor plans). Default: train.")
    gen.add_argument("--num", type=int, default=None,
                     help="number of games (default: ALFWorld's size, "
                          f"{DEFAULT_SPLIT_SIZES})")
    gen.add_argument("--out", required=True, help="output data root (becomes $ALFWORLD_DATA)")
    gen.add_argument("--seed", type=int, default=0, help="generator base seed. Default: 0.")
    gen.add_argument("--start", type=int, default=0,
                     help="first game index (to generate a split in chunks). Default: 0.")
    gen.add_argument("--check", choices=sorted(CHECKS), default="planner",
                     help="solvability check of every game: 'expert' plays our expert to a win "
                          "in the engine; 'planner' also needs a Fast Downward plan from the "
                          "start that wins when played (~0.3 s per game). Default: planner.")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(func=lambda a: _run_generate(_with_default_num(a)))
    return parser


def _with_default_num(args: argparse.Namespace) -> argparse.Namespace:
    if args.num is None:
        args.num = DEFAULT_SPLIT_SIZES[args.split]
    return args


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m arlgym.envs.alfworld.cli generate ...``)."""
    parser = argparse.ArgumentParser(prog="arlgym")
    add_subparser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["alfworld", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
