"""An optimal Sokoban solver: A* over box pushes, costed in player moves.

A search node is (player cell, box cells). Its successors are the *pushes* the player can make
after walking (BFS over free floor) to the cell behind a box; a push costs the walk length
plus one move, so the returned solution is optimal in moves, which is what ``max_steps``
counts. The heuristic is the sum of each box's push distance to its nearest target (ignoring
other boxes), a lower bound on moves, so A* stays optimal. Cells from which no box can ever
reach a target ("dead squares") are pruned.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from arlgym.envs.sokoban.room import MOVE_NAMES, Room

__all__ = ["solve", "Solution", "live_cells", "push_distances"]


@dataclass(frozen=True, slots=True)
class Solution:
    """A move sequence and the number of search nodes it took to find."""

    moves: tuple[str, ...]
    expanded: int

    def __len__(self) -> int:
        return len(self.moves)


def _neighbours(room: Room) -> list[tuple[str, int]]:
    return [(name, room.offset(name)) for name in MOVE_NAMES]


def push_distances(room: Room) -> dict[int, int]:
    """For every cell from which a box can reach some target, the fewest pushes needed.

    Computed backwards from the targets: a box at ``x`` can be pushed to ``x + d`` when
    ``x - d`` (where the player stands) and ``x + d`` are not walls. Boxes are ignored.
    """
    dist: dict[int, int] = {t: 0 for t in room.targets}
    queue = deque(room.targets)
    offsets = [d for _, d in _neighbours(room)]
    while queue:
        y = queue.popleft()
        for d in offsets:
            x = y - d  # the box came from x, pushed in direction d
            if x in dist or x in room.walls or (x - d) in room.walls:
                continue
            dist[x] = dist[y] + 1
            queue.append(x)
    return dist


def live_cells(room: Room) -> frozenset[int]:
    """Cells a box may occupy without making the level unsolvable (simple deadlocks only)."""
    return frozenset(push_distances(room))


def _walk(room: Room, start: int, boxes: frozenset[int]) -> dict[int, tuple[int, str | None]]:
    """BFS over free cells: cell -> (parent cell, move into cell)."""
    parents: dict[int, tuple[int, str | None]] = {start: (-1, None)}
    queue = deque([start])
    moves = _neighbours(room)
    walls = room.walls
    while queue:
        cell = queue.popleft()
        for name, d in moves:
            n = cell + d
            if n in parents or n in walls or n in boxes:
                continue
            parents[n] = (cell, name)
            queue.append(n)
    return parents


def _walk_distances(room: Room, start: int, boxes: frozenset[int]) -> dict[int, int]:
    dist = {start: 0}
    queue = deque([start])
    offsets = [d for _, d in _neighbours(room)]
    walls = room.walls
    while queue:
        cell = queue.popleft()
        nd = dist[cell] + 1
        for d in offsets:
            n = cell + d
            if n in dist or n in walls or n in boxes:
                continue
            dist[n] = nd
            queue.append(n)
    return dist


def solve(room: Room, max_moves: int | None = None, max_nodes: int = 500_000) -> Solution | None:
    """Find a move-optimal solution.

    Args:
        room: the position to solve.
        max_moves: prune nodes whose optimistic cost exceeds this (``None``: no bound).
        max_nodes: give up after expanding this many nodes.

    Returns:
        A :class:`Solution` (``moves`` is empty when the room is already solved), or ``None``
        when the room is unsolvable within the bounds.
    """
    if room.solved:
        return Solution((), 0)
    pdist = push_distances(room)
    if any(b not in pdist for b in room.boxes):
        return None
    moves = _neighbours(room)
    targets = room.targets

    def h(boxes: frozenset[int]) -> int:
        return sum(pdist[b] for b in boxes)

    start = (room.player, room.boxes)
    best_g: dict[tuple[int, frozenset[int]], int] = {start: 0}
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], int, str]] = {}
    counter = 0
    heap = [(h(room.boxes), 0, counter, start)]
    expanded = 0
    while heap:
        f, g, _, node = heapq.heappop(heap)
        if g > best_g.get(node, g):
            continue
        player, boxes = node
        if boxes <= targets:
            return Solution(_reconstruct(room, parent, node), expanded)
        expanded += 1
        if expanded > max_nodes:
            return None
        dist = _walk_distances(room, player, boxes)
        for b in boxes:
            for name, d in moves:
                stand = b - d
                if stand not in dist:
                    continue
                beyond = b + d
                if beyond in room.walls or beyond in boxes or beyond not in pdist:
                    continue
                new_boxes = (boxes - {b}) | {beyond}
                ng = g + dist[stand] + 1
                child = (b, new_boxes)
                if ng >= best_g.get(child, 1 << 30):
                    continue
                nf = ng + h(new_boxes)
                if max_moves is not None and nf > max_moves:
                    continue
                best_g[child] = ng
                parent[child] = (node, stand, name)
                counter += 1
                heapq.heappush(heap, (nf, ng, counter, child))
    return None


def _reconstruct(room: Room, parent, node) -> tuple[str, ...]:
    pushes = []
    while node in parent:
        prev, stand, name = parent[node]
        pushes.append((prev, stand, name))
        node = prev
    out: list[str] = []
    for (player, boxes), stand, name in reversed(pushes):
        tree = _walk(room, player, boxes)
        path = []
        cell = stand
        while cell != player:
            cell, move = tree[cell]
            path.append(move)
        out.extend(reversed(path))  # type: ignore[arg-type]
        out.append(name)
    return tuple(out)
