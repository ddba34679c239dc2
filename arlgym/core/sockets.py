"""A listening socket bound before a server starts (the WebShop site, ``arlgym serve``).

Binding here rather than inside uvicorn means the port (0: any free one) is known before serving
starts, and a taken port is a :class:`~arlgym.errors.ConfigError` naming the fix instead of a
log line from inside the server thread.
"""

from __future__ import annotations

import socket
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["listening_socket", "serve_until_interrupted"]


def listening_socket(host: str, port: int, *, backlog: int, purpose: str,
                     reuse_port: bool = False) -> socket.socket:
    """A socket listening on ``host:port``; ``purpose`` says what for, in the error.

    ``reuse_port``: set ``SO_REUSEPORT``, so several processes each bind a socket of their own
    to one port and the kernel spreads new connections over them (``arlgym serve
    --processes``); every socket on the port must set it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"port={port}: cannot {purpose} on {host}:{port}: {e.strerror}. "
                          "Fix: choose another --port (0: any free one)") from None
    sock.listen(backlog)
    return sock


def serve_until_interrupted(serve_forever: Any) -> int:
    """Run a foreground server's ``serve_forever`` until Ctrl-C; exit status 0 either way (a
    person stopping ``arlgym serve`` or ``arlgym webshop serve`` is the normal end)."""
    import contextlib

    with contextlib.suppress(KeyboardInterrupt):
        serve_forever()
    return 0
