"""Greedy beside sampled: the two decodings a model row is reported under, and paired effects.

Why both, by default: a model that imitates a noisy demonstrator copies the noise, and greedy
decoding drops it for free. An effect measured against the sampled policy alone can be exactly
what argmax already gives (measured on the main job: a sampled SFT at 47.8% was 72.0% greedily,
above both RL policies trained from it), so ``arlgym eval`` of a model policy at a temperature
above 0 also plays every task greedily and prints the two side by side, paired task by task.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DECODINGS", "MODEL_POLICY_PREFIXES", "is_model_policy", "greedy_companion", "success_by_task",
           "paired_difference", "paired_on_tasks"]

#: the two decodings every model row is reported under
DECODINGS = ("greedy", "sampled")

#: policy spec prefixes whose decoding is a choice (scripted policies have none)
MODEL_POLICY_PREFIXES = ("hf:", "vllm:", "openai:", "openai-tools:")


def is_model_policy(spec: str) -> bool:
    """Whether a policy spec names a model (its decoding is greedy or sampled)."""
    return spec.startswith(MODEL_POLICY_PREFIXES)


def greedy_companion(out: str | Path) -> Path:
    """Where the greedy episodes of a sampled eval written to ``out`` go:
    ``<stem>.greedy.jsonl`` beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}.greedy.jsonl")


def success_by_task(trajectories: Iterable[Any]) -> dict[str, float]:
    """task id -> success rate over its episodes (0/1 for one greedy episode), in order."""
    rooms: dict[str, list[float]] = {}
    for t in trajectories:
        rooms.setdefault(t.task_id, []).append(float(t.won))
    return {k: sum(v) / len(v) for k, v in rooms.items()}


def paired_difference(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """after − before on the same tasks: the mean difference, its standard error from the
    per-task differences (a paired test: tasks both policies win or both lose add no noise)
    and z = mean / SE. Per task a win (bool) or a success rate over several samples."""
    n = len(before)
    if n != len(after) or n < 2:
        raise ValueError("paired_difference needs two equally long outcome lists (n >= 2)")
    d = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    se = math.sqrt(var / n)
    return {"difference": mean, "se": se, "z": mean / se if se > 0 else float("nan"),
            "rooms": n, "gained": sum(x > 0 for x in d), "lost": sum(x < 0 for x in d)}


def paired_on_tasks(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """:func:`paired_difference` over the tasks of ``before``, in its order (both evals played
    the same list; a task missing from ``after`` is an error, not a silent drop)."""
    missing = [k for k in before if k not in after]
    if missing:
        raise ValueError(f"{len(missing)} tasks of the first eval are missing from the second "
                         f"(e.g. {missing[0]}): the two evals did not play the same tasks")
    tasks = list(before)
    return paired_difference([before[k] for k in tasks], [after[k] for k in tasks])
