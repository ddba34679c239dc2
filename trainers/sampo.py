"""Entry point: ``accelerate launch trainers/sampo.py --config configs/<x>.yaml --algo <preset>``.

All logic lives in :mod:`arlgym.rl`; see ``python trainers/sampo.py --help``.
"""

import sys

from arlgym.rl.cli import main

if __name__ == "__main__":
    sys.exit(main())
