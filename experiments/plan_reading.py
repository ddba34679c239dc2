"""The plans a Sokoban policy writes, read against the optimal solver, and what following them wins.

Behind docs/main_job.md ("What RL can gain here: the plan-following ceiling"). A turn of the
main job's policies reads ``<think>plan: down left up</think><action>down</action>``; two
readings tell what RL can still gain from such a policy:

* **plan quality**, from any eval's episodes: on each turn whose room is still solvable, does
  the first move of the written plan start an optimal solution (the solver's distance to the
  goal falls by one)? And the move made? Read over every such turn, and over the episodes'
  first turns alone — the same start states for every policy on the same test rooms, so a
  change there is a change of the plan, not of which states the policy happens to visit.
* **the plan-following ceiling**: the model played under the table's eval protocol with its
  move replaced by the first move of the plan it wrote (:class:`FollowPlan`), paired room by
  room against the quickstart's SFT eval — what ending every slip would give with the plans
  as they are, the most an RL run that only removes slips can gain.

    arlgym quickstart --seed 2 --out runs/qs/s2
    python experiments/plan_reading.py --from runs/qs/s2
    python experiments/plan_reading.py --from runs/qs/s2 --model runs/qs/s2/arena/sampo/seed-2/final

``<out>/plan_reading.json`` (default ``<from>/plan_reading``) holds the numbers; the
ceiling's episodes are kept beside it, so a rerun reads them back.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

MOVES = ("up", "down", "left", "right")
PLAN_AND_MOVE = re.compile(r"<think>plan: ([a-z ]+)</think><action>(\w+)</action>")
PLAN_HEAD = re.compile(r"<think>plan: (up|down|left|right)\b")
#: the text grid's symbols (arlgym.envs.sokoban.room) in XSB, the solver's input format
TEXT_TO_XSB = {"#": "#", "_": " ", "O": ".", "X": "$", "√": "*", "P": "@", "S": "+"}
GRID_START, GRID_END = "Your current observation is:\n", "\nYour admissible"


def room_from_prompt(prompt: str):
    """The room the Sokoban text prompt shows (its current grid), as a solver ``Room``."""
    from arlgym.envs.sokoban.room import parse_xsb

    if GRID_START not in prompt:
        raise ValueError("no Sokoban grid in the prompt (expected 'Your current observation is:')")
    block = prompt.rsplit(GRID_START, 1)[1].split(GRID_END, 1)[0]
    return parse_xsb("\n".join("".join(TEXT_TO_XSB.get(c, c) for c in row) for row in block.splitlines()))


@cache
def _distance(xsb: str) -> int | None:
    from arlgym.envs.sokoban.room import parse_xsb
    from arlgym.envs.sokoban.solver import solve

    solution = solve(parse_xsb(xsb), max_nodes=200_000)
    return None if solution is None else len(solution)


def optimal_moves(room) -> frozenset[str]:
    """The moves that start an optimal solution of ``room`` (empty when it is unsolvable)."""
    here = _distance(room.to_xsb())
    if here is None or here == 0:
        return frozenset()
    return frozenset(m for m in MOVES if _distance(room.move(m)[0].to_xsb()) == here - 1)


def plan_quality(path: Path) -> dict[str, float]:
    """Shares of solvable turns whose plan's first move, and whose move made, is optimal
    (``plan_optimal``, ``move_optimal``), the plan's over first turns alone
    (``first_plan_optimal``), and the slip share (the move is not the plan's first)."""
    counts = dict.fromkeys(("turns", "plan", "move", "slip", "first", "first_plan", "unsolvable"), 0)
    for line in Path(path).read_text().splitlines():
        for step in json.loads(line)["steps"]:
            found = PLAN_AND_MOVE.search(step.get("response") or "")
            if not found:
                continue
            room = room_from_prompt(step["prompt"])
            best = optimal_moves(room)
            if not best:
                counts["unsolvable"] += 1
                continue
            plan_head, move = found.group(1).split()[0], found.group(2)
            counts["turns"] += 1
            counts["plan"] += plan_head in best
            counts["move"] += move in best
            counts["slip"] += plan_head != move
            if step["step"] == 0:
                counts["first"] += 1
                counts["first_plan"] += plan_head in best
    share = lambda k, n: counts[k] / counts[n] if counts[n] else float("nan")  # noqa: E731
    return {"turns": counts["turns"], "unsolvable_turns": counts["unsolvable"],
            "plan_optimal": share("plan", "turns"), "move_optimal": share("move", "turns"),
            "slip_share": share("slip", "turns"), "first_turns": counts["first"],
            "first_plan_optimal": share("first_plan", "first")}


class FollowPlan:
    """A policy whose move is the first move of the plan it wrote (the reply otherwise kept):
    the policy with every slip removed. Replies without a plan pass through unchanged."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = f"follow-plan:{getattr(inner, 'name', type(inner).__name__)}"

    def generate(self, prompts, sampling=None, **kwargs):
        from arlgym.policies.base import Completion

        out = []
        for c in self.inner.generate(prompts, sampling, **kwargs):
            head, start, end = PLAN_HEAD.search(c.text), c.text.rfind("<action>"), c.text.rfind("</action>")
            if head is None or start < 0 or end < start:
                out.append(c)
                continue
            # the text changed, so the sampled ids and log-probs no longer describe it
            out.append(Completion(f"{c.text[:start]}<action>{head.group(1)}{c.text[end:]}"))
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--from", dest="start", required=True, help="a finished quickstart's --out")
    p.add_argument("--model", default=None, help="the model whose ceiling is played (default: <from>/sft)")
    p.add_argument("--out", default=None, help="where the reading goes (default: <from>/plan_reading)")
    args = p.parse_args(argv)

    from arlgym.errors import ConfigError
    from arlgym.evaluation.decodings import paired_on_tasks, success_by_task
    from arlgym.policies import make_policy
    from arlgym.quickstart import protocol_eval, recipe_config
    from arlgym.rollout import load_jsonl

    start = Path(args.start)
    if not (start / "recipe.json").exists() or not (start / "eval_sft.jsonl").exists():
        raise ConfigError(f"--from {start}: not a finished quickstart (needs recipe.json and "
                          "eval_sft.jsonl). Fix: run `arlgym quickstart --out DIR` first")
    model = Path(args.model) if args.model else start / "sft"
    if not (model / "config.json").exists():
        raise ConfigError(f"--model {model}: no model there (config.json missing). Fix: a "
                          "checkpoint folder such as <from>/sft or <from>/arena/sampo/seed-0/final")
    out = Path(args.out) if args.out else start / "plan_reading"
    out.mkdir(parents=True, exist_ok=True)
    cfg = recipe_config(start)

    import torch

    torch.set_num_threads(1)
    tag = "sft" if model == start / "sft" else re.sub(r"\W+", "-", str(model.relative_to(start)
                                                                      if model.is_relative_to(start) else model))
    ceiling_path = out / f"follow_{tag}.jsonl"
    if not ceiling_path.exists():
        protocol_eval(cfg, FollowPlan(make_policy(f"hf:{model}")), ceiling_path)
    sft_rooms = success_by_task(load_jsonl(start / "eval_sft.jsonl"))
    follow_rooms = success_by_task(load_jsonl(ceiling_path))
    reading = {"model": str(model),
               "ceiling": {"success": sum(follow_rooms.values()) / len(follow_rooms),
                           "vs_sft": paired_on_tasks(sft_rooms, follow_rooms)},
               "quality": {"sft": plan_quality(start / "eval_sft.jsonl"),
                           "follow": plan_quality(ceiling_path)}}
    for last in sorted(start.glob("arena/*/seed-*/eval/test-last.jsonl")):
        reading["quality"][str(last.parent.parent.relative_to(start / "arena"))] = plan_quality(last)
    (out / "plan_reading.json").write_text(json.dumps(reading, indent=2))

    e = reading["ceiling"]["vs_sft"]
    print(f"plan-following ceiling of {model}: {reading['ceiling']['success']:.1%}, vs the SFT "
          f"{e['difference']:+.1%} ± {e['se']:.1%} (z {e['z']:+.2f}, {e['rooms']} rooms)")
    print(f"{'episodes':<20} {'slips':>6} {'plan opt':>9} {'move opt':>9} {'1st plan opt':>13}")
    for name, q in reading["quality"].items():
        print(f"{name:<20} {q['slip_share']:>6.1%} {q['plan_optimal']:>9.1%} {q['move_optimal']:>9.1%} "
              f"{q['first_plan_optimal']:>13.1%}")
    return 0


if __name__ == "__main__":
    from arlgym.errors import ArlgymError

    try:
        sys.exit(main())
    except ArlgymError as exc:
        print(f"plan_reading.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
