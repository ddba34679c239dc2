"""The env server's ASGI app: OpenEnv's protocol over many sessions of arlgym envs.

Routes (OpenEnv 0.10's, so its ``GenericEnvClient``, ``MCPToolClient`` and ``openenv validate``
work unchanged, plus ``/envs``, ``/tasks`` and ``/close``):

==================  =========================================================================
``GET /health``     ``{"status": "healthy", "sessions": n, "max_sessions": m, "resets": r,
                    "steps": s}`` (r, s: resets and steps served since the server started)
``GET /metadata``   OpenEnv's ``EnvironmentMetadata`` (name, description, version)
``GET /schema``     JSON schemas of the action, observation and state
``GET /envs``       the hosted env ids with their server-side kwargs (clients check them)
``GET /tasks``      ``?env=…&split=…&limit=…``: the env's enumerated task ids of a split (the
                    fixed eval list ``arlgym eval --env-servers`` plays)
``POST /reset``     new HTTP session (or ``session_id`` to reuse one): the first observation
``POST /step``      ``{"session_id": …, "action": {"response": "<LLM text>"}}``
``GET /state``      ``?session_id=…``: episode id, step count, env, seed, task id, done
``POST /close``     ``{"session_id": …}``: free an HTTP session now (else it expires)
``GET /openapi.json``
                    the HTTP routes of the mode (``openenv validate`` reads the mode there)
``POST /mcp``       MCP JSON-RPC (:mod:`arlgym.serve.mcp`): OpenEnv's ``tools/list``,
                    ``tools/call``, ``openenv/session/create|close``; streamable HTTP
                    (``initialize``, ``Mcp-Session-Id``; ``DELETE`` ends the session)
``WS /ws``          one session per connection (``?session_id=``: attach to an HTTP session):
                    OpenEnv's ``reset``/``step``/``state``/``close``/``mcp``, and arlgym's
                    ``expert`` (``{"policy": "expert" | "teacher"}``: the env's scripted answer
                    for the current state, for the expert/greedy policies)
``WS /mcp``         MCP JSON-RPC on the connection's own session
==================  =========================================================================

``mode="production"`` (OpenEnv's production mode) does not serve ``POST /reset``,
``POST /step`` and ``GET /state``; a WebSocket to any other path is answered 404.

Reset data: ``seed`` (int >= 0; the same task as ``gymnasium.make(id).reset(seed=seed)``),
``env`` (a hosted id; default the first), ``task_id``, ``split``, ``options`` (env-specific
reset options), ``episode_id``; any other key is refused, so a typo never silently drops a seed.

Security: a request with an ``Origin`` header (a browser page) is refused, so a web page cannot
drive a loopback server; with a token every request needs ``Authorization: Bearer <token>`` (or
HTTP Basic with the token as password, which OpenEnv's client sends for a URL like
``http://arl:<token>@host:8000``); bodies and WebSocket messages are capped at ``max_body``
bytes; session ids are 192-bit random; an HTTP request cannot reach a WebSocket's session.
Every error is JSON naming the problem (HTTP: ``{"detail": …, "code": …}`` with a 4xx status;
WebSocket: OpenEnv's ``{"type": "error", "data": {"message": …, "code": …}}``); env tracebacks
stay in the server's log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import arlgym
from arlgym.core.validation import did_you_mean
from arlgym.errors import ArlgymError, ConfigError, ResetNeeded, TaskNotFound
from arlgym.serve.codec import JSONDecodeError, dumps, loads
from arlgym.serve.hosts import SCRIPTED_METHODS, EnvRaised, HostFailure
from arlgym.serve.mcp import McpServer
from arlgym.serve.sessions import NO_REPLY, RequestError, Session, _check_keys, _new_id

__all__ = ["ServeApp", "ServeConfig", "RESET_KEYS", "MODES", "openapi"]

logger = logging.getLogger("arlgym.serve")

#: keys a reset message may carry (HTTP adds ``session_id``)
RESET_KEYS = ("seed", "env", "task_id", "split", "options", "episode_id")
_STEP_KEYS = ("response", "metadata")
#: the server's modes (OpenEnv's ``ServerMode``)
MODES = ("simulation", "production")
#: the OpenEnv HTTP API version this server implements (its reference server's OpenAPI version)
OPENENV_API_VERSION = "1.0.0"
#: the HTTP routes that production mode drops, as OpenEnv's server does
SIMULATION_ROUTES = frozenset({("POST", "/reset"), ("POST", "/step"), ("GET", "/state")})


@dataclass
class ServeConfig:
    """What a server hosts and how it guards itself (see :class:`arlgym.serve.EnvServer`)."""

    envs: dict[str, dict[str, Any]]
    token: str | None = None
    max_sessions: int = 1024
    ttl: float = 600.0
    max_body: int = 1 << 20
    #: env ids whose steps run on the event loop itself (cheap, thread-safe steps): no thread
    #: hop per step (see :attr:`arlgym.core.env.AgentEnv.cheap_step`)
    inline_steps: frozenset[str] = frozenset()
    #: ``"simulation"`` (every route) or ``"production"``: OpenEnv's production mode, without
    #: the HTTP ``/reset``, ``/step`` and ``/state`` routes (an agent acts through MCP tools and
    #: WebSockets; it cannot reset or peek over plain HTTP)
    mode: str = "simulation"
    #: this process's index among the server's ``processes`` (``arlgym serve --processes``):
    #: each process holds its own sessions, and an HTTP session id names the process that
    #: holds it, so a request that reaches another process is refused with a clear answer
    process_index: int = 0
    processes: int = 1


class _WebSocketRoutes:
    """The WebSocket routes of :class:`ServeApp` (OpenEnv's ``/ws`` protocol and MCP's
    ``/mcp``): the handshake, a connection's session, one message at a time."""

    # ------------------------------------------------------------------ WebSocket
    async def _websocket(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        msg = await receive()
        if msg["type"] != "websocket.connect":
            return
        path = scope["path"].rstrip("/") or "/"
        refusal = self._refusal(scope)
        if refusal is not None:  # before accept: the client sees an HTTP 403 handshake answer
            await send({"type": "websocket.close", "code": 1008, "reason": refusal.code})
            return
        if path not in ("/ws", "/mcp"):  # a 404 answer to the handshake, not a session
            await self._refuse_handshake(scope, send, 404, "NOT_FOUND", f"no WebSocket route "
                                         f"{path}: WebSocket /ws (OpenEnv's env protocol) or "
                                         "/mcp (MCP JSON-RPC)")
            return
        await send({"type": "websocket.accept"})
        session, attached = Session(sid=self.new_sid(), kind="ws"), False
        query = parse_qs(scope["query_string"].decode("latin-1"))
        if path == "/ws" and "session_id" in query:  # OpenEnv's MCP client: attach to a session
            try:
                session, attached = self._attach(query["session_id"][0]), True
            except RequestError as e:
                await send({"type": "websocket.send", "text": dumps(
                    {"type": "error", "data": {"message": e.message, "code": e.code}})})
                await send({"type": "websocket.close", "code": 1008})
                return
        answer = self.mcp.ws_message if path == "/mcp" else self._ws_message
        try:
            while True:
                msg = await receive()
                if msg["type"] == "websocket.disconnect":
                    break
                text = msg.get("text")
                if text is None:
                    text = (msg.get("bytes") or b"").decode("utf-8", "replace")
                try:
                    reply = await answer(session, text)
                except RequestError as e:
                    reply = {"type": "error", "data": {"message": e.message, "code": e.code}}
                except Exception:  # noqa: BLE001 - a bug of ours: log it, answer JSON
                    logger.exception("internal error on a WebSocket message")
                    reply = {"type": "error", "data": {
                        "message": "internal server error (see the server's log)",
                        "code": "INTERNAL_ERROR"}}
                if reply is None:  # "close"
                    break
                if reply is not NO_REPLY:
                    await send({"type": "websocket.send", "text": dumps(reply)})
        finally:
            if attached:  # the session outlives its socket unless it was closed meanwhile
                session.attached = False
                session.used = time.monotonic()
            if session.sid in self.sessions and (not attached or session.close_pending):
                async with session.lock:
                    self._drop(session, close_env=True)
        try:
            await send({"type": "websocket.close", "code": 1000})
        except Exception:  # noqa: BLE001 - the client already closed the connection
            pass

    async def _refuse_handshake(self, scope: dict[str, Any], send: Callable, status: int,
                                code: str, message: str) -> None:
        """Answer a WebSocket handshake with an HTTP error and a JSON body where the server
        supports it (ASGI's ``websocket.http.response``), else close it (HTTP 403)."""
        if "websocket.http.response" not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": 1008, "reason": code})
            return
        payload = dumps({"detail": message, "code": code}).encode()
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "websocket.http.response.body", "body": payload})

    def _attach(self, sid: str) -> Session:
        """The HTTP session ``sid`` (made by ``POST /reset`` or MCP's
        ``openenv/session/create``), now driven by one WebSocket (OpenEnv's ``MCPToolClient``
        shares one session between ``/ws`` and ``POST /mcp`` this way)."""
        session = self.sessions.get(sid)
        if session is None and (misdirected := self.elsewhere(sid)) is not None:
            raise misdirected
        if session is None or session.kind != "http":
            raise RequestError(404, "SESSION_ERROR", "Unknown session_id: the one to attach "
                               "(?session_id=) comes from openenv/session/create on POST /mcp "
                               "or from POST /reset; it may have been closed or expired after "
                               f"ttl={self.config.ttl:g} s idle")
        if session.attached:
            raise RequestError(409, "SESSION_ERROR", f"Session {sid[:6]}… already has an "
                               "attached WebSocket")
        session.attached, session.used = True, time.monotonic()
        return session

    async def _ws_message(self, session: Session, text: str) -> dict[str, Any] | None:
        """One ``/ws`` message's answer (``None``: close the socket)."""
        message = _parse_object(text)
        kind = message.get("type")
        if kind == "close":
            return None
        if kind not in ("reset", "step", "state", "expert", "mcp"):
            raise RequestError(400, "UNKNOWN_TYPE", f"unknown message type {kind!r}; expected "
                               "'reset', 'step', 'state', 'expert', 'mcp' or 'close'")
        _check_keys(message, ("type", "data"), f"the {kind!r} message")
        data = message.get("data", {})
        if not isinstance(data, dict):
            raise RequestError(422, "VALIDATION_ERROR", f"'data' of the {kind!r} message must be "
                               "a JSON object")
        if kind == "mcp":  # OpenEnv's JSON-RPC over this socket, on this socket's session
            answer = await self.mcp.call(data, session)
            return {"type": "mcp", "data": answer if answer is not None else {
                "jsonrpc": "2.0", "id": None, "result": None}}
        if kind == "reset":
            if "session_id" in data:
                raise RequestError(422, "VALIDATION_ERROR", "a WebSocket is its own session; "
                                   "drop 'session_id' from the reset data")
            return {"type": "observation", "data": await self._reset(session, dict(data))}
        if kind == "step":
            if data.get("type") in ("list_tools", "call_tool"):  # OpenEnv's MCP actions
                return {"type": "observation", "data": await self.mcp.step_action(session, data)}
            return {"type": "observation", "data": await self._step(session, data)}
        if kind == "expert":
            return {"type": "expert", "data": await self._expert(session, data)}
        return {"type": "state", "data": self._state(session)}


class _HttpRoutes:
    """The HTTP routes of :class:`ServeApp`: guards, the request body, one answer per route."""

    # ------------------------------------------------------------------ HTTP
    async def _http(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        method, path = scope["method"], scope["path"].rstrip("/") or "/"
        extra: list[tuple[bytes, bytes]] = []
        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                raise refusal
            if (method, path) in SIMULATION_ROUTES and self.config.mode == "production":
                raise RequestError(404, "NOT_FOUND", f"no route {method} {path} in production "
                                   "mode (OpenEnv's: no HTTP reset/step/state): play over "
                                   "WebSocket /ws or the MCP tools on /mcp, or serve with "
                                   "--mode simulation")
            if path == "/mcp":
                status, body, extra = await self.mcp.http(scope, method, await self._read_body(
                    scope, receive))
            elif method == "GET":
                query = parse_qs(scope["query_string"].decode("latin-1"))
                body, status = await self._get(path, query), 200
            elif method == "POST":
                data = _parse_object(await self._read_body(scope, receive))
                body, status = await self._post(path, data), 200
            else:
                raise RequestError(405, "METHOD_NOT_ALLOWED", f"{method} is not supported; use "
                                   "GET (health, metadata, schema, envs, state) or POST (reset, "
                                   "step, close, mcp)")
        except RequestError as e:
            status, body = e.status, {"detail": e.message, "code": e.code}
        except Exception:  # noqa: BLE001 - a bug of ours: log it, answer JSON without a traceback
            logger.exception("internal error on %s %s", method, path)
            status, body = 500, {"detail": "internal server error (see the server's log)",
                                 "code": "INTERNAL_ERROR"}
        payload = b"" if body is None else dumps(body).encode()
        headers = [(b"content-length", str(len(payload)).encode())]
        if body is not None:
            headers.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": headers + extra})
        await send({"type": "http.response.body", "body": payload})

    async def _read_body(self, scope: dict[str, Any], receive: Callable) -> bytes:
        """The request body (``b"{}"`` when empty), at most ``max_body`` bytes of JSON."""
        limit = self.config.max_body
        headers = dict(scope["headers"])
        ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestError(413, "PAYLOAD_TOO_LARGE", f"the request body has {int(declared)} "
                               f"bytes; the server accepts at most max_body={limit}")
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise RequestError(400, "DISCONNECTED", "the client went away")
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise RequestError(413, "PAYLOAD_TOO_LARGE", f"the request body has more than "
                                   f"max_body={limit} bytes")
            chunks.append(chunk)
            more = msg.get("more_body", False)
        raw = b"".join(chunks)
        if ctype != "application/json" and raw:
            raise RequestError(415, "UNSUPPORTED_MEDIA_TYPE", "send the body as JSON with "
                               "'Content-Type: application/json'")
        return raw or b"{}"

    async def _tasks(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """``GET /tasks``: the first ``limit`` task ids of ``split``, enumerated by a temporary
        env with the server's kwargs (so a client needs neither the env nor its data)."""
        _check_keys(query, ("env", "split", "limit"), "the /tasks query")
        env_id = (query.get("env") or [self.default_env])[0]
        if env_id not in self.config.envs:
            raise RequestError(404, "UNKNOWN_ENV", f"env {env_id!r} is not hosted here"
                               f"{did_you_mean(env_id, self.config.envs)}; hosted: "
                               f"{list(self.config.envs)}")
        split = (query.get("split") or ["test"])[0]
        raw = (query.get("limit") or [""])[0]
        try:
            limit = int(raw) if raw else None
        except ValueError:
            limit = -1
        if limit is not None and limit < 1:
            raise RequestError(422, "VALIDATION_ERROR", f"limit={raw!r} is invalid: expected an "
                               "int >= 1, or no limit")
        tasks = await self._call(self.hosts[env_id], "tasks", _new_id(),
                                 (env_id, self.config.envs[env_id], split, limit))
        return {"env": env_id, "split": split, "tasks": tasks}

    async def _get(self, path: str, query: dict[str, list[str]]) -> dict[str, Any]:
        if path == "/health":
            return {"status": "healthy", "sessions": len(self.sessions),
                    "max_sessions": self.config.max_sessions, "resets": self.resets,
                    "steps": self.steps, "pid": self.pid,
                    "process": self.config.process_index, "processes": self.config.processes}
        if path == "/metadata":
            return {"name": "arlgym", "version": arlgym.__version__,
                    "description": "arlgym LLM-agent envs (" + ", ".join(self.config.envs)
                    + "): the action is the raw LLM response text; observation.metadata "
                    "carries every info key (anchor, format_valid, task_reward, …)",
                    "readme_content": None, "author": None, "documentation_url": None}
        if path == "/schema":
            return _SCHEMA
        if path == "/openapi.json":
            return openapi(self.config.mode, list(self.config.envs))
        if path == "/envs":
            return {"default": self.default_env,
                    "envs": {k: {"kwargs": v} for k, v in self.config.envs.items()}}
        if path == "/state":
            sid = (query.get("session_id") or [""])[0]
            return self._state(self._http_session(sid))
        if path == "/tasks":
            return await self._tasks(query)
        raise RequestError(404, "NOT_FOUND", f"no route GET {path}; routes: {self._routes()}")

    async def _post(self, path: str, data: dict[str, Any]) -> dict[str, Any]:
        if path == "/reset":
            sid = data.pop("session_id", None)
            if sid is None:
                session = Session(sid=self.new_sid(), kind="http")
            else:
                session = self._http_session(sid)
            return await self._reset(session, data)
        if path == "/step":
            _check_keys(data, ("session_id", "action", "timeout_s", "request_id"), "/step body")
            session = self._http_session(data.get("session_id"))
            if "action" not in data:
                raise RequestError(422, "VALIDATION_ERROR", "the /step body needs 'action': "
                                   "{'response': '<the LLM response text>'}")
            return await self._step(session, data["action"])
        if path == "/close":
            _check_keys(data, ("session_id",), "/close body")
            session = self._http_session(data.get("session_id"))
            if session.attached:  # its WebSocket (?session_id=) closes it when it goes
                session.close_pending = True
                return {"closed": session.sid, "closing": True}
            async with session.lock:
                self._drop(session, close_env=True)
            return {"closed": session.sid}
        raise RequestError(404, "NOT_FOUND", f"no route POST {path}; routes: {self._routes()}")

    def _routes(self) -> str:
        """The routes of this mode, for a 404's message."""
        paths = openapi(self.config.mode, [])["paths"]
        return ", ".join(f"{m.upper()} {p}" for p, ops in paths.items() for m in ops) + \
            ", WebSocket /ws /mcp"

    def _http_session(self, sid: Any) -> Session:
        if not isinstance(sid, str) or not sid:
            raise RequestError(400, "SESSION_ERROR", "this request needs 'session_id': the one "
                               "returned in observation.session_id by POST /reset")
        session = self.sessions.get(sid)
        if session is None and (misdirected := self.elsewhere(sid)) is not None:
            raise misdirected
        if session is None or session.kind != "http":
            raise RequestError(404, "SESSION_ERROR", "unknown session_id (never created, closed, "
                               f"or expired after ttl={self.config.ttl:g} s idle). Fix: POST "
                               "/reset without session_id to start a new session")
        return session


class ServeApp(_HttpRoutes, _WebSocketRoutes):
    """The ASGI app. ``hosts`` maps each env id to its host (thread or process host)."""

    def __init__(self, config: ServeConfig, hosts: dict[str, Any], threads: int = 8) -> None:
        self.config = config
        self.hosts = hosts
        self.default_env = next(iter(config.envs))
        self.sessions: dict[str, Session] = {}
        self.expired = 0
        self.resets = self.steps = 0  # served since start (GET /health): is the server used?
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="arlgym-serve")
        self._reaper: asyncio.Task | None = None
        self.mcp = McpServer(self)
        self.pid = os.getpid()

    def new_sid(self) -> str:
        """A new session id; with several server processes it ends in ``.<process index>``, so
        any process can tell a session held by another from one that never existed."""
        sid = _new_id()
        return sid if self.config.processes == 1 else f"{sid}.{self.config.process_index}"

    def elsewhere(self, sid: Any) -> RequestError | None:
        """The refusal for a request naming a session this process does not hold but a sibling
        process may (``--processes`` > 1); ``None`` when the id names none of them."""
        if self.config.processes == 1 or not isinstance(sid, str):
            return None
        _, dot, index = sid.rpartition(".")
        if not dot or not index.isdigit() or int(index) == self.config.process_index \
                or int(index) >= self.config.processes:
            return None
        return RequestError(421, "MISDIRECTED_SESSION", f"session {sid[:6]}… lives in server "
                            f"process {index} of {self.config.processes} (arlgym serve "
                            f"--processes {self.config.processes}) and this request reached "
                            f"process {self.config.process_index}: an HTTP session is "
                            "reachable only over the connection that made it. Fix: keep one "
                            "keep-alive connection per HTTP session, play over WebSocket /ws "
                            "(a session per connection), or serve with --processes 1")

    # ------------------------------------------------------------------ ASGI entry
    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self._reaper = asyncio.create_task(self._reap_forever())
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self._reaper is not None:
                    self._reaper.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def shutdown(self) -> None:
        """Close every session's env and the thread pool (the server calls it after serving)."""
        for s in list(self.sessions.values()):
            self._drop(s, close_env=True, blocking=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ guards
    def _refusal(self, scope: dict[str, Any]) -> RequestError | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if "origin" in headers:
            return RequestError(403, "FORBIDDEN", "requests from web pages (an Origin header) are "
                                "refused: the env server is for programs, not browsers")
        token = self.config.token
        if token is None:
            return None
        given = headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "basic":  # a URL like http://arl:<token>@host (OpenEnv's client)
            try:
                value = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                value = ""
        elif scheme.lower() != "bearer":
            value = ""
        if not value or not hmac.compare_digest(value.strip().encode(), token.encode()):
            return RequestError(401, "UNAUTHORIZED",
                                "missing or wrong access token: send 'Authorization: Bearer "
                                "<token>' (the server's --token), or put it in the URL as "
                                "http://arl:<token>@host:port for OpenEnv's client")
        return None

    # ------------------------------------------------------------------ session ops
    def register(self, session: Session) -> None:
        """Hold ``session`` (refused past ``max_sessions``)."""
        if len(self.sessions) >= self.config.max_sessions:
            raise RequestError(503, "CAPACITY_REACHED", f"the server holds "
                               f"max_sessions={self.config.max_sessions} sessions. Fix: "
                               "close finished sessions, retry later, or start the "
                               "server with a larger --max-sessions")
        self.sessions[session.sid] = session

    async def _reset(self, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        env_id, seed, options, episode_id = self._reset_args(data)
        async with session.lock:
            session.used = time.monotonic()
            new = session.sid not in self.sessions
            if new:
                self.register(session)
            host = self.hosts[env_id]
            try:
                if not session.live or session.env_id != env_id:
                    if session.live:
                        await self._call(self.hosts[session.env_id], "close", session.sid)
                        session.live = False
                    await self._call(host, "create", session.sid,
                                     (env_id, self.config.envs[env_id]))
                    session.env_id, session.live = env_id, True
                result = await self._call(host, "reset", session.sid, (seed, options))
            except BaseException:
                if new:  # a session whose first reset failed is not kept (nobody knows its id)
                    self._drop(session, close_env=True)
                raise
            session.seed, session.task_id = seed, result["observation"]["metadata"].get("task_id")
            session.episode_id = episode_id or _new_id()[:16]
            session.steps, session.done = 0, False
            session.used = time.monotonic()
            self.resets += 1
        result["observation"]["session_id"] = session.sid
        result["observation"]["env"] = env_id
        return result

    async def _step(self, session: Session, action: Any) -> dict[str, Any]:
        if not isinstance(action, dict):
            raise RequestError(422, "VALIDATION_ERROR", "the action must be a JSON object "
                               "{'response': '<the LLM response text>'}")
        _check_keys(action, _STEP_KEYS, "the action")
        text = action.get("response")
        if not isinstance(text, str):
            raise RequestError(422, "VALIDATION_ERROR", "the action needs 'response': the LLM "
                               f"response text (a string), got {type(text).__name__}")
        async with session.lock:
            if not session.live or session.sid not in self.sessions:
                raise RequestError(409, "SESSION_ERROR", "no episode to step: send reset first "
                                   "(MCP: call the start_episode tool)"
                                   + ("" if session.env_id is None else
                                      f" (this session expired after ttl={self.config.ttl:g} s "
                                      "idle or its env was lost)"))
            if session.done:
                raise RequestError(409, "SESSION_ERROR", "the episode has ended (done=true); "
                                   "send reset (MCP: call start_episode) to start the next one")
            session.used = time.monotonic()
            result = await self._call(self.hosts[session.env_id], "step", session.sid, text,
                                      inline=session.env_id in self.config.inline_steps)
            session.steps += 1
            self.steps += 1
            session.done = bool(result["done"])
            session.used = time.monotonic()
        result["observation"]["session_id"] = session.sid
        result["observation"]["env"] = session.env_id
        return result

    async def _expert(self, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        """The env's scripted response for the current state: the expert and greedy policies
        read the env's true state, which lives here, so the client asks for their answer."""
        _check_keys(data, ("policy",), "the 'expert' data")
        policy = data.get("policy", "expert")
        if policy not in SCRIPTED_METHODS:
            raise RequestError(422, "VALIDATION_ERROR", f"policy={policy!r} is invalid: "
                               f"expected one of {list(SCRIPTED_METHODS)}")
        async with session.lock:
            if not session.live or session.sid not in self.sessions or session.done:
                raise RequestError(409, "SESSION_ERROR", "no episode in progress: send reset "
                                   "first")
            session.used = time.monotonic()
            response = await self._call(self.hosts[session.env_id], "expert", session.sid,
                                        policy)
        return {"response": response}

    def _state(self, session: Session) -> dict[str, Any]:
        return {"episode_id": session.episode_id, "step_count": session.steps,
                "session_id": session.sid, "env": session.env_id, "seed": session.seed,
                "task_id": session.task_id, "done": session.done, "server_pid": self.pid}

    def _reset_args(self, data: dict[str, Any]) -> tuple[str, int | None, dict | None, str | None]:
        _check_keys(data, RESET_KEYS, "the reset data")
        env_id = data.get("env", self.default_env)
        if env_id not in self.config.envs:
            raise RequestError(404, "UNKNOWN_ENV", f"env {env_id!r} is not hosted here"
                               f"{did_you_mean(env_id, self.config.envs)}; hosted: "
                               f"{list(self.config.envs)}")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise RequestError(422, "VALIDATION_ERROR", f"seed={seed!r} is invalid: expected an "
                               "int >= 0 or null")
        options = data.get("options")
        if options is not None and not isinstance(options, dict):
            raise RequestError(422, "VALIDATION_ERROR", "'options' must be a JSON object of the "
                               "env's reset options")
        options = dict(options or {})
        for key in ("task_id", "split"):
            if key in data:
                options[key] = data[key]
        episode_id = data.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise RequestError(422, "VALIDATION_ERROR", "'episode_id' must be a string of at "
                               "most 255 characters")
        return env_id, seed, options or None, episode_id

    async def _call(self, host: Any, cmd: str, sid: str, payload: Any = None,
                    inline: bool = False) -> Any:
        """``host.call(cmd, sid, payload)`` on the thread pool, or here on the event loop when
        ``inline`` (a cheap step: the hop to a thread and back, and the GIL hand-offs it
        causes, cost the server more CPU than the step itself)."""
        try:
            if inline:
                return host.call(cmd, sid, payload)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, host.call, cmd, sid, payload)
        except EnvRaised as e:
            if isinstance(e.error, (ConfigError, TaskNotFound)):
                raise RequestError(400, "INVALID_REQUEST", str(e.error)) from None
            if isinstance(e.error, ResetNeeded):
                raise RequestError(409, "SESSION_ERROR", str(e.error)) from None
            if isinstance(e.error, ArlgymError):
                raise RequestError(500, "ENV_ERROR", f"{type(e.error).__name__}: {e.error}") from None
            logger.error("env raised during %s of session %s…:\n%s", cmd, sid[:6], e.text)
            raise RequestError(500, "ENV_ERROR", f"the env raised during {cmd}: {e} (the "
                               "traceback is in the server's log)") from None
        except HostFailure as e:
            session = self.sessions.get(sid)
            if session is not None:  # its env died with the worker: the next reset makes one
                session.live = False
            raise RequestError(502, "ENV_WORKER_FAILED", str(e)) from None

    # ------------------------------------------------------------------ expiry
    def _drop(self, session: Session, *, close_env: bool, blocking: bool = False) -> None:
        """Forget ``session``; its env is closed on the pool (or here, when ``blocking``)."""
        self.sessions.pop(session.sid, None)
        if close_env and session.live and session.env_id is not None:
            session.live = False
            host = self.hosts[session.env_id]
            if blocking:
                _quiet(host.call, "close", session.sid)
            else:
                self._pool.submit(_quiet, host.call, "close", session.sid)

    async def _reap_forever(self) -> None:
        period = max(0.05, min(5.0, self.config.ttl / 4))
        while True:
            await asyncio.sleep(period)
            self.reap()

    def reap(self) -> int:
        """Drop sessions idle for more than ``ttl`` seconds (not while they are stepped)."""
        now, n = time.monotonic(), 0
        for s in list(self.sessions.values()):
            if now - s.used > self.config.ttl and not s.lock.locked() and not s.attached:
                self._drop(s, close_env=True)
                n += 1
        self.expired += n
        return n


def _quiet(fn: Callable, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - closing a lost env
        pass


def _parse_object(raw: bytes | str) -> dict[str, Any]:
    try:
        data = loads(raw)
    except (JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, "INVALID_JSON", f"malformed JSON: {e}") from None
    if not isinstance(data, dict):
        raise RequestError(400, "INVALID_JSON", f"expected a JSON object, got "
                           f"{type(data).__name__}")
    return data


_OBSERVATION_SCHEMA = {"title": "ArlgymObservation", "type": "object", "properties": {
    "prompt": {"type": "string", "description": "the prompt the policy reads next"},
    "image_png": {"type": "string", "description": "vision envs: base64 PNG of the frame"},
    "metadata": {"type": "object", "description": "every info key of the env, plus "
                 "terminated and truncated"},
    "session_id": {"type": "string"}, "env": {"type": "string"}}}

_SCHEMA = {
    "action": {"title": "ArlgymAction", "type": "object", "additionalProperties": False,
               "properties": {"response": {"type": "string",
                                           "description": "the raw LLM response text"},
                              "metadata": {"type": "object"}},
               "required": ["response"]},
    "observation": _OBSERVATION_SCHEMA,
    # a reset's observation has the same fields (OpenEnv 0.10 lists it apart)
    "reset_observation": _OBSERVATION_SCHEMA,
    "state": {"title": "ArlgymState", "type": "object", "properties": {
        "episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
        "session_id": {"type": "string"}, "env": {"type": ["string", "null"]},
        "seed": {"type": ["integer", "null"]}, "task_id": {}, "done": {"type": "boolean"},
        "server_pid": {"type": "integer", "description": "the server process holding the "
                       "session (arlgym serve --processes)"}}},
}


def _op(summary: str, body: bool = False, query: tuple[str, ...] = ()) -> dict[str, Any]:
    """One OpenAPI operation: JSON in (``body``), JSON out."""
    op: dict[str, Any] = {"summary": summary, "responses": {"200": {
        "description": "JSON", "content": {"application/json": {"schema": {"type": "object"}}}}}}
    if body:
        op["requestBody"] = {"content": {"application/json": {"schema": {"type": "object"}}}}
    if query:
        op["parameters"] = [{"name": q, "in": "query", "required": False,
                             "schema": {"type": "string"}} for q in query]
    return op


def openapi(mode: str, envs: list[str]) -> dict[str, Any]:
    """``GET /openapi.json``: the HTTP routes this server answers in ``mode`` (production drops
    ``/reset``, ``/step`` and ``/state``; ``openenv validate`` reads the mode from them).
    WebSocket routes (``/ws``, ``/mcp``) have no OpenAPI form; the description names them."""
    paths: dict[str, Any] = {
        "/health": {"get": _op("health, sessions held, resets and steps served")},
        "/metadata": {"get": _op("OpenEnv's EnvironmentMetadata")},
        "/schema": {"get": _op("JSON schemas of the action, observations and state")},
        "/envs": {"get": _op("the hosted env ids with their server-side kwargs")},
        "/tasks": {"get": _op("the enumerated task ids of a split", query=(
            "env", "split", "limit"))},
        "/reset": {"post": _op("start an episode (a new HTTP session, or session_id's)", True)},
        "/step": {"post": _op("one turn: {session_id, action: {response}}", True)},
        "/state": {"get": _op("a session's episode state", query=("session_id",))},
        "/close": {"post": _op("free an HTTP session now", True)},
        "/mcp": {"post": _op("MCP JSON-RPC: initialize, tools/list, tools/call, "
                             "openenv/session/create|close", True)},
        "/openapi.json": {"get": _op("this document")},
    }
    if mode == "production":
        for method, path in SIMULATION_ROUTES:
            paths[path].pop(method.lower())
        paths = {p: ops for p, ops in paths.items() if ops}
    # info.version is the HTTP API's version, OpenEnv's 1.0.0 (its reference server's), which
    # `openenv validate` reads as the standard it checks (profile openenv-http/1.x); arlgym's
    # own version is x-arlgym-version (and /metadata's version)
    return {"openapi": "3.1.0",
            "info": {"title": "arlgym env server", "version": OPENENV_API_VERSION,
                     "x-arlgym-version": arlgym.__version__,
                     "description": f"{mode} mode; envs: {', '.join(envs) or '-'}. WebSocket "
                                    "/ws: OpenEnv's env protocol (reset/step/state/mcp/close); "
                                    "WebSocket /mcp: MCP JSON-RPC."},
            "paths": paths}
