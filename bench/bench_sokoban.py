"""Sokoban benchmarks: room generation vs gym-sokoban, and env step throughput.

For each room size both generators make rooms from the same seeds in this run; the script
prints mean/median/max time, the speed ratio, failures (gym-sokoban raises on score 0; we count
rooms our solver cannot solve — must be 0) and the mean optimal solution length of each, which
shows the two draw rooms from the same distribution.

    python bench/bench_sokoban.py [--rooms 200] [--big-rooms 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gymnasium as gym  # noqa: E402
from _gym_sokoban import load_room_utils, to_room  # noqa: E402

import arlgym  # noqa: E402,F401
from arlgym.envs.sokoban.generator import generate_room  # noqa: E402
from arlgym.envs.sokoban.solver import solve  # noqa: E402

CONFIGS = [((6, 6), 1), ((7, 7), 2), ((8, 8), 2), ((10, 10), 3)]


def _fmt(ts: list[float]) -> str:
    return f"{1e3 * statistics.mean(ts):8.2f} {1e3 * statistics.median(ts):8.2f} {1e3 * max(ts):9.2f}"


def bench_generation(n_small: int, n_big: int) -> None:
    ru = load_room_utils()
    print("Room generation (ms): mean / median / max; 'unsolved' = rooms our solver cannot solve")
    print(f"{'room':>6} {'boxes':>5} {'n':>4} | {'gym-sokoban':>27} {'fail':>4} {'len':>5} | "
          f"{'arlgym':>27} {'unsolved':>8} {'len':>5} | {'speed-up':>8}")
    for dims, boxes in CONFIGS:
        n = n_big if dims[0] >= 10 else n_small
        ref_t, ref_len, ref_fail = [], [], 0
        for seed in range(n):
            random.seed(seed)
            np.random.seed(seed)
            t = time.perf_counter()
            try:
                structure, state, _ = ru.generate_room(dims, num_steps=round(1.7 * sum(dims)),
                                                       num_boxes=boxes)
            except (RuntimeWarning, RuntimeError):  # score 0, or too few floor cells
                ref_fail += 1
                ref_t.append(time.perf_counter() - t)
                continue
            ref_t.append(time.perf_counter() - t)
            sol = solve(to_room(structure, state), max_nodes=200_000)
            if sol is not None:
                ref_len.append(len(sol))
        our_t, our_len, unsolved = [], [], 0
        for seed in range(n):
            t = time.perf_counter()
            g = generate_room(np.random.default_rng(seed), dims, boxes)
            our_t.append(time.perf_counter() - t)
            r = g.room
            for m in g.solution.moves:
                r, _ = r.move(m)
            unsolved += not r.solved
            our_len.append(len(g.solution))
        ratio = statistics.mean(ref_t) / statistics.mean(our_t)
        print(f"{dims[0]}x{dims[1]:<3} {boxes:>5} {n:>4} | {_fmt(ref_t)} {ref_fail:>4} "
              f"{statistics.mean(ref_len):5.1f} | {_fmt(our_t)} {unsolved:>8} "
              f"{statistics.mean(our_len):5.1f} | {ratio:7.1f}x")


def bench_steps(n_steps: int) -> None:
    env = gym.make("arl/Sokoban-v0")
    env.reset(seed=0)
    moves = ["up", "down", "left", "right"]
    rng = np.random.default_rng(0)
    responses = [f"<think>go</think><action>{moves[rng.integers(4)]}</action>" for _ in range(n_steps)]
    t = time.perf_counter()
    resets = 0
    for text in responses:
        *_, term, trunc, _ = env.step(text)
        if term or trunc:
            env.reset()
            resets += 1
    dt = time.perf_counter() - t
    print(f"\nEnv step throughput (arl/Sokoban-v0, text prompt rendered every step, "
          f"{resets} resets incl. generation): {n_steps / dt:,.0f} steps/s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rooms", type=int, default=200, help="rooms per small config")
    ap.add_argument("--big-rooms", type=int, default=20, help="rooms for 10x10/3 (gym-sokoban is slow)")
    ap.add_argument("--steps", type=int, default=20_000)
    args = ap.parse_args()
    bench_generation(args.rooms, args.big_rooms)
    bench_steps(args.steps)
