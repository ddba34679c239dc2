"""Thin entry point over :mod:`arlgym.evaluation`: same flags as ``arlgym eval``.

    python eval/evaluate.py --env arl/Sokoban-v0 --policy hf:runs/sft-tiny --episodes 200
"""

import sys

from arlgym.cli import main

if __name__ == "__main__":
    sys.exit(main(["eval", *sys.argv[1:]]))
