"""Running one of arlgym's commands: parse, dispatch, and turn a user error into one line.

Every console script (``arlgym``, ``arlgym-sft``, ``arlgym-train``, ``arlgym-arena``) runs its
parser through :func:`run_command`, so they agree on exit codes (2: a user error, 130:
interrupted) and on how an error reads. It sits beside :mod:`arlgym.clikit` (the shared flags)
below every command, so no command imports another command's module.
"""

from __future__ import annotations

import argparse
import sys

from arlgym.clikit import invoked_prog
from arlgym.errors import ArlgymError

__all__ = ["run_command", "safe_name"]


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None,
                interrupted: str = "interrupted") -> int:
    """Parse, run ``args.func`` and turn user errors into one line on stderr (exit code 2)."""
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ArlgymError as e:
        text = str(e)
        if "Traceback (most recent call last)" not in text:  # a user error: one line
            text = " ".join(text.split())
        print(f"{invoked_prog(parser)}: error: {text}", file=sys.stderr)
        return 2
    except EOFError:  # e.g. --policy human with stdin closed or redirected from /dev/null
        print(f"{invoked_prog(parser)}: error: standard input ended while a command waited for input "
              "(--policy human reads moves from stdin). Fix: run it in a terminal, or pipe one "
              "move per line into it", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: {interrupted}", file=sys.stderr)
        return 130


def safe_name(text: str) -> str:
    """``text`` with every character but letters, digits and ``-_.`` replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
