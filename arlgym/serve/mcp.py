"""MCP on the env server: an arlgym env as two tools any MCP client can call.

OpenEnv 0.10 serves JSON-RPC ``tools/list``, ``tools/call`` and its session methods
``openenv/session/create|close`` on ``POST /mcp``, on ``WebSocket /mcp`` (one session per
connection) and as ``{"type": "mcp", "data": <request>}`` messages on ``/ws`` (the socket's
session); this module answers all three the same way, so OpenEnv's ``MCPToolClient`` plays an
arlgym env. ``POST /mcp`` also speaks the standard MCP streamable-HTTP transport (``initialize``
hands out an ``Mcp-Session-Id`` header that binds the later requests to one env session), so
the official ``mcp`` SDK client and any MCP-capable agent can play too.

The tools (OpenEnv reserves ``reset``, ``step``, ``state`` and ``close`` for its env protocol,
so none is named so):

``start_episode``  ``{seed?, env?, task_id?, split?, options?, episode_id?}``: a new episode in
                   the session, exactly as a reset with the same data (the same task as
                   ``gymnasium.make(env).reset(seed=seed)``).
``act``            ``{response: string}``: one turn, the raw LLM text the env parses, exactly as
                   ``/step`` (the ``<think>/<action>`` format and its penalty apply); or
                   ``{action: string}``: the move alone, played as
                   ``<think></think><action>{action}</action>`` (always well-formed: the format
                   penalty never applies, as in the TRL adapter).

A tool's result is MCP's ``CallToolResult``: ``content`` (the prompt as text, plus the frame as
an ``image`` block for vision envs), ``structuredContent`` and OpenEnv's ``data`` (both the full
step result: observation with every info key — anchor, admissible actions, format_valid, … —,
reward, done, metadata), ``isError``. Errors are JSON-RPC errors on OpenEnv's paths (its client
raises them); in a standard MCP session a refused tool call is a result with ``isError: true``
(MCP's convention: the model reads the message and can recover, e.g. start the next episode).
"""

from __future__ import annotations

from typing import Any

import arlgym
from arlgym.core.validation import did_you_mean
from arlgym.serve.codec import JSONDecodeError, loads
from arlgym.serve.sessions import NO_REPLY, RequestError, Session, _check_keys

__all__ = ["McpServer", "TOOLS", "RESERVED_TOOL_NAMES", "PROTOCOL_VERSIONS"]

#: OpenEnv's reserved tool names (its env protocol's verbs)
RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})
#: MCP protocol versions ``initialize`` accepts, newest first (a client asking for another one
#: gets the newest, as the MCP spec says)
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32700, -32600, -32601
INVALID_PARAMS, INTERNAL_ERROR, SERVER_ERROR = -32602, -32603, -32000

_RESET_ARGS = ("seed", "env", "task_id", "split", "options", "episode_id")

TOOLS: list[dict[str, Any]] = [
    {"name": "start_episode",
     "description": "Start a new episode of the environment (a seeded task) and return its "
                    "first observation. Call it before act, and again after an episode ends.",
     "inputSchema": {"type": "object", "additionalProperties": False, "properties": {
         "seed": {"type": "integer", "minimum": 0,
                  "description": "the task's seed (the same task as a local reset(seed))"},
         "env": {"type": "string", "description": "a hosted env id (default: the first)"},
         "task_id": {"type": "string", "description": "a fixed task instead of a seed"},
         "split": {"type": "string", "description": "the task split, e.g. train or test"},
         "options": {"type": "object", "description": "env-specific reset options"},
         "episode_id": {"type": "string"}}}},
    {"name": "act",
     "description": "Play one turn. Give either `response`: your full reply in the "
                    "environment's format (<think>...</think><action>...</action>), or "
                    "`action`: the move alone, e.g. one of the admissible actions. Returns "
                    "the next observation, the reward and whether the episode is over.",
     "inputSchema": {"type": "object", "additionalProperties": False, "properties": {
         "response": {"type": "string", "description": "the raw reply text the env parses"},
         "action": {"type": "string", "description": "the move alone"}}}},
]
_TOOL_NAMES = tuple(t["name"] for t in TOOLS)


class RpcError(Exception):
    """A JSON-RPC error answer: ``code`` (JSON-RPC's), ``message``, ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _error(code: int, message: str, rid: Any = None, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": err}


def _rpc_error(e: Exception) -> RpcError:
    """An app :class:`RequestError` as JSON-RPC's: the caller's mistakes are invalid params,
    the rest server errors; ``data`` keeps the server's code (``SESSION_ERROR``, …)."""
    status, code = getattr(e, "status", 500), getattr(e, "code", "INTERNAL_ERROR")
    rpc = INVALID_PARAMS if status in (400, 404, 422) else SERVER_ERROR
    return RpcError(rpc, getattr(e, "message", str(e)), {"code": code, "status": status})


class McpServer:
    """The MCP side of one :class:`~arlgym.serve.app.ServeApp` (it holds the sessions)."""

    def __init__(self, app: Any) -> None:  # a ServeApp (app.py imports this module)
        self.app = app

    # ------------------------------------------------------------------ transports
    async def http(self, scope: dict[str, Any], method: str,
                   raw: bytes) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """``POST``/``DELETE /mcp``: ``(status, body or None, extra headers)``. Every JSON-RPC
        answer is HTTP 200 (``openenv validate`` posts ``{}`` and wants a JSON-RPC error with
        200); a notification gets 202 without a body (streamable HTTP)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        header_sid = headers.get("mcp-session-id")
        bound = None
        if header_sid is not None:
            bound = self.app.sessions.get(header_sid)
            if bound is None and (misdirected := self.app.elsewhere(header_sid)) is not None:
                raise misdirected
            if bound is None or bound.kind != "http":  # MCP: 404 says "initialize again"
                return 404, _error(INVALID_REQUEST, "unknown or expired Mcp-Session-Id: "
                                   "initialize again"), []
        if method == "DELETE":  # streamable HTTP: the client ends its session
            if bound is None:
                raise RequestError(400, "SESSION_ERROR", "DELETE /mcp needs the "
                                   "Mcp-Session-Id header of the session to end")
            async with bound.lock:
                self.app._drop(bound, close_env=True)
            return 200, None, []
        if method != "POST":
            raise RequestError(405, "METHOD_NOT_ALLOWED", f"{method} /mcp: this server answers "
                               "POST (JSON-RPC, streamable HTTP without server-sent streams) "
                               "and DELETE (end an MCP session)")
        try:
            request = loads(raw)
        except (JSONDecodeError, UnicodeDecodeError) as e:
            return 200, _error(PARSE_ERROR, f"Parse error: {e}"), []
        if isinstance(request, dict) and request.get("method") == "initialize" \
                and "id" in request and bound is None:
            answer, session = await self._initialize(request)
            extra = [] if session is None else [(b"mcp-session-id", session.sid.encode())]
            return 200, answer, extra
        answer = await self.call(request, bound, standard=bound is not None)
        if answer is None:  # a notification: accepted, no body
            return 202, None, []
        return 200, answer, []

    async def ws_message(self, session: Session, text: str) -> dict[str, Any] | None:
        """One frame on ``WebSocket /mcp``: a JSON-RPC request on the connection's session."""
        try:
            request = loads(text)
        except (JSONDecodeError, UnicodeDecodeError) as e:
            return _error(PARSE_ERROR, f"Parse error: {e}")
        answer = await self.call(request, session)
        return NO_REPLY if answer is None else answer

    async def step_action(self, session: Session, action: dict[str, Any]) -> dict[str, Any]:
        """OpenEnv's MCP actions sent as ``/ws`` steps (``ListToolsAction``,
        ``CallToolAction``: its ``MCPToolClient`` outside production mode): the step result
        whose observation is a ``ListToolsObservation`` or ``CallToolObservation``."""
        if action["type"] == "list_tools":
            _check_step_keys(action, ("type", "metadata"))
            return {"observation": {"tools": TOOLS, "metadata": {}}, "reward": None,
                    "done": False}
        _check_step_keys(action, ("type", "tool_name", "arguments", "metadata"))
        name = action.get("tool_name")
        try:
            result = await self._tools_call({"name": name, "arguments": action.get(
                "arguments") or {}}, session, standard=False)
        except RpcError as e:
            kind = "tool_not_found" if e.message.startswith("Tool not found") else (
                "invalid_args" if e.code == INVALID_PARAMS else "execution_error")
            return {"observation": {"tool_name": name, "result": None, "metadata": {},
                                    "error": {"error_type": kind, "message": e.message}},
                    "reward": None, "done": session.done}
        step = result["data"]
        return {"observation": {"tool_name": name, "result": result, "error": None,
                                "metadata": step["metadata"]},
                "reward": step["reward"], "done": step["done"], "metadata": step["metadata"]}

    # ------------------------------------------------------------------ JSON-RPC
    async def call(self, request: Any, bound: Session | None = None, *,
                   standard: bool = False) -> dict[str, Any] | None:
        """The JSON-RPC answer to ``request`` (``None`` for a notification). ``bound``: the
        session of the transport (a WebSocket, an ``Mcp-Session-Id``), else ``params``'s
        ``session_id`` names one; ``standard``: tool errors as ``isError`` results (MCP)."""
        if not isinstance(request, dict):
            return _error(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC request "
                          "object (batches are not supported)")
        rid = request.get("id")
        if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            return _error(INVALID_REQUEST, "Invalid Request: a JSON-RPC 2.0 request needs "
                          "'jsonrpc': '2.0' and 'method' (e.g. tools/list)",
                          rid if isinstance(rid, (str, int)) else None)
        method, params = request["method"], request.get("params", {})
        if "id" not in request:  # a notification (notifications/initialized, …): no answer
            return None
        if not isinstance(params, dict):
            return _error(INVALID_PARAMS, "Params must be an object", rid)
        try:
            result = await self._dispatch(method, params, bound, standard)
        except RpcError as e:
            return _error(e.code, e.message, rid, e.data)
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    async def _dispatch(self, method: str, params: dict[str, Any], bound: Session | None,
                        standard: bool) -> Any:
        if method == "tools/list":
            if bound is None and params.get("session_id") is not None:
                self._session(params["session_id"])  # an unknown id is an error, as OpenEnv's
            return {"tools": TOOLS}
        if method == "tools/call":
            return await self._tools_call(params, bound, standard)
        if method == "openenv/session/create":
            if bound is not None:
                return {"session_id": bound.sid}
            return {"session_id": self._new_session().sid}
        if method == "openenv/session/close":
            return await self._close(params, bound)
        if method == "ping":
            return {}
        if method == "initialize":  # on a WebSocket or within a session: nothing to hand out
            return self._init_result(params)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method} (this server answers "
                       "initialize, ping, tools/list, tools/call, openenv/session/create, "
                       "openenv/session/close)")

    # ------------------------------------------------------------------ methods
    async def _initialize(self, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        params = request.get("params")
        if not isinstance(params, dict):
            return _error(INVALID_PARAMS, "Params must be an object", request["id"]), None
        try:
            session = self._new_session()
        except RpcError as e:
            return _error(e.code, e.message, request["id"], e.data), None
        return {"jsonrpc": "2.0", "id": request["id"], "result": self._init_result(params)}, \
            session

    def _init_result(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        envs = ", ".join(self.app.config.envs)
        return {"protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "arlgym", "version": arlgym.__version__},
                "instructions": f"arlgym environments ({envs}). Call start_episode (a seed "
                                "picks the task), then act once per turn until the result "
                                "says done; the reward of each turn is in the result."}

    def _new_session(self) -> Session:
        session = Session(sid=self.app.new_sid(), kind="http")
        try:
            self.app.register(session)
        except RequestError as e:
            raise _rpc_error(e) from None
        return session

    def _session(self, sid: Any) -> Session:
        session = self.app.sessions.get(sid) if isinstance(sid, str) else None
        if session is None and (misdirected := self.app.elsewhere(sid)) is not None:
            raise _rpc_error(misdirected)
        if session is None or session.kind != "http":  # a WebSocket's session stays its own
            raise RpcError(INVALID_PARAMS, f"Unknown session_id: {str(sid)[:12]}… (create one "
                           "with openenv/session/create; sessions expire after "
                           f"ttl={self.app.config.ttl:g} s idle)",
                           {"code": "SESSION_ERROR", "status": 404})
        return session

    async def _close(self, params: dict[str, Any], bound: Session | None) -> dict[str, Any]:
        sid = params.get("session_id")
        if not sid:
            raise RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
        if bound is not None and sid == bound.sid:
            raise RpcError(INVALID_REQUEST, "Cannot close active WebSocket-managed session via "
                           "MCP method")
        session = self._session(sid)
        if session.attached:  # its WebSocket closes it when it goes (OpenEnv's semantics)
            session.close_pending = True
            return {"session_id": sid, "closed": False, "closing": True}
        async with session.lock:
            self.app._drop(session, close_env=True)
        return {"session_id": sid, "closed": True}

    async def _tools_call(self, params: dict[str, Any], bound: Session | None,
                          standard: bool) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "Missing 'name' in params")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "'arguments' must be an object")
        if name not in _TOOL_NAMES:
            hint = (" (OpenEnv reserves reset/step/state/close for its env protocol)"
                    if name in RESERVED_TOOL_NAMES else did_you_mean(name, _TOOL_NAMES))
            raise RpcError(INVALID_PARAMS, f"Tool not found: {name}{hint}; tools: "
                           f"{list(_TOOL_NAMES)}")
        if bound is not None:
            session = bound
        elif params.get("session_id") is not None:
            session = self._session(params["session_id"])
        else:
            raise RpcError(INVALID_PARAMS, f"tools/call {name} needs a session: "
                           "params.session_id from openenv/session/create, or an MCP session "
                           "(initialize), or a WebSocket (/mcp, /ws)")
        try:
            if name == "start_episode":
                _check_args(arguments, _RESET_ARGS, name)
                return _tool_result(await self.app._reset(session, dict(arguments)))
            _check_args(arguments, ("response", "action"), name)
            text = _act_text(arguments)
            return _tool_result(await self.app._step(session, {"response": text}))
        except (RequestError, RpcError) as e:
            err = e if isinstance(e, RpcError) else _rpc_error(e)
            if standard:  # MCP: the model sees the refusal and can recover
                return {"content": [{"type": "text", "text": err.message}], "isError": True}
            raise err from None


def _check_step_keys(action: dict[str, Any], allowed: tuple[str, ...]) -> None:
    _check_keys(action, allowed, f"the {action['type']!r} action")


def _check_args(arguments: dict[str, Any], allowed: tuple[str, ...], tool: str) -> None:
    unknown = [k for k in arguments if k not in allowed]
    if unknown:
        raise RpcError(INVALID_PARAMS, f"unknown argument {unknown[0]!r} of {tool}"
                       f"{did_you_mean(unknown[0], allowed)}; accepted: {list(allowed)}")


def _act_text(arguments: dict[str, Any]) -> str:
    """The response text ``act`` steps: ``response`` as given, or ``action`` wrapped."""
    given = [k for k in ("response", "action") if k in arguments]
    if len(given) != 1:
        raise RpcError(INVALID_PARAMS, "act takes exactly one of 'response' (the full reply "
                       "text) or 'action' (the move alone)")
    value = arguments[given[0]]
    if not isinstance(value, str):
        raise RpcError(INVALID_PARAMS, f"act's {given[0]!r} must be a string, got "
                       f"{type(value).__name__}")
    return value if given[0] == "response" else f"<think></think><action>{value}</action>"


def _tool_result(step: dict[str, Any]) -> dict[str, Any]:
    """MCP's ``CallToolResult`` of a reset or step result (``data``: OpenEnv's field)."""
    observation = step["observation"]
    text = observation["prompt"]
    if step.get("reward") is not None:
        text += f"\n\nReward: {step['reward']:g}. " + ("The episode is over." if step["done"]
                                                       else "Continue.")
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if "image_png" in observation:
        content.append({"type": "image", "data": observation["image_png"],
                        "mimeType": "image/png"})
    return {"content": content, "structuredContent": step, "isError": False, "data": step}
