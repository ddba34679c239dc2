"""ALFWorld memory stays bounded over distinct games (issue: ~1 MB per distinct game, forever).

The cause was TextWorld's intern table (``mementos``): every ``Proposition`` ever built stays
alive, and each ALFWorld game names its objects by THOR coordinates. The engine prunes that
table and keeps its own caches as LRUs (:data:`~arlgym.envs.alfworld.engine.CACHE_LIMITS`).
Here the limits are made small so that they fill after a few games, then many more distinct
games are played: the caches stay at their limits, the intern table stays bounded, and RSS stops
growing. ``bench/soak_alfworld.py`` is the long soak (by default 10k episodes over distinct
tasks, ~0.6 s a new task on a free core; the recorded run: 10,000 distinct tasks, RSS 257.9
MiB after 1k -> 255.7 MiB after 10k, see docs/alfworld.md).

Run: ``pytest tests/unit/envs/test_alfworld_memory.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arlgym.envs.alfworld import engine as eng  # noqa: E402


def test_lru_keeps_its_limit_most_recent_first():
    lru = eng._LRU(3)
    for k in "abcd":
        lru[k] = k
    assert list(lru) == ["b", "c", "d"]
    assert lru.get("b") == "b" and list(lru) == ["c", "d", "b"]
    lru["e"] = "e"
    assert list(lru) == ["d", "b", "e"] and lru.get("zz") is None


def test_prune_drops_only_unreferenced_interned_propositions():
    import textworld.logic as twl

    kept = twl.Proposition("arlgymkeep", [twl.Variable("x_bar_1", "t")])
    twl.Proposition("arlgymdrop", [twl.Variable("y_bar_1", "t")])  # only the table holds it
    table = eng._memento_table()
    def names() -> set[str]:
        return {v.name for v in table.values() if isinstance(v, twl.Proposition)}

    assert "arlgymdrop" in names()
    eng.prune_textworld_interning(force=True)
    names = names()
    assert "arlgymkeep" in names and "arlgymdrop" not in names
    # Interning still works for a live proposition, and a dropped one is rebuilt equal.
    assert twl.Proposition("arlgymkeep", [twl.Variable("x_bar_1", "t")]) is kept
    assert twl.Proposition("arlgymdrop", [twl.Variable("y_bar_1", "t")]).name == "arlgymdrop"


# Run in a fresh interpreter: earlier tests in the same process keep games, engines and their
# propositions alive (CI saw 12k interned entries before this test's first game), which would
# make both the intern-table bound and the RSS growth measure them instead of this engine.
_SOAK = r"""
import gc, json, os, sys
from arlgym.envs.alfworld import engine as eng
from arlgym.envs.alfworld.generator import generate_game

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

limit = 3
eng._Shared.translations = eng._LRU(limit)
eng._Shared.games = eng._LRU(limit)
eng.INTERN_PRUNE_FLOOR = 2_000
game = eng.AlfredGame()
out = {"rss": [], "interned": [], "sizes_ok": True}
first = again = None
try:
    for i in range(14):
        game.load(generate_game("train", 3000 + i).game_json())
        seen = [game.reset()]
        for command in game.admissible_commands[:2]:
            seen += [game.step(command), list(game.admissible_commands), game.facts()]
        if i == 0:
            first = seen
        gc.collect()
        sizes = eng.cache_sizes()
        out["sizes_ok"] &= sizes["translations"] <= limit and sizes["games"] <= limit
        out["rss"].append(rss_mb())
        out["interned"].append(sizes["textworld_interned"])
    game.load(generate_game("train", 3000).game_json())
    again = [game.reset()]
    for command in game.admissible_commands[:2]:
        again += [game.step(command), list(game.admissible_commands), game.facts()]
finally:
    game.close()
out["replay_equal"] = again == first
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_distinct_games_keep_memory_bounded():
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _SOAK], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    rss, interned = out["rss"], out["interned"]
    assert out["sizes_ok"], "an engine cache grew past its limit"
    # The first game, replayed after many prunes and evictions, plays exactly as before.
    assert out["replay_equal"]
    # Without pruning the table grows by ~1-2k propositions a game (14 games: >15k).
    assert max(interned[6:]) < 4 * 2_000 + 6_000, interned
    assert any(b < a for a, b in zip(interned, interned[1:], strict=False)), interned  # a prune ran
    # After the first games fill the caches, 8 more distinct games add < 10 MiB
    # (the unbounded engine: ~1 MiB per game plus the uncapped translations).
    assert rss[-1] - rss[5] < 10, rss
