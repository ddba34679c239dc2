"""ALFWorld memory stays bounded over distinct games (issue: ~1 MB per distinct game, forever).

The cause was TextWorld's intern table (``mementos``): every ``Proposition`` ever built stays
alive, and each ALFWorld game names its objects by THOR coordinates. The engine prunes that
table and keeps its own caches as LRUs (:data:`~arlgym.envs.alfworld.engine.CACHE_LIMITS`).
Here the limits are made small so that they fill after a few games, then many more distinct
games are played: the caches stay at their limits, the intern table stays bounded, and RSS stops
growing. ``bench/soak_alfworld.py`` is the full soak (10k episodes over distinct tasks).

Run: ``pytest tests/unit/envs/test_alfworld_memory.py``.
"""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arlgym.envs.alfworld import engine as eng  # noqa: E402
from arlgym.envs.alfworld.generator import generate_game  # noqa: E402


def _rss_mb() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


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


@pytest.mark.slow
def test_distinct_games_keep_memory_bounded(monkeypatch):
    limit = 3
    for name in ("translations", "games"):
        monkeypatch.setattr(eng._Shared, name, eng._LRU(limit))
    monkeypatch.setattr(eng, "INTERN_PRUNE_FLOOR", 2_000)
    game = eng.AlfredGame()
    rss: list[float] = []
    interned: list[int] = []
    first: list = []
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
            assert sizes["translations"] <= limit and sizes["games"] <= limit
            rss.append(_rss_mb())
            interned.append(sizes["textworld_interned"])
        # The first game, replayed after many prunes and evictions, plays exactly as before.
        game.load(generate_game("train", 3000).game_json())
        again = [game.reset()]
        for command in game.admissible_commands[:2]:
            again += [game.step(command), list(game.admissible_commands), game.facts()]
        assert again == first
    finally:
        game.close()
    # Without pruning the table grows by ~1-2k propositions a game (14 games: >15k).
    assert max(interned[6:]) < 4 * 2_000 + 6_000, interned
    # After the first games fill the caches, 8 more distinct games add < 10 MiB
    # (the unbounded engine: ~1 MiB per game plus the uncapped translations).
    print("rss", rss, "interned", interned)
    assert rss[-1] - rss[5] < 10, rss
