"""Generated games of all 120 floor plans in ALFWorld's own AlfredTWEnv (and its handcoded expert).

Writes one checked game per floor plan (ALFWorld's layout) to a temporary folder, lets alfworld
0.4.2's ``AlfredTWEnv`` load them all and replays each stored walkthrough, then (``--expert``)
lets ALFWorld's handcoded expert play every game. Prints counts per scene type and task type.

    python bench/alfworld_floorplans.py [--plans FloorPlan1,FloorPlan10] [--expert]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", default="all", help="'all' or a comma list of floor plans")
    parser.add_argument("--expert", action="store_true",
                        help="also run ALFWorld's handcoded expert on every game")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=None,
                        help="reuse a folder written by an earlier run (skip generation)")
    parser.add_argument("--out", default=None, help="write the games here and keep them")
    args = parser.parse_args()

    from arlgym.envs.alfworld.catalog import floor_plans
    from arlgym.envs.alfworld.official_check import (
        replay_walkthroughs,
        run_handcoded_expert,
        write_floor_plan_games,
    )

    plans = sorted(floor_plans()) if args.plans == "all" else args.plans.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.data or args.out or tmp
        t0 = time.perf_counter()
        if args.data:
            folders = sorted(p.parent for p in Path(tmp).rglob("game.tw-pddl"))
        else:
            folders = write_floor_plan_games(tmp, plans, seed=args.seed)
        t1 = time.perf_counter()
        done = []

        def progress(gamefile: str, ok: bool) -> None:
            done.append(ok)
            print(f"[{len(done)}/{len(folders)}] {'won ' if ok else 'LOST'} "
                  f"{Path(gamefile).parent.parent.name} ({time.perf_counter() - t1:.0f} s)",
                  flush=True)

        results = replay_walkthroughs(tmp, on_result=progress)
        t2 = time.perf_counter()
        found = set(results) == {str(f / "game.tw-pddl") for f in folders}
        types = {str(f / "game.tw-pddl"): json.loads((f / "traj_data.json").read_text())
                 ["task_type"] for f in folders}
        won = Counter(types[g] for g, ok in results.items() if ok)
        total = Counter(types.values())
        print(f"floor plans: {len(plans)}; games written {len(folders)} in {t1 - t0:.0f} s")
        print(f"AlfredTWEnv found exactly these games: {found}")
        print(f"walkthroughs won in AlfredTWEnv: {sum(results.values())}/{len(results)} "
              f"({t2 - t1:.0f} s)")
        for t in sorted(total):
            print(f"  {t:34s} {won[t]}/{total[t]}")
        lost = [Path(g).parent.parent.name for g, ok in results.items() if not ok]
        if lost:
            print("lost:", lost)
        if args.expert:
            expert = run_handcoded_expert(tmp)
            ew = Counter(t for t, ok in expert.values() if ok)
            et = Counter(t for t, _ in expert.values())
            print("ALFWorld handcoded expert wins:")
            for t in sorted(et):
                print(f"  {t:34s} {ew[t]}/{et[t]}")


if __name__ == "__main__":
    main()
