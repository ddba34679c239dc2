"""Fixtures shared by the env tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def own_arlgym_cache(tmp_path_factory):
    """Point ``$ARLGYM_CACHE_DIR`` (WebShop indexes and product stores) at a temporary folder
    for one test module, then restore it: tests never touch the user's ~/.cache."""
    old = os.environ.get("ARLGYM_CACHE_DIR")
    os.environ["ARLGYM_CACHE_DIR"] = str(tmp_path_factory.mktemp("arlgym-cache"))
    yield os.environ["ARLGYM_CACHE_DIR"]
    if old is None:
        os.environ.pop("ARLGYM_CACHE_DIR", None)
    else:
        os.environ["ARLGYM_CACHE_DIR"] = old
