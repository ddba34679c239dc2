"""Success rate, score, lengths, format/action validity and pass@k over trajectories."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from arlgym.rollout import Trajectory

__all__ = ["summarize", "format_summary", "pass_at_k", "SUCCESS_RATE", "SUCCESS_SE", "MEAN_SCORE",
           "FORMAT_VALID_RATIO"]

# The eval summary's vocabulary (``summary.json`` of ``arlgym eval``, the arena's test evals).
# The trainer logs the same numbers under ``eval/`` keys; arlgym.rl.metrics.EVAL_OF_SUMMARY is
# the one translation between the two.
#: fraction of episodes won
SUCCESS_RATE = "success_rate"
#: binomial standard error of the success rate
SUCCESS_SE = "success_se"
#: mean final env score
MEAN_SCORE = "mean_score"
#: turns whose response parsed, over all turns
FORMAT_VALID_RATIO = "format_valid_ratio"


def _stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    n = len(trajs)
    steps = sum(t.length for t in trajs)
    success = sum(t.won for t in trajs) / n
    return {
        "episodes": n,
        SUCCESS_RATE: success,
        SUCCESS_SE: math.sqrt(success * (1 - success) / n) if n > 1 else 0.0,
        MEAN_SCORE: sum(t.score for t in trajs) / n,
        "mean_steps": steps / n,
        "mean_return": sum(t.episode_return for t in trajs) / n,
        FORMAT_VALID_RATIO: sum(s.format_valid for t in trajs for s in t.steps) / max(1, steps),
        "action_valid_ratio": sum(s.action_valid for t in trajs for s in t.steps) / max(1, steps),
    }


def summarize(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Overall metrics plus the same metrics per ``task_type`` (when there is more than one).

    Step-level ratios (format/action validity) are over all turns, not averaged per episode.
    """
    if not trajs:
        return {"overall": {"episodes": 0}, "by_task_type": {}}
    by_type: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_type[t.task_type or "all"].append(t)
    return {
        "overall": _stats(trajs),
        "by_task_type": {k: _stats(v) for k, v in sorted(by_type.items())} if len(by_type) > 1 else {},
    }


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k estimate (Chen et al. 2021): 1 − C(n−c, k) / C(n, k)."""
    if k > num_samples:
        raise ValueError(f"k={k} exceeds the number of samples n={num_samples}")
    if num_samples - num_correct < k:
        return 1.0
    prod = 1.0
    for i in range(num_samples - num_correct + 1, num_samples + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def format_summary(summary: dict[str, Any], title: str = "") -> str:
    """A plain-text table: one row overall, one per task type."""
    cols = [("episodes", "episodes", "{:d}"), ("success", "success_rate", "{:.1%}"),
            ("± se", "success_se", "{:.1%}"), ("score", "mean_score", "{:.3f}"),
            ("steps", "mean_steps", "{:.2f}"), ("format ok", "format_valid_ratio", "{:.1%}"),
            ("action ok", "action_valid_ratio", "{:.1%}")]
    rows = [("overall", summary["overall"])] + list(summary.get("by_task_type", {}).items())
    header = ["task type"] + [c[0] for c in cols]
    body = []
    for name, stats in rows:
        if not stats.get("episodes"):
            body.append([name] + ["-"] * len(cols))
            continue
        body.append([name] + [fmt.format(int(stats[key]) if fmt == "{:d}" else stats[key])
                              for _, key, fmt in cols])
    widths = [max(len(str(r[i])) for r in [header] + body) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).rjust(w) if i else str(v).ljust(w)  # noqa: E731
                               for i, (v, w) in enumerate(zip(r, widths, strict=True)))
    out = [title] if title else []
    out += [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body]
    return "\n".join(out)
