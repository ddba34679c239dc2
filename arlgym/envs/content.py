"""An env's tasks by content: what "the same task" means when a run's tasks are compared with
the held-out panels.

Ids of different splits never collide, but two ids can hold one task (two room seeds that give
one puzzle, two seeds that draw one question). Each env states its rule in
``AgentEnv.task_content_key`` — Sokoban: :func:`~arlgym.envs.sokoban.env.room_content_key`;
TIR Math: :func:`~arlgym.envs.tir_math.problems.problem_content_key`; WebShop (text and
browser): :func:`~arlgym.envs.webshop.splits.goal_content_key`; ALFWorld:
:func:`~arlgym.envs.alfworld.generator.game_content_key` — the same keys that keep the splits
apart and that ``python -m arlgym.envs.split_audit`` audits. :class:`TaskContent` opens the env
once and memoises the keys, so a run's task ids are keyed once, at its end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from arlgym.core.validation import make_checked_env

__all__ = ["TaskContent", "task_content_key"]

#: envs that play another env's tasks through a costlier front end (a browser): their tasks
#: are listed and keyed by that env, with the front end's own kwargs dropped
_SAME_TASKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "arl/WebShopBrowser-v0": ("arl/WebShop-v0", ("page_timeout",)),
}


class TaskContent:
    """The tasks of ``env_id`` made with ``env_kwargs``: their content keys and panels.

    Use as a context manager (the env is closed at exit).
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        kwargs = dict(env_kwargs or {})
        if env_id in _SAME_TASKS:
            env_id, dropped = _SAME_TASKS[env_id]
            kwargs = {k: v for k, v in kwargs.items() if k not in dropped}
        self.env_id = env_id
        self._env = make_checked_env(env_id, kwargs, name="env_kwargs")
        self._keys: dict[str, str] = {}

    @property
    def held_out_splits(self) -> tuple[str, ...]:
        """The env's held-out splits (``test`` and ``val``; ALFWorld: its two eval splits)."""
        return tuple(self._env.unwrapped.held_out_splits)

    def key(self, task_id: str) -> str:
        """The content key of one task id (memoised)."""
        if task_id not in self._keys:
            self._keys[task_id] = self._env.unwrapped.task_content_key(task_id)
        return self._keys[task_id]

    def keys(self, task_ids: Iterable[str]) -> set[str]:
        """The distinct content keys of ``task_ids``."""
        return {self.key(t) for t in set(task_ids)}

    def panel(self, split: str, limit: int) -> list[str]:
        """The first ``limit`` task ids of ``split``: the list an eval of ``limit`` episodes
        plays (``list_tasks``)."""
        return list(self._env.unwrapped.list_tasks(split, limit))

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> TaskContent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def task_content_key(env_id: str, env_kwargs: Mapping[str, Any] | None = None
                     ) -> Callable[[str], str]:
    """A function from a task id of ``env_id`` to its content key (the env stays open for as
    long as the function is referenced; :class:`TaskContent` closes it explicitly)."""
    return TaskContent(env_id, env_kwargs).key
