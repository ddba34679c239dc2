"""Failure patterns of evaluated episodes: which kinds of action agents take, in which order,
and how failed episodes fail (the paper's Appendix F: action-transition flows of successful vs
failed trajectories, loops, premature purchases).

Input is what ``arlgym eval`` writes (one :class:`~arlgym.rollout.Trajectory` per JSONL line).
Each step gets an **action type** — a small vocabulary per env family (Sokoban moves; ALFWorld
verbs; WebShop search / product / option / inspect / navigate / back / buy; TIR code / answer),
``invalid format`` and ``invalid action`` for every env — and each failed episode one **failure
mode**, the first that applies:

===================== =====================================================================
``format collapse``   half or more of its responses broke the format
``invalid actions``   half or more of its actions were not admissible / did not run
``loop``              it came back to the same true state (anchor) three or more times
``wrong final``       it ended by itself without winning (wrong purchase, wrong answer)
``out of steps``      it ran out of steps
===================== =====================================================================
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arlgym.envs import env_family
from arlgym.rollout import StepRecord, Trajectory

__all__ = ["action_type", "failure_mode", "pattern_report", "format_patterns", "plot_transitions",
           "START", "WON", "LOST"]

START, WON, LOST = "(start)", "(won)", "(lost)"
_ASIN = re.compile(r"^b0[0-9a-z]{8}$")
_WEBSHOP_KINDS = {"back to search": "back", "next >": "navigate", "< prev": "navigate",
                  "description": "inspect", "features": "inspect", "reviews": "inspect",
                  "buy now": "buy", "search": "search"}


def action_type(env_id: str, step: StepRecord) -> str:
    """The kind of action ``step`` took (see the module docstring)."""
    if step.action is None:
        return "invalid format"
    if not step.action_valid:
        return "invalid action"
    action = (step.executed_action or step.action).strip()
    family = env_family(env_id)
    if family == "sokoban":
        return action.lower()
    if family == "tir_math":
        return "answer" if action.startswith("\\boxed") else "code"
    if family == "webshop":
        match = re.match(r"^\s*(search|click)\s*\[(.*)\]\s*$", action, re.IGNORECASE | re.DOTALL)
        if not match:
            return "other"
        if match.group(1).lower() == "search":
            return "search"
        target = match.group(2).strip().lower()
        if _ASIN.match(target):
            return "product"
        return _WEBSHOP_KINDS.get(target, "option")
    words = action.lower().split()
    return words[0] if words else "other"


def failure_mode(traj: Trajectory) -> str | None:
    """How a failed episode failed (``None`` for a won one); see the module docstring."""
    if traj.won or not traj.steps:
        return None
    n = len(traj.steps)
    if sum(not s.format_valid for s in traj.steps) * 2 >= n:
        return "format collapse"
    if sum(not s.action_valid for s in traj.steps) * 2 >= n:
        return "invalid actions"
    if Counter(s.anchor for s in traj.steps).most_common(1)[0][1] >= 3:
        return "loop"
    last = traj.steps[-1]
    if last.terminated:
        return "wrong final"
    return "out of steps"


def pattern_report(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Action-type counts, transitions (with start / won / lost ends) and failure modes, for
    successful and failed episodes separately."""
    report: dict[str, Any] = {"episodes": len(trajectories), "won": 0,
                              "action_types": {"won": Counter(), "lost": Counter()},
                              "transitions": {"won": Counter(), "lost": Counter()},
                              "failure_modes": Counter()}
    for traj in trajectories:
        outcome = "won" if traj.won else "lost"
        report["won"] += traj.won
        kinds = [action_type(traj.env_id, s) for s in traj.steps]
        report["action_types"][outcome].update(kinds)
        path = [START, *kinds, WON if traj.won else LOST]
        report["transitions"][outcome].update(zip(path, path[1:], strict=False))
        mode = failure_mode(traj)
        if mode is not None:
            report["failure_modes"][mode] += 1
    return report


def format_patterns(report: dict[str, Any], top: int = 8) -> str:
    """A plain-text summary of :func:`pattern_report`."""
    n, won = report["episodes"], report["won"]
    lines = [f"{n} episodes, {won} won ({won / max(1, n):.1%})"]
    for outcome in ("won", "lost"):
        counts: Counter = report["action_types"][outcome]
        total = sum(counts.values())
        if total:
            shown = ", ".join(f"{k} {v / total:.0%}" for k, v in counts.most_common(top))
            lines.append(f"actions in {outcome} episodes ({total} steps): {shown}")
    for outcome in ("won", "lost"):
        moves = [f"{a} -> {b} ({c})" for (a, b), c in report["transitions"][outcome].most_common(top)]
        if moves:
            lines.append(f"top transitions ({outcome}): " + "; ".join(moves))
    modes: Counter = report["failure_modes"]
    if modes:
        lost = sum(modes.values())
        lines.append("failure modes: " + ", ".join(f"{k} {v} ({v / lost:.0%})" for k, v in modes.most_common()))
    return "\n".join(lines)


def plot_transitions(report: dict[str, Any], path: str | Path) -> Path:
    """Two heat maps (won / lost episodes) of how often action type A is followed by B."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    kinds = sorted({k for outcome in ("won", "lost") for pair in report["transitions"][outcome]
                    for k in pair} - {START, WON, LOST})
    rows, cols = [START, *kinds], [*kinds, WON, LOST]
    fig, axes = plt.subplots(1, 2, figsize=(2 * (2 + 0.55 * len(cols)), 1.5 + 0.45 * len(rows)), squeeze=False)
    for ax, outcome in zip(axes[0], ("won", "lost"), strict=True):
        counts = report["transitions"][outcome]
        grid = np.array([[counts.get((a, b), 0) for b in cols] for a in rows], dtype=float)
        ax.imshow(grid, cmap="Greens" if outcome == "won" else "Reds")
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
        ax.set_yticks(range(len(rows)), rows)
        for (i, j), value in np.ndenumerate(grid):
            if value:
                ax.text(j, i, int(value), ha="center", va="center", fontsize=8)
        ax.set(title=f"{outcome} episodes: action type -> next", xlabel="next", ylabel="from")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
