"""The WebShop site over HTTP: a small ASGI app, served by uvicorn (a production server: httptools'
C parser on asyncio's event loop; one per process, on loopback), that renders each shopper's
:class:`~arlgym.envs.webshop.engine.ShopSession` as HTML and applies the clicks and searches a
browser sends.

The HTML marks what the agent may read and do: every visible string of WebShop's text mode is
an element with ``data-text`` (in page order), every clickable is an ``<a data-click="…">``, the
search box is ``<input name="q">`` with a submit button. So the text a browser reads off the page
equals the text env's observation (tested), and ``arlgym webshop serve`` lets a person shop.

Routes: ``GET /`` (serve mode: a new session with a new goal, redirected to its page),
``GET /s/<sid>`` (the page), ``GET /s/<sid>/search?q=…`` and ``GET /s/<sid>/act?a=…`` (apply and
answer with the new page, one round trip; the page's links carry ``n=<step>``, and an action
from an older page, e.g. a reload, is not applied twice). Sessions are forgotten when unused for ``ttl`` seconds or when more than
``max_sessions`` are held (least recently used first), so memory stays flat however many
shoppers come; a forgotten session's pages answer 410. Sessions an env registers with
``pinned=True`` stay until the env forgets them.

Why uvicorn and not waitress (the server before): every page is rendered in ~0.1 ms, so the
server's own cost per request decides how a crowd is served. Measured with 200 shoppers arriving
at once on 2 cores (``bench/bench_webshop.py --load-only``), waitress spent ~0.5 ms of CPU a
request in its Python event loop, which walks every open connection at each wake-up; under the
burst it stalled now and then (one run in four: p99 3.9 s; with fewer than 8 threads 8–31 ms of
CPU a request). uvicorn (httptools' parser) costs ~0.25 ms a request and serves the same burst 2×
faster (docs/webshop.md). Its loop is asyncio's own, not uvloop: under uvloop some runs accepted
the burst's connections late (the server saw first requests spread over 200 ms while the clients
had all connected within 17 ms: p99 213–271 ms in 2 runs of 6), under asyncio every run took them
at once (p99 113–133 ms in 6 of 6). Pages render in the event loop's thread, one at a time:
rendering is short, and it keeps every session's actions in order without more locks.
"""

from __future__ import annotations

import html
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote

from arlgym.core.sockets import listening_socket
from arlgym.envs.webshop.engine import BACK, BUY, PREV, SEP, TABS, ShopSession
from arlgym.errors import MissingDependency

__all__ = ["ShopServer", "shared_server", "render_page"]

_BUTTONS = frozenset((BACK, PREV, BUY, *TABS))
_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:60em}a{display:inline-block;"
          "margin:.2em .6em .2em 0}p{margin:.3em 0}.goal{background:#eef;padding:.5em}")


def render_page(sid: str, session: ShopSession, step: int) -> str:
    """HTML of the session's current page."""
    esc = html.escape
    parts: list[str] = []
    text = session.observation().split(SEP)
    clickables = set(session.clickables())

    def act_url(action: str) -> str:
        return f"/s/{sid}/act?a={quote(action)}&n={step}"

    product = session.product if session.page == "item" else None
    option_values = {v for vs in product.options.values() for v in vs} if product else set()
    for chunk in text:
        key = chunk.strip().lower()
        if key in clickables and key != "search":
            # option values are marked: WebShop lists them after the buttons and product links
            mark = " data-option" if key in option_values and key not in _BUTTONS else ""
            parts.append(f'<a href="{act_url(f"click[{key}]")}" data-click="{esc(key)}"{mark} '
                         f'data-text>{esc(chunk)}</a>')
        elif key == "search" and session.page == "search":
            parts.append(f'<form method="get" action="/s/{sid}/search"><span data-text>Search</span> '
                         f'<input name="q" type="text" size="60" autofocus><input type="hidden" name="n" '
                         f'value="{step}"> <button type="submit" data-click="search">Search</button></form>')
        else:
            parts.append(f"<p data-text>{esc(chunk)}</p>")
    done = ""
    if session.purchased and session.result is not None:
        done = (f'<p class="done" data-score="{session.result.score}">Bought '
                f'{esc(session.purchased)}: score {session.result.score:.2f}</p>')
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>WebShop</title><style>{_STYLE}"
            f"</style></head><body data-step='{step}'><div class='goal'>Instruction: "
            f"{esc(session.goal.instruction)}</div>{''.join(parts)}{done}"
            f"<script>history.replaceState(null, '', '/s/{sid}')</script></body></html>")


class _Entry:
    __slots__ = ("session", "step", "used", "pinned", "lock")

    def __init__(self, session: ShopSession, pinned: bool) -> None:
        self.session, self.step, self.used, self.pinned = session, 0, time.monotonic(), pinned
        self.lock = threading.Lock()


class ShopServer:
    """The site on ``host:port`` (port 0: a free one), served by uvicorn; see the module
    docstring for routes and session expiry. ``start()`` serves from a background thread (the
    envs), ``serve_forever()`` from the calling one (``arlgym webshop serve``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, max_sessions: int = 10_000,
                 ttl: float = 3600.0, backlog: int = 2048) -> None:
        try:
            import uvicorn
        except ImportError as e:
            raise MissingDependency("the WebShop site needs uvicorn: pip install 'arlgym[webshop]'") from e
        self.max_sessions, self.ttl = int(max_sessions), float(ttl)
        self._sessions: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.new_session_factory: Callable[[], ShopSession] | None = None  # `arlgym webshop serve`
        self.expired = 0
        self._socket = listening_socket(host, port, backlog=backlog,
                                        purpose="serve the WebShop site")
        self.host, self.port = host, int(self._socket.getsockname()[1])
        self._server = uvicorn.Server(uvicorn.Config(
            self.asgi, interface="asgi3", lifespan="off", loop="asyncio", log_config=None,
            log_level="warning",
            access_log=False, backlog=backlog,
            server_header=False, date_header=False, headers=[("Server", "arlgym-webshop")],
            timeout_keep_alive=60, timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self._run, name="arlgym-webshop", daemon=True)

    # ------------------------------------------------------------------ ASGI
    async def asgi(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        """The ASGI app: one request, answered from :meth:`handle` (no body is read: GET only)."""
        if scope["type"] != "http":
            return
        status, headers, body = self.handle(scope["method"], scope["path"],
                                            scope["query_string"].decode("latin-1"))
        await send({"type": "http.response.start", "status": int(status[:3]),
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
                    + [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    def handle(self, method: str, path: str, query: str = "") -> tuple[str, list[tuple[str, str]], bytes]:
        """One request: (status, headers, body). Also what tests call without a socket."""
        if method not in ("GET", "HEAD"):
            return _reply("405 Method Not Allowed", "only GET")
        parts = [p for p in path.split("/") if p]
        if not parts:
            if self.new_session_factory is None:
                return _reply("404 Not Found", "no shop here: open the page of your session")
            return _redirect(f"/s/{self.register(self.new_session_factory())}")
        if parts[0] != "s" or len(parts) not in (2, 3):
            return _reply("404 Not Found", "not found")
        sid = parts[1]
        entry = self._entry(sid)
        if entry is None:
            return _reply("410 Gone" if self._known(sid) else "404 Not Found",
                          "this shopping session has expired or never existed")
        action = None
        if len(parts) == 3:
            args = parse_qs(query)
            if parts[2] == "search":
                action = f"search[{args.get('q', [''])[0]}]"
            elif parts[2] == "act":
                action = args.get("a", [""])[0]
            else:
                return _reply("404 Not Found", "not found")
            rendered_at = args.get("n", [None])[0]
        with entry.lock:  # one action at a time per session; sessions run in parallel
            # an action from a page older than the current one (a reload, a double click) is
            # not applied again; the page answers directly (no redirect round trip)
            if action is not None and (rendered_at is None or rendered_at == str(entry.step)):
                if not entry.session.purchased:
                    entry.session.act(action)
                entry.step += 1
            page = render_page(sid, entry.session, entry.step)
        return "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")], page.encode()

    # ------------------------------------------------------------------ sessions
    def _known(self, sid: str) -> bool:
        return len(sid) == 32 and all(c in "0123456789abcdef" for c in sid)

    def _entry(self, sid: str) -> _Entry | None:
        with self._lock:
            entry = self._sessions.get(sid)
            if entry is None:
                return None
            now = time.monotonic()
            if not entry.pinned and now - entry.used > self.ttl:
                del self._sessions[sid]
                self.expired += 1
                return None
            entry.used = now
            self._sessions.move_to_end(sid)
            return entry

    def register(self, session: ShopSession, pinned: bool = False) -> str:
        """Serve ``session`` under a new id; returns the id. Unpinned sessions expire (see the
        module docstring)."""
        sid = secrets.token_hex(16)
        with self._lock:
            self._sessions[sid] = _Entry(session, pinned)
            self._evict()
        return sid

    def _evict(self) -> None:
        now = time.monotonic()
        over = len(self._sessions) - self.max_sessions
        dead = []
        for sid, entry in self._sessions.items():  # least recently used first
            if entry.pinned:
                continue
            if over <= 0 and now - entry.used <= self.ttl:
                break  # every later one was used more recently
            dead.append(sid)
            over -= 1
        for sid in dead:
            del self._sessions[sid]
        self.expired += len(dead)

    def warm_up(self, query: str = "red shoes") -> None:
        """Serve one visit (a new session, a search, a page) inside the process, then forget it.

        ``arlgym webshop serve`` calls it before it prints the address: a broken catalog or goal
        factory fails there, not at the first visitor's request, and the first visit's one-off
        cost (~1 ms: the index's memory-mapped pages, lazily built tables; measured) is paid
        before anyone waits. Does nothing without ``new_session_factory``."""
        if self.new_session_factory is None:
            return
        _, headers, _ = self.handle("GET", "/")
        sid = dict(headers)["Location"].rsplit("/", 1)[-1]
        self.handle("GET", f"/s/{sid}/search", "q=" + quote(query))
        self.forget(sid)

    def forget(self, sid: str) -> None:
        with self._lock:
            self._sessions.pop(sid, None)

    def __len__(self) -> int:
        return len(self._sessions)

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ShopServer:
        if not self._thread.is_alive() and not self._server.should_exit:
            self._thread.start()
        return self

    def _run(self) -> None:
        self._server.run(sockets=[self._socket])

    def serve_forever(self) -> None:
        """Serve in the calling thread (``arlgym webshop serve``; Ctrl-C stops it)."""
        self._run()

    def shutdown(self) -> None:
        """Stop serving (open connections are closed) and free the port."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
        self._socket.close()


def _reply(status: str, text: str) -> tuple[str, list[tuple[str, str]], bytes]:
    return status, [("Content-Type", "text/plain; charset=utf-8")], text.encode()


def _redirect(location: str) -> tuple[str, list[tuple[str, str]], bytes]:
    return "302 Found", [("Location", location), ("Content-Type", "text/plain")], b""


_SHARED: ShopServer | None = None
_SHARED_PID: int | None = None
_SHARED_LOCK = threading.Lock()


def shared_server() -> ShopServer:
    """The process's one loopback server, started on first use (a forked process, e.g. a vector
    worker, starts its own: the parent's serving thread does not exist in the child)."""
    global _SHARED, _SHARED_PID
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED_PID != os.getpid():
            _SHARED, _SHARED_PID = ShopServer().start(), os.getpid()
        return _SHARED
