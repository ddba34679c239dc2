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
        processes: server processes sharing the port (``SO_REUSEPORT``: the kernel spreads new
            connections over them), this one and ``processes - 1`` started here. One process
            runs its event loop, its resets and the WebSocket protocol on one core at a time
            (the GIL); a burst of new sessions then queues behind it. Each process holds its
            own sessions, env hosts and ``max_sessions``: a WebSocket session lives in the
            process of its connection, and an HTTP session is reachable only over the
            connection that made it (elsewhere: HTTP 421, ``MISDIRECTED_SESSION``).
        process_index: which of the ``processes`` this one is (0: the one that starts the
            others; set by it for the others).
    """

    def __init__(self, envs: dict[str, dict[str, Any]], host: str = "127.0.0.1", port: int = 0,
                 *, token: str | None = None, insecure: bool = False, max_sessions: int = 1024,
                 ttl: float = 600.0, max_body: int = 1 << 20, workers: int | None = None,
                 threads: int = 8, timeout: float = 300.0, backlog: int = 2048,
                 check_envs: bool = True, inline_steps: bool = True,
                 mode: str = "simulation", processes: int = 1, process_index: int = 0) -> None:
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
        processes = check_int("processes", processes, min=1, example=2)
        envs = {env_id: dict(kwargs or {}) for env_id, kwargs in envs.items()}
        if check_envs:
            for env_id, kwargs in envs.items():
                check_env_kwargs(env_id, kwargs, name=f"--env-kwarg of {env_id}")
        self._socket = listening_socket(host, port, backlog=backlog, purpose="listen",
                                        reuse_port=processes > 1)
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
                                        mode=mode, process_index=process_index,
                                        processes=processes),
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
        self._siblings: list[tuple[Any, Any]] = []  # (process, pipe) of the other processes
        if processes > 1 and process_index == 0:
            self._start_siblings(envs, dict(
                host=host, port=self.port, token=token, insecure=insecure,
                max_sessions=max_sessions, ttl=ttl, max_body=max_body, workers=workers,
                threads=threads, timeout=timeout, backlog=backlog, check_envs=check_envs,
                inline_steps=inline_steps, mode=mode, processes=processes))

    def _start_siblings(self, envs: dict[str, dict[str, Any]], kwargs: dict[str, Any]) -> None:
        """Start the other server processes (``spawn``: no threads of this one are copied) and
        wait until each serves, so the first burst of connections finds them all listening."""
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        try:
            for index in range(1, kwargs["processes"]):
                here, there = ctx.Pipe()
                proc = ctx.Process(target=_sibling_main, args=(envs, kwargs, index, there),
                                   daemon=True, name=f"arlgym-serve-{index}")
                proc.start()
                there.close()
                self._siblings.append((proc, here))
            for index, (_, here) in enumerate(self._siblings, start=1):
                if not here.poll(120):
                    raise RuntimeError(f"server process {index} did not start within 120 s")
                status, detail = here.recv()
                if status != "ok":
                    raise RuntimeError(f"server process {index} failed to start: {detail}")
        except BaseException:
            self._close_hosts()  # the siblings started so far, this one's hosts and socket
            raise

    def pids(self) -> list[int]:
        """The server processes' ids, this one first."""
        return [os.getpid()] + [proc.pid for proc, _ in self._siblings]

    def _stop_siblings(self) -> None:
        for _, here in self._siblings:
            try:
                here.send("stop")
            except (OSError, BrokenPipeError):
                pass
        for proc, here in self._siblings:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
            here.close()
        self._siblings = []

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
        self._stop_siblings()
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


def _sibling_main(envs: dict[str, dict[str, Any]], kwargs: dict[str, Any], index: int,
                  conn: Any) -> None:
    """One more server process on the port: serve until the first process says stop or goes
    away (its end of the pipe closes)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the first process stops us
    try:
        server = EnvServer(envs, process_index=index, **kwargs).start()
    except BaseException as e:  # noqa: BLE001 - reported to the first process
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ok", os.getpid()))
    try:
        conn.recv()
    except (EOFError, OSError):
        pass
    server.stop()
