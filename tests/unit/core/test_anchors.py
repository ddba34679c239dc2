"""anchor_hash: stable across processes, insensitive to dict/set order, sensitive to content."""

import subprocess
import sys

import numpy as np
import pytest

from arlgym import anchor_hash


def test_order_insensitive_containers():
    assert anchor_hash({"a": 1, "b": [1, 2]}) == anchor_hash({"b": [1, 2], "a": 1})
    assert anchor_hash(frozenset({3, 1, 2})) == anchor_hash({2, 3, 1})


def test_content_and_type_sensitive():
    base = anchor_hash((1, 2))
    assert base != anchor_hash((2, 1))  # sequences keep order
    assert anchor_hash(1) != anchor_hash("1") != anchor_hash(1.0)
    assert anchor_hash(True) != anchor_hash(1)
    assert anchor_hash(["ab", "c"]) != anchor_hash(["a", "bc"])  # length-prefixed strings
    a = np.zeros((2, 3), dtype=np.uint8)
    assert anchor_hash(a) != anchor_hash(a.reshape(3, 2)) != anchor_hash(a.astype(np.int64))


def test_digest_shape():
    h = anchor_hash({"x": np.arange(4)})
    assert len(h) == 32 and int(h, 16) >= 0


def test_unsupported_type_raises_typeerror():
    with pytest.raises(TypeError, match="anchor_hash cannot encode"):
        anchor_hash(object())


def test_same_digest_in_another_process():
    state = {"grid": np.arange(9).reshape(3, 3), "player": (1, 2), "facts": {"(at a b)", "(on c d)"}}
    code = (
        "import numpy as np; from arlgym import anchor_hash; "
        "print(anchor_hash({'grid': np.arange(9).reshape(3, 3), 'player': (1, 2), "
        "'facts': {'(on c d)', '(at a b)'}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert out.stdout.strip() == anchor_hash(state)


def test_cached_int_sets_keep_their_digest():
    """Frozensets of plain ints (Sokoban's walls) are encoded once and cached: the digest is the
    uncached encoding's (pinned), on the first and the repeated call, and a set holding a bool
    that equals a cached set's int is not served from the cache."""
    state = (7, 7, frozenset(range(20)), frozenset({9}), frozenset({10}), 3)
    for _ in range(2):
        assert anchor_hash(state) == "9d2bfa312b0ca57cde17702cd7d9fc02"
    assert anchor_hash(frozenset({1, 2})) != anchor_hash(frozenset({True, 2}))
    assert anchor_hash(frozenset({True, 2})) == "191e16730264accf8dff8f7ed8ec42d1"
    assert anchor_hash(frozenset({1, 2})) == anchor_hash({1, 2})  # a set and a frozenset agree
