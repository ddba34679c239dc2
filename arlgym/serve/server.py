"""``EnvServer``: the env server process — a socket, uvicorn, the app and its env hosts.

uvicorn serves the ASGI app (:mod:`arlgym.serve.app`) on a socket bound here, as the WebShop
site does (:mod:`arlgym.envs.webshop.server`), so the port (0: any free one) is known before
serving starts; its loop is asyncio's own and its HTTP parser httptools'. The steps of envs
whose class declares ``cheap_step`` (Sokoban: ~0.1 ms) run on the event loop itself: handing
each to a pool thread cost the server more CPU per step than the step (docs/serving.md). WebSocket messages
are capped by uvicorn at ``max_body`` bytes (a bigger one closes the connection with 1009).
WebSocket compression (permessage-deflate) is off: a prompt of 1-2 KB costs ~50 us of zlib on
each side per message, which took a third off the Sokoban step throughput (1,280 -> 1,910
steps/s, 8 clients, client and server on the same 2 cores); prompts are small next to any link.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from typing import Any

from arlgym.core.sockets import listening_socket
from arlgym.core.validation import check_env_kwargs, check_float, check_int
from arlgym.errors import ConfigError, MissingDependency
from arlgym.serve.app import MODES, ServeApp, ServeConfig
from arlgym.serve.hosts import ProcessHost, ThreadHost

__all__ = ["EnvServer", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _env_class(env_id: str) -> type:
    import gymnasium as gym

    entry = gym.registry[env_id].entry_point
    return gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry


def _thread_safe(env_id: str) -> bool:
    return bool(getattr(_env_class(env_id), "thread_safe", True))


def _cheap_step(env_id: str) -> bool:
    cls = _env_class(env_id)
    return bool(getattr(cls, "thread_safe", True) and getattr(cls, "cheap_step", False))


class EnvServer:
    """Host sessions of ``envs`` (``{env_id: gymnasium.make kwargs}``) on ``host:port``.

    Args:
        envs: the env ids to host with their kwargs; the first is the default of a reset.
        host, port: where to listen (loopback by default; port 0: a free one).
        token: the access token every request must carry (``Authorization: Bearer``).
        insecure: allow a non-loopback ``host`` without a token (anyone who can reach the port
            can then run episodes).
        max_sessions: sessions held at once; one more is refused (HTTP 503, code
            ``CAPACITY_REACHED``).
        ttl: seconds a session may stay idle before it is closed.
        max_body: largest request body or WebSocket message, in bytes.
        workers: worker processes per env id whose class is not thread-safe (ALFWorld).
        threads: threads that run the envs of thread-safe classes (and wait on workers).
        timeout: seconds a worker may take for one request before it counts as hung.
        inline_steps: step the envs whose class declares ``cheap_step`` (Sokoban) on the event
            loop instead of a pool thread; ``False`` sends every step to the pool (the slower
            path, kept to measure against: ``bench/bench_serve.py --no-inline-steps``).
        mode: ``"simulation"`` (every route) or ``"production"`` (OpenEnv's production mode:
            no HTTP ``/reset``, ``/step``, ``/state``; agents play over ``/ws`` and MCP).
    """

    def __init__(self, envs: dict[str, dict[str, Any]], host: str = "127.0.0.1", port: int = 0,
                 *, token: str | None = None, insecure: bool = False, max_sessions: int = 1024,
                 ttl: float = 600.0, max_body: int = 1 << 20, workers: int | None = None,
                 threads: int = 8, timeout: float = 300.0, backlog: int = 2048,
                 check_envs: bool = True, inline_steps: bool = True,
                 mode: str = "simulation") -> None:
        try:
            import uvicorn
            import websockets  # noqa: F401  (uvicorn's WebSocket protocol)
        except ImportError as e:
            raise MissingDependency("the env server needs uvicorn and websockets: pip install "
                                    "'arlgym[serve]'") from e
        if not envs:
            raise ConfigError("envs is empty: host at least one env id, e.g. "
                              "--env arl/Sokoban-v0")
        if token is not None and (not isinstance(token, str) or len(token) < 16):
            raise ConfigError("--token is too short: use at least 16 characters, e.g. the "
                              "output of `python -c 'import secrets; print(secrets.token_urlsafe())'`")
        if not is_loopback(host) and token is None and not insecure:
            raise ConfigError(f"--host {host} accepts connections from other machines: pass "
                              "--token <secret> (clients send it as a bearer token) or, on a "
                              "trusted network only, --insecure")
        if mode not in MODES:
            raise ConfigError(f"--mode {mode!r} is invalid: expected one of {list(MODES)} "
                              "(production drops the HTTP reset/step/state routes, as OpenEnv's)")
        max_sessions = check_int("max_sessions", max_sessions, min=1, example=1024)
        ttl = check_float("ttl", ttl, gt=0, example=600)
        max_body = check_int("max_body", max_body, min=1024, example=1 << 20)
        threads = check_int("threads", threads, min=1, example=8)
        workers = check_int("workers", workers, min=1, allow_none=True, example=2)
        envs = {env_id: dict(kwargs or {}) for env_id, kwargs in envs.items()}
        if check_envs:
            for env_id, kwargs in envs.items():
                check_env_kwargs(env_id, kwargs, name=f"--env-kwarg of {env_id}")
        self._socket = listening_socket(host, port, backlog=backlog, purpose="listen")
        # accepted connections inherit TCP_NODELAY: uvicorn writes an HTTP answer's head and
        # body apart, and with Nagle's algorithm the body waited for the client's delayed ACK,
        # ~40 ms on every keep-alive request (POST /mcp from OpenEnv's MCP client: 50 -> 3 ms)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host, self.port = host, int(self._socket.getsockname()[1])
        hosts: dict[str, Any] = {}
        threaded = ThreadHost()
        n_workers = workers or min(4, os.cpu_count() or 1)
        for env_id in envs:
            hosts[env_id] = threaded if _thread_safe(env_id) else ProcessHost(n_workers, timeout)
        self._hosts = hosts
        inline = frozenset(e for e in envs if inline_steps and _cheap_step(e))
        self.app = ServeApp(ServeConfig(envs=envs, token=token, max_sessions=max_sessions,
                                        ttl=ttl, max_body=max_body, inline_steps=inline,
                                        mode=mode),
                            hosts, threads=threads)
        self._server = uvicorn.Server(uvicorn.Config(
            self.app, interface="asgi3", lifespan="on", loop="asyncio", http="httptools",
            ws="websockets-sansio", ws_max_size=max_body, ws_per_message_deflate=False,
            log_config=None, log_level="warning",
            access_log=False, backlog=backlog, server_header=False, date_header=False,
            # open connections (a WebSocket holds one) beyond this get HTTP 503 from uvicorn,
            # so idle connections that never reset cannot pile up past the session limit
            limit_concurrency=max_sessions + 64,
            headers=[("Server", "arlgym-serve")], timeout_keep_alive=60,
            timeout_graceful_shutdown=2))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> EnvServer:
        """Serve from a background thread (tests, benchmarks, in-process use)."""
        self._thread = threading.Thread(target=self.serve_forever, name="arlgym-serve",
                                        daemon=True)
        self._thread.start()
        import time

        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise RuntimeError("the env server stopped while starting (see its log)")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Serve from this thread until :meth:`stop` (or Ctrl-C in ``arlgym serve``)."""
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._close_hosts()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close_hosts()

    def _close_hosts(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        self.app.shutdown()
        for host in {id(h): h for h in self._hosts.values()}.values():
            host.shutdown()
        try:
            self._socket.close()
        except OSError:
            pass

    def __enter__(self) -> EnvServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
