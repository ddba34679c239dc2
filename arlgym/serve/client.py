"""arlgym's own client of ``arlgym serve``: a Gymnasium env whose episodes run on a server, and
a group vector whose groups are spread over several servers.

:class:`RemoteEnv` speaks the server's WebSocket protocol (OpenEnv's messages) and rebuilds
exactly what the in-process env returns — the prompt (vision: the frame, from lossless PNG),
the reward, ``terminated``/``truncated`` and every ``info`` key — so a trajectory played through
a server equals the in-process one for the same seeds (tested). Every wait is bounded: a server
that dies or stops answering raises :class:`RemoteEnvError` naming it within ``timeout``.

:class:`RemoteGroupVecEnv` is what ``make_group_vec(..., servers=[...])`` builds: group ``g``
lives on ``servers[g % len(servers)]``; a step sends every env's action first and then reads
the replies, so the servers (and the sessions on one server) work concurrently.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from arlgym.core.spaces import AnyText
from arlgym.core.vector import GroupVecEnv, WorkerRestarted
from arlgym.errors import ConfigError, MissingDependency, ResetNeeded, WorkerError
from arlgym.serve.codec import decode_result, dumps, jsonable, loads

__all__ = ["RemoteEnv", "RemoteEnvError", "RemoteGroupVecEnv", "make_remote_group_vec",
           "server_envs", "server_tasks"]


class RemoteEnvError(WorkerError):
    """An env server died, stopped answering, refused us, or lost the session.

    ``server`` is its URL; ``env_indices`` (in a vector) the envs whose episodes are lost.
    """

    def __init__(self, message: str, *, server: str = "", cause: str = "",
                 env_indices: list[int] | None = None) -> None:
        super().__init__(message, env_indices=env_indices, cause=cause)
        self.server = server


def _ws_url(url: str) -> str:
    url = url.rstrip("/")
    if url.startswith("http://"):
        return "ws://" + url[7:] + "/ws"
    if url.startswith("https://"):
        return "wss://" + url[8:] + "/ws"
    return url + "/ws"


def server_envs(url: str, token: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """The server's ``GET /envs``: the hosted ids with their kwargs."""
    return _get_json(url, "/envs", token, timeout)


def server_tasks(url: str, env_id: str, split: str, limit: int | None = None,
                 token: str | None = None, timeout: float = 300.0) -> list[str]:
    """The server's ``GET /tasks``: ``env_id``'s enumerated task ids of ``split`` (the first
    ``limit``), listed by the server with its own env kwargs and data."""
    from urllib.parse import urlencode

    query = {"env": env_id, "split": split, **({"limit": limit} if limit is not None else {})}
    try:
        return list(_get_json(url, f"/tasks?{urlencode(query)}", token, timeout)["tasks"])
    except RemoteEnvError as e:
        if e.cause in ("HTTP 400", "HTTP 404", "HTTP 422"):
            raise ConfigError(str(e)) from None
        raise


def _get_json(url: str, path: str, token: str | None, timeout: float) -> dict[str, Any]:
    route = path.split("?", 1)[0]
    req = urllib.request.Request(url.rstrip("/") + path, headers=_auth(token))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        detail = _detail(e.read())
        raise RemoteEnvError(f"env server {url} refused GET {route}: HTTP {e.code} {detail}",
                             server=url, cause=f"HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RemoteEnvError(f"env server {url} cannot be reached: {reason}. Fix: start it "
                             "(arlgym serve --env ...) or correct the URL", server=url,
                             cause=str(reason)) from None


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _detail(raw: bytes) -> str:
    try:
        return str(json.loads(raw).get("detail", ""))
    except (ValueError, AttributeError):
        return raw[:200].decode("utf-8", "replace")


class RemoteEnv(gym.Env):
    """One session of ``env_id`` on the server at ``url``; a drop-in for ``gymnasium.make``.

    Args:
        url: the server, e.g. ``http://host:8000``.
        env_id: a hosted id.
        env_kwargs: the kwargs the caller expects the env to have; they must equal the server's
            (env kwargs are set on the server, ``arlgym serve --env-kwarg``), else
            :class:`ConfigError` — a silent mismatch would train on other tasks.
        token: the server's access token, if it has one.
        timeout: seconds to wait for any reply before the server counts as unresponsive.
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                 token: str | None = None, timeout: float = 60.0, check: bool = True) -> None:
        try:
            from websockets.sync.client import connect
        except ImportError as e:
            raise MissingDependency("remote envs need websockets: pip install "
                                    "'arlgym[serve]'") from e
        self.url, self.env_id, self.timeout = url.rstrip("/"), env_id, float(timeout)
        if check:
            hosted = server_envs(self.url, token, timeout=min(self.timeout, 10.0))["envs"]
            if env_id not in hosted:
                raise ConfigError(f"env server {self.url} does not host {env_id!r}; it hosts "
                                  f"{list(hosted)}. Fix: start it with --env {env_id}")
            theirs = hosted[env_id]["kwargs"]
            if env_kwargs is not None and jsonable(dict(env_kwargs)) != theirs:
                raise ConfigError(f"env_kwargs={dict(env_kwargs)} differ from the kwargs of "
                                  f"{env_id} on {self.url}: {theirs}. Fix: start the server "
                                  "with the same --env-kwarg flags, or pass its kwargs")
        self.action_space = AnyText()
        self.observation_space = AnyText()
        try:
            # entered by hand: the connection lives as long as this env (closed in close())
            self._ws = connect(_ws_url(self.url), additional_headers=_auth(token),
                               open_timeout=min(self.timeout, 10.0),
                               max_size=64 << 20).__enter__()
        except Exception as e:  # noqa: BLE001 - websockets raises several types here
            raise RemoteEnvError(f"env server {self.url} refused or dropped the WebSocket "
                                 f"connection: {e}", server=self.url, cause=str(e)) from None
        self._pending: str | None = None
        self._last_info: dict[str, Any] | None = None

    def _admissible(self) -> list[str] | None:
        """The admissible actions now (from the last info), for policies that ask the env
        (``env.unwrapped._admissible()``, e.g. the random policy)."""
        if self._last_info is None:
            raise ResetNeeded(f"{self.env_id} on {self.url}: call reset() first")
        return self._last_info.get("admissible_actions")

    # ------------------------------------------------------------------ split send/receive
    def send_reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._send({"type": "reset", "data": {"seed": seed, "env": self.env_id,
                                              "options": dict(options or {})}})
        self._pending = "reset"

    def send_step(self, action: str) -> None:
        if not isinstance(action, str):
            raise ConfigError(f"RemoteEnv.step: action={action!r} is invalid: expected the "
                              "LLM's response text (a str)")
        self._send({"type": "step", "data": {"response": action}})
        self._pending = "step"

    def receive(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The reply to the last ``send_*``: ``(obs, reward, terminated, truncated, info)``."""
        what, self._pending = self._pending, None
        result = decode_result(self._reply(what)["data"])
        self._last_info = result[4]
        return result

    def _reply(self, what: str | None) -> dict[str, Any]:
        """The next message from the server; an error message raised as our own types."""
        try:
            raw = self._ws.recv(timeout=self.timeout)
        except TimeoutError:
            raise RemoteEnvError(f"env server {self.url} sent no reply to {what!r} within "
                                 f"timeout={self.timeout:g} s (stopped or overloaded); the "
                                 "episode is lost", server=self.url,
                                 cause="no reply in time") from None
        except Exception as e:  # noqa: BLE001 - ConnectionClosed*, OSError
            raise RemoteEnvError(f"env server {self.url} closed the connection during {what!r} "
                                 f"({type(e).__name__}: {e}); the episode is lost",
                                 server=self.url, cause=type(e).__name__) from None
        message = loads(raw)
        if message.get("type") == "error":
            data = message.get("data", {})
            code, text = data.get("code", ""), data.get("message", "")
            if code in ("INVALID_REQUEST", "VALIDATION_ERROR", "UNKNOWN_ENV"):
                raise ConfigError(f"{self.env_id} on {self.url}: {text}")
            if code == "SESSION_ERROR":
                raise ResetNeeded(f"{self.env_id} on {self.url}: {text}")
            raise RemoteEnvError(f"env server {self.url} answered {what!r} with {code}: {text}",
                                 server=self.url, cause=code)
        return message

    # ------------------------------------------------------------------ scripted policies
    def expert_response(self) -> str:
        """The env's expert answer for the current state, computed on the server (the expert
        reads the env's true state, which lives there): what ``--policy expert`` plays."""
        return self._scripted("expert")

    def teacher_response(self) -> str:
        """The env's greedy teacher's answer (Sokoban), computed on the server."""
        return self._scripted("teacher")

    def _scripted(self, policy: str) -> str:
        self._send({"type": "expert", "data": {"policy": policy}})
        return str(self._reply(policy)["data"]["response"])

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._ws.send(dumps(message))
        except Exception as e:  # noqa: BLE001 - ConnectionClosed*, OSError
            raise RemoteEnvError(f"env server {self.url} is gone ({type(e).__name__}: {e}); "
                                 "the episode is lost", server=self.url,
                                 cause=type(e).__name__) from None

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.send_reset(seed, options)
        obs, _, _, _, info = self.receive()
        return obs, info

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.send_step(action)
        return self.receive()

    def __del__(self) -> None:  # a forgotten env frees its server session and reader thread
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def close(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is None:
            return
        self._ws = None
        try:
            ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - the server may be gone already
            pass
        try:
            ws.close()
        except Exception:  # noqa: BLE001
            pass


#: what a policy may ask of a remote env's ``unwrapped`` (the scripted and random policies)
_REMOTE_METHODS = frozenset({"_admissible", "expert_response", "teacher_response"})


class RemoteGroupVecEnv(GroupVecEnv):
    """Groups of remote envs; see the module docstring.

    A failing server (dead, stopped, refusing) raises :class:`RemoteEnvError` naming it and the
    envs it hosted. With ``restart=True`` the vector follows the async vector's rules instead:
    the lost envs move to the servers still alive (their sessions reset with their last seed
    and options), a ``reset`` simply completes, and a ``step`` raises
    :class:`~arlgym.core.vector.WorkerRestarted` so the rollout collector replays those groups
    from reset (or drops them); ``max_restarts`` bounds the server failures taken.
    """

    def __init__(self, envs: Sequence[RemoteEnv], num_tasks: int, group_size: int,
                 seed: int, *, servers: Sequence[str], make_env: Any, restart: bool = False,
                 max_restarts: int = 3) -> None:
        super().__init__(num_tasks, group_size, seed)
        self.envs = list(envs)
        self.servers = [u.rstrip("/") for u in servers]
        self.restart, self.max_restarts = restart, max_restarts
        self.restarts = 0
        self.dead: dict[str, str] = {}  # server url -> why it was given up
        self._make_env = make_env

    def _exchange(self, sends: list[Any], send: str) -> list[Any]:
        active = [i for i, item in enumerate(sends) if item is not None]
        failed: dict[str, RemoteEnvError] = {}
        for i in active:
            env = self.envs[i]
            if env.url in failed:
                continue
            try:
                if send == "reset":
                    env.send_reset(*sends[i])
                else:
                    env.send_step(sends[i])
            except RemoteEnvError as e:
                failed[env.url] = e
        out: list[Any] = [None] * self.num_envs
        for i in active:  # read every reply, so the healthy sessions stay in step
            env = self.envs[i]
            if env.url in failed:
                continue
            try:
                out[i] = env.receive()
            except RemoteEnvError as e:
                failed[env.url] = e
        if failed:
            self._fail_over(failed, send, sends, out)
        return out

    def _fail_over(self, failed: dict[str, RemoteEnvError], send: str, sends: list[Any],
                   out: list[Any]) -> None:
        url, err = next(iter(failed.items()))
        lost = [i for i, env in enumerate(self.envs) if env.url in failed]
        for u, e in failed.items():
            self.dead[u] = e.cause or "failed"
        live = [u for u in self.servers if u not in self.dead]
        if not self.restart or not live or self.restarts + len(failed) > self.max_restarts:
            why = ("" if not self.restart else " (no server left)" if not live else
                   f" (max_restarts={self.max_restarts} server failures already taken)")
            fix = "" if self.restart else " Fix: pass restart=True to move its envs to the " \
                "other servers (the rollout collector does)."
            raise RemoteEnvError(f"{err} (envs {lost} of this vector){why}.{fix}", server=url,
                                 cause=err.cause, env_indices=lost)
        self.restarts += len(failed)
        for i in lost:
            self.envs[i].close()
            self.envs[i] = self._make_env(live[self.group_of(i) % len(live)])
        if send == "reset":  # complete the reset on the new sessions
            redo = [sends[i] if i in lost else None for i in range(self.num_envs)]
            again = self._exchange(redo, "reset")
            for i in lost:
                out[i] = again[i]
            return
        replay = [self._last_calls[i] if i in lost else None for i in range(self.num_envs)]
        if any(c is not None for c in replay):
            self._exchange(replay, "reset")
        results = [(None, 0.0, False, False, None) if sends[i] is None else
                   (None if i in lost else out[i]) for i in range(self.num_envs)]
        raise WorkerRestarted(f"{err}; envs {lost} moved to {live} and must replay their groups "
                              "from reset", worker=None, env_indices=lost, cause=err.cause,
                              results=results)

    def _run_reset(self, calls):
        out = self._exchange(list(calls), "reset")
        return [None if r is None else (r[0], r[4]) for r in out]

    def _run_step(self, actions):
        out = self._exchange(list(actions), "step")
        return [(None, 0.0, False, False, None) if a is None else r
                for a, r in zip(actions, out, strict=True)]

    # handles(): the base class's index proxies, so a policy always reaches the env that
    # holds the index now (a failed server's envs are replaced by new sessions elsewhere)

    def call_one(self, index: int, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in _REMOTE_METHODS and not args and not kwargs:
            return getattr(self.envs[index], name)()
        raise ConfigError(f"env.unwrapped.{name}() cannot run on a remote env (the env lives "
                          f"on the server; a remote env answers {sorted(_REMOTE_METHODS)}). "
                          "Fix: use a policy that needs only the prompt, or the expert, "
                          "greedy or random policy")

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [self.call_one(i, name, *args, **kwargs) for i in range(self.num_envs)]

    def close(self) -> None:
        for env in self.envs:
            env.close()


def make_remote_group_vec(env_id: str, num_tasks: int, group_size: int, seed: int,
                          servers: Sequence[str], *, timeout: float | None = 300.0,
                          token: str | None = None, env_kwargs: dict[str, Any] | None = None,
                          restart: bool = False, max_restarts: int = 3) -> RemoteGroupVecEnv:
    """``num_tasks × group_size`` remote envs, group ``g`` on ``servers[g % len(servers)]``."""
    if isinstance(servers, str) or not servers:
        raise ConfigError(f"servers={servers!r} is invalid: expected a non-empty list of URLs, "
                          "e.g. servers=['http://host1:8000']")
    for url in servers:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"servers entry {url!r} is invalid: expected a URL like "
                              "http://host:8000")
    checked: set[str] = set()
    wait = 300.0 if timeout is None else float(timeout)

    def make_env(url: str) -> RemoteEnv:
        env = RemoteEnv(url, env_id, env_kwargs, token=token, timeout=wait,
                        check=url not in checked)
        checked.add(url)
        return env

    envs: list[RemoteEnv] = []
    try:
        for i in range(num_tasks * group_size):
            envs.append(make_env(servers[(i // group_size) % len(servers)]))
    except BaseException:
        for env in envs:
            env.close()
        raise
    return RemoteGroupVecEnv(envs, num_tasks, group_size, seed, servers=servers,
                             make_env=make_env, restart=restart, max_restarts=max_restarts)
