"""Load gym-sokoban's ``room_utils`` (the reference generator) without importing the package.

``import gym_sokoban`` fails on current setuptools (no ``pkg_resources``) and its env on numpy 2
(``np.bool8``); ``room_utils.py`` itself needs only numpy, so it is loaded from its file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np

from arlgym.envs.sokoban.room import Room


def load_room_utils() -> ModuleType:
    spec = importlib.util.find_spec("gym_sokoban")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gym-sokoban is not installed: pip install gym-sokoban==0.0.6 (the [dev] extra)")
    path = Path(next(iter(spec.submodule_search_locations))) / "envs" / "room_utils.py"
    mod_spec = importlib.util.spec_from_file_location("gym_sokoban_room_utils", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def to_room(structure: np.ndarray, state: np.ndarray) -> Room:
    """gym-sokoban's (room_fixed, room_state) arrays -> our Room."""
    h, w = structure.shape
    flat_s, flat_t = structure.ravel(), state.ravel()
    return Room(
        h, w,
        frozenset(int(i) for i in np.flatnonzero(flat_s == 0)),
        frozenset(int(i) for i in np.flatnonzero(flat_s == 2)),
        frozenset(int(i) for i in np.flatnonzero(np.isin(flat_t, [3, 4]))),
        int(np.flatnonzero(flat_t == 5)[0]),
    )
