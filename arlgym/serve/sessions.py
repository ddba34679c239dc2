"""The server's session record and request errors, shared by the HTTP/WebSocket app
(:mod:`arlgym.serve.app`) and its MCP side (:mod:`arlgym.serve.mcp`) — below both, so neither
imports the other's module for them."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from arlgym.core.validation import did_you_mean

__all__ = ["NO_REPLY", "RequestError", "Session"]

#: a WebSocket handler's "send nothing" (a JSON-RPC notification); ``None`` closes the socket
NO_REPLY: dict[str, Any] = {}


class RequestError(Exception):
    """A client mistake or a refused request: ``status`` (HTTP), ``code`` (OpenEnv's codes)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(eq=False)
class Session:
    sid: str
    kind: str  # "http" | "ws"
    env_id: str | None = None
    episode_id: str | None = None
    seed: int | None = None
    task_id: Any = None
    steps: int = 0
    done: bool = True
    used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    live: bool = False  # holds an env on its host
    attached: bool = False  # a WebSocket (``/ws?session_id=``) drives this HTTP session now
    close_pending: bool = False  # closed over MCP while attached: dropped when the socket goes


def _new_id() -> str:
    return secrets.token_urlsafe(24)  # 192 random bits


def _check_keys(data: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    unknown = [k for k in data if k not in allowed]
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise RequestError(422, "VALIDATION_ERROR", f"unknown key {unknown[0]!r} in {what}{hint};"
                           f" accepted: {list(allowed)}")
