"""TIR sandbox cost per code cell, p50 and p95, measured in the same run:

* ``isolated``: the default — forked from a warm interpreter (numpy and sympy imported) that
  lives inside the bubblewrap boundary, each cell in fresh user/mount/PID/net/IPC/UTS
  namespaces with its own tmpfs and /proc (``docs/security.md``);
* ``fork``: ``sandbox="unisolated"``, forked from a warm interpreter on the host (no namespaces
  but a network one);
* ``subprocess``: ``sandbox="unisolated", engine="subprocess"``: a fresh ``python -I`` per cell,
  the way ARLArena's sandbox runs cells (``python3 main.py``), without its 2 s client sleep.

    python bench/bench_tir_sandbox.py [--cells 50] [--breakdown] [--gap 0.05]

``--breakdown`` splits an isolated ``print(1)`` into request → cell running (fork, namespaces,
mounts, limits) and cell running → reply (the code, exit, teardown of the namespaces, reaping).
The machine's load is printed: on a shared machine, compare the columns of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from arlgym.envs.tir_math.problems import generate_problem
from arlgym.envs.tir_math.sandbox import PythonSandbox

CELLS = {
    "print(1)": "print(1)",
    "numpy": "import numpy as np\nprint(np.arange(10).sum())",
    "sympy": "import sympy\nx = sympy.symbols('x')\nprint(sympy.solve(x**2 - 2, x))",
}
MODES = {"isolated": {}, "fork": {"isolation": "unisolated", "engine": "fork"},
         "subprocess": {"isolation": "unisolated", "engine": "subprocess"}}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3


def _server_interpreter(box: PythonSandbox) -> int | None:
    """Host pid of the warm interpreter under a fork sandbox's launcher (bwrap chain or not)."""
    root = box.server_pid
    if root is None:
        return None
    todo = [root]
    while todo:  # breadth first: the server, not its cells (forks of it, same command line)
        pid = todo.pop(0)
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if b"python" in os.path.basename(argv[0]) and any(b"PRELOAD" in a for a in argv):
                return pid  # (not bwrap, whose arguments hold the same code)
            todo += [int(c) for t in os.listdir(f"/proc/{pid}/task")
                     for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError:
            continue
    return None


def cpu_seconds(box: PythonSandbox) -> float:
    """CPU used so far by the cells of ``box`` and what runs them (the fork server and its reaped
    children, or this process's reaped children for the subprocess engine) — what a cell costs
    on an idle machine, where the wall time is this CPU time plus a little waiting."""
    if box.engine == "subprocess":
        t = os.times()
        return t.children_user + t.children_system
    pid = _server_interpreter(box)
    if pid is None:
        return float("nan")
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _pair(p50: float, p95: float) -> str:
    return f"{p50:.1f} / {p95:.1f}"


def breakdown(box: PythonSandbox, n: int, gap: float) -> None:
    to_start, to_reply = [], []
    for _ in range(n):
        time.sleep(gap)
        sent = time.monotonic()
        result = box.run("import time; print(time.monotonic())")
        done = time.monotonic()
        started = float(result.stdout)
        to_start.append(started - sent)
        to_reply.append(done - started)
    print(f"isolated print: request -> cell running p50 {statistics.median(to_start) * 1e3:.1f} ms, "
          f"cell running -> reply p50 {statistics.median(to_reply) * 1e3:.1f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=50, help="cells per kind and mode")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--gap", type=float, default=0.05,
                    help="seconds between two cells of a mode (a model generates between two cells "
                         "of a rollout; the servers fork the next cell meanwhile); 0: back to back")
    ap.add_argument("--kinds", default="print(1),numpy,sympy,reference",
                    help="comma-separated cell kinds to time")
    args = ap.parse_args()
    boxes = {mode: PythonSandbox(timeout=60.0, **kwargs) for mode, kwargs in MODES.items()}
    for box in boxes.values():
        box.run("print(0)")  # start the servers outside the timing (~1 s, once per process)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.cells} cells each")
    reference = [generate_problem(s).solution_code for s in range(args.cells)]
    print(f"{'cell':10s} " + " ".join(f"{m + ' p50/p95 ms':>24s}" for m in MODES))
    cpu: dict[str, dict[str, float]] = {}
    kinds = [*((k, [v] * args.cells) for k, v in CELLS.items()), ("reference", reference)]
    for name, codes in [(k, c) for k, c in kinds if k in args.kinds.split(",")]:
        samples: dict[str, list[float]] = {m: [] for m in MODES}
        cpu[name] = {}
        for mode, box in boxes.items():
            cpu[name][mode] = -cpu_seconds(box)
        for code in codes:  # interleaved, so that load changes hit every mode alike
            for mode, box in boxes.items():
                time.sleep(args.gap / len(boxes))
                result = box.run(code)
                assert result.ok or result.timed_out, (mode, name, result)
                samples[mode].append(result.seconds)
        for mode, box in boxes.items():
            cpu[name][mode] += cpu_seconds(box)
        cells = " ".join(f"{_pair(*percentiles(samples[m])):>24s}" for m in MODES)
        print(f"{name:10s} {cells}")
    print("\nCPU ms per cell (the cell and the server that forks and reaps it, on the critical path or "
          "not; the client's JSON and thread wake-up, ~0.3 ms, not counted)")
    for name, per_mode in cpu.items():
        print(f"{name:10s} " + " ".join(f"{m} {1e3 * v / args.cells:7.1f}" for m, v in per_mode.items()))
    if args.breakdown:
        breakdown(boxes["isolated"], args.cells, args.gap)
    for box in boxes.values():
        box.close()
