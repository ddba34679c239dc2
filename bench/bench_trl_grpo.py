"""arlgym's RL trainer against TRL's GRPOTrainer on the same single-turn task (issue 5).

Both sides train the same model (``--model``, default ``tiny``: same seed, same initial
weights, its own tokenizer) with a GSPO sequence-level loss on first-turn Sokoban prompts
(``env_kwargs={"max_steps": 1}``: one turn per episode), with the same prompts × generations per
step, completion cap, temperature 1.0, learning rate, ``beta``/``kl_coef`` 0, clip 3e-3 / 4e-3
(Table 6, Sokoban), seq-mean-token-mean aggregation (TRL ``loss_type="grpo"``), grad clip 1.0,
one optimizer step per generated batch, and HF ``generate`` for sampling on the CPU. The reward
is the env's own reward for the response: TRL's reward function replays the room and steps it.

Each side runs in its own subprocess, so its peak RSS (``ru_maxrss``) is its own; "RSS setup" is
the resident size once model, data and trainer are built, before the first step. Per step:

* **gen** — sampling plus reward: arlgym's rollout (generate + env step); TRL's
  ``_generate_and_score_completions`` (generate, rewards, group advantages, its bookkeeping);
* **old-lp** — arlgym only: the no-grad old-log-prob pass (+ advantages);
* **update** — forward + backward + grad clip + optimizer step;
* tokens/s = (prompt + completion tokens of the batch) / time: of the whole step, of
  old-lp + update ("train") and of the update alone.

Every phase is timed on two clocks: wall time, and the process's CPU time, which with one torch
thread hardly moves when other work competes for the cores (the machines these benches run on
are shared). The first ``--warmup`` steps of each run are left out and each figure is the median
over the others; ``--rounds`` repeats the runs in alternating order and pools their steps. Rows:
TRL, arlgym (``share_prompts`` on, the default) and arlgym with it off (each group's G members
then run their common prompt G times, as TRL's batch does).

What the two sides compute differently:

* TRL skips the old-log-prob pass when generation and optimisation are aligned (one optimizer
  step per generation, ``num_iterations=1``) and uses ``logp.detach()``; arlgym always
  recomputes old log-probs with a no-grad forward (multi-epoch / mini-batch PPO and turn samples
  need them), so its step carries one extra forward.
* TRL forwards the whole batch at once, padded to the longest prompt + completion; arlgym packs
  token-budgeted micro-batches (16,384 tokens, one here) and, with ``share_prompts``, runs a
  group's shared prompt once.
* arlgym's sampler also returns each sampled token's log-prob (recorded per step, O(B × V)).

Both sides run with ``--threads`` torch threads (default 1). The tiny model's matrices are so
small that a second thread gains little, and on a machine whose cores are busy with other work
every OpenMP barrier waits for a descheduled thread: measured here, one ``generate`` of 128 × 48
tokens took 13–27 s with 2 threads under such load and 1.4 s with 1.

    python bench/bench_trl_grpo.py [--model tiny] [--prompts 16] [--generations 8]
                                   [--max-new-tokens 48] [--steps 6] [--warmup 1] [--rounds 1]
                                   [--lr 1e-5] [--threads 1] [--no-unshared]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV_ID = "arl/Sokoban-v0"
ENV_KWARGS = {"max_steps": 1}
CLIP_LOW, CLIP_HIGH = 3e-3, 4e-3  # Table 6, Sokoban column, GSPO
SEED = 0


def _rss_mib() -> float:
    """Current resident set size of this process in MiB (from /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _now() -> tuple[float, float]:
    """(wall, CPU) clocks. With one torch thread the process CPU time hardly moves when other
    work competes for the cores, so it is reported next to wall time."""
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _now()
    return wall - start[0], cpu - start[1]


#: The phase running now ("gen" inside a timed generation call, else "train"); bench_memory.py
#: attributes its RSS samples by it.
PHASE = "train"


def _timed(fn: Any, log: list[tuple[float, float]], phase: str | None = None) -> Any:
    """``fn`` wrapped to append its (wall, CPU) seconds to ``log`` on every call (and to set
    :data:`PHASE` to ``phase`` while it runs)."""
    def wrapper(*a: Any, **k: Any) -> Any:
        global PHASE
        start = _now()
        if phase:
            PHASE = phase
        try:
            return fn(*a, **k)
        finally:
            if phase:
                PHASE = "train"
            log.append(_since(start))
    return wrapper


def _step_record(step: tuple[float, float], gen: tuple[float, float],
                 update: tuple[float, float], counts: tuple[int, int, int]) -> dict[str, float]:
    """One step's phases in wall and CPU seconds; old-lp is what step leaves to neither."""
    rec: dict[str, float] = {"samples": counts[0], "prompt_tokens": counts[1],
                             "completion_tokens": counts[2]}
    for k, clock in enumerate(("wall", "cpu")):
        rec[f"{clock}/step"], rec[f"{clock}/gen"], rec[f"{clock}/update"] = step[k], gen[k], update[k]
        rec[f"{clock}/old_lp"] = max(0.0, step[k] - gen[k] - update[k])
    return rec


# ----------------------------------------------------------------------------------- TRL side
def run_trl(args: argparse.Namespace, out_dir: str) -> dict[str, Any]:
    """GRPOTrainer with GSPO (``importance_sampling_level="sequence"``, ``loss_type="grpo"``)."""
    import gymnasium as gym
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import arlgym  # noqa: F401  (registers the env ids)
    from arlgym.models import load_model_and_tokenizer

    env = gym.make(ENV_ID, **ENV_KWARGS)
    rows = []
    for k in range(args.prompts * args.steps):  # distinct rooms; each shown to G completions
        prompt, _ = env.reset(seed=10_000 + k)
        rows.append({"prompt": [{"role": "user", "content": prompt}], "room_seed": 10_000 + k})

    def sokoban_reward(completions: list[Any], room_seed: list[int], **_: Any) -> list[float]:
        """The env's reward for the response: replay the room, step it once."""
        out = []
        for completion, seed in zip(completions, room_seed, strict=True):
            env.reset(seed=seed)
            text = completion[0]["content"] if isinstance(completion, list) else completion
            out.append(float(env.step(text)[1]))
        return out

    gen_log: list[tuple[float, float]] = []
    counts: list[tuple[int, int, int]] = []  # (samples, prompt tokens, completion tokens)

    class CountingGRPOTrainer(GRPOTrainer):
        """Counts the prompt and completion tokens of each generated batch."""

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            out = super()._generate_and_score_completions(inputs)
            counts.append((int(out["prompt_mask"].shape[0]), int(out["prompt_mask"].sum()),
                           int(out["completion_mask"].sum())))
            return out

    class StepClock(TrainerCallback):
        """Wall/CPU time from step begin (before generation) to step end (after the update)."""

        def __init__(self) -> None:
            self.log: list[tuple[float, float]] = []
            self._start = _now()

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self._start = _now()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.log.append(_since(self._start))

    model, tokenizer = load_model_and_tokenizer(args.model, seed=SEED)
    config = GRPOConfig(
        output_dir=out_dir, seed=SEED, use_cpu=True, bf16=False,
        report_to="none", per_device_train_batch_size=args.prompts * args.generations,
        gradient_accumulation_steps=1, num_generations=args.generations,
        max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=args.lr, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, loss_type="grpo", importance_sampling_level="sequence", epsilon=CLIP_LOW,
        epsilon_high=CLIP_HIGH, num_iterations=1, max_steps=args.steps, logging_steps=1,
        save_strategy="no", gradient_checkpointing=False, shuffle_dataset=False,
        dataloader_num_workers=0, disable_tqdm=True, log_level="error",
    )
    clock = StepClock()
    trainer = CountingGRPOTrainer(model=model, reward_funcs=sokoban_reward, args=config,
                                  train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                  callbacks=[clock])
    # an instance attribute shadows the method: times the whole generate-and-score phase
    trainer._generate_and_score_completions = _timed(trainer._generate_and_score_completions, gen_log,
                                                        "gen")
    setup_rss = _rss_mib()
    trainer.train()
    steps = []
    for step, gen, n in zip(clock.log, gen_log, counts, strict=True):
        update = (step[0] - gen[0], step[1] - gen[1])  # no old-log-prob pass on this path
        steps.append(_step_record(step, gen, update, n))
    return {"steps": steps, "setup_rss_mib": setup_rss, "peak_rss_mib": _peak_rss_mib()}


# -------------------------------------------------------------------------------- arlgym side
def run_arlgym(args: argparse.Namespace, share_prompts: bool, out_dir: str) -> dict[str, Any]:
    """arlgym's Trainer with the ``gspo`` preset on the one-turn Sokoban env."""
    from arlgym.rl.config import TrainConfig
    from arlgym.rl.trainer import Trainer

    cfg = TrainConfig(
        algo="gspo", env_id=ENV_ID, env_kwargs=dict(ENV_KWARGS), model=args.model, seed=SEED,
        output_dir=out_dir, max_steps=args.steps,
        num_tasks=args.prompts, group_size=args.generations, temperature=1.0,
        max_new_tokens=args.max_new_tokens, generation_batch_size=args.prompts * args.generations,
        rollout_engine="hf", lr=args.lr, kl_coef=0.0, clip_low=CLIP_LOW, clip_high=CLIP_HIGH,
        aggregation="seq-mean-token-mean", grad_clip=1.0, log_with="none",
        share_prompts=share_prompts,
    )
    trainer = Trainer(cfg)
    gen_log: list[tuple[float, float]] = []
    update_log: list[tuple[float, float]] = []
    counts: list[tuple[int, int, int]] = []
    update = trainer._update

    def counting_update(samples: list[Any], adv: Any) -> dict[str, float]:
        """The trainer's own update, after counting the tokens it trains on."""
        counts.append((len(samples), sum(len(s.prompt_ids) for s in samples),
                       sum(len(s.response_ids) for s in samples)))
        return update(samples, adv)

    # instance attributes shadow the methods, so train_step calls the timed versions
    trainer._rollout = _timed(trainer._rollout, gen_log, "gen")
    trainer._update = _timed(counting_update, update_log)
    setup_rss = _rss_mib()
    steps = []
    for _ in range(args.steps):
        start = _now()
        trainer.train_step()
        steps.append(_step_record(_since(start), gen_log[-1], update_log[-1], counts[-1]))
    trainer.collector.close()
    return {"steps": steps, "setup_rss_mib": setup_rss, "peak_rss_mib": _peak_rss_mib()}


# ------------------------------------------------------------------------------------- driver
NAMES = {"trl": "TRL GRPOTrainer", "arlgym": "arlgym (shared)", "arlgym-unshared": "arlgym (unshared)"}


def _summary(steps: list[dict[str, float]], clock: str) -> dict[str, float]:
    """Medians of one clock's phases over ``steps`` and the tokens/s they give."""
    med = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731
    tokens = med("prompt_tokens") + med("completion_tokens")
    step, gen, old, update = (med(f"{clock}/{k}") for k in ("step", "gen", "old_lp", "update"))
    return {"step": step, "gen": gen, "old_lp": old, "update": update, "tokens": tokens,
            "tok_s_step": tokens / step, "tok_s_train": tokens / (old + update),
            "tok_s_update": tokens / update}


def _run_side(side: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one side in a fresh interpreter; its numbers come back as JSON."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        path = fh.name
    cmd = [sys.executable, __file__, "--side", side, "--json", path, "--model", args.model,
           "--prompts", str(args.prompts), "--generations", str(args.generations),
           "--max-new-tokens", str(args.max_new_tokens), "--steps", str(args.steps),
           "--lr", str(args.lr), "--threads", str(args.threads)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # TRL prints its log dicts
    result = json.loads(Path(path).read_text())
    result["process_s"] = time.perf_counter() - start
    os.unlink(path)
    return result


def _table(title: str, rows: dict[str, dict[str, float]]) -> None:
    cols = [("step s", "step", "{:.2f}"), ("gen s", "gen", "{:.2f}"), ("old-lp s", "old_lp", "{:.2f}"),
            ("update s", "update", "{:.2f}"), ("tokens/step", "tokens", "{:,.0f}"),
            ("tok/s step", "tok_s_step", "{:,.0f}"), ("tok/s train", "tok_s_train", "{:,.0f}"),
            ("tok/s update", "tok_s_update", "{:,.0f}")]
    print(f"\n{title}")
    print(f"{'':20s}" + "".join(f"{c[0]:>13s}" for c in cols))
    for side, row in rows.items():
        print(f"{NAMES[side]:20s}" + "".join(f"{fmt.format(row[key]):>13s}" for _, key, fmt in cols))
    for side, row in rows.items():
        if side == "trl":
            continue
        cells = [f"{row[key] / rows['trl'][key]:.2f}x" if rows["trl"][key] else "-" for _, key, _ in cols]
        label = "  ratio " + NAMES[side].removeprefix("arlgym ")
        print(f"{label:20s}" + "".join(f"{c:>13s}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="model spec for both sides (tiny, a BC checkpoint)")
    ap.add_argument("--prompts", type=int, default=16, help="distinct prompts (task groups) per step")
    ap.add_argument("--generations", type=int, default=8, help="completions per prompt (G)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="completion cap, both sides")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per side and round")
    ap.add_argument("--warmup", type=int, default=1, help="first steps of each run left out")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs per side, in alternating order; timed steps are pooled")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per side (see the docstring for why 1 by default)")
    ap.add_argument("--no-unshared", action="store_true", help="skip the share_prompts=False row")
    ap.add_argument("--side", choices=list(NAMES), help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.side:  # child process: run one side, write its numbers
        import torch

        torch.set_num_threads(args.threads)
        with tempfile.TemporaryDirectory(prefix=f"bench_{args.side}_") as out_dir:
            if args.side == "trl":
                result = run_trl(args, out_dir)
            else:
                result = run_arlgym(args, args.side == "arlgym", out_dir)
        Path(args.json).write_text(json.dumps(result))
        return

    import torch
    import transformers
    import trl

    sides = ["trl", "arlgym"] + ([] if args.no_unshared else ["arlgym-unshared"])
    print(f"single-turn Sokoban (env max_steps=1), model {args.model}: {args.prompts} prompts x "
          f"{args.generations} completions per step, <= {args.max_new_tokens} new tokens, GSPO, "
          f"{args.rounds} x {args.steps} steps per side (medians, first {args.warmup} of each run "
          f"left out); trl {trl.__version__}, transformers {transformers.__version__}, torch "
          f"{torch.__version__}, {args.threads} torch thread(s)")
    steps: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for r in range(args.rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            raw = _run_side(side, args)
            runs[side].append(raw)
            steps[side] += raw["steps"][args.warmup:] or raw["steps"]

    _table("wall time (medians)", {side: _summary(steps[side], "wall") for side in sides})
    _table("CPU time of the process (hardly moved by other load with 1 thread)",
           {side: _summary(steps[side], "cpu") for side in sides})
    print(f"\n{'memory':20s}{'RSS setup MiB':>15s}{'peak RSS MiB':>15s}{'peak ratio':>12s}")
    trl_peak = max(run["peak_rss_mib"] for run in runs["trl"])
    for side in sides:
        setup = max(run["setup_rss_mib"] for run in runs[side])
        peak = max(run["peak_rss_mib"] for run in runs[side])
        print(f"{NAMES[side]:20s}{setup:15.0f}{peak:15.0f}{peak / trl_peak:11.2f}x")
    print()
    for side in sides:
        st = steps[side]
        n = statistics.median(s["samples"] for s in st)
        prompt = statistics.median(s["prompt_tokens"] for s in st) / n
        completion = statistics.median(s["completion_tokens"] for s in st) / n
        walls = [round(s["wall/step"], 2) for run in runs[side] for s in run["steps"]]
        print(f"{NAMES[side]}: {n:.0f} samples/step, prompt {prompt:.1f} + completion "
              f"{completion:.1f} tokens per sample; step wall s {walls}; process "
              f"{sum(run['process_s'] for run in runs[side]):.0f} s")
    print("ratios are arlgym / TRL: > 1 is better for tok/s, < 1 for seconds. 'train' = old-lp +\n"
          "update; TRL has no old-log-prob pass on this aligned on-policy path (it uses\n"
          "logp.detach()), arlgym always recomputes one.")


if __name__ == "__main__":
    main()
