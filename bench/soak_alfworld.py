"""Memory soak of arl/ALFWorld-v0: many episodes over distinct tasks, RSS must stay bounded.

Each episode resets to a task never played before (``gen-train-00000``, ``-00001``, ...; each
generated, expert-checked and translated on first use, as in training) and takes a few random
admissible steps. RSS is sampled every ``--report-every`` episodes; the run fails when RSS
exceeds ``--bound-mb``, and reports the growth over the second half of the run (which the
bounded caches make ~0: they fill within the first ~100 distinct games).

    python bench/soak_alfworld.py --episodes 10000 --steps 3
    python bench/soak_alfworld.py --episodes 400 --cache DIR   # reuse generated games

Before arlgym bounded its caches and pruned TextWorld's intern table, RSS grew ~0.5-1 MB per
distinct game without end (400 distinct tasks: 81 -> 319 MB).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3, help="random steps per episode")
    parser.add_argument("--bound-mb", type=float, default=400.0,
                        help="fail when RSS exceeds this (MiB). Default 400.")
    parser.add_argument("--report-every", type=int, default=50)
    parser.add_argument("--cache", default=None,
                        help="$ARLGYM_CACHE for generated games (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    tmp = None
    if args.cache is None:
        tmp = tempfile.TemporaryDirectory(prefix="arlgym-soak-")
        args.cache = tmp.name
    os.environ["ARLGYM_CACHE"] = args.cache

    import gymnasium as gym

    import arlgym  # noqa: F401
    from arlgym.envs.alfworld.engine import cache_sizes

    env = gym.make("arl/ALFWorld-v0", data_source="generated",
                   split_sizes={"train": args.episodes}, max_steps=args.steps + 1)
    rng = random.Random(args.seed)
    samples: list[tuple[int, float]] = []
    start = rss_mb()
    t0 = time.perf_counter()
    status = 0
    try:
        for episode in range(args.episodes):
            _, info = env.reset(options={"task_id": f"gen-train-{episode:05d}"})
            for _ in range(args.steps):
                action = rng.choice(info["admissible_actions"])
                _, _, term, trunc, info = env.step(f"<think>soak</think><action>{action}</action>")
                if term or trunc:
                    break
            if (episode + 1) % args.report_every == 0 or episode + 1 == args.episodes:
                now = rss_mb()
                samples.append((episode + 1, now))
                print(f"episode {episode + 1:6d}  rss {now:7.1f} MiB  "
                      f"{time.perf_counter() - t0:7.0f} s  {cache_sizes()}", flush=True)
                if now > args.bound_mb:
                    print(f"FAIL: RSS {now:.1f} MiB > bound {args.bound_mb} MiB")
                    status = 1
                    break
    finally:
        env.close()
        if tmp is not None:
            tmp.cleanup()
    if samples:
        half = [s for s in samples if s[0] >= samples[-1][0] // 2]
        peak = max(r for _, r in samples)
        print(f"distinct-task episodes {samples[-1][0]}: RSS {start:.1f} -> {samples[-1][1]:.1f} "
              f"MiB (peak {peak:.1f}); second half {half[0][1]:.1f} -> {half[-1][1]:.1f} MiB "
              f"({(half[-1][1] - half[0][1]) / max(1, half[-1][0] - half[0][0]) * 1000:.1f} "
              f"MiB per 1000 episodes); bound {args.bound_mb} MiB")
    return status


if __name__ == "__main__":
    sys.exit(main())
