"""Generated games in ALFWorld's own ``AlfredTWEnv``: found, and won by their walkthroughs.

One game per floor plan is generated (:func:`~arlgym.envs.alfworld.generator.generate_in_floor_plan`),
checked in our engine, written in ALFWorld's layout, then loaded by alfworld 0.4.2's
``AlfredTWEnv`` (TextWorld's unmodified ``PddlEnv``) and replayed. CI plays twelve floor plans,
three of each room type (a reference step costs ~0.3 s): the first and last of each range and
ALFWorld's four unseen scenes — FloorPlan10 (its densest unseen kitchen), 219, 308 and 424 —
plus FloorPlan418 (whose sink was once named "sinkbasinbasin") and FloorPlan420 (a THOR
"Bathtub|..|SinkBasin");
``test_alfworld_generate.py`` plays the other splits' games through the same loader.
``ARLGYM_ALFWORLD_FLOORPLANS=all`` plays all 120
(~10 min on 2 cores; ``bench/alfworld_floorplans.py`` does the same and prints a summary;
the last full run is reported in docs/alfworld.md).

Run: ``pytest tests/unit/envs/test_alfworld_floorplans.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arlgym.envs.alfworld.catalog import floor_plans  # noqa: E402
from arlgym.envs.alfworld.official_check import (  # noqa: E402
    replay_walkthroughs,
    write_floor_plan_games,
)

_CI_PLANS = ("FloorPlan1", "FloorPlan10", "FloorPlan30",          # kitchens
             "FloorPlan201", "FloorPlan219", "FloorPlan230",     # living rooms
             "FloorPlan301", "FloorPlan308", "FloorPlan330",     # bedrooms
             "FloorPlan418", "FloorPlan420", "FloorPlan424")     # bathrooms


def _plans() -> list[str]:
    chosen = os.environ.get("ARLGYM_ALFWORLD_FLOORPLANS", "")
    if chosen == "all":
        return sorted(floor_plans())
    if chosen:
        return [p.strip() for p in chosen.split(",") if p.strip()]
    return list(_CI_PLANS)


@pytest.mark.slow
def test_alfworld_loader_wins_generated_games_of_each_floor_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    plans = _plans()
    folders = write_floor_plan_games(tmp_path, plans)
    assert len(folders) == len(plans)
    results = replay_walkthroughs(tmp_path)
    assert set(results) == {str(f / "game.tw-pddl") for f in folders}
    lost = sorted(Path(g).parent.parent.name for g, won in results.items() if not won)
    assert not lost, lost
