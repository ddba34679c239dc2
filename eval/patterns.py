"""Thin entry point over :mod:`arlgym.evaluation.patterns`: same flags as ``arlgym patterns``.

    python eval/patterns.py runs/eval/arl_WebShop-v0__hf_runs_sft__test.jsonl
"""

import sys

from arlgym.cli import main

if __name__ == "__main__":
    sys.exit(main(["patterns", *sys.argv[1:]]))
