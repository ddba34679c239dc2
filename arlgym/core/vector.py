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

import importlib
import logging
import multiprocessing as mp
import os
import pickle
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from arlgym.core.env_ids import register_envs
from arlgym.core.validation import check_bool, check_choice, check_float, check_int, did_you_mean
from arlgym.errors import ArlgymError, ConfigError, EnvCrashed, WorkerError

__all__ = ["make_group_vec", "GroupVecEnv", "SyncGroupVecEnv", "AsyncGroupVecEnv", "WorkerError",
           "WorkerRestarted"]

logger = logging.getLogger("arlgym.vector")


class WorkerRestarted(WorkerError):
    """A worker died or hung and was replaced (``restart=True``); its envs were reset.

    Raised by ``step``/``call``/``call_one`` (``reset`` retries by itself), also when an env of
    a live worker raised :class:`~arlgym.errors.EnvCrashed` (its browser or simulator died; the
    worker is kept, the env starts a new one on reset): the episodes of the envs in
    ``env_indices`` are lost, so their groups must be replayed from reset
    (:meth:`GroupVecEnv.reset_envs`) or dropped whole. ``results`` holds the reply of every other
    env of the interrupted request (``None`` for the envs of the replaced worker), so the
    caller can keep the work the healthy workers did.
    """

    def __init__(self, message: str, *, worker: int | None = None,
                 env_indices: list[int] | None = None, cause: str = "",
                 results: list[Any] | None = None) -> None:
        super().__init__(message, worker=worker, env_indices=env_indices, cause=cause)
        self.results = results


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for one env: ``gymnasium.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        register_envs()  # inside worker processes too

        return gym.make(self.env_id, **self.kwargs)


#: what ``make_group_vec(..., servers=[...])`` builds, named like an env id's entry point: the
#: remote vector lives in the serve layer above the core, so the core names it instead of
#: importing it (the same seam as :data:`arlgym.core.env_ids.ENV_IDS`)
REMOTE_GROUP_VEC = "arlgym.serve.client:make_remote_group_vec"


def _load_entry(entry: str) -> Any:
    """The object a ``"module:attribute"`` string names (imported on first use)."""
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


StepOut = tuple[Any, float, bool, bool, dict[str, Any] | None]
_SKIPPED: StepOut = (None, 0.0, False, False, None)


def _reset_many(envs: Sequence[gym.Env], calls: Sequence[tuple[int | None, dict | None] | None]):
    """Reset each env with its ``(seed, options)``; a ``None`` call leaves that env alone."""
    return [None if call is None else env.reset(seed=call[0], options=call[1])
            for env, call in zip(envs, calls, strict=True)]


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
        #: the (seed, options) each env was last reset with, for replaying a group
        self._last_calls: list[tuple[int | None, dict | None] | None] = [None] * self.num_envs

    def group_of(self, env_index: int) -> int:
        """The group (task) index of env ``env_index``."""
        return env_index // self.group_size

    def state_dict(self) -> dict[str, int]:
        """The task-stream position (the seed the next ``reset`` draws its groups from), so a
        resumed run continues with the tasks an uninterrupted one would have played."""
        return {"next_seed": int(self._next_seed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the task stream from a :meth:`state_dict`."""
        self._next_seed = int(state["next_seed"])

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
        calls = self._reset_calls(seed, task_ids, options)
        results = self._run_reset(calls)
        self._last_calls = list(calls)
        return [obs for obs, _ in results], [info for _, info in results]

    def reset_envs(self, indices: Sequence[int]) -> tuple[list[Any], list[dict[str, Any]]]:
        """Reset only the envs in ``indices``, each with the seed and options of its last
        :meth:`reset` (same task, same first state), e.g. to replay a group from the start.

        Returns the observations and infos of those envs, in the order of ``indices``.
        """
        wanted = sorted(set(indices))
        for i in wanted:
            if not 0 <= i < self.num_envs or self._last_calls[i] is None:
                raise ConfigError(f"reset_envs: env index {i} is out of range 0..{self.num_envs - 1} "
                                  "or was never reset; call reset() first")
        calls = [self._last_calls[i] if i in wanted else None for i in range(self.num_envs)]
        results = self._run_reset(calls)
        by_index = {i: results[i] for i in wanted}
        return [by_index[i][0] for i in indices], [by_index[i][1] for i in indices]

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


def _pack_error() -> tuple[str, BaseException | None]:
    """The current exception as (traceback text, the exception if it is a picklable
    arlgym error, so the parent can re-raise the same type)."""
    import sys

    exc = sys.exc_info()[1]
    text = traceback.format_exc()
    if isinstance(exc, ArlgymError):
        try:
            pickle.loads(pickle.dumps(exc))
            return text, exc
        except Exception:  # noqa: BLE001 - an unpicklable error travels as text
            pass
    return text, None


def _worker(conn, factories, index: int) -> None:
    """Worker loop: hosts a shard of envs and answers ``(seq, command, payload)`` messages with
    ``(seq, status, payload)``; the sequence number lets the parent drop stale replies."""
    import signal

    # Ctrl-C goes to the whole process group; the parent handles it and closes the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        envs = [f() for f in factories]
        conn.send((0, "ok", None))
    except BaseException:  # noqa: BLE001 - report any construction failure to the parent
        conn.send((0, "error", _pack_error()))
        return
    while True:
        try:
            seq, cmd, payload = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if cmd == "reset":
                out: Any = _reset_many(envs, payload)
            elif cmd == "step":
                out = _step_many(envs, payload)
            elif cmd == "call":
                name, args, kwargs = payload
                out = []
                for env in envs:
                    attr = getattr(env.unwrapped, name)
                    out.append(attr(*args, **kwargs) if callable(attr) else attr)
            elif cmd == "call_one":
                local, name, args, kwargs = payload
                attr = getattr(envs[local].unwrapped, name)
                out = attr(*args, **kwargs) if callable(attr) else attr
            elif cmd == "close":
                for env in envs:
                    env.close()
                conn.send((seq, "ok", None))
                break
            else:  # pragma: no cover - internal protocol
                raise RuntimeError(f"unknown worker command {cmd!r}")
            conn.send((seq, "ok", out))
        except (BrokenPipeError, ConnectionError):  # the parent is gone
            break
        except BaseException:  # noqa: BLE001 - the parent re-raises with this traceback
            try:
                conn.send((seq, "error", _pack_error()))
            except (BrokenPipeError, ConnectionError, OSError):
                break
    conn.close()


class _Failure(Exception):
    """Internal: a worker is dead or did not answer in time (``cause`` says which)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


#: the start method of async workers when none is given (tests switch it to "fork")
DEFAULT_CONTEXT = "spawn"

#: payloads above this size are sent from a helper thread, so a stopped worker whose pipe is
#: full cannot block the parent past the timeout
_BIG_PAYLOAD = 32 * 1024


class _WorkerLifecycle:
    """Starting, ending and replacing the worker processes of :class:`AsyncGroupVecEnv`, and
    turning a failed request into a restart, a retried reset or a :class:`WorkerError`."""

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child, self._factories[self._slices[w]], w),
                                 daemon=True, name=f"arlgym-vec-worker-{w}")
        proc.start()
        child.close()
        self._conns[w], self._procs[w] = parent, proc

    def _await_ready(self, w: int) -> None:
        build_timeout = None if self.timeout is None else max(self.timeout, 120.0)
        try:
            status, payload = self._recv(w, 0, build_timeout)
        except _Failure as f:
            hint = ""
            if self._context in ("spawn", "forkserver") and not self._procs[w].is_alive():
                hint = (f" With the {self._context!r} start method every worker re-imports your "
                        "main script: if it builds the vector (or the collector/trainer) at top "
                        "level, put that code under `if __name__ == \"__main__\":`, or pass "
                        "context='fork'. The worker's own error, if any, is printed above.")
            self._kill(w)
            raise WorkerError(f"{self._describe(w)} failed while building its envs: {f.cause}.{hint}",
                              worker=w, env_indices=self._envs_of(w), cause=f.cause) from None
        if status == "error":
            self._kill(w)
            self._raise_env_error(w, "building its envs", payload)

    def _kill(self, w: int) -> None:
        proc, conn = self._procs[w], self._conns[w]
        if proc is not None and proc.is_alive():
            proc.kill()  # SIGKILL also ends a stopped (SIGSTOP) process
        if proc is not None:
            proc.join(timeout=5)
        if conn is not None:
            conn.close()

    def _restart_worker(self, w: int, cause: str) -> list[Any] | None:
        """Replace worker ``w``; its envs are reset with their last calls. Returns those reset
        results (``None`` entries for envs never reset)."""
        what = self._describe(w)
        self._kill(w)
        if self.restarts >= self.max_restarts:
            self._failed[w] = cause
            raise WorkerError(
                f"{what} failed: {cause}; not replaced because the vector already replaced "
                f"max_restarts={self.max_restarts} workers. Fix: find out why workers die (memory? "
                "a crashing env?) or raise max_restarts.",
                worker=w, env_indices=self._envs_of(w), cause=cause)
        self.restarts += 1
        logger.warning("%s failed (%s); replacing it (restart %d of at most %d)",
                       what, cause, self.restarts, self.max_restarts)
        self._start(w)
        self._await_ready(w)
        calls = self._last_calls[self._slices[w]]
        if all(c is None for c in calls):
            return None
        seq = self._send(w, "reset", list(calls))
        try:
            status, payload = self._recv(w, seq, self.timeout)
        except _Failure as f:
            self._kill(w)
            self._failed[w] = f.cause
            raise WorkerError(f"{self._describe(w)} (a replacement) failed again while resetting "
                              f"its envs: {f.cause}", worker=w, env_indices=self._envs_of(w),
                              cause=f.cause) from None
        if status == "error":
            self._raise_env_error(w, "reset", payload)
        return payload

    def _death_cause(self, w: int) -> str:
        proc = self._procs[w]
        proc.join(timeout=1)
        code = proc.exitcode
        if code is None:
            return "its pipe closed while the process is still running"
        if code < 0:
            import signal

            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the process was killed by {name}"
        return f"the process exited with code {code}"

    def _raise_env_error(self, w: int, what: str, payload: tuple[str, BaseException | None]):
        text, exc = payload
        if exc is not None:  # the env's own error (e.g. ConfigError for bad reset options)
            if isinstance(exc, WorkerError) and exc.worker is None:  # e.g. EnvCrashed: say where
                exc.worker, exc.env_indices = w, self._envs_of(w)
            raise exc
        raise WorkerError(f"an env of {self._describe(w)} raised during {what}:\n{text}",
                          worker=w, env_indices=self._envs_of(w), cause=text.strip().splitlines()[-1])

    def _handle_failures(self, cmd: str, payloads: dict[int, Any], failures: dict[int, str],
                         replies: dict[int, Any], crashed: dict[int, str] | None = None) -> None:
        """Dead/hung workers (``failures``) and, with ``restart=True``, live workers whose env
        raised :class:`EnvCrashed` (``crashed``: the worker is kept; the env recovers on reset)
        are handled alike: a ``reset`` is completed, any other request raises
        :class:`WorkerRestarted` for all their envs (a step may have run on some of them)."""
        crashed = crashed or {}
        if not self.restart:
            w, cause = next(iter(failures.items()))
            already = w in self._failed
            for fw, fcause in failures.items():
                self._failed.setdefault(fw, fcause)
                self._kill(fw)
            others = "" if len(failures) == 1 else f" (and workers {sorted(failures)[1:]})"
            usable = ("" if already else " The other workers stay usable; requests that involve "
                      "this worker's envs will raise this error again.")
            raise WorkerError(
                f"{self._describe(w)}{others} failed during {cmd!r}: {cause}.{usable} Fix: pass "
                "restart=True to replace dead workers (the rollout collector does), or timeout= "
                "for slow envs.", worker=w, env_indices=self._envs_of(w), cause=cause)
        restarted: list[int] = []
        for w, cause in failures.items():
            if w in self._failed:
                raise WorkerError(f"{self._describe(w)} {cause}; build a new vector", worker=w,
                                  env_indices=self._envs_of(w), cause=cause)
            reset_results = self._restart_worker(w, cause)
            restarted.append(w)
            if cmd == "reset":  # replay the reset: the replacement was reset with these calls
                replies[w] = self._retry_reset(w, payloads[w], reset_results)
        for w, cause in crashed.items():
            self.env_crashes += 1
            logger.warning("an env of %s crashed during %r (%s); its episodes are lost",
                           self._describe(w), cmd, cause)
            if cmd == "reset":  # the env starts a new browser/simulator on reset: retry once
                replies[w] = self._retry_reset(w, payloads[w], None)
        if cmd == "reset":
            return
        envs = sorted(i for w in [*restarted, *crashed] for i in self._envs_of(w))
        partial = self._flatten(cmd, replies, payloads)
        what = []
        if restarted:
            what.append(f"{', '.join(self._describe(w) for w in restarted)} failed during {cmd!r} "
                        f"({'; '.join(failures[w] for w in restarted)}) and was replaced")
        if crashed:
            what.append(f"an env of {', '.join(self._describe(w) for w in crashed)} crashed during "
                        f"{cmd!r} ({'; '.join(crashed.values())})")
        first = restarted[0] if restarted else next(iter(crashed))
        raise WorkerRestarted(
            f"{'; '.join(what)}; envs {envs} lost their episodes, so their groups must be "
            "replayed from reset", worker=first, env_indices=envs,
            cause=failures[first] if restarted else crashed[first], results=partial)

    def _retry_reset(self, w: int, calls: list[Any], reset_results: list[Any] | None) -> list[Any]:
        if reset_results is not None and list(calls) == list(self._last_calls[self._slices[w]]):
            return reset_results
        seq = self._send(w, "reset", calls)
        status, payload = self._recv(w, seq, self.timeout)
        if status == "error":
            self._raise_env_error(w, "reset", payload)
        return payload


class AsyncGroupVecEnv(_WorkerLifecycle, GroupVecEnv):
    """Envs sharded over ``num_workers`` processes; every worker steps its shard concurrently.

    Every request carries a sequence number that the reply echoes, so a reply left over from an
    earlier, failed request is dropped, never taken for the answer to a later one. A worker that
    dies or does not answer within ``timeout`` seconds raises :class:`WorkerError` naming the
    worker, its envs and the cause; the other workers' replies are read first, so they stay in
    step and usable. With ``restart=True`` the worker is killed and replaced by a fresh one whose
    envs are reset with their last seed and options: ``reset`` then simply completes, while
    ``step``/``call``/``call_one`` raise :class:`WorkerRestarted` so the caller (the rollout
    collector) replays the affected groups from reset or drops them whole.

    Args:
        factories: one picklable zero-argument callable per env.
        num_tasks, group_size, seed: see :class:`GroupVecEnv`.
        num_workers: worker processes (default: CPU count, at most one per env).
        context: multiprocessing start method: ``"spawn"`` (default: :data:`DEFAULT_CONTEXT`),
            ``"forkserver"`` or ``"fork"``. ``spawn``/``forkserver`` re-import the main script
            in each worker, so a script must build the vector under
            ``if __name__ == "__main__":``.
        timeout: seconds to wait for any reply before the worker counts as hung (``None``: wait
            for ever). Building the envs gets ``max(timeout, 120)``.
        restart: replace a dead or hung worker instead of raising :class:`WorkerError`.
        max_restarts: replacements allowed over the vector's life before :class:`WorkerError`.
    """

    def __init__(self, factories: Sequence[Callable[[], gym.Env]], num_tasks: int,
                 group_size: int, seed: int, num_workers: int | None = None,
                 context: str | None = None, *, timeout: float | None = 300.0,
                 restart: bool = False, max_restarts: int = 3) -> None:
        self._closed = True  # until the workers exist (close() and __del__ check it)
        super().__init__(num_tasks, group_size, seed)
        n = len(factories)
        if n != self.num_envs:
            raise ConfigError(f"got {n} env factories for num_tasks × group_size = {self.num_envs}")
        num_workers = check_int("num_workers", num_workers, min=1, allow_none=True)
        self.timeout = check_float("timeout", timeout, gt=0, allow_none=True,
                                   fix="pass seconds > 0, e.g. timeout=300, or None to wait for ever")
        self.restart = check_bool("restart", restart)
        self.max_restarts = check_int("max_restarts", max_restarts, min=0)
        context = context or DEFAULT_CONTEXT
        methods = mp.get_all_start_methods()
        if context not in methods:
            raise ConfigError(f"context={context!r} is invalid: expected one of {methods} "
                              "(a multiprocessing start method). Fix: pass context='spawn'.")
        _check_not_bootstrapping()
        workers = min(n, num_workers or os.cpu_count() or 1)
        bounds = np.linspace(0, n, workers + 1).astype(int)
        self._slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        self._factories = list(factories)
        self._env_id = getattr(self._factories[0], "env_id", None)
        self._context = context
        self._ctx = mp.get_context(context)
        self._conns: list[Any] = [None] * workers
        self._procs: list[Any] = [None] * workers
        self._failed: dict[int, str] = {}  # worker -> cause, for workers given up on
        self._seq = 0
        #: workers replaced so far (restart=True)
        self.restarts = 0
        #: envs whose browser/simulator died (EnvCrashed) and whose groups were replayed (restart=True)
        self.env_crashes = 0
        self._closed = False
        try:
            for w in range(workers):
                self._start(w)
            for w in range(workers):
                self._await_ready(w)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ worker lifecycle
    @property
    def num_workers(self) -> int:
        return len(self._slices)

    def worker_pid(self, worker: int) -> int | None:
        """The process id of worker ``worker`` (for tests and diagnostics)."""
        return self._procs[worker].pid

    def worker_of(self, env_index: int) -> int:
        """The worker hosting env ``env_index``."""
        for w, sl in enumerate(self._slices):
            if sl.start <= env_index < sl.stop:
                return w
        raise IndexError(f"env index {env_index} out of range 0..{self.num_envs - 1}")

    def _envs_of(self, w: int) -> list[int]:
        return list(range(self._slices[w].start, self._slices[w].stop))

    def _describe(self, w: int) -> str:
        envs = self._envs_of(w)
        span = f"env {envs[0]}" if len(envs) == 1 else f"envs {envs[0]}-{envs[-1]}"
        pid = self._procs[w].pid if self._procs[w] is not None else "?"
        what = f" of {self._env_id}" if self._env_id else ""
        return f"vector worker {w} (pid {pid}, {span}{what})"

    # ------------------------------------------------------------------ messaging
    def _send(self, w: int, cmd: str, payload: Any) -> int:
        """Send one request; returns its sequence number. Raises _Failure if the pipe is gone
        or a large payload cannot be written within the timeout."""
        self._seq += 1
        seq = self._seq
        conn = self._conns[w]
        data = bytes(mp.reduction.ForkingPickler.dumps((seq, cmd, payload)))
        try:
            if len(data) <= _BIG_PAYLOAD:
                conn.send_bytes(data)
            else:
                err: list[BaseException] = []

                def write() -> None:
                    try:
                        conn.send_bytes(data)
                    except BaseException as e:  # noqa: BLE001 - reported below
                        err.append(e)

                t = threading.Thread(target=write, daemon=True)
                t.start()
                t.join(self.timeout)
                if t.is_alive():
                    raise _Failure(f"could not send the {cmd!r} request within "
                                   f"timeout={self.timeout} s ({self._state(w)})")
                if err:
                    raise err[0]
        except (BrokenPipeError, ConnectionError, EOFError, OSError):
            raise _Failure(self._death_cause(w)) from None
        return seq

    def _state(self, w: int) -> str:
        """``alive``, ``stopped (SIGSTOP)`` or ``exited ...``, read from the process table."""
        proc = self._procs[w]
        if not proc.is_alive():
            return self._death_cause(w)
        try:
            with open(f"/proc/{proc.pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "the process is alive but unresponsive"
        if state in ("T", "t"):
            return "the process is stopped (SIGSTOP/SIGTSTP)"
        return "the process is alive but unresponsive"

    def _recv(self, w: int, seq: int, timeout: float | None) -> tuple[str, Any]:
        """The reply to request ``seq`` of worker ``w``; stale replies are dropped."""
        conn, proc = self._conns[w], self._procs[w]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 0.5 if deadline is None else min(0.5, max(0.0, deadline - time.monotonic()))
            try:
                ready = conn.poll(wait)
            except (EOFError, OSError):
                raise _Failure(self._death_cause(w)) from None
            if not ready:
                if not proc.is_alive():
                    raise _Failure(self._death_cause(w))
                if deadline is not None and time.monotonic() >= deadline:
                    raise _Failure(f"no reply within timeout={timeout:g} s ({self._state(w)})")
                continue
            try:
                rseq, status, payload = conn.recv()
            except (EOFError, OSError):
                raise _Failure(self._death_cause(w)) from None
            if rseq == seq:
                return status, payload
            # a reply to an earlier request that failed or timed out: never use it

    def _request(self, cmd: str, payloads: dict[int, Any]) -> dict[int, Any]:
        """Send ``payloads[w]`` to each worker ``w``, read every reply, then handle failures.

        Returns ``{worker: reply}``. Dead/hung workers: ``WorkerError`` (restart=False) or
        ``WorkerRestarted`` after replacing them; a ``reset`` is completed instead.
        """
        if self._closed:
            raise WorkerError("the vector is closed; build a new one")
        sent: dict[int, int] = {}
        failures: dict[int, str] = {}
        replies: dict[int, Any] = {}
        errors: dict[int, Any] = {}
        for w, payload in payloads.items():
            if w in self._failed:
                failures[w] = f"it failed earlier ({self._failed[w]})"
                continue
            try:
                sent[w] = self._send(w, cmd, payload)
            except _Failure as f:
                failures[w] = f.cause
        for w, seq in sent.items():  # read every healthy worker's reply, so all stay in step
            try:
                status, payload = self._recv(w, seq, self.timeout)
            except _Failure as f:
                failures[w] = f.cause
                continue
            (errors if status == "error" else replies)[w] = payload
        crashed: dict[int, str] = {}  # live workers whose env lost its episode (EnvCrashed)
        if self.restart:
            for w in [w for w, (_, exc) in errors.items() if isinstance(exc, EnvCrashed)]:
                crashed[w] = errors.pop(w)[1].cause or "an env crashed"
        if failures or crashed:
            self._handle_failures(cmd, payloads, failures, replies, crashed)
        for w, payload in errors.items():
            self._raise_env_error(w, cmd, payload)
        return replies

    def _flatten(self, cmd: str, replies: dict[int, Any], payloads: dict[int, Any]) -> list[Any]:
        """Per-env results from per-worker replies; envs of workers without a reply get
        ``None`` (or the skipped-step tuple when the request skipped them)."""
        out: list[Any] = []
        for w, sl in enumerate(self._slices):
            size = sl.stop - sl.start
            if w in replies:
                out.extend(replies[w])
            elif w not in payloads and cmd == "step":
                out.extend([_SKIPPED] * size)
            else:
                out.extend([None] * size)
        return out

    def _scatter(self, cmd: str, per_env: Sequence[Any], skip_none: bool) -> list[Any]:
        payloads = {}
        for w, sl in enumerate(self._slices):
            part = list(per_env[sl])
            if skip_none and all(p is None for p in part):
                continue  # nothing for this worker: leave it (and a failed one) alone
            payloads[w] = part
        return self._flatten(cmd, self._request(cmd, payloads), payloads)

    # ------------------------------------------------------------------ GroupVecEnv API
    def _run_reset(self, calls):
        return self._scatter("reset", calls, skip_none=True)

    def _run_step(self, actions):
        return self._scatter("step", actions, skip_none=True)

    def call_one(self, index: int, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``env.unwrapped.<name>(*args, **kwargs)`` on env ``index`` (or read it)."""
        w = self.worker_of(index)
        replies = self._request("call_one", {w: (index - self._slices[w].start, name, args, kwargs)})
        return replies[w]

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``env.unwrapped.<name>(*args, **kwargs)`` on every env (or read an attribute)."""
        payloads = {w: (name, args, kwargs) for w in range(self.num_workers)}
        return self._flatten("call", self._request("call", payloads), payloads)

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for w in range(self.num_workers):
            if self._procs[w] is None or w in self._failed or not self._procs[w].is_alive():
                continue
            try:
                seq = self._send(w, "close", None)
                self._recv(w, seq, 5.0)
            except (_Failure, OSError, EOFError):
                pass
        for w in range(self.num_workers):
            if self._procs[w] is not None:
                self._procs[w].join(timeout=5)
                self._kill(w)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _check_not_bootstrapping() -> None:
    """Refuse to start workers from a worker that is still importing the main script (a
    script without a ``__main__`` guard under the spawn/forkserver start methods)."""
    if getattr(mp.current_process(), "_inheriting", False):
        raise ConfigError(
            "an async vector is being built while a worker process imports the main script: "
            "the script has no `if __name__ == \"__main__\":` guard. Fix: put the code that "
            "builds the vector (or collector/trainer) under that guard, or pass context='fork'.")

def make_group_vec(
    env_id: str,
    num_tasks: int,
    group_size: int,
    seed: int = 0,
    mode: Literal["sync", "async", "auto"] = "sync",
    *,
    num_workers: int | None = None,
    timeout: float | None = 300.0,
    restart: bool = False,
    max_restarts: int = 3,
    context: str | None = None,
    servers: Sequence[str] | None = None,
    server_token: str | None = None,
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
        timeout: async mode: seconds a worker may take to answer before it counts as hung and
            :class:`WorkerError` is raised (``None``: wait for ever).
        restart: async mode: replace a dead or hung worker and raise :class:`WorkerRestarted`
            (its groups must be replayed) instead of :class:`WorkerError`.
        max_restarts: async mode: worker replacements allowed over the vector's life.
        context: async mode: multiprocessing start method (``spawn``, ``forkserver``, ``fork``;
            default :data:`DEFAULT_CONTEXT`).
        servers: env server URLs (``arlgym serve``): the envs run there, group ``g`` on
            ``servers[g % len(servers)]`` (:class:`arlgym.serve.client.RemoteGroupVecEnv`);
            ``mode``/``num_workers``/``context`` do not apply, ``restart`` moves the envs of a
            failed server to the live ones; ``kwargs`` must equal the server's env kwargs.
        server_token: the servers' access token, if they have one.
        **kwargs: passed to ``gymnasium.make`` for every env.

    >>> vec = make_group_vec("arl/Sokoban-v0", num_tasks=2, group_size=3, seed=7)
    >>> obs, infos = vec.reset()
    >>> infos[0]["anchor"] == infos[2]["anchor"] != infos[3]["anchor"]
    True
    """
    register_envs()
    if not isinstance(env_id, str) or env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("arl/"))
        raise ConfigError(f"unknown env id {env_id!r}{did_you_mean(env_id, known)}; registered "
                          f"arlgym ids: {known}")
    num_tasks = check_int("num_tasks", num_tasks, min=1)
    group_size = check_int("group_size", group_size, min=1)
    check_choice("mode", mode, ("sync", "async", "auto"))
    if servers is not None:
        make_remote_group_vec = _load_entry(REMOTE_GROUP_VEC)
        return make_remote_group_vec(env_id, num_tasks, group_size, seed, servers,
                                     timeout=timeout, token=server_token, env_kwargs=dict(kwargs),
                                     restart=restart, max_restarts=max_restarts)
    if mode == "auto":
        spec = gym.registry[env_id]
        entry = spec.entry_point
        cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        mode = "sync" if getattr(cls, "thread_safe", True) else "async"
    factories = [EnvFactory(env_id, dict(kwargs)) for _ in range(num_tasks * group_size)]
    if mode == "sync":
        return SyncGroupVecEnv(factories, num_tasks, group_size, seed)
    return AsyncGroupVecEnv(factories, num_tasks, group_size, seed, num_workers=num_workers,
                            context=context, timeout=timeout, restart=restart,
                            max_restarts=max_restarts)
