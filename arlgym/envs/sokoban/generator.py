"""Procedural Sokoban rooms by reverse play (the algorithm of gym-sokoban, used by RAGEN,
verl-agent and ARLArena), with our own implementation.

1. **Topology.** A random walk of ``num_steps`` steps carves floor out of a solid block, stamping
   one of five small masks at each position and turning with probability
   ``p_change_directions``; the outer ring stays wall.
2. **Placement.** The player and ``num_boxes`` targets go on random floor cells; every box starts
   on its target (a solved position).
3. **Reverse play.** From the solved position the player *pulls* boxes. Every position reachable
   within ``search_depth`` pulls is a candidate; its score is gym-sokoban's
   ``pulls × Σ Manhattan(box, its target)``, and 0 while any box still sits on a target
   (gym-sokoban names the factor ``box_swaps``, but as written it counts every pull).
4. **Verification.** Candidates are taken best score first and the first one the A* solver
   solves within ``max_solution_length`` moves is returned, so every room is solvable (and
   solvable within the episode's step budget). A zero best score means a retry with new draws.

Differences from gym-sokoban, on purpose: the search is breadth-first over *pull* states with
the player's reachable region as part of the state (gym-sokoban runs a depth-first search over
single moves), which visits each position once and is what makes large rooms fast; randomness
comes from the ``numpy.random.Generator`` the caller passes (gym-sokoban uses the global RNG).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from arlgym.envs.sokoban.room import Room
from arlgym.envs.sokoban.solver import Solution, solve
from arlgym.errors import ConfigError, UnsolvableError

__all__ = ["generate_room", "GeneratedRoom"]

# gym-sokoban's topology masks (3×3 stamps).
_MASKS = np.array(
    [
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    ],
    dtype=bool,
)
_DIRECTIONS = [(1, 0), (0, 1), (-1, 0), (0, -1)]


@dataclass(frozen=True, slots=True)
class GeneratedRoom:
    """A generated room, its optimal solution and generation statistics."""

    room: Room
    solution: Solution
    score: int
    tries: int


def _topology(rng: np.random.Generator, height: int, width: int, num_steps: int,
              p_change: float) -> np.ndarray:
    level = np.zeros((height, width), dtype=bool)
    direction = _DIRECTIONS[rng.integers(4)]
    pos = np.array([rng.integers(1, height - 1), rng.integers(1, width - 1)])
    for _ in range(num_steps):
        if rng.random() < p_change:
            direction = _DIRECTIONS[rng.integers(4)]
        pos = pos + direction
        pos[0] = min(max(pos[0], 1), height - 2)
        pos[1] = min(max(pos[1], 1), width - 2)
        r, c = int(pos[0]) - 1, int(pos[1]) - 1
        level[r : r + 3, c : c + 3] |= _MASKS[rng.integers(len(_MASKS))]
    level[[0, height - 1], :] = False
    level[:, [0, width - 1]] = False
    return level


def _region_key(start: int, boxes: frozenset[int], walls: frozenset[int], width: int) -> int:
    """Smallest cell of the player's reachable region: one id per region."""
    seen = {start}
    stack = [start]
    best = start
    while stack:
        cell = stack.pop()
        if cell < best:
            best = cell
        for d in (1, -1, width, -width):
            n = cell + d
            if n not in seen and n not in walls and n not in boxes:
                seen.add(n)
                stack.append(n)
    return best


def _reverse_play(room: Room, search_depth: int, max_states: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """BFS over pull states. Returns ``(score, player, box positions by target index)``."""
    width = room.width
    walls = room.walls
    offsets = (1, -1, width, -width)
    target_cells = tuple(sorted(room.targets))
    target_rc = [divmod(t, width) for t in target_cells]
    start_boxes = target_cells  # boxes[i] started on target i

    targets = room.targets

    def score(boxes: tuple[int, ...], pulls: int) -> int:
        if any(b in targets for b in boxes):
            return 0
        disp = 0
        for (tr, tc), b in zip(target_rc, boxes, strict=True):
            br, bc = divmod(b, width)
            disp += abs(br - tr) + abs(bc - tc)
        return pulls * disp

    start_set = frozenset(start_boxes)
    seen = {(start_set, _region_key(room.player, start_set, walls, width))}
    # queue item: (boxes by target index, player cell, depth = pulls so far)
    queue = deque([(start_boxes, room.player, 0)])
    results: list[tuple[int, int, tuple[int, ...]]] = []
    while queue:
        boxes, player, depth = queue.popleft()
        if depth:
            results.append((score(boxes, depth), player, boxes))
        if depth >= search_depth or len(seen) >= max_states:
            continue
        box_set = frozenset(boxes)
        # cells the player can reach from here
        reach = {player}
        stack = [player]
        while stack:
            cell = stack.pop()
            for d in offsets:
                n = cell + d
                if n not in reach and n not in walls and n not in box_set:
                    reach.add(n)
                    stack.append(n)
        for i, b in enumerate(boxes):  # noqa: B007 - i indexes the box's target
            for d in offsets:
                stand = b + d  # player stands next to the box, then steps further away
                dest = stand + d
                if stand not in reach or dest in walls or dest in box_set:
                    continue
                new_boxes = boxes[:i] + (stand,) + boxes[i + 1 :]
                new_set = frozenset(new_boxes)
                key = (new_set, _region_key(dest, new_set, walls, width))
                if key in seen:
                    continue
                seen.add(key)
                queue.append((new_boxes, dest, depth + 1))
    return results


def generate_room(
    rng: np.random.Generator,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    *,
    search_depth: int = 30,
    num_steps: int | None = None,
    p_change_directions: float = 0.35,
    max_solution_length: int | None = None,
    max_states: int = 300_000,
    max_tries: int = 200,
) -> GeneratedRoom:
    """Generate one solvable room.

    Args:
        rng: the caller's generator (envs pass ``self.np_random`` or a per-task generator).
        dim_room: ``(height, width)`` including the outer wall ring.
        num_boxes: number of boxes (= targets).
        search_depth: most pulls in the reverse search (ARLArena uses 30).
        num_steps: random-walk length; default ``round(1.7 * (height + width))`` (gym-sokoban).
        p_change_directions: probability that the walk turns (gym-sokoban: 0.35).
        max_solution_length: only accept rooms the solver solves in at most this many moves.
        max_states: cap on reverse-search states (gym-sokoban: 300,000).
        max_tries: topology/placement draws before giving up.

    Raises:
        ConfigError: impossible sizes.
        UnsolvableError: no acceptable room after ``max_tries`` draws.
    """
    height, width = int(dim_room[0]), int(dim_room[1])
    if height < 4 or width < 4:
        raise ConfigError(f"dim_room must be at least (4, 4), got {dim_room!r}")
    if num_boxes < 1 or num_boxes > (height - 2) * (width - 2) - 1:
        raise ConfigError(f"num_boxes={num_boxes} does not fit a {height}x{width} room")
    steps = round(1.7 * (height + width)) if num_steps is None else int(num_steps)
    for attempt in range(1, max_tries + 1):
        floor = _topology(rng, height, width, steps, p_change_directions)
        cells = np.flatnonzero(floor.ravel())
        if len(cells) <= num_boxes + 1:
            continue
        picks = rng.choice(cells, size=num_boxes + 1, replace=False)
        player, targets = int(picks[0]), frozenset(int(c) for c in picks[1:])
        walls = frozenset(int(c) for c in np.flatnonzero(~floor.ravel()))
        solved = Room(height, width, walls, targets, targets, player)
        candidates = _reverse_play(solved, search_depth, max_states)
        if not candidates:
            continue
        best = max(c[0] for c in candidates)
        if best <= 0:
            continue
        # best score first; ties in a random (rng-driven) order
        order = rng.permutation(len(candidates))
        ranked = sorted(order, key=lambda k: -candidates[k][0])
        for k in ranked[:50]:
            score, p, boxes = candidates[k]
            if score <= 0:
                break
            room = Room(height, width, walls, targets, frozenset(boxes), p)
            if room.solved:
                continue
            solution = solve(room, max_moves=max_solution_length)
            if solution is not None and (
                max_solution_length is None or len(solution) <= max_solution_length
            ):
                return GeneratedRoom(room, solution, score, attempt)
    raise UnsolvableError(
        f"no solvable {height}x{width} room with {num_boxes} box(es) found in {max_tries} tries"
        + (f" within {max_solution_length} moves" if max_solution_length else "")
        + "; use a larger room, fewer boxes or a larger max_steps"
    )
