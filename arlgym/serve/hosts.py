"""Where a server's envs live: in the server process, or in worker processes.

The ASGI event loop runs no env code of its own but the steps of envs that declare
``cheap_step`` (Sokoban, ~0.1 ms: the app calls :meth:`ThreadHost.call` directly): a slow step
(a TIR cell, an ALFWorld planner) would stall every other session. :class:`ThreadHost` runs the envs of thread-safe classes
(``AgentEnv.thread_safe``: Sokoban, TIR Math, WebShop text) in the server process on a thread
pool; each session is stepped by one thread at a time (the app holds a per-session lock), so
episodes stay in order. :class:`ProcessHost` runs the envs of classes that are not thread-safe
(ALFWorld's TextWorld engine, the WebShop browser) in ``workers`` processes; a session is pinned
to one worker, and each worker answers one request at a time, like the async vector's workers.
Both return results already encoded (:func:`arlgym.serve.codec.encode_result`), so encoding
happens off the event loop too.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from typing import Any

from arlgym.core.vector import EnvFactory, _pack_error
from arlgym.errors import ArlgymError, ConfigError
from arlgym.serve.codec import encode_result

__all__ = ["ThreadHost", "ProcessHost", "HostFailure", "EnvRaised", "SCRIPTED_METHODS"]

#: the scripted policies a client may ask a session's env for (``expert`` message): the env
#: method each calls. Only these: a client names a policy, never an arbitrary method.
SCRIPTED_METHODS = {"expert": "expert_response", "teacher": "teacher_response"}


class HostFailure(ArlgymError, RuntimeError):
    """A worker process died or did not answer in time; its sessions are lost."""


class EnvRaised(Exception):
    """The env raised: ``error`` is the exception when it is an arlgym error (a user error the
    client should see, e.g. an unknown ``task_id``), else ``None``; ``text`` its traceback."""

    def __init__(self, text: str, error: BaseException | None) -> None:
        super().__init__(text.strip().splitlines()[-1] if text.strip() else "error")
        self.text, self.error = text, error


def _run(envs: dict[str, Any], cmd: str, sid: str, payload: Any) -> Any:
    """One request against the env table ``envs`` (shared by both hosts)."""
    if cmd == "tasks":  # the enumerated task ids of a split, from a temporary env
        env_id, kwargs, split, limit = payload
        env = EnvFactory(env_id, dict(kwargs))()
        try:
            return list(env.unwrapped.list_tasks(split, limit))
        finally:
            env.close()
    if cmd == "create":
        env_id, kwargs = payload
        old = envs.pop(sid, None)
        if old is not None:
            old.close()
        envs[sid] = EnvFactory(env_id, dict(kwargs))()
        return None
    if cmd == "close":
        env = envs.pop(sid, None)
        if env is not None:
            env.close()
        return None
    env = envs[sid]
    if cmd == "reset":
        seed, options = payload
        obs, info = env.reset(seed=seed, options=options)
        return encode_result(obs, None, False, False, info)
    if cmd == "step":
        obs, reward, terminated, truncated, info = env.step(payload)
        return encode_result(obs, reward, terminated, truncated, info)
    if cmd == "expert":  # the scripted answer for the current state (expert / greedy policies)
        method = SCRIPTED_METHODS[payload]
        respond = getattr(env.unwrapped, method, None)
        if respond is None:
            raise ConfigError(f"{type(env.unwrapped).__name__} has no {payload} policy "
                              f"({method}()); the {payload!r} policy cannot play it")
        return respond()
    raise RuntimeError(f"unknown host command {cmd!r}")  # pragma: no cover - internal


class ThreadHost:
    """Envs in this process; :meth:`call` is blocking and is run on the app's thread pool."""

    def __init__(self) -> None:
        self._envs: dict[str, Any] = {}
        self._lock = threading.Lock()  # guards the table, not the envs

    def call(self, cmd: str, sid: str, payload: Any = None) -> Any:
        try:
            if cmd == "tasks":
                return _run({}, cmd, sid, payload)
            if cmd == "create":
                env_id, kwargs = payload
                env = EnvFactory(env_id, dict(kwargs))()
                with self._lock:
                    old = self._envs.pop(sid, None)
                    self._envs[sid] = env
                if old is not None:
                    old.close()
                return None
            if cmd == "close":
                with self._lock:
                    env = self._envs.pop(sid, None)
                if env is not None:
                    env.close()
                return None
            with self._lock:
                env = self._envs[sid]
            return _run({sid: env}, cmd, sid, payload)
        except Exception:  # noqa: BLE001 - the app turns it into a JSON error
            raise EnvRaised(*_pack_error()) from None

    def shutdown(self) -> None:
        with self._lock:
            envs, self._envs = list(self._envs.values()), {}
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing at exit
                pass


def _worker_main(conn: Any) -> None:
    """A worker process: an env table answering ``(seq, cmd, sid, payload)`` requests."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server handles Ctrl-C and closes us
    envs: dict[str, Any] = {}
    while True:
        try:
            seq, cmd, sid, payload = conn.recv()
        except (EOFError, OSError):
            break
        if cmd == "shutdown":
            break
        try:
            out = ("ok", _run(envs, cmd, sid, payload))
        except BaseException:  # noqa: BLE001 - reported to the server
            out = ("error", _pack_error())
        try:
            conn.send((seq, *out))
        except (BrokenPipeError, ConnectionError, OSError):
            break
    for env in envs.values():
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass


class _Worker:
    def __init__(self, ctx: Any, index: int) -> None:
        self.index = index
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True,
                                name=f"arlgym-serve-worker-{index}")
        self.proc.start()
        child.close()
        self.lock = threading.Lock()
        self.seq = 0
        self.sessions: set[str] = set()
        self.failed: str | None = None

    def request(self, cmd: str, sid: str, payload: Any, timeout: float) -> Any:
        with self.lock:
            if self.failed:
                raise HostFailure(f"env worker {self.index} failed earlier ({self.failed}); "
                                  "the episode is lost. Fix: reset to start it again")
            self.seq += 1
            seq = self.seq
            try:
                self.conn.send((seq, cmd, sid, payload))
                deadline = time.monotonic() + timeout
                while True:
                    if self.conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                        rseq, status, out = self.conn.recv()
                        if rseq != seq:
                            continue
                        if status == "error":
                            raise EnvRaised(*out)
                        return out
                    if not self.proc.is_alive():
                        raise HostFailure(f"exited with code {self.proc.exitcode}")
                    if time.monotonic() >= deadline:
                        raise HostFailure(f"no reply within {timeout:g} s")
            except (EOFError, OSError, BrokenPipeError) as e:
                self._fail(f"its pipe broke ({type(e).__name__})")
                raise HostFailure(f"env worker {self.index} (pid {self.proc.pid}) died: "
                                  f"{self.failed}; its sessions are lost. Fix: reset to start "
                                  "the episode again") from None
            except HostFailure as e:
                self._fail(str(e))
                raise HostFailure(f"env worker {self.index} (pid {self.proc.pid}) failed: "
                                  f"{e}; its sessions are lost. Fix: reset to start the episode "
                                  "again") from None

    def _fail(self, cause: str) -> None:
        self.failed = cause
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()

    def shutdown(self) -> None:
        if self.failed is None:
            try:
                self.conn.send((0, "shutdown", "", None))
            except (OSError, BrokenPipeError):
                pass
            self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)


class ProcessHost:
    """Envs in ``workers`` processes (started with ``spawn``: no server threads are copied);
    a new session goes to the live worker with the fewest sessions, and a failed worker is
    replaced when the next session is created."""

    def __init__(self, workers: int, timeout: float = 300.0) -> None:
        self._ctx = mp.get_context("spawn")
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._workers = [_Worker(self._ctx, i) for i in range(workers)]
        self._where: dict[str, _Worker] = {}

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def _least_busy(self) -> _Worker:
        """The live worker with the fewest sessions (failed ones replaced first); hold the lock."""
        for i, w in enumerate(self._workers):
            if w.failed:
                w.shutdown()
                self._workers[i] = _Worker(self._ctx, i)
        return min(self._workers, key=lambda w: len(w.sessions))

    def call(self, cmd: str, sid: str, payload: Any = None) -> Any:
        if cmd == "tasks":  # a one-off on a temporary env: no session is pinned
            with self._lock:
                worker = self._least_busy()
            return worker.request(cmd, sid, payload, self._timeout)
        with self._lock:
            worker = self._where.get(sid)
            if worker is None or (cmd == "create" and worker.failed):
                if cmd == "close":
                    return None
                worker = self._least_busy()
                self._where[sid] = worker
                worker.sessions.add(sid)
            if cmd == "close":
                self._where.pop(sid, None)
                worker.sessions.discard(sid)
                if worker.failed:
                    return None
        return worker.request(cmd, sid, payload, self._timeout)

    def shutdown(self) -> None:
        for w in self._workers:
            w.shutdown()
