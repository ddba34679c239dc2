"""arlgym envs over the network: an OpenEnv-compatible env server and the clients that use it.

``arlgym serve`` (:mod:`arlgym.serve.server`) hosts many sessions of any registered env and
speaks OpenEnv's HTTP/WebSocket protocol and MCP, so OpenEnv's own ``GenericEnvClient`` and
``MCPToolClient``, and any MCP client, drive it unchanged; :mod:`arlgym.serve.client` is arlgym's own client (:class:`RemoteEnv`, a Gymnasium
env whose episodes equal the in-process ones) used by ``make_group_vec(..., servers=[...])``.
See docs/serving.md.
"""

from __future__ import annotations

__all__ = ["EnvServer", "RemoteEnv", "RemoteEnvError"]


def __getattr__(name: str):  # lazy: importing arlgym.serve must not need uvicorn/websockets
    if name == "EnvServer":
        from arlgym.serve.server import EnvServer

        return EnvServer
    if name in ("RemoteEnv", "RemoteEnvError"):
        from arlgym.serve import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
