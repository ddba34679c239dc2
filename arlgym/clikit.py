"""The conventions every arlgym command line shares (``arlgym``, ``arlgym-sft``, the trainer).

* **One spelling**: options are spelt with dashes (``--output-dir``, ``--max-new-tokens``), as
  POSIX tools and most of arlgym's commands always had them; the underscore spelling of the
  same option (``--output_dir``, as Hugging Face's and TRL's parsers print them, and as the
  trainer's YAML fields are named) is accepted everywhere as an alias, so existing commands
  keep working.
* **Defaults in every** ``--help``, and ``--version`` on every command.
* **Env kwargs the same way everywhere**: ``--env-kwarg KEY=VALUE`` (repeatable; the value is a
  Python/JSON literal where it parses) and ``--env-kwargs JSON`` (one mapping); both may be
  combined, single keys override the mapping.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Sequence
from typing import Any

from arlgym.core.validation import did_you_mean
from arlgym.errors import ConfigError
from arlgym.version import __version__

__all__ = ["ArgumentParser", "HelpFormatter", "canonical_option", "add_version", "add_env_kwargs",
           "env_kwargs_of"]


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


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default unless its help already says it (or it has none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, argparse.SUPPRESS, False, []):
            return text
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return text
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with arlgym's conventions (see the module docstring).
    Subparsers made from it are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        default = kwargs.get("default")
        if kwargs.get("help") is None and default not in (None, False, [], argparse.SUPPRESS):
            kwargs["help"] = "(default: %(default)s)"  # argparse shows no default without a help
        return super().add_argument(*(canonical_option(n) for n in names), **kwargs)

    def error(self, message: str) -> Any:
        """One line (no usage dump): the error, a did-you-mean for a misspelt option, and where
        the options are listed."""
        hint = ""
        if message.startswith("unrecognized arguments:"):
            known = _option_strings(self)
            for token in message.split(":", 1)[1].split():
                if token.startswith("--"):
                    hint = did_you_mean(token.split("=")[0], known)
                    if hint:
                        break
        self.exit(2, f"{self.prog}: error: {message}{hint}. See `{self.prog} --help`\n")

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> Any:
        argv = sys.argv[1:] if args is None else args
        return super().parse_known_args(_canonical_argv(list(argv)), namespace)


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of ``parser`` and of its subcommands."""
    out: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= _option_strings(sub)
        out.update(o for o in action.option_strings if o.startswith("--"))
    return out


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


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
