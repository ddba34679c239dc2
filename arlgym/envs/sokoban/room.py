"""A Sokoban room: immutable layout (walls, targets) plus the movable state (boxes, player).

Cells are addressed by flat index ``r * width + c`` so that solver and generator work on small
ints and frozensets. Rooms read and write the standard XSB text format:
``#`` wall, ``@`` player, ``+`` player on goal, ``$`` box, ``*`` box on goal, ``.`` goal,
space (or ``-``/``_``) floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from arlgym.errors import LevelFormatError

__all__ = ["Room", "MOVES", "MOVE_NAMES", "parse_xsb", "read_xsb_collection"]

#: Move name -> (row delta, col delta), in the order the prompt lists them.
MOVES: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
MOVE_NAMES: tuple[str, ...] = tuple(MOVES)

# Text-grid symbols (gym-sokoban's ``tiny_rgb_array`` text mode, used by verl-agent/ARLArena).
_TEXT_WALL, _TEXT_FLOOR, _TEXT_TARGET = "#", "_", "O"
_TEXT_BOX, _TEXT_BOX_ON_TARGET, _TEXT_PLAYER, _TEXT_PLAYER_ON_TARGET = "X", "√", "P", "S"


@dataclass(frozen=True)
class Room:
    """One Sokoban position.

    Attributes:
        height, width: grid size (the border is part of the grid).
        walls: frozenset of wall cells.
        targets: frozenset of target cells.
        boxes: frozenset of box cells.
        player: the player's cell.
    """

    height: int
    width: int
    walls: frozenset[int]
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int
    _offsets: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        offsets = {name: dr * self.width + dc for name, (dr, dc) in MOVES.items()}
        object.__setattr__(self, "_offsets", offsets)

    # -------------------------------------------------------------- geometry
    def cell(self, row: int, col: int) -> int:
        return row * self.width + col

    def coords(self, cell: int) -> tuple[int, int]:
        return divmod(cell, self.width)

    def offset(self, move: str) -> int:
        """Flat-index delta of ``move``; valid because the border is always wall."""
        return self._offsets[move]

    def is_free(self, cell: int) -> bool:
        return cell not in self.walls and cell not in self.boxes

    @property
    def solved(self) -> bool:
        return self.boxes <= self.targets

    @property
    def boxes_on_targets(self) -> int:
        return len(self.boxes & self.targets)

    # -------------------------------------------------------------- dynamics
    def move(self, name: str) -> tuple[Room, int]:
        """Apply one move. Returns the new room and the change in boxes on targets (-1, 0, +1).

        Walking into a wall or pushing a box into a wall/box leaves the room unchanged.
        """
        d = self._offsets[name]
        nxt = self.player + d
        if nxt in self.walls:
            return self, 0
        if nxt in self.boxes:
            beyond = nxt + d
            if beyond in self.walls or beyond in self.boxes:
                return self, 0
            boxes = (self.boxes - {nxt}) | {beyond}
            delta = (beyond in self.targets) - (nxt in self.targets)
            return Room(self.height, self.width, self.walls, self.targets, frozenset(boxes), nxt), delta
        return Room(self.height, self.width, self.walls, self.targets, self.boxes, nxt), 0

    def state_key(self) -> tuple[int, tuple[int, ...]]:
        return self.player, tuple(sorted(self.boxes))

    # -------------------------------------------------------------- views
    def to_grid(self) -> np.ndarray:
        """gym-sokoban's integer encoding: 0 wall, 1 floor, 2 target, 3 box on target, 4 box,
        5 player (6 player on target)."""
        grid = np.ones(self.height * self.width, dtype=np.uint8)
        grid[list(self.walls)] = 0
        grid[list(self.targets)] = 2
        for b in self.boxes:
            grid[b] = 3 if b in self.targets else 4
        grid[self.player] = 6 if self.player in self.targets else 5
        return grid.reshape(self.height, self.width)

    def to_text(self, cell_separator: str = "") -> str:
        """The text grid shown to text agents (``# _ O X √ P S``), one row per line."""
        symbols = [_TEXT_WALL, _TEXT_FLOOR, _TEXT_TARGET, _TEXT_BOX_ON_TARGET, _TEXT_BOX,
                   _TEXT_PLAYER, _TEXT_PLAYER_ON_TARGET]
        grid = self.to_grid()
        return "\n".join(cell_separator.join(symbols[v] for v in row) for row in grid)

    def to_xsb(self) -> str:
        """The room in XSB format (trailing spaces of each row removed)."""
        symbols = ["#", " ", ".", "*", "$", "@", "+"]
        grid = self.to_grid()
        return "\n".join("".join(symbols[v] for v in row).rstrip() for row in grid)


def parse_xsb(text: str) -> Room:
    """Parse one XSB level. Rows may be ragged (short rows are padded with floor).

    Floor outside the walls is kept as floor (it is unreachable), so ``to_xsb`` gives the
    input back for ordinary levels.

    Raises:
        LevelFormatError: unknown symbols, not exactly one player, no boxes, a box count
            different from the goal count, or a player region not closed by walls.
    """
    if not isinstance(text, str):
        raise LevelFormatError(f"an XSB level must be a str, got {type(text).__name__}")
    lines = [line.rstrip("\r").rstrip() for line in text.split("\n")]
    lines = [line for line in lines if line.strip() and not line.lstrip().startswith(";")]
    if not lines:
        raise LevelFormatError("the XSB level is empty")
    width = max(len(line) for line in lines)
    height = len(lines)
    walls: set[int] = set()
    targets: set[int] = set()
    boxes: set[int] = set()
    players: list[int] = []
    for r, line in enumerate(lines):
        for c, ch in enumerate(line.ljust(width)):
            cell = r * width + c
            if ch == "#":
                walls.add(cell)
            elif ch in " -_":
                pass
            elif ch == ".":
                targets.add(cell)
            elif ch == "$":
                boxes.add(cell)
            elif ch == "*":
                boxes.add(cell)
                targets.add(cell)
            elif ch == "@":
                players.append(cell)
            elif ch == "+":
                players.append(cell)
                targets.add(cell)
            else:
                raise LevelFormatError(
                    f"unknown XSB symbol {ch!r} at row {r + 1}, column {c + 1}; "
                    "use # @ + $ * . or space"
                )
    if len(players) != 1:
        raise LevelFormatError(
            f"an XSB level needs exactly one player (@ or +), found {len(players)}"
        )
    if not boxes:
        raise LevelFormatError("the XSB level has no boxes ($ or *)")
    if len(boxes) != len(targets):
        raise LevelFormatError(
            f"the XSB level has {len(boxes)} boxes but {len(targets)} goals; they must match"
        )
    _check_closed(players[0], walls, height, width)
    return Room(height, width, frozenset(walls), frozenset(targets), frozenset(boxes), players[0])


def _check_closed(player: int, walls: set[int], height: int, width: int) -> None:
    """Raise unless walls enclose every cell the player (or a pushed box) could reach.

    A closed region never touches the grid border, which is also what keeps flat-index moves
    from wrapping around a row.
    """
    seen = {player}
    stack = [player]
    while stack:
        cell = stack.pop()
        r, c = divmod(cell, width)
        if r in (0, height - 1) or c in (0, width - 1):
            raise LevelFormatError(
                f"the level is not closed: the player can reach row {r + 1}, column {c + 1} "
                "on its edge; surround the playable area with # walls"
            )
        for d in (1, -1, width, -width):
            n = cell + d
            if n not in seen and n not in walls:
                seen.add(n)
                stack.append(n)


def read_xsb_collection(text: str) -> list[tuple[str, str]]:
    """Split a level collection (Boxoban ``; 0`` headers or blank-line separated XSB).

    Returns:
        ``(title, level_text)`` pairs in file order; titles are the ``;`` comment lines or the
        1-based index when a level has none.
    """
    levels: list[tuple[str, str]] = []
    title: str | None = None
    rows: list[str] = []

    def flush() -> None:
        nonlocal rows, title
        if any(row.strip() for row in rows):
            levels.append((title or str(len(levels) + 1), "\n".join(rows)))
        rows = []
        title = None

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(";"):
            flush()
            title = stripped.lstrip("; ").strip() or None
        elif not stripped:
            flush()
        elif set(stripped) <= set("#@+$*.-_ "):
            rows.append(line.rstrip())
        else:  # a title line without ';' (e.g. "Level 3")
            flush()
            title = stripped
    flush()
    return levels
