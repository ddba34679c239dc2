"""Memory soak of the text envs other than ALFWorld (``bench/soak_alfworld.py`` has that one):
many episodes over distinct tasks per env; RSS must stay bounded.

For each env (``arl/Sokoban-v0``, ``arl/TIRMath-v0``, ``arl/WebShop-v0`` by default) one env is
made and ``--episodes`` episodes are played, episode ``k`` on the ``k``-th id of
``list_tasks("train", limit=episodes)`` (a new room, problem or goal each time: every task id
is distinct; WebShop's catalog is sized so that its train split holds that many goals — two goals
a product, ~69% of them in train — as its default 1,000 products hold only 1,377) with the env's
own expert for at most ``--steps`` turns. RSS is sampled every ``--report-every`` episodes: this process and, separately,
its child processes (the TIR fork server and its spare cell). The run fails when this process's
RSS grows by more than ``--max-growth-mb`` between the end of the warm-up (``--warmup`` of the
episodes; caches and allocator pools fill there) and the end, or passes ``--bound-mb``.

    python bench/soak_envs.py --episodes 10000
    python bench/soak_envs.py --envs arl/Sokoban-v0 --episodes 2000 --report-every 200
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

from arlgym.core import procfs


def _rss_mb(pid: int | str = "self") -> float:
    """Resident set size of ``pid`` in MiB; 0 if it is gone."""
    return procfs.rss_mib(pid)


def _children_rss_mb() -> float:
    """RSS of every live descendant of this process (forks share pages: an upper bound)."""
    return sum(procfs.rss_mib(child) for child in procfs.descendants(os.getpid()))


def soak(env_id: str, episodes: int, steps: int, report_every: int, warmup: float) -> dict:
    import gymnasium as gym

    import arlgym  # noqa: F401  (registers the ids)

    kwargs = {"num_products": max(1000, episodes)} if "WebShop" in env_id else {}
    env = gym.make(env_id, **kwargs)
    base = env.unwrapped
    task_ids = base.list_tasks("train", limit=episodes)
    if len(set(task_ids)) < episodes:
        env.close()
        raise SystemExit(f"{env_id}: its train split holds {len(set(task_ids))} tasks, fewer than "
                         f"--episodes {episodes}: the soak would repeat tasks")
    tasks: set[str] = set()
    samples: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    try:
        for episode in range(episodes):
            _, info = env.reset(seed=episode, options={"task_id": task_ids[episode]})
            tasks.add(str(info.get("task_id")))
            for _ in range(steps):
                _, _, term, trunc, info = env.step(base.expert_response())
                if term or trunc:
                    break
            if (episode + 1) % report_every == 0 or episode + 1 == episodes:
                gc.collect()
                samples.append((episode + 1, _rss_mb(), _children_rss_mb()))
                print(f"{env_id:18s} episode {episode + 1:6d}  rss {samples[-1][1]:7.1f} MiB  "
                      f"children {samples[-1][2]:7.1f} MiB  {time.perf_counter() - t0:6.0f} s", flush=True)
    finally:
        env.close()
    after_warmup = next(s for s in samples if s[0] >= warmup * episodes)
    return {"env": env_id, "episodes": episodes, "distinct_tasks": len(tasks),
            "rss_start": samples[0][1], "rss_warm": after_warmup[1], "rss_end": samples[-1][1],
            "rss_peak": max(s[1] for s in samples), "children_end": samples[-1][2],
            "children_peak": max(s[2] for s in samples), "warm_episode": after_warmup[0],
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["arl/Sokoban-v0", "arl/TIRMath-v0", "arl/WebShop-v0"])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3, help="expert turns per episode at most")
    parser.add_argument("--report-every", type=int, default=500)
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="fraction of the episodes before growth is measured (default 0.1)")
    parser.add_argument("--max-growth-mb", type=float, default=20.0,
                        help="fail when RSS grows more than this after the warm-up (MiB; default 20)")
    parser.add_argument("--bound-mb", type=float, default=1024.0,
                        help="fail when this process's RSS exceeds this (MiB; default 1024)")
    args = parser.parse_args(argv)
    status = 0
    for env_id in args.envs:
        r = soak(env_id, args.episodes, args.steps, min(args.report_every, args.episodes), args.warmup)
        growth = r["rss_end"] - r["rss_warm"]
        ok = growth <= args.max_growth_mb and r["rss_peak"] <= args.bound_mb
        status |= not ok
        print(f"{'OK' if ok else 'FAIL'} {env_id}: {r['episodes']} episodes over {r['distinct_tasks']} "
              f"distinct tasks in {r['seconds']:.0f} s; RSS {r['rss_start']:.1f} -> {r['rss_warm']:.1f} "
              f"(episode {r['warm_episode']}) -> {r['rss_end']:.1f} MiB (peak {r['rss_peak']:.1f}; growth "
              f"after warm-up {growth:+.1f} MiB, bound {args.max_growth_mb:g}); child processes "
              f"{r['children_end']:.1f} MiB at the end (peak {r['children_peak']:.1f})", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
