"""Differential test: the cached engine vs unmodified TextWorld PddlEnv + AlfredDemangler.

Both engines play the same generated games with the same random command sequence (mostly
admissible commands, some junk); the intro, every feedback text, the admissible list, ``won``
and the PDDL facts must be identical at every step.

Run: ``pytest tests/unit/envs/test_alfworld_engine.py`` (the slow-marked case plays 720 steps
over 12 games, 4 of each split, spread over up to 4 worker processes). Since the generated scenes
are as dense as ALFRED's (twice the objects of the first generator), a reference step costs
~0.3 s of CPU on an idle core, so the step counts are smaller than the 3000 steps this test
played on the sparser scenes; ``bench/bench_alfworld.py`` compares more steps on demand.
"""

from __future__ import annotations

import multiprocessing
import os
import random
from concurrent.futures import ProcessPoolExecutor

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arlgym.envs.alfworld.engine import AlfredGame, ReferenceGame  # noqa: E402
from arlgym.envs.alfworld.generator import SPLITS, generate_game  # noqa: E402

_JUNK = ("jump", "take moon from sky", "", "help", "go to  fridge 1")


def _play_games(game_numbers: list[int], steps: int, seed: int) -> int:
    """Play games ``game_numbers`` in both engines; the number of steps compared.

    Each game gets its own command RNG (from ``seed`` and its number), so the commands played do
    not depend on how games are spread over processes.
    """
    fast, ref = AlfredGame(), ReferenceGame()
    compared = 0
    for g in game_numbers:
        rng = random.Random(seed * 100_003 + g)
        game = generate_game(SPLITS[g % 3], 1000 + g + 50 * seed).game_json()
        fast.load(game)
        ref.load(game)
        assert fast.reset() == ref.reset()
        for _ in range(steps):
            assert fast.admissible_commands == ref.admissible_commands
            assert fast.won == ref.won
            assert fast.facts() == ref.facts()
            if rng.random() < 0.05:
                command = rng.choice(_JUNK)
            else:
                command = rng.choice(fast.admissible_commands)
            assert fast.step(command) == ref.step(command), (g, command)
            compared += 1
        assert fast.admissible_commands == ref.admissible_commands and fast.won == ref.won
        # A second reset of the same game must start over identically.
        assert fast.reset() == ref.reset()
        assert fast.facts() == ref.facts()
    fast.close()
    return compared


def test_engine_matches_textworld_reference():
    # train and valid_seen games here; the slow case covers all three splits
    assert _play_games([0, 1], steps=12, seed=0) == 24


@pytest.mark.slow
def test_engine_matches_textworld_reference_thousands_of_steps():
    """720 random steps over 12 games; the reference engine costs ~0.3 s of CPU a step.

    With 4+ cores the games are spread over worker processes (spawned, not forked, so each
    loads its own TextWorld and Fast Downward); on 2 cores two workers were measured slower
    than one, so the games run here.
    """
    num_games, steps = 12, 60
    workers = min(4, (os.cpu_count() or 1) // 2)
    if workers <= 1:
        compared = _play_games(list(range(num_games)), steps, seed=1)
    else:
        chunks = [list(range(w, num_games, workers)) for w in range(workers)]
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            compared = sum(pool.map(_play_games, chunks, [steps] * workers, [1] * workers))
    assert compared == num_games * steps >= 720
