"""A greedy Sokoban teacher with systematic mistakes: imperfect demonstrations for imitation.

Why: behaviour cloning of the optimal solver (``expert_response``) leaves RL nothing to add — a
fully trained SFT reaches ~92% on 6×6 one-box rooms. A teacher that is good but *wrong in a
consistent way* gives imitation a ceiling that RL, which sees the env's reward and not the
teacher, can climb over.

The teacher is a greedy box-pusher without planning (measured on the first 200 held-out
6×6 one-box rooms, 15 moves: it wins 53.0%, uniformly random moves 28%, the optimal solver 100%).
It takes the first box that is off a target and the nearest free target (Manhattan distance),
picks the first push in :data:`MOVE_NAMES` order (vertical before horizontal) that brings the box
one cell closer to that target, and walks *straight* to the cell behind the box — a move that
gets it one cell closer, vertical first, without path planning. Its mistakes are systematic:
it bumps into a wall between it and the box (a no-op it repeats until the step limit), walks
into the box it meant to go around (an unplanned push), pushes a box into a corner or along a
wall it cannot leave (no deadlock look-ahead), and is stuck when the box must first move away
from its target. It is a deterministic function of the position, so a model can imitate it
from the grid alone, mistakes included.
"""

from __future__ import annotations

from arlgym.envs.sokoban.room import MOVE_NAMES, Room

__all__ = ["greedy_plan", "greedy_response"]

#: what the teacher answers when no push brings the box closer (its systematic failure)
STUCK_MOVE = MOVE_NAMES[0]


def _manhattan(room: Room, a: int, b: int) -> int:
    (ra, ca), (rb, cb) = room.coords(a), room.coords(b)
    return abs(ra - rb) + abs(ca - cb)


def _straight_walk(room: Room, goal: int) -> tuple[str, ...]:
    """The teacher's walk towards ``goal`` (no path planning): the moves, in
    :data:`MOVE_NAMES` order, that each take the player one cell closer in Manhattan distance —
    walls and boxes in the way included (it bumps into them)."""
    out = []
    cell = room.player
    while cell != goal:
        for name in MOVE_NAMES:
            nxt = cell + room.offset(name)
            if _manhattan(room, nxt, goal) < _manhattan(room, cell, goal):
                out.append(name)
                cell = nxt
                break
    return tuple(out)


def greedy_plan(room: Room) -> tuple[str, ...]:
    """The teacher's intended moves from ``room``: its straight walk to the cell behind the box
    and the push, or ``()`` when the room is solved or no push brings the box closer to its
    target (the teacher is stuck). Only the first move is played; the plan is recomputed from
    the next position.
    """
    if room.solved:
        return ()
    box = min(room.boxes - room.targets)
    target = min(room.targets - room.boxes, key=lambda t: (_manhattan(room, box, t), t))
    dist = _manhattan(room, box, target)
    for name in MOVE_NAMES:
        d = room.offset(name)
        beyond, stand = box + d, box - d
        if _manhattan(room, beyond, target) >= dist or not room.is_free(beyond):
            continue
        if not room.is_free(stand):
            continue
        return _straight_walk(room, stand) + (name,)
    return ()


def greedy_response(room: Room, plan_length: int = 4) -> str:
    """``<think>plan: …</think><action>move</action>`` in the expert's format: the teacher's
    next moves (at most ``plan_length``) and the first of them."""
    if room.solved:
        return "<think>all boxes are on targets</think><action>up</action>"
    plan = greedy_plan(room)
    if not plan:
        return f"<think>plan: {STUCK_MOVE}</think><action>{STUCK_MOVE}</action>"
    return f"<think>plan: {' '.join(plan[:max(1, plan_length)])}</think><action>{plan[0]}</action>"
