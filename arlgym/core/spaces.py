"""Gymnasium spaces for free text.

``gymnasium.spaces.Text`` only admits characters from a fixed charset (alphanumerics by
default); prompts and LLM responses hold arbitrary Unicode. :class:`AnyText` keeps ``Text``'s
length bound and sampling but accepts any ``str`` within the bound.
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

__all__ = ["AnyText", "MAX_TEXT_LENGTH"]

#: Upper bound on prompt/response length in characters (far above any real prompt).
MAX_TEXT_LENGTH = 1_000_000


class AnyText(spaces.Text):
    """A ``Text`` space whose ``contains`` accepts any string of at most ``max_length`` chars."""

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, seed: Any = None) -> None:
        super().__init__(max_length=max_length, min_length=0, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("AnyText", self.max_length))
