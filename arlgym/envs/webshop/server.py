"""The WebShop site over HTTP: a Flask app on loopback that renders each shopper's
:class:`~arlgym.envs.webshop.engine.ShopSession` as HTML and applies the clicks and searches a
browser sends. One server per process serves every session (not one server per env).

The HTML marks what the agent may read and do: every visible string of WebShop's text mode is
an element with ``data-text`` (in page order), every clickable is an ``<a data-click="…">``, the
search box is ``<input name="q">`` with a submit button. So the text a browser reads off the page
equals the text env's observation (tested), and ``arlgym webshop serve`` lets a person shop.
"""

from __future__ import annotations

import html
import secrets
import threading
from typing import Any
from urllib.parse import quote

from arlgym.envs.webshop.engine import SEP, ShopSession
from arlgym.errors import ConfigError

__all__ = ["ShopServer", "shared_server", "render_page"]


def render_page(sid: str, session: ShopSession, step: int) -> str:
    """HTML of the session's current page."""
    esc = html.escape
    parts: list[str] = []
    text = session.observation().split(SEP)
    clickables = {c.lower() for c in session.clickables()}

    def act_url(action: str) -> str:
        return f"/s/{sid}/act?a={quote(action)}"

    for chunk in text:
        key = chunk.strip().lower()
        if key in clickables and key != "search":
            parts.append(f'<a href="{act_url(f"click[{key}]")}" data-click="{esc(key)}" '
                         f'data-text>{esc(chunk)}</a>')
        elif key == "search" and session.page == "search":
            parts.append(f'<form method="get" action="/s/{sid}/search"><span data-text>Search</span> '
                         '<input name="q" type="text" size="60" autofocus> '
                         '<button type="submit" data-click="search">Search</button></form>')
        else:
            parts.append(f"<p data-text>{esc(chunk)}</p>")
    done = ""
    if session.purchased and session.result is not None:
        done = (f'<p class="done" data-score="{session.result.score}">Bought '
                f'{esc(session.purchased)}: score {session.result.score:.2f}</p>')
    return ("<!doctype html><html><head><meta charset='utf-8'><title>WebShop</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:60em}a{display:inline-block;"
            "margin:.2em .6em .2em 0}p{margin:.3em 0}.goal{background:#eef;padding:.5em}</style>"
            f"</head><body data-step='{step}'><div class='goal'>Instruction: "
            f"{esc(session.goal.instruction)}</div>{''.join(parts)}{done}</body></html>")


class ShopServer:
    """A threaded Werkzeug server on 127.0.0.1 (a free port) holding registered sessions."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        import logging

        try:
            from flask import Flask, abort, redirect, request
            from werkzeug.serving import make_server
        except ImportError as e:
            raise ConfigError("the WebShop site needs Flask: pip install 'arlgym[webshop]'") from e

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

        self._sessions: dict[str, tuple[ShopSession, list[int]]] = {}
        self._lock = threading.Lock()
        self.new_session_factory: Any = None  # for `arlgym webshop serve`: () -> ShopSession
        app = Flask("arlgym-webshop")

        def lookup(sid: str) -> tuple[ShopSession, list[int]]:
            with self._lock:
                if sid not in self._sessions:
                    abort(404)
                return self._sessions[sid]

        @app.get("/")
        def index() -> Any:
            if self.new_session_factory is None:
                abort(404)
            return redirect(f"/s/{self.register(self.new_session_factory())}")

        @app.get("/s/<sid>")
        def page(sid: str) -> Any:
            session, step = lookup(sid)
            return render_page(sid, session, step[0])

        @app.get("/s/<sid>/search")
        def search(sid: str) -> Any:
            return self._apply(sid, f"search[{request.args.get('q', '')}]", redirect)

        @app.get("/s/<sid>/act")
        def act(sid: str) -> Any:
            return self._apply(sid, request.args.get("a", ""), redirect)

        self.app = app
        self._server = make_server(host, port, app, threaded=True)
        self.host, self.port = host, self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="arlgym-webshop",
                                        daemon=True)

    def _apply(self, sid: str, action: str, redirect: Any) -> Any:
        from flask import abort

        with self._lock:
            if sid not in self._sessions:
                abort(404)
            session, step = self._sessions[sid]
            if not session.purchased:
                session.act(action)
            step[0] += 1
        return redirect(f"/s/{sid}")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ShopServer:
        if not self._thread.is_alive():
            self._thread.start()
        return self

    def register(self, session: ShopSession) -> str:
        """Serve ``session`` under a new id; returns the id."""
        sid = secrets.token_hex(8)
        with self._lock:
            self._sessions[sid] = (session, [0])
        return sid

    def forget(self, sid: str) -> None:
        with self._lock:
            self._sessions.pop(sid, None)

    def serve_forever(self) -> None:
        """Serve in the calling thread (``arlgym webshop serve``)."""
        self._server.serve_forever()

    def shutdown(self) -> None:
        self._server.shutdown()


_SHARED: ShopServer | None = None
_SHARED_LOCK = threading.Lock()


def shared_server() -> ShopServer:
    """The process's one loopback server, started on first use."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ShopServer().start()
        return _SHARED
