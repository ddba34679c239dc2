"""``arlgym serve``: host sessions of arlgym envs for OpenEnv clients and remote vector envs."""

from __future__ import annotations

import argparse
import os

from arlgym.clikit import host_name, port_number
from arlgym.core.sockets import serve_until_interrupted
from arlgym.envs.requirements import pip_install

# the env-server options live in a base module (every command that plays envs remotely uses
# them); re-exported here for code that imported them from this module
from arlgym.envs.servers import TOKEN_VARIABLE, add_env_servers, env_server_kwargs, parse_env_kwargs
from arlgym.errors import ConfigError, MissingDependency
from arlgym.serve.server import EnvServer, is_loopback

__all__ = ["add_subparser", "parse_env_kwargs", "env_server_kwargs", "add_env_servers",
           "TOKEN_VARIABLE"]


def _require_serve_extra() -> None:
    """uvicorn and websockets, or one line naming the exact command that installs them into
    this interpreter (from this checkout when arlgym runs from one), as `arlgym envs` does."""
    import importlib.util

    lacking = [m for m in ("uvicorn", "websockets") if importlib.util.find_spec(m) is None]
    if lacking:
        raise MissingDependency(f"the env server needs {' and '.join(lacking)}, not installed here "
                                f"(`make demo` leaves them out). Fix: {pip_install('serve')}")


def _serve(args: argparse.Namespace) -> int:
    if not args.env:
        raise ConfigError("name the envs to host: --env arl/Sokoban-v0 (repeatable); "
                          "`arlgym envs` lists the ids")
    if len(set(args.env)) != len(args.env):
        raise ConfigError(f"--env names an env twice: {args.env}")
    _require_serve_extra()
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE) or None
    server = EnvServer(parse_env_kwargs(args.env, args.env_kwarg), host=args.host,
                       port=args.port, token=token, insecure=args.insecure,
                       max_sessions=args.max_sessions, ttl=args.ttl, max_body=args.max_body,
                       workers=args.workers, threads=args.threads, timeout=args.timeout,
                       inline_steps=not args.no_inline_steps, mode=args.mode,
                       processes=args.processes)
    guard = "token required" if token else (
        "loopback only" if is_loopback(args.host) else "NO token (--insecure)")
    print(f"arlgym serve: {', '.join(args.env)} on {server.url} ({guard}; at most "
          f"{args.max_sessions} sessions"
          + (f" in each of {args.processes} processes, pids "
             f"{' '.join(map(str, server.pids()))}" if args.processes > 1 else "")
          + f", idle ones closed after {args.ttl:g} s). "
          f"OpenEnv clients: GenericEnvClient(base_url='{server.url}'). Ctrl-C stops.",
          flush=True)
    return serve_until_interrupted(server.serve_forever)


def add_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve", help="serve envs over HTTP/WebSocket (OpenEnv protocol; docs/serving.md)",
        description="Host many sessions of arlgym envs in one server that speaks OpenEnv's "
                    "HTTP/WebSocket protocol: OpenEnv's client, make_group_vec(servers=[...]) "
                    "and the TRL adapter connect to it. See docs/serving.md.")
    p.add_argument("--env", action="append", default=[], metavar="ENV_ID",
                   help="an env id to host, repeatable; the first is the default of a reset")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="[ENV_ID:]KEY=VALUE",
                   help="keyword for gymnasium.make of that env, repeatable "
                        "(e.g. arl/Sokoban-v0:dim_room=7; no prefix with a single --env)")
    p.add_argument("--host", type=host_name, default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, this machine only); any "
                        "other needs --token or --insecure")
    p.add_argument("--port", type=port_number, default=8000, help="port (default: 8000; 0: any free)")
    p.add_argument("--token", default=None,
                   help=f"access token clients must send as 'Authorization: Bearer <token>' "
                        f"(default: ${TOKEN_VARIABLE}, which keeps it out of `ps`)")
    p.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --host without a token (trusted networks only)")
    p.add_argument("--max-sessions", type=int, default=1024,
                   help="sessions held at once; more are refused with a clear error (default: 1024)")
    p.add_argument("--ttl", type=float, default=600.0,
                   help="seconds an idle session is kept before it is closed (default: 600)")
    p.add_argument("--max-body", type=int, default=1 << 20,
                   help="largest request body / WebSocket message in bytes (default: 1048576)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes per env that is not thread-safe, e.g. ALFWorld "
                        "(default: min(4, CPUs))")
    p.add_argument("--processes", type=int, default=1,
                   help="server processes sharing the port, each with its own sessions (the "
                        "kernel spreads new connections over them): more cores for bursts of "
                        "new sessions. A WebSocket session lives in its connection's process; "
                        "an HTTP session only over the connection that made it (another "
                        "connection may reach another process: HTTP 421). Default: 1")
    p.add_argument("--threads", type=int, default=8,
                   help="threads stepping the thread-safe envs (default: 8)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a worker process may take for one request (default: 300)")
    p.add_argument("--no-inline-steps", action="store_true",
                   help="run every step on the thread pool, also those of envs with cheap "
                        "steps (Sokoban), which otherwise run on the event loop (slower; for "
                        "comparison)")
    p.add_argument("--mode", default="simulation", choices=("simulation", "production"),
                   help="production: OpenEnv's production mode, without the HTTP /reset, /step "
                        "and /state routes (agents play over /ws and the MCP tools on /mcp); "
                        "default: simulation (every route)")
    p.set_defaults(func=_serve)
    return p
