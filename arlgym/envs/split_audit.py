"""How many held-out tasks also occur in training, by content rather than by id.

Ids of different splits never collide by construction (seed ranges, enumerated lists); what a
reviewer asks is whether the *same task* — the same game layout, the same shopping request,
the same math question — can be drawn under a training id. Each env defines a content key, and
this module counts the held-out items whose key a train item has::

    python -m arlgym.envs.split_audit            # every env, default settings
    python -m arlgym.envs.split_audit --env tir --tir-train-seeds 100000

A non-zero ``same`` column is a leak. ``near`` counts a coarser match that is reported, not
excluded, where an env's protocol shares it on purpose (ALFWorld's seen-scene split).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from arlgym.envs.alfworld.generator import DEFAULT_SPLIT_SIZES, generate_game
from arlgym.envs.sokoban.env import SokobanEnv
from arlgym.envs.sokoban.env import room_content_key as key
from arlgym.envs.tir_math.problems import (
    SPLIT_SEED_RANGES,
    content_split,
    generate_problem,
    panel_seeds,
    problem_content_key,
)
from arlgym.envs.webshop.env import load_shop
from arlgym.envs.webshop.splits import HeldOutGoals, goal_content_key, split_range

__all__ = ["SplitOverlap", "count_overlap", "audit_alfworld", "audit_webshop", "audit_tir",
           "audit_sokoban", "format_table", "main"]


@dataclass(frozen=True)
class SplitOverlap:
    """One held-out split measured against its env's train split."""

    env: str
    held_out: str
    #: held-out items measured, and how many distinct content keys they have
    items: int
    distinct: int
    #: train items measured, and what part of the train split that is
    train_items: int
    train_scope: str
    #: held-out items whose content key some train item has (must be 0)
    same: int
    #: held-out items matched by the coarser ``near_rule`` (``None``: not measured)
    near: int | None = None
    near_rule: str = ""


def count_overlap(held_out_keys: Sequence[str], train_keys: Iterable[str]) -> int:
    """Held-out items (with repeats) whose key is among ``train_keys``."""
    train = set(train_keys)
    return sum(key in train for key in held_out_keys)


def _row(env: str, split: str, held: Sequence[str], train: Sequence[str], scope: str,
         near: int | None = None, near_rule: str = "") -> SplitOverlap:
    return SplitOverlap(env, split, len(held), len(set(held)), len(train), scope,
                        count_overlap(held, train), near, near_rule)


# ------------------------------------------------------------------------------------ envs
def audit_alfworld(seed: int = 0) -> list[SplitOverlap]:
    """Generated ALFWorld at ALFWorld's sizes: every game of every split (first draw of each
    slot; a slot whose draw the expert cannot win is redrawn, again at random)."""
    def games(split: str) -> list:
        return [generate_game(split, i, seed=seed) for i in range(DEFAULT_SPLIT_SIZES[split])]

    def goal(g) -> str:
        p = g.pddl_params
        return "|".join((g.task_type, g.floor_plan, p["object_target"], p["parent_target"],
                         p["toggle_target"]))

    train = games("train")
    rows = []
    for split in ("eval_in_distribution", "eval_out_of_distribution"):
        held = games(split)
        rows.append(_row("alfworld", split, [g.content_key for g in held],
                         [g.content_key for g in train], "whole split",
                         count_overlap([goal(g) for g in held], [goal(g) for g in train]),
                         "same scene, task type and goal objects"))
    return rows


def audit_webshop(num_products: int = 1000, catalog_seed: int = 0) -> list[SplitOverlap]:
    """The synthetic catalog: every test and val goal against every goal train may draw."""
    catalog, _ = load_shop(None, num_products, catalog_seed)
    goals = catalog.goals
    train = [goals[j] for j in HeldOutGoals.of(catalog).train_indices(catalog)]
    rows = []
    for split in ("test", "val"):
        held = [goals[j] for j in range(*split_range(split, len(goals)))]
        rows.append(_row("webshop", split, [goal_content_key(g) for g in held],
                         [goal_content_key(g) for g in train], "whole split",
                         count_overlap([g.asin for g in held], [g.asin for g in train]),
                         "same target product, other options"))
    return rows


def audit_tir(train_seeds: int = 20_000, panel: int = 500) -> list[SplitOverlap]:
    """Generated problems: each held-out panel (``list_tasks``' first ``panel`` seeds) against
    the first ``train_seeds`` train seeds. The train split has 2**30 seeds; that no seed of it
    reaches a held-out question follows from :func:`~arlgym.envs.tir_math.problems.content_split`,
    which the ``near`` column checks: held-out items whose key the train split owns."""
    def keys(seeds: Iterable[int]) -> list[str]:
        return [problem_content_key(p.question, p.family) for p in map(generate_problem, seeds)]

    low = SPLIT_SEED_RANGES["train"][0]
    train = keys(range(low, low + train_seeds))
    rows = []
    for split in ("test", "val"):
        held = keys(panel_seeds(split, panel))
        owned = sum(content_split(k) == "train" for k in held)
        rows.append(_row("tir_math", split, held, train, f"first {train_seeds:,} of 2^30 seeds",
                         owned, "key owned by train: reachable from the whole split"))
    return rows


def audit_sokoban(dim_room: int = 7, num_boxes: int = 1, train_rooms: int = 3000,
                  panel: int = 200) -> list[SplitOverlap]:
    """Sokoban rooms: each held-out panel against ``train_rooms`` training draws, by puzzle
    (:func:`arlgym.envs.sokoban.env.room_content_key`)."""
    env = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes)
    train = []
    for k in range(train_rooms):
        env.reset(seed=k, options={"split": "train"})
        train.append(key(env.room))
    rows = []
    for split in ("test", "val"):
        held = []
        for task_id in env.list_tasks(split, limit=panel):
            env.reset(options={"task_id": task_id})
            held.append(key(env.room))
        rows.append(_row("sokoban", split, held, train, f"{train_rooms:,} training draws"))
    env.close()
    return rows


# ------------------------------------------------------------------------------------ report
def format_table(rows: Sequence[SplitOverlap]) -> str:
    """A markdown table, one line per held-out split."""
    lines = ["| env | held-out split | items (distinct) | train items measured | same content "
             "| near (rule) |", "|---|---|---|---|---|---|"]
    for r in rows:
        near = "—" if r.near is None else f"{r.near} ({r.near_rule})"
        lines.append(f"| {r.env} | {r.held_out} | {r.items} ({r.distinct}) | {r.train_items:,} "
                     f"({r.train_scope}) | **{r.same}** | {near} |")
    return "\n".join(lines)


_AUDITS = ("alfworld", "webshop", "tir", "sokoban")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the overlap table; exit status 1 when any held-out item's content is in train."""
    parser = argparse.ArgumentParser(prog="python -m arlgym.envs.split_audit",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", nargs="+", choices=_AUDITS, default=list(_AUDITS),
                        help="envs to audit (default: all)")
    parser.add_argument("--webshop-products", type=int, default=1000,
                        help="synthetic WebShop catalog size (default 1000, the env's default)")
    parser.add_argument("--tir-train-seeds", type=int, default=20_000,
                        help="train seeds of TIR Math to compare against (default 20,000)")
    parser.add_argument("--sokoban-dim", type=int, default=7, help="Sokoban room size (default 7)")
    args = parser.parse_args(argv)
    rows: list[SplitOverlap] = []
    if "alfworld" in args.env:
        rows += audit_alfworld()
    if "webshop" in args.env:
        rows += audit_webshop(args.webshop_products)
    if "tir" in args.env:
        rows += audit_tir(args.tir_train_seeds)
    if "sokoban" in args.env:
        rows += audit_sokoban(args.sokoban_dim)
    print(format_table(rows))
    return 1 if any(r.same for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
