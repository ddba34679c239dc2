"""How a run names remote env servers: the ``env_servers`` setting, the ``--env-servers`` flag
and the ``--env-kwarg [ENV_ID:]KEY=VALUE`` flags of ``arlgym serve``.

Every command that can play its envs on ``arlgym serve`` servers (the trainer, ``arlgym eval``,
``arlgym-sft collect``) turns its URL list into the collector's ``servers``/``server_token``
here, so none of them imports another command's CLI module. The token comes from
``$ARLGYM_SERVE_TOKEN``, so it never lands in a command line, a config or a record.
"""

from __future__ import annotations

import argparse
import os

from arlgym.clikit import parse_kwarg_pairs
from arlgym.errors import ConfigError

__all__ = ["TOKEN_VARIABLE", "env_server_kwargs", "add_env_servers", "parse_env_kwargs"]

#: the environment variable that holds the servers' access token
TOKEN_VARIABLE = "ARLGYM_SERVE_TOKEN"


def env_server_kwargs(env_servers: str | None, flag: str = "env_servers") -> dict:
    """The collector's ``servers``/``server_token`` for a comma-separated URL list (the
    trainer's ``env_servers``, the ``--env-servers`` flag of ``arlgym eval`` and
    ``arlgym-sft collect``); empty: ``{}`` (local envs). The token comes from
    ``$ARLGYM_SERVE_TOKEN``, so it never lands in a command line, a config or a record."""
    urls = [u.strip() for u in (env_servers or "").split(",") if u.strip()]
    if not urls:
        return {}
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{flag} entry {url!r} is invalid: expected URLs like "
                              f"http://host:8000, comma-separated (e.g. {flag} "
                              "http://node1:8000,http://node2:8000)")
    return {"servers": urls, "server_token": os.environ.get(TOKEN_VARIABLE) or None}


def add_env_servers(p: argparse.ArgumentParser) -> None:
    """``--env-servers URL[,URL...]``: play the envs on ``arlgym serve`` servers."""
    p.add_argument("--env-servers", default="", metavar="URL[,URL...]",
                   help="play the envs on these env servers (`arlgym serve`, docs/serving.md), "
                        "group g on server g mod n, instead of in this process; the results "
                        f"equal the local run's. A token, if they need one: ${TOKEN_VARIABLE}")


def parse_env_kwargs(env_ids: list[str], pairs: list[str]) -> dict[str, dict]:
    """``--env-kwarg [ENV_ID:]KEY=VALUE`` flags -> ``{env_id: kwargs}``; an unprefixed key
    needs a single ``--env`` (with several, which env it meant would be a guess)."""
    out: dict[str, dict] = {env_id: {} for env_id in env_ids}
    for pair in pairs:
        target, sep, rest = pair.partition(":")
        if sep and "=" not in target:
            if target not in out:
                raise ConfigError(f"--env-kwarg {pair!r} names env {target!r}, which no --env "
                                  f"hosts; hosted: {env_ids}")
            out[target].update(parse_kwarg_pairs([rest]))
        elif len(env_ids) == 1:
            out[env_ids[0]].update(parse_kwarg_pairs([pair]))
        else:
            raise ConfigError(f"--env-kwarg {pair!r}: with several --env, say which env it is "
                              f"for, e.g. --env-kwarg {env_ids[0]}:{pair}")
    return out
