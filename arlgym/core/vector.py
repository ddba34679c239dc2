"""Groups of envs for group-relative RL: ``num_tasks × group_size`` copies, one task per group.

GRPO/GiGPO/SAMPO compare ``group_size`` rollouts of the *same* task, so every member of a group
must start from the same initial state: member ``j`` of group ``g`` is reset with seed
``base_seed + g`` (or the same ``task_id``), and its own RNG. Autoreset is off: a finished env
stays finished until the next ``reset``, and ``step`` skips envs whose action is ``None`` so the
rollout collector never prompts or steps finished episodes.

Why not ``gymnasium.vector``: it passes one ``options`` dict to every sub-env (we need a task id
per group), merges infos into arrays (our infos hold lists and strings) and always steps every
sub-env. The two classes here keep Gymnasium's method names and tuple order but return a list
of per-env infos. The async version shards envs over a few worker processes (not one process
per env), for envs that are not thread-safe (TextWorld/ALFWorld) or slow.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from arlgym.errors import ArlgymError, ConfigError

__all__ = ["make_group_vec", "GroupVecEnv", "SyncGroupVecEnv", "AsyncGroupVecEnv", "WorkerError"]


class WorkerError(ArlgymError, RuntimeError):
    """An env raised inside a worker process; the message carries the worker's traceback."""


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for one env: ``gymnasium.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        import arlgym  # noqa: F401  (registers the ids inside worker processes)

        return gym.make(self.env_id, **self.kwargs)


StepOut = tuple[Any, float, bool, bool, dict[str, Any] | None]
_SKIPPED: StepOut = (None, 0.0, False, False, None)


def _reset_many(envs: Sequence[gym.Env], calls: Sequence[tuple[int | None, dict | None]]):
    return [env.reset(seed=seed, options=opts) for env, (seed, opts) in zip(envs, calls, strict=True)]


def _step_many(envs: Sequence[gym.Env], actions: Sequence[str | None]) -> list[StepOut]:
    out: list[StepOut] = []
    for env, action in zip(envs, actions, strict=True):
        if action is None:
            out.append(_SKIPPED)
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            out.append((obs, float(reward), bool(terminated), bool(truncated), info))
    return out


class GroupVecEnv:
    """Common bookkeeping of the sync and async group vectors (seeds, task ids, shapes)."""

    def __init__(self, num_tasks: int, group_size: int, seed: int) -> None:
        if not isinstance(num_tasks, int) or num_tasks < 1:
            raise ConfigError(f"num_tasks must be a positive int, got {num_tasks!r}")
        if not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group_size must be a positive int, got {group_size!r}")
        self.num_tasks = num_tasks
        self.group_size = group_size
        self.num_envs = num_tasks * group_size
        self._next_seed = int(seed)
        self.group_seeds: list[int] = []

    def group_of(self, env_index: int) -> int:
        """The group (task) index of env ``env_index``."""
        return env_index // self.group_size

    def _reset_calls(
        self,
        seed: int | None,
        task_ids: Sequence[Any] | None,
        options: dict[str, Any] | None,
    ) -> list[tuple[int | None, dict | None]]:
        base = self._next_seed if seed is None else int(seed)
        self._next_seed = base + self.num_tasks
        self.group_seeds = [base + g for g in range(self.num_tasks)]
        if task_ids is not None and len(task_ids) != self.num_tasks:
            raise ConfigError(
                f"task_ids has {len(task_ids)} entries; give one per task group "
                f"(num_tasks={self.num_tasks})"
            )
        calls = []
        for i in range(self.num_envs):
            g = self.group_of(i)
            opts = dict(options or {})
            if task_ids is not None:
                opts["task_id"] = task_ids[g]
            calls.append((self.group_seeds[g], opts or None))
        return calls

    def reset(
        self,
        *,
        seed: int | None = None,
        task_ids: Sequence[Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Reset every env; group ``g`` gets seed ``base + g`` and ``task_ids[g]`` if given.

        Without ``seed`` the base continues after the previous reset's groups, so repeated
        resets walk through fresh tasks deterministically.
        """
        results = self._run_reset(self._reset_calls(seed, task_ids, options))
        return [obs for obs, _ in results], [info for _, info in results]

    def step(
        self, actions: Sequence[str | None]
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any] | None]]:
        """Step every env whose action is not ``None``; skipped envs return ``None`` obs/info."""
        if len(actions) != self.num_envs:
            raise ConfigError(f"expected {self.num_envs} actions (None to skip), got {len(actions)}")
        results = self._run_step(list(actions))
        obs = [r[0] for r in results]
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        infos = [r[4] for r in results]
        return obs, rewards, terminated, truncated, infos

    def handles(self) -> list[Any]:
        """One object per env that policies needing the true state can use as ``env``.

        Sync vectors return the envs themselves. Async vectors return proxies whose
        ``unwrapped.<method>(...)`` runs in the worker (methods only, e.g. ``expert_response()``
        and ``_admissible()``).
        """
        return [_RemoteEnv(self, i) for i in range(self.num_envs)]

    def call_one(self, index: int, name: str, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _run_reset(self, calls):  # pragma: no cover - abstract
        raise NotImplementedError

    def _run_step(self, actions):  # pragma: no cover - abstract
        raise NotImplementedError

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __enter__(self) -> GroupVecEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _RemoteEnv:
    """Stand-in for an env living in a worker: ``proxy.unwrapped.name(*a)`` calls it there."""

    def __init__(self, vec: GroupVecEnv, index: int) -> None:
        self._vec = vec
        self._index = index

    @property
    def unwrapped(self) -> _RemoteEnv:
        return self

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            return self._vec.call_one(self._index, name, *args, **kwargs)

        return method


class SyncGroupVecEnv(GroupVecEnv):
    """All envs in this process, stepped one after another."""

    def __init__(self, factories: Sequence[Callable[[], gym.Env]], num_tasks: int,
                 group_size: int, seed: int) -> None:
        super().__init__(num_tasks, group_size, seed)
        self.envs = [f() for f in factories]

    def handles(self) -> list[Any]:
        return list(self.envs)

    def _run_reset(self, calls):
        return _reset_many(self.envs, calls)

    def _run_step(self, actions):
        return _step_many(self.envs, actions)

    def call_one(self, index: int, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``env.unwrapped.<name>(*args, **kwargs)`` on env ``index`` (or read it)."""
        attr = getattr(self.envs[index].unwrapped, name)
        return attr(*args, **kwargs) if callable(attr) else attr

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``env.unwrapped.<name>(*args, **kwargs)`` on every env (or read an attribute)."""
        out = []
        for env in self.envs:
            attr = getattr(env.unwrapped, name)
            out.append(attr(*args, **kwargs) if callable(attr) else attr)
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _worker(conn, factories) -> None:
    """Worker loop: hosts a shard of envs and answers (command, payload) messages."""
    try:
        envs = [f() for f in factories]
        conn.send(("ok", None))
    except BaseException:  # noqa: BLE001 - report any construction failure to the parent
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            cmd, payload = conn.recv()
        except EOFError:
            break
        try:
            if cmd == "reset":
                conn.send(("ok", _reset_many(envs, payload)))
            elif cmd == "step":
                conn.send(("ok", _step_many(envs, payload)))
            elif cmd == "call":
                name, args, kwargs = payload
                out = []
                for env in envs:
                    attr = getattr(env.unwrapped, name)
                    out.append(attr(*args, **kwargs) if callable(attr) else attr)
                conn.send(("ok", out))
            elif cmd == "call_one":
                index, name, args, kwargs = payload
                attr = getattr(envs[index].unwrapped, name)
                conn.send(("ok", attr(*args, **kwargs) if callable(attr) else attr))
            elif cmd == "close":
                for env in envs:
                    env.close()
                conn.send(("ok", None))
                break
        except BaseException:  # noqa: BLE001 - the parent re-raises with this traceback
            conn.send(("error", traceback.format_exc()))
    conn.close()


class AsyncGroupVecEnv(GroupVecEnv):
    """Envs sharded over ``num_workers`` processes; every worker steps its shard concurrently."""

    def __init__(self, factories: Sequence[Callable[[], gym.Env]], num_tasks: int,
                 group_size: int, seed: int, num_workers: int | None = None,
                 context: str = "spawn") -> None:
        super().__init__(num_tasks, group_size, seed)
        n = len(factories)
        workers = min(n, num_workers or os.cpu_count() or 1)
        if workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {num_workers!r}")
        bounds = np.linspace(0, n, workers + 1).astype(int)
        self._slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        ctx = mp.get_context(context)
        self._conns = []
        self._procs = []
        for sl in self._slices:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, list(factories[sl])), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._closed = False
        self._gather()

    def _gather(self) -> list[Any]:
        replies = [conn.recv() for conn in self._conns]
        for status, payload in replies:
            if status == "error":
                raise WorkerError(f"an env raised in a worker process:\n{payload}")
        return [payload for _, payload in replies]

    def _scatter(self, cmd: str, per_env: Sequence[Any]) -> list[Any]:
        for conn, sl in zip(self._conns, self._slices, strict=True):
            conn.send((cmd, list(per_env[sl])))
        return [item for part in self._gather() for item in part]

    def _run_reset(self, calls):
        return self._scatter("reset", calls)

    def _run_step(self, actions):
        return self._scatter("step", actions)

    def call_one(self, index: int, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``env.unwrapped.<name>(*args, **kwargs)`` on env ``index`` (or read it)."""
        for w, sl in enumerate(self._slices):
            if sl.start <= index < sl.stop:
                conn = self._conns[w]
                conn.send(("call_one", (index - sl.start, name, args, kwargs)))
                status, payload = conn.recv()
                if status == "error":
                    raise WorkerError(f"an env raised in a worker process:\n{payload}")
                return payload
        raise IndexError(f"env index {index} out of range 0..{self.num_envs - 1}")

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        for conn in self._conns:
            conn.send(("call", (name, args, kwargs)))
        return [item for part in self._gather() for item in part]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("close", None))
                conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def make_group_vec(
    env_id: str,
    num_tasks: int,
    group_size: int,
    seed: int = 0,
    mode: Literal["sync", "async", "auto"] = "sync",
    *,
    num_workers: int | None = None,
    **kwargs: Any,
) -> GroupVecEnv:
    """Build ``num_tasks × group_size`` copies of ``env_id``; members of a group share a task.

    Args:
        env_id: a registered id, e.g. ``"arl/Sokoban-v0"``.
        num_tasks: number of task groups.
        group_size: rollouts per task (GRPO's G).
        seed: base seed; group ``g`` of the first reset uses ``seed + g``.
        mode: ``"sync"`` (one process), ``"async"`` (worker processes), or ``"auto"``:
            async for env classes that declare ``thread_safe = False``, else sync.
        num_workers: worker processes for async mode (default: CPU count).
        **kwargs: passed to ``gymnasium.make`` for every env.

    >>> vec = make_group_vec("arl/Sokoban-v0", num_tasks=2, group_size=3, seed=7)
    >>> obs, infos = vec.reset()
    >>> infos[0]["anchor"] == infos[2]["anchor"] != infos[3]["anchor"]
    True
    """
    import arlgym  # noqa: F401

    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("arl/"))
        raise ConfigError(f"unknown env id {env_id!r}; registered arlgym ids: {known}")
    if mode not in ("sync", "async", "auto"):
        raise ConfigError(f"mode must be 'sync', 'async' or 'auto', got {mode!r}")
    if mode == "auto":
        spec = gym.registry[env_id]
        entry = spec.entry_point
        cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        mode = "sync" if getattr(cls, "thread_safe", True) else "async"
    factories = [EnvFactory(env_id, dict(kwargs)) for _ in range(num_tasks * group_size)]
    if mode == "sync":
        return SyncGroupVecEnv(factories, num_tasks, group_size, seed)
    return AsyncGroupVecEnv(factories, num_tasks, group_size, seed, num_workers=num_workers)
