"""Gymnasium spaces for free text.

``gymnasium.spaces.Text`` only admits characters from a fixed charset (alphanumerics by
default); prompts and LLM responses hold arbitrary Unicode. :class:`AnyText` keeps ``Text``'s
length bound and sampling but accepts any ``str`` within the bound.

Gymnasium's ``AsyncVectorEnv`` passes observations through shared memory by default, which for
``Text`` stores each character as its index in the charset — a prompt's space or newline is no
index of the alphanumeric charset (``KeyError: ' '``). :class:`AnyText` therefore registers its
own shared-memory layout with Gymnasium (UTF-8 bytes after a length), so
``gymnasium.make_vec(id, vectorization_mode="async")`` works with its defaults for every env.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory as _shm

__all__ = ["AnyText", "MAX_TEXT_LENGTH", "SharedTexts"]

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


#: bytes of the length header of one text slot in shared memory
_HEADER = 8


def _slot_bytes(space: AnyText) -> int:
    """One text slot: the length, then room for ``max_length`` characters of UTF-8 (<= 4 bytes
    each; the same 4 bytes per character that Gymnasium's own ``Text`` slot takes)."""
    return _HEADER + 4 * space.max_length


@_shm.create_shared_memory.register(AnyText)
def _create_anytext_shared_memory(space: AnyText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array("B", n * _slot_bytes(space), lock=True)


class SharedTexts(Sequence[str]):
    """The texts of a batch in shared memory, decoded when read.

    ``AsyncVectorEnv`` reads its shared observation buffer once, at construction, and relies on
    that read returning *views* that later writes show through (as numpy arrays do); a tuple of
    ``str`` would stay the first batch forever. This sequence is such a view; a deep copy (what
    the vector env hands out with its default ``copy=True``) is a plain tuple of ``str``.
    """

    def __init__(self, rows: np.ndarray) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._rows[index]
        size = int(row[:_HEADER].view(np.int64)[0])
        return row[_HEADER:_HEADER + size].tobytes().decode("utf-8")

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # a live view: its value changes

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


@_shm.read_from_shared_memory.register(AnyText)
def _read_anytext_from_shared_memory(space: AnyText, shared_memory: Any, n: int = 1) -> SharedTexts:
    data = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8).reshape((n, _slot_bytes(space)))
    return SharedTexts(data)


@_shm.write_to_shared_memory.register(AnyText)
def _write_anytext_to_shared_memory(space: AnyText, index: int, value: str, shared_memory: Any) -> None:
    encoded = value.encode("utf-8")
    slot = _slot_bytes(space)
    if len(encoded) > slot - _HEADER:  # only a str longer than max_length characters
        raise ValueError(f"text of {len(value)} characters exceeds the space's max_length "
                         f"{space.max_length}")
    dest = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)
    start = index * slot
    dest[start:start + _HEADER] = np.frombuffer(np.int64(len(encoded)).tobytes(), dtype=np.uint8)
    dest[start + _HEADER:start + _HEADER + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
