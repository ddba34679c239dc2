"""RGB rendering of Sokoban rooms with gym-sokoban's tile set (shipped with its MIT notice).

The tiles are the ones the ARLArena vision prompt describes: a green alien-like player, a
yellow crate marked with an orange X, a black target tile outlined in red.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import numpy as np

from arlgym.envs.sokoban.room import Room

__all__ = ["render_rgb", "TILE_SIZE"]

#: Native tile size of the shipped PNGs, in pixels.
TILE_SIZE = 16
# Order matches Room.to_grid codes: 0 wall, 1 floor, 2 target, 3 box on target, 4 box,
# 5 player, 6 player on target.
_TILE_FILES = ("wall", "floor", "box_target", "box_on_target", "box", "player", "player_on_target")


@lru_cache(maxsize=8)
def _tiles(tile_size: int) -> np.ndarray:
    """(7, tile, tile, 3) uint8 array, scaled with nearest neighbour when ``tile_size`` != 16."""
    from PIL import Image

    folder = resources.files("arlgym.envs.sokoban") / "tiles"
    out = []
    for name in _TILE_FILES:
        with (folder / f"{name}.png").open("rb") as fh:
            img = Image.open(fh).convert("RGB")
            if tile_size != TILE_SIZE:
                img = img.resize((tile_size, tile_size), Image.NEAREST)
            out.append(np.asarray(img, dtype=np.uint8))
    return np.stack(out)


def render_rgb(room: Room, tile_size: int = TILE_SIZE) -> np.ndarray:
    """The room as an ``(height * tile_size, width * tile_size, 3)`` uint8 image."""
    tiles = _tiles(tile_size)
    grid = room.to_grid()
    img = tiles[grid]  # (H, W, t, t, 3)
    h, w = grid.shape
    return img.transpose(0, 2, 1, 3, 4).reshape(h * tile_size, w * tile_size, 3)
