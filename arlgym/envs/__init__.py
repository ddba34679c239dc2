"""One package per env family (sokoban, alfworld, webshop, tir_math)."""

from __future__ import annotations

__all__ = ["env_family"]

_PREFIXES = {"sokoban": "sokoban", "alfworld": "alfworld", "webshop": "webshop", "tir": "tir_math"}


def env_family(env_id: str, default: str | None = None) -> str | None:
    """The family of an env id (``arl/SokobanVision-v0`` -> ``sokoban``, ``arl/TIRMath-v0`` ->
    ``tir_math``), ``default`` for an id of none of them."""
    name = env_id.split("/")[-1].lower()
    return next((family for prefix, family in _PREFIXES.items() if name.startswith(prefix)), default)
