"""Anchor-state hashes for GiGPO.

GiGPO groups turns that start from the *same environment state* ("anchor states") across the
trajectories of one task group and compares their returns. The anchor must therefore be a
function of the true state, never of the prompt (two different states can print the same
feedback text), and it must be equal across processes and Python runs so that rollouts collected
by different workers can be grouped. Python's ``hash()`` is salted per process, so we hash a
canonical byte encoding with BLAKE2b instead.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["anchor_hash"]

_DIGEST_BYTES = 16


def _encode(obj: Any, out: hashlib._Hash) -> None:  # type: ignore[name-defined]
    """Feed a type-tagged, order-canonical encoding of ``obj`` into ``out``."""
    if obj is None:
        out.update(b"N")
    elif isinstance(obj, bool):
        out.update(b"T" if obj else b"F")
    elif isinstance(obj, (int, np.integer)):
        data = str(int(obj)).encode()
        out.update(b"i" + struct.pack("<I", len(data)) + data)
    elif isinstance(obj, (float, np.floating)):
        out.update(b"f" + struct.pack("<d", float(obj)))
    elif isinstance(obj, str):
        data = obj.encode("utf-8", "surrogatepass")
        out.update(b"s" + struct.pack("<I", len(data)) + data)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        out.update(b"b" + struct.pack("<I", len(data)) + data)
    elif isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        header = f"{arr.dtype.str}|{arr.shape}".encode()
        out.update(b"a" + struct.pack("<I", len(header)) + header)
        out.update(arr.tobytes())
    elif isinstance(obj, Mapping):
        items = sorted((_digest(k), v) for k, v in obj.items())
        out.update(b"d" + struct.pack("<I", len(items)))
        for key_digest, value in items:
            out.update(key_digest)
            _encode(value, out)
    elif isinstance(obj, (set, frozenset)):
        if type(obj) is frozenset and all(type(v) is int for v in obj):
            body = _INT_SET_BODIES.get(obj)
            if body is None:
                if len(_INT_SET_BODIES) >= _INT_SET_CACHE_MAX:
                    _INT_SET_BODIES.clear()
                body = _INT_SET_BODIES[obj] = _set_body(obj)
            out.update(body)
        else:
            out.update(_set_body(obj))
    elif isinstance(obj, (list, tuple)):
        out.update(b"l" + struct.pack("<I", len(obj)))
        for v in obj:
            _encode(v, out)
    else:
        raise TypeError(
            f"anchor_hash cannot encode {type(obj).__name__}; convert the state to "
            "None/bool/int/float/str/bytes/ndarray or dicts, lists, tuples and sets of them"
        )


#: the encodings of frozensets of plain ints (Sokoban's walls and targets, hashed again at every
#: step of an episode: half the step's time before). Plain ints equal as keys have equal
#: encodings, so the cache cannot mix up values (a set holding a bool or a float never enters)
_INT_SET_BODIES: dict[frozenset, bytes] = {}
_INT_SET_CACHE_MAX = 4096


def _set_body(obj: set | frozenset) -> bytes:
    """A set's encoding: its size, then its members' digests in sorted order."""
    digests = sorted(_digest(v) for v in obj)
    return b"S" + struct.pack("<I", len(digests)) + b"".join(digests)


def _digest(obj: Any) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    _encode(obj, h)
    return h.digest()


def anchor_hash(state: Any) -> str:
    """A stable hex digest of an environment state.

    Equal states give equal digests in every process and Python run; dict key order and set
    order do not matter, list order does. Arrays hash by dtype, shape and contents.

    Args:
        state: nested None/bool/int/float/str/bytes/ndarray/dict/list/tuple/set values.

    Returns:
        32 lowercase hex characters.

    Raises:
        TypeError: for a value of another type (a bug in the env, not a user error).

    >>> anchor_hash({"b": 1, "a": [1, 2]}) == anchor_hash({"a": [1, 2], "b": 1})
    True
    """
    return _digest(state).hex()
