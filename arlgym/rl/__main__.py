"""``python -m arlgym.rl`` = ``trainers/sampo.py`` (what ``arlgym arena`` launches per run, so
that a run needs the installed package only, not the repository's ``trainers/`` folder)."""

import sys

from arlgym.rl.cli import main

if __name__ == "__main__":
    sys.exit(main())
