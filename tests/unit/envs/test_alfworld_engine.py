"""Differential test: the cached engine vs unmodified TextWorld PddlEnv + AlfredDemangler.

Both engines play the same generated games with the same random command sequence (mostly
admissible commands, some junk); the intro, every feedback text, the admissible list, ``won``
and the PDDL facts must be identical at every step.

Run: ``pytest tests/unit/envs/test_alfworld_engine.py`` (the slow-marked case plays 1000+ steps).
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arlgym.envs.alfworld.engine import AlfredGame, ReferenceGame  # noqa: E402
from arlgym.envs.alfworld.generator import SPLITS, generate_game  # noqa: E402


def _differential(num_games: int, steps: int, seed: int) -> int:
    rng = random.Random(seed)
    fast, ref = AlfredGame(), ReferenceGame()
    compared = 0
    for g in range(num_games):
        game = generate_game(SPLITS[g % 3], 1000 + g + 50 * seed).game_json()
        fast.load(game)
        ref.load(game)
        assert fast.reset() == ref.reset()
        for _ in range(steps):
            assert fast.admissible_commands == ref.admissible_commands
            assert fast.won == ref.won
            assert fast.facts() == ref.facts()
            if rng.random() < 0.05:
                command = rng.choice(["jump", "take moon from sky", "", "help"])
            else:
                command = rng.choice(fast.admissible_commands)
            assert fast.step(command) == ref.step(command), command
            compared += 1
        # A second reset of the same game must start over identically.
        assert fast.reset() == ref.reset()
        assert fast.facts() == ref.facts()
    return compared


def test_engine_matches_textworld_reference():
    assert _differential(num_games=3, steps=25, seed=0) == 75


@pytest.mark.slow
def test_engine_matches_textworld_reference_thousands_of_steps():
    assert _differential(num_games=10, steps=100, seed=1) >= 1000
