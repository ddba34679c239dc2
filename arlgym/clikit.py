"""The conventions every arlgym command line shares (``arlgym``, ``arlgym-sft``, the trainer).

* **One spelling**: options are spelt with dashes (``--output-dir``, ``--max-new-tokens``), as
  POSIX tools and most of arlgym's commands always had them; the underscore spelling of the
  same option (``--output_dir``, as Hugging Face's and TRL's parsers print them, and as the
  trainer's YAML fields are named) is accepted everywhere as an alias, so existing commands
  keep working.
* **Defaults in every** ``--help`` (zeros included), and ``--version`` on every command and
  subcommand.
* **One-line mistakes, scoped**: an unknown option, subcommand or value is one line, exit 2,
  with a did-you-mean drawn from *that* (sub)command's own options or choices and a pointer to
  its own ``--help``; abbreviations are off, so an option's prefix is a mistake, not a guess.
* **Env kwargs the same way everywhere**: ``--env-kwarg KEY=VALUE`` (repeatable; the value is a
  Python/JSON literal where it parses) and ``--env-kwargs JSON`` (one mapping); both may be
  combined, single keys override the mapping.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from arlgym.core.validation import did_you_mean
from arlgym.errors import ConfigError
from arlgym.version import __version__

__all__ = ["ArgumentParser", "HelpFormatter", "canonical_option", "add_version", "add_env_kwargs",
           "env_kwargs_of", "invoked_prog", "port_number", "host_name"]


def canonical_option(token: str) -> str:
    """``--output_dir=x`` -> ``--output-dir=x``; anything that is not a long option unchanged."""
    if not token.startswith("--") or len(token) == 2:
        return token
    name, sep, value = token[2:].partition("=")
    return "--" + name.replace("_", "-") + sep + value


def _canonical_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":  # what follows is positional, whatever it looks like
            return out + list(argv[i:])
        out.append(canonical_option(token))
    return out


def _no_default(value: Any) -> bool:
    """Whether ``value`` means "no default to show". By identity, not equality: ``0 == False``,
    so an equality test hid every default of 0 (``--seed``, ``--save-steps``)."""
    return value is None or value is argparse.SUPPRESS or value is False or value == []


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default unless its help already says it (or it has none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or _no_default(action.default):
            return text
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return text
        return super()._get_help_string(action)


class _Subcommands(argparse._SubParsersAction):
    """A subcommand parses its arguments to the end itself: an argument it does not know is its
    own error (did-you-mean from its options, "See `arlgym train --help`"), not the top
    command's, which would suggest options of every other subcommand."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        parser.invoked_subcommand = self._name_parser_map[values[0]]  # for invoked_prog
        extra = vars(namespace).pop(argparse._UNRECOGNIZED_ARGS_ATTR, None)
        if extra:
            self._name_parser_map[values[0]].error(f"unrecognized arguments: {' '.join(extra)}")


_INVALID_CHOICE = re.compile(r"invalid choice: (.+?) \(choose from (.*)\)$")


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with arlgym's conventions (see the module docstring).
    Subparsers made from it are of this class too, and get ``--version`` on their own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # `--max-step` must not start a run
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)
        add_version(self)

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        if kwargs.get("help") is None and not _no_default(kwargs.get("default")):
            kwargs["help"] = "(default: %(default)s)"  # argparse shows no default without a help
        return super().add_argument(*(canonical_option(n) for n in names), **kwargs)

    def error(self, message: str) -> Any:
        """One line (no usage dump): the error, a did-you-mean from this (sub)command's own
        options or the argument's choices, and where this command's options are listed."""

        hint = ""
        if message.startswith("unrecognized arguments:"):
            known = _option_strings(self)
            for token in message.split(":", 1)[1].split():
                if token.startswith("--"):
                    hint = did_you_mean(token.split("=")[0], known)
                    if hint:
                        break
        elif match := _INVALID_CHOICE.search(message):
            try:
                value = ast.literal_eval(match.group(1))
                choices = ast.literal_eval(f"[{match.group(2)}]")
            except (ValueError, SyntaxError):
                value, choices = None, []
            hint = did_you_mean(value, choices)
        self.exit(2, f"{self.prog}: error: {message}{hint}. See `{self.prog} --help`\n")

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> Any:
        argv = sys.argv[1:] if args is None else args
        return super().parse_known_args(_canonical_argv(list(argv)), namespace)


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """The long options of ``parser`` itself (not of its subcommands: a did-you-mean must name
    an option the command that failed has)."""
    return {o for action in parser._actions for o in action.option_strings if o.startswith("--")}


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version`` (once: a parser built from a parent that has it keeps the parent's)."""
    if "--version" in parser._option_string_actions:
        return
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def invoked_prog(parser: argparse.ArgumentParser) -> str:
    """The ``prog`` of the (sub)subcommand the last ``parse_args`` of ``parser`` ran
    (``arlgym arena run``): a run-time error names the command the user typed."""
    while getattr(parser, "invoked_subcommand", None) is not None:
        parser = parser.invoked_subcommand
    return parser.prog


def port_number(text: str) -> int:
    """``--port``: an integer in 0..65535 (0: any free port), checked at parse time, so a bad
    one is one line and exit 2, not an ``OverflowError`` from the socket."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: give an integer in "
                                         "0..65535 (0: any free port), e.g. --port 8000") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range: a port is 0..65535 (0: any "
                                         "free port), e.g. --port 8000")
    return port


_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def host_name(text: str) -> str:
    """``--host``: an IP address or a host name to listen on, checked at parse time; a URL or a
    ``host:port`` is named as such (the port has its own option)."""
    import ipaddress

    host = text.strip()
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if _HOSTNAME.match(host):
        return host
    if "://" in host:
        why = "a URL, not an address"
    elif host.count(":") == 1 and host.rsplit(":", 1)[1].isdigit():
        why = "an address with a port; give the port as --port"
    else:
        why = "not an IP address or host name"
    raise argparse.ArgumentTypeError(f"{text!r} is {why}: e.g. --host 127.0.0.1 (this machine "
                                     "only) or --host 0.0.0.0 (every interface)")


def add_env_kwargs(p: argparse.ArgumentParser, *, json_default: bool = False) -> None:
    """``--env-kwarg KEY=VALUE`` (repeatable) and ``--env-kwargs JSON``."""
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="one keyword for gymnasium.make, repeatable (e.g. --env-kwarg max_steps=10)")
    p.add_argument("--env-kwargs", default=None, metavar="JSON",
                   help="keywords for gymnasium.make as one JSON mapping (e.g. "
                        "'{\"max_steps\": 10}'); --env-kwarg keys override it")


def parse_kwarg_pairs(pairs: Sequence[str], flag: str = "--env-kwarg") -> dict[str, Any]:
    """``["dim_room=7", "num_boxes=2"]`` -> ``{"dim_room": 7, "num_boxes": 2}`` (Python literals
    where they parse, strings otherwise)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects key=value, got {pair!r}. Fix: write e.g. "
                              f"{flag} dim_room=7 (repeat the flag for more keys)")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            lowered = value.strip().lower()
            out[key] = {"true": True, "false": False, "null": None}.get(lowered, value)
    return out


def parse_kwargs_json(text: str | None, flag: str = "--env-kwargs") -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {text!r} is not JSON ({e.msg}). Fix: write e.g. "
                          f"{flag} '{{\"max_steps\": 10}}'") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} {text!r} is not a JSON mapping. Fix: write e.g. "
                          f"{flag} '{{\"max_steps\": 10}}'")
    return value


def env_kwargs_of(args: argparse.Namespace) -> dict[str, Any]:
    """The env kwargs of ``--env-kwargs`` and ``--env-kwarg`` combined."""
    return {**parse_kwargs_json(getattr(args, "env_kwargs", None)),
            **parse_kwarg_pairs(getattr(args, "env_kwarg", []) or [])}
