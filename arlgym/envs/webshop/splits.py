"""WebShop's goal splits, and what keeps the held-out goals out of training.

``test`` is goals 0–499 and ``val`` goals 500–599 of WebShop's shuffled goal list (the ids
WebShop and verl-agent evaluate on; fewer in small catalogs, see :func:`split_range`); ``train``
is the rest **less every goal that shares content with a held-out goal**: the same request
(:func:`goal_content_key`: the instruction without its price clause, lower-cased, whitespace
collapsed) or the same target product (its asin). A product has one goal per option
combination, so without the second rule 342 of the 500 test goals of the default catalog would
have their very product (its title, its page, a different size or colour) bought in training.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["split_range", "goal_content_key", "HeldOutGoals", "TEST_GOALS", "VAL_GOALS"]

#: WebShop's test panel (verl-agent evaluates goals 0–499) and arlgym's validation panel.
TEST_GOALS, VAL_GOALS = 500, 100
SPLIT_ALIASES = {"eval": "test", "validation": "val", "valid": "val"}
_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars\.?\s*$")
#: Random draws before a train reset gives up on rejection and scans the train range.
_MAX_DRAWS = 10_000


def split_range(split: str, num_goals: int) -> tuple[int, int]:
    """Goal indices ``[low, high)`` of ``split`` (``train``'s range still holds the goals
    :class:`HeldOutGoals` excludes)."""
    split = SPLIT_ALIASES.get(split, split)
    test_end = min(TEST_GOALS, num_goals // 2)
    val_end = min(test_end + VAL_GOALS, test_end + (num_goals - test_end) // 4)
    ranges = {"test": (0, test_end), "val": (test_end, val_end), "train": (val_end, num_goals)}
    if split not in ranges:
        raise ConfigError(f"unknown split {split!r}; choose one of {sorted(ranges)}")
    return ranges[split]


def goal_content_key(goal: Any) -> str:
    """What a goal asks for, as the agent reads it: the instruction lower-cased, whitespace
    collapsed, its price clause dropped (a request differing only in the price bound is the
    same request)."""
    text = " ".join(str(goal.instruction).lower().split())
    return _PRICE_CLAUSE.sub("", text)


@dataclass(frozen=True)
class HeldOutGoals:
    """The requests and target products of a catalog's ``test`` and ``val`` goals."""

    keys: frozenset[str]
    asins: frozenset[str]

    @classmethod
    def of(cls, catalog: Any) -> HeldOutGoals:
        goals = catalog.goals
        low, _ = split_range("test", len(goals))
        _, high = split_range("val", len(goals))
        held = [goals[j] for j in range(low, high)]
        return cls(frozenset(goal_content_key(g) for g in held), frozenset(g.asin for g in held))

    def overlaps(self, goal: Any) -> bool:
        """Whether ``goal`` asks for a held-out request or targets a held-out product."""
        return goal.asin in self.asins or goal_content_key(goal) in self.keys

    def train_indices(self, catalog: Any) -> list[int]:
        """Every train goal that shares no content with a held-out goal (scans the range)."""
        goals = catalog.goals
        low, high = split_range("train", len(goals))
        return [j for j in range(low, high) if not self.overlaps(goals[j])]

    def draw_train(self, catalog: Any, rng: Any) -> int:
        """A uniform draw among :meth:`train_indices`, by rejection (no scan of big catalogs).

        Raises:
            ConfigError: every train goal shares content with a held-out goal.
        """
        goals = catalog.goals
        low, high = split_range("train", len(goals))
        if high > low:
            for _ in range(_MAX_DRAWS):
                j = int(rng.integers(low, high))
                if not self.overlaps(goals[j]):
                    return j
            allowed = self.train_indices(catalog)
            if allowed:
                return allowed[int(rng.integers(len(allowed)))]
        raise ConfigError(f"no WebShop train goal left: all {high - low} goals after the test and val "
                          f"panels share a request or product with them; use a larger catalog "
                          f"(num_products=, default 1000)")
