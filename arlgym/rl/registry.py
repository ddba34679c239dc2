"""The one registry factory for the RL algorithm layer (docs/architecture.md,
"Conventions").

Every pluggable piece of :mod:`arlgym.rl` (advantage estimators, policy losses, loss
aggregations, loss modifiers, group filters) lives in a :class:`Registry` and is chosen by name
from a config or preset. All registries follow one rule set:

* registering a name twice raises :class:`RegistryError` (no silent overwrite);
* looking up an unknown name raises :class:`RegistryError` listing the registered names;
* :meth:`Registry.unregister` exists so tests can undo what they added (docs/architecture.md, "Conventions").

>>> from arlgym.rl.registry import LOSSES
>>> sorted(LOSSES.names())[:2]  # doctest: +SKIP
['cispo', 'gspo']
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from arlgym.errors import ConfigError

__all__ = [
    "RegistryError",
    "Registry",
    "ADVANTAGES",
    "LOSSES",
    "AGGREGATIONS",
    "MODIFIERS",
    "FILTERS",
    "REGISTRIES",
    "register",
    "get",
]

F = TypeVar("F", bound=Callable[..., Any])


class RegistryError(ConfigError):
    """A registry name is unknown, or was registered twice."""


class Registry(Generic[F]):
    """A name → function table with strict registration.

    Args:
        kind: what the registry holds, used in error messages (``"policy loss"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator registering ``fn`` under ``name``; a duplicate name raises."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f"a {self.kind} name must be a non-empty string, got {name!r}")

        def deco(fn: F) -> F:
            if name in self._table:
                raise RegistryError(
                    f"{self.kind} {name!r} is already registered (by {self._table[name].__module__}."
                    f"{self._table[name].__qualname__}); pick another name or unregister it first"
                )
            self._table[name] = fn
            return fn

        return deco

    def unregister(self, name: str) -> F:
        """Remove and return ``name`` (for tests that must leave the registry as found)."""
        self.get(name)
        return self._table.pop(name)

    def get(self, name: str) -> F:
        """The function registered as ``name``; an unknown name raises listing the options."""
        try:
            return self._table[name]
        except (KeyError, TypeError):
            pass
        options = sorted(self._table)
        hint = difflib.get_close_matches(str(name), options, n=1)
        did_you_mean = f" Did you mean {hint[0]!r}?" if hint else ""
        raise RegistryError(
            f"unknown {self.kind} {name!r}; registered: {', '.join(options) or '(none)'}.{did_you_mean}"
        )

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._table)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._table)})"


ADVANTAGES: Registry = Registry("advantage estimator")
LOSSES: Registry = Registry("policy loss")
AGGREGATIONS: Registry = Registry("loss aggregation")
MODIFIERS: Registry = Registry("loss modifier")
FILTERS: Registry = Registry("group filter")

#: Registries by the kind names used in :func:`register` / :func:`get`.
REGISTRIES: dict[str, Registry] = {
    "advantage": ADVANTAGES,
    "loss": LOSSES,
    "aggregation": AGGREGATIONS,
    "modifier": MODIFIERS,
    "filter": FILTERS,
}


def _registry(kind: str) -> Registry:
    try:
        return REGISTRIES[kind]
    except KeyError:
        raise RegistryError(
            f"unknown registry kind {kind!r}; kinds: {', '.join(REGISTRIES)}"
        ) from None


def register(kind: str, name: str) -> Callable[[F], F]:
    """``@register("loss", "gspo")``: register a function in the registry of ``kind``."""
    return _registry(kind).register(name)


def get(kind: str, name: str) -> Callable[..., Any]:
    """The function registered as ``name`` in the registry of ``kind``."""
    return _registry(kind).get(name)
