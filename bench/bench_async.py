"""Synchronous vs asynchronous rollouts: throughput and idle time of one trainer config.

For each env (default: ALFWorld, TIR Math, with its sandboxed code cells, and Sokoban) it
trains the same preset from the same seed three or more ways — synchronous, and
``async_rollouts`` with ``max_staleness`` k for each ``--ks`` value (``staleness_policy pace``,
``--workers`` rollout processes) — and reports, over the steps after ``--warmup``:

* env steps/s — responses sampled and played (``env/turns``) per second of step time;
* trained tokens/s — prompt + response tokens of the trained samples per second;
* learner wait — the fraction of step time the learner waited for a rollout batch (async);
  synchronous rollout time is all learner idle time, reported as ``time/rollout_s`` share;
* rollout busy — the fraction of the workers' wall time spent playing jobs (async);
* staleness — mean staleness of the trained turns.

With the tiny model on CPU every env's rollout time is mostly the sampler's: profiled in an
async ALFWorld run (py-spy on the rollout worker), HF generate took 89% of the worker's time,
ALFWorld's resets 9% and its steps (~1.5 ms each) less than 1%.

All runs of one invocation share the machine's conditions; compare ratios within one run, not
absolute figures across machines. Worker start-up (a process that loads torch and the model) is
outside the measured steps when ``--warmup`` >= 1.

    python bench/bench_async.py --steps 8 --warmup 2 --ks 1,2 --workers 1
    python bench/bench_async.py --envs alfworld --steps 6 --warmup 2 --ks 1 --workers 2 --rollout-logprobs

(docs/async.md, "Measured throughput", quotes both; the second gave 1.74× on ALFWorld.)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from arlgym.rl import metrics as M

ENVS = {
    "alfworld": ("arl/ALFWorld-v0", {"max_steps": 6}),
    "tir": ("arl/TIRMath-v0", {"max_steps": 2, "sandbox_timeout": 2.0}),
    "sokoban": ("arl/Sokoban-v0", {"max_steps": 4}),
}


def run(env: str, extra: list[str], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    env_id, kwargs = ENVS[env]
    cfg = parse_train_config([
        "--env_id", env_id, "--env_kwargs", json.dumps(kwargs), "--model", args.model,
        "--algo", args.algo, "--num_tasks", str(args.num_tasks), "--group_size",
        str(args.group_size), "--max_new_tokens", str(args.max_new_tokens), "--lr", "1e-4",
        "--max_steps", str(args.steps), "--log_with", "none", "--torch_threads", "1",
        "--collapse_alarm", "false", "--output_dir", str(out), *extra])
    t0 = time.perf_counter()
    rows = Trainer(cfg).train()
    wall = time.perf_counter() - t0
    rows = rows[args.warmup:]
    step_s = sum(r[M.TIME_STEP] for r in rows)
    return {
        "env_steps_per_s": sum(r[M.TURNS] for r in rows) / step_s,
        "trained_tokens_per_s": sum(r[M.TOKENS] for r in rows) / step_s,
        "learner_wait_frac": sum(r.get(M.TIME_WAIT, r[M.TIME_ROLLOUT]) for r in rows) / step_s,
        "rollout_busy_frac": (sum(r[M.ASYNC_BUSY] for r in rows) / len(rows)
                              if M.ASYNC_BUSY in rows[0] else None),
        "staleness_mean": (sum(r[M.STALENESS_MEAN] for r in rows) / len(rows)
                           if M.STALENESS_MEAN in rows[0] else 0.0),
        "success": sum(r[M.SUCCESS_RATE] for r in rows) / len(rows),
        "measured_steps": len(rows), "wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="alfworld,tir,sokoban")
    p.add_argument("--ks", default="1,2", help="max_staleness values of the async runs")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--algo", default="grpo")
    p.add_argument("--model", default="tiny")
    p.add_argument("--num_tasks", type=int, default=4)
    p.add_argument("--group_size", type=int, default=4)
    p.add_argument("--max_new_tokens", type=int, default=32)
    p.add_argument("--rollout-logprobs", action="store_true",
                   help="also run each async variant with --old_logprobs rollout: the PPO ratio "
                        "anchored at the sampler's log-probs, so the learner skips the forward "
                        "pass that recomputes a stale batch's old log-probs")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.envs.split(","):
            variants = [("sync", [])]
            for k in args.ks.split(","):
                flags = ["--async_rollouts", "true", "--max_staleness", k,
                         "--rollout_workers", str(args.workers)]
                variants.append((f"async k={k}", flags))
                if args.rollout_logprobs:
                    variants.append((f"async k={k} rollout-logprobs",
                                     [*flags, "--old_logprobs", "rollout"]))
            for name, extra in variants:
                key = f"{env} / {name}"
                results[key] = run(env, extra, args, Path(tmp) / key.replace(" ", "_").replace("/", "-"))
                print(key, json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                       for k, v in results[key].items()}), flush=True)
    print("\n| run | env steps/s | trained tokens/s | learner wait | rollout busy | staleness | "
          "speed-up (env steps/s) |\n|---|---|---|---|---|---|---|")
    for key, r in results.items():
        base = results[f"{key.split(' / ')[0]} / sync"]["env_steps_per_s"]
        busy = "–" if r["rollout_busy_frac"] is None else f"{r['rollout_busy_frac']:.2f}"
        print(f"| {key} | {r['env_steps_per_s']:.2f} | {r['trained_tokens_per_s']:.0f} | "
              f"{r['learner_wait_frac']:.2f} | {busy} | {r['staleness_mean']:.2f} | "
              f"{r['env_steps_per_s'] / base:.2f}× |")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
