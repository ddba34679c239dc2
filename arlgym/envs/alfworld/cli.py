"""``arlgym alfworld generate``: write generated games in ALFWorld's on-disk layout.

``arlgym alfworld generate --split train --num 3500 --out DIR`` writes
``DIR/json_2.1.1/train/<type>-<obj>-None-<recep>-<scene>/trial_<id>/{traj_data.json,game.tw-pddl}``
and copies ``alfred.pddl``/``alfred.twl2`` to ``DIR/logic/``, so ``DIR`` can be used as
``$ALFWORLD_DATA`` by arlgym (``data_source="official"``) and by the official alfworld tools.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_subparser", "generate_split", "main"]


def generate_split(split: str, num: int, out: str | Path, *, seed: int = 0,
                   check: str = "expert", start: int = 0, progress: bool = True) -> list[Path]:
    """Generate ``num`` games of ``split`` into ``out`` (see the module docstring).

    ``check="expert"`` plays each game with the expert in the real engine and keeps only won
    draws (the walkthrough is written into ``game.tw-pddl``); ``check="planner"`` additionally
    requires Fast Downward to find a plan from the initial state (slower, ~1 s per game).
    """
    from arlgym.envs.alfworld.engine import AlfredGame
    from arlgym.envs.alfworld.expert import play_expert
    from arlgym.envs.alfworld.generator import (
        OFFICIAL_SPLIT_DIRS,
        domain_text,
        generate_game,
        grammar_template,
        write_game,
    )
    from arlgym.errors import ConfigError, UnsolvableError

    if check not in ("expert", "planner"):
        raise ConfigError(f"check must be 'expert' or 'planner', got {check!r}")
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
    for index in iterator:
        for attempt in range(8):
            game = generate_game(split, index, seed=seed, attempt=attempt)
            engine.load(game.game_json())
            walkthrough = play_expert(engine, game.task_type, game.pddl_params)
            if walkthrough is None:
                continue
            if check == "planner":
                engine.reset()
                if not engine.plan():
                    continue
            game.walkthrough = walkthrough
            written.append(write_game(game, split_dir / game.dirname))
            break
        else:
            raise UnsolvableError(f"no solvable draw for {split}[{index}]")
    return written


def _run_generate(args: argparse.Namespace) -> int:
    paths = generate_split(args.split, args.num, args.out, seed=args.seed, check=args.check,
                           start=args.start, progress=not args.quiet)
    print(f"wrote {len(paths)} {args.split} games under {Path(args.out) / 'json_2.1.1'}")
    return 0


def add_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``alfworld`` (with its ``generate`` subcommand) on ``subparsers``."""
    from arlgym.envs.alfworld.generator import DEFAULT_SPLIT_SIZES, SPLITS

    parser = subparsers.add_parser(
        "alfworld", help="ALFWorld tools (generate games offline)",
        description="ALFWorld tools. Games are generated from the THOR floor plans shipped "
                    "in the alfworld package; nothing is downloaded.")
    sub = parser.add_subparsers(dest="alfworld_command", required=True)
    gen = sub.add_parser(
        "generate", help="write generated games in ALFWorld's json_2.1.1 layout",
        description="Write generated ALFWorld games (traj_data.json + game.tw-pddl per game) "
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
    gen.add_argument("--check", choices=("expert", "planner"), default="expert",
                     help="solvability check: 'expert' plays each game to a win in the "
                          "engine; 'planner' also runs Fast Downward (slower). Default: expert.")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(func=lambda a: _run_generate(_with_default_num(a)))
    return parser


def _with_default_num(args: argparse.Namespace) -> argparse.Namespace:
    from arlgym.envs.alfworld.generator import DEFAULT_SPLIT_SIZES

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
