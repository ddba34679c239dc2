"""TIR sandbox cost per code cell: the fork engine (cells forked from a warm interpreter with
numpy and sympy imported) against one fresh ``python -I`` per cell — the way ARLArena's sandbox
runs cells (``python3 main.py``), without its 2 s client sleep — measured in the same run.

    python bench/bench_tir_sandbox.py [--cells 30]
"""

from __future__ import annotations

import argparse
import statistics

from arlgym.envs.tir_math.problems import generate_problem
from arlgym.envs.tir_math.sandbox import PythonSandbox

CELLS = {
    "print": "print(6 * 7)",
    "numpy": "import numpy as np\nprint(np.arange(10).sum())",
    "sympy": "import sympy\nx = sympy.symbols('x')\nprint(sympy.solve(x**2 - 2, x))",
}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=30, help="cells per kind and engine")
    args = ap.parse_args()
    boxes = {engine: PythonSandbox(engine=engine) for engine in ("fork", "subprocess")}
    boxes["fork"].run("print(0)")  # start the server outside the timing (~0.5 s, once per process)
    reference = [generate_problem(s).solution_code for s in range(args.cells)]
    print(f"{'cell':10s} {'fork ms':>9s} {'subprocess ms':>14s} {'speed-up':>9s}")
    for name, codes in [*((k, [v] * args.cells) for k, v in CELLS.items()), ("reference", reference)]:
        ms = {e: statistics.median(b.run(c).seconds for c in codes) * 1000 for e, b in boxes.items()}
        print(f"{name:10s} {ms['fork']:9.1f} {ms['subprocess']:14.1f} {ms['subprocess'] / ms['fork']:8.1f}x")
