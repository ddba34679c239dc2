"""``arlgym quickstart``: the whole pipeline on Sokoban with the tiny model, offline, on CPU.

expert demonstrations → a *short* behaviour cloning (SFT) → eval → SAMPO from the SFT checkpoint
→ eval again on the same held-out rooms; prints a random / SFT / SFT+SAMPO table with the RL
effect as a paired difference (same rooms before and after) and its standard error, and saves
the curves.

The SFT phase is short on purpose (250 steps: ~14% greedy success, below random moves): it
leaves RL headroom, so the RL phase shows what it does. Long SFT reaches ~92% by itself
(``--sft-steps 0 --episodes 3000``: 3 epochs, 927 steps), and then a few RL steps have nothing
left to gain. The RL phase uses large rollout batches (16 rooms × 8 rollouts, ~1,500 turn
samples, ~6 PPO mini-batches per step): measured, batches of 32 episodes moved nothing in 24
steps (README, "Why a weak start, and why these batches").

Every phase runs a fixed number of steps (with a progress bar and ETA), never a time budget, so
a busy machine gives the same numbers later. Eval uses one torch thread; SFT and RL two only
when the machine is idle at the start (two threads next to another busy process run ~10x
slower than one). If a phase is cut short anyway (``--sft-minutes`` as an
explicit guard, Ctrl-C), the table says so and the command exits with status 3 unless
``--allow-short`` was given.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["QuickstartConfig", "rl_phase_summary", "run_quickstart", "paired_difference",
           "choose_threads", "greedy_eval", "sampled_eval", "CutShort"]


class CutShort(RuntimeError):
    """A phase ran fewer steps than planned (the result is printed, then the exit is 3)."""


@dataclass
class QuickstartConfig:
    out: str = "runs/quickstart"
    #: expert demonstrations (2,000 rooms → 6,547 step samples)
    episodes: int = 2000
    #: SFT passes over the demonstrations, used when ``sft_steps`` is 0 (3 epochs of 3,000
    #: rooms = 927 steps reach ~92%: no headroom left for RL)
    sft_epochs: int = 3
    #: SFT optimizer steps (0: use sft_epochs). 250 on purpose: a weak start (~14% greedy on
    #: held-out rooms, random moves ~20%) that RL can improve
    sft_steps: int = 250
    #: optional guard (minutes): stop SFT when it is spent — the run is then marked cut short
    sft_minutes: float | None = None
    sft_lr: float = 1e-3
    sft_batch_size: int = 32
    #: held-out test rooms; the RL effect is a paired difference on them
    eval_episodes: int = 200
    rl_steps: int = 6
    #: 16 rooms × 8 rollouts a step: measured, 8 × 4 a step (24 steps at lr 5e-4) left greedy
    #: success where it was (+0.5 points); 16 × 8 at lr 2e-4 lifted it by 5.5–12 points
    rl_tasks: int = 16
    rl_group_size: int = 8
    rl_lr: float = 2e-4
    #: turn samples per optimizer update (0: the whole rollout batch, on-policy); 256 of the
    #: ~1,500 a step gives ~6 updates, the later ones off-policy (where SAMPO's clipping acts)
    rl_mini_batch_size: int = 256
    #: rollout temperature of the RL phase (Table 6: 1.0); log-probs are computed at the same
    #: temperature, so the policy being optimised is exactly the one sampled
    rl_temperature: float = 1.0
    #: steps before SAMPO's dynamic sampling starts filtering (the paper's cold start). The
    #: default (None: = rl_steps) never filters: measured from the same start, 6 steps without
    #: filtering +5.5 points (z 2.9) in ~5 min, with filtering from step 3 +5.0 (z 2.7) but
    #: the filtered steps roll out twice (~70 s instead of ~45 s a step)
    rl_cold_start_steps: int | None = None
    seed: int = 0
    #: torch CPU threads of eval (0: torch's default; -1: auto). One thread: generating for a
    #: batch of rooms gains nothing from more, and with a busy neighbour every OpenMP barrier
    #: waits for a descheduled thread (measured: one generate 1.4 s with 1 thread, 13-27 s with 2)
    threads: int = 1
    #: torch threads of SFT; -1 (auto): 2 when the machine is idle at the start of the phase,
    #: else 1 — two threads beside a busy process run ~10x slower, one thread merely shares the
    #: cores (the step count is fixed either way; float sums depend on the thread count, so
    #: the last digits may differ)
    sft_threads: int = -1
    #: torch threads of the RL phase, the same rule (auto: 2 on an idle machine: a step of
    #: ~1,500 turn samples takes ~45 s with 2 threads)
    rl_threads: int = -1
    #: accept a cut-short run (exit 0)
    allow_short: bool = False

    @classmethod
    def fast(cls, out: str = "runs/quickstart-fast") -> QuickstartConfig:
        """Tiny settings for CI: every stage runs, numbers mean nothing."""
        return cls(out=out, episodes=64, sft_steps=20, eval_episodes=8, rl_steps=2,
                   rl_tasks=2, rl_group_size=2, rl_mini_batch_size=0, sft_threads=1,
                   rl_threads=1)


def choose_threads(requested: int, cores: int | None = None, load: float | None = None) -> int:
    """Threads for a phase: ``requested`` if >= 0 (0 = torch's default), else auto: all cores
    (at most 2: the tiny model's batches split no further) when other processes leave them
    free, one thread otherwise. ``load`` (cores kept busy by others) is measured over half a
    second when not given (:func:`arlgym.core.procfs.busy_cores`), not taken from the 1-minute
    load average: that still holds this run's own previous phase — measured, after two SFT
    threads it chose one thread for RL on an idle machine."""
    if requested >= 0:
        return requested
    cores = cores or os.cpu_count() or 1
    if load is None:
        from arlgym.core.procfs import busy_cores

        load = busy_cores()
        if load is None:
            try:
                load = os.getloadavg()[0]
            except OSError:
                load = 0.0
    free = cores - load
    return min(2, cores) if free >= min(2, cores) - 0.5 else 1


def paired_difference(before: list[float], after: list[float]) -> dict[str, float]:
    """after − before on the same rooms: the mean difference, its standard error from the
    per-room differences (a paired test: rooms both policies win or both lose add no noise)
    and z = mean / SE. Per room a win (bool) or a success rate over several samples."""
    n = len(before)
    if n != len(after) or n < 2:
        raise ValueError("paired_difference needs two equally long outcome lists (n >= 2)")
    d = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    se = math.sqrt(var / n)
    return {"difference": mean, "se": se, "z": mean / se if se > 0 else float("nan"),
            "rooms": n, "gained": sum(x > 0 for x in d), "lost": sum(x < 0 for x in d)}


def _test_rooms_eval(policy_spec_or_obj: Any, episodes: int, out: Path, temperature: float,
                     samples: int = 1, seed: int | None = None) -> tuple[dict[str, Any], list]:
    """Eval on the first ``episodes`` Sokoban test rooms, ``samples`` episodes a room:
    (overall summary, trajectories task by task in the eval list's order)."""
    from arlgym.evaluation.runner import evaluate
    from arlgym.policies import SamplingParams, make_policy

    policy = make_policy(policy_spec_or_obj) if isinstance(policy_spec_or_obj, str) else policy_spec_or_obj
    summary, trajs = evaluate("arl/Sokoban-v0", policy, episodes=episodes, split="test", out=out,
                              batch_size=64, samples_per_task=samples,
                              sampling=SamplingParams(temperature=temperature, max_new_tokens=24, seed=seed),
                              progress=True)
    return summary["overall"], trajs


def greedy_eval(policy_spec_or_obj: Any, episodes: int, out: Path) -> tuple[dict[str, Any], list[bool]]:
    """Greedy eval on the first ``episodes`` test rooms: (overall summary, won per room)."""
    summary, trajs = _test_rooms_eval(policy_spec_or_obj, episodes, out, temperature=0.0)
    return summary, [t.won for t in trajs]


def sampled_eval(policy_spec_or_obj: Any, episodes: int, samples: int, out: Path,
                 seed: int = 1234) -> tuple[dict[str, Any], list[float]]:
    """The policy RL optimises, measured: ``samples`` episodes at T = 1 (the rollout
    temperature) on each of the first ``episodes`` test rooms, sampling seeded by ``seed``.
    Returns (overall summary, success rate per room, in the order of :func:`greedy_eval`).

    Why beside the greedy eval: a weak start's greedy policy fails by looping (one state, one
    argmax, the same bump into a wall until the step limit: all 174 greedy failures of the
    quickstart's seed-1 start on 200 rooms), which sampling escapes — at T = 1 the same start wins ~29%,
    greedily ~13%. RL moves the sampled policy; the greedy one follows only where an argmax flips."""
    summary, trajs = _test_rooms_eval(policy_spec_or_obj, episodes, out, temperature=1.0,
                                      samples=samples, seed=seed)
    rooms: dict[str, list[float]] = {}
    for t in trajs:
        rooms.setdefault(t.task_id, []).append(float(t.won))
    return summary, [sum(v) / len(v) for v in rooms.values()]


def _plot(sft_log: list[dict], rl_log: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    if sft_log:
        a.plot([h["step"] for h in sft_log], [h["loss"] for h in sft_log])
    a.set(title="SFT (tiny model, expert demos)", xlabel="step", ylabel="loss")
    if rl_log:
        steps = [h["step"] for h in rl_log]
        b.plot(steps, [h["env/success_rate"] for h in rl_log], label="rollout success")
        b.plot(steps, [h["env/format_valid_ratio"] for h in rl_log], label="format valid")
        b.legend()
    b.set(title="SAMPO from the SFT checkpoint", xlabel="step", ylim=(0, 1.05))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rl_phase_summary(rl_log: list[dict], temperature: float) -> dict[str, Any]:
    """Malformed-response ratio over every RL rollout turn (each step's ratio weighted by its
    number of sampled turns) and the first/last step's rollout success."""
    responses = sum(h["env/turns"] for h in rl_log)
    invalid = sum(h["env/turns"] * (1.0 - h["env/format_valid_ratio"]) for h in rl_log)
    return {"temperature": temperature, "steps": len(rl_log), "responses": int(responses),
            "invalid_ratio": invalid / responses if responses else 0.0,
            "first_success": rl_log[0]["env/success_rate"] if rl_log else 0.0,
            "last_success": rl_log[-1]["env/success_rate"] if rl_log else 0.0}


def _report_lines(cfg: QuickstartConfig, rows: dict[str, dict], effect: dict[str, float] | None,
                  rl_phase: dict[str, Any], short: list[str], timings: dict[str, float],
                  sft_threads: int, rl_threads: int) -> list[str]:
    """The table, the paired RL effect, the RL phase and the timings, as printed and as
    written to ``report.md``."""
    what = f"{cfg.sft_steps} steps" if cfg.sft_steps > 0 else f"{cfg.sft_epochs} epochs"
    lines = [f"Sokoban 6x6/1 box, {cfg.eval_episodes} held-out rooms, greedy "
             f"(SFT: {what} on {cfg.episodes} expert rooms; SAMPO: {cfg.rl_steps} steps):",
             f"{'policy':10s} {'success':>8s} {'± se':>6s} {'format ok':>9s} {'steps':>6s}"]
    for name, r in rows.items():
        lines.append(f"{name:10s} {r['success_rate']:8.1%} {r['success_se']:6.1%} "
                     f"{r['format_valid_ratio']:9.1%} {r['mean_steps']:6.2f}")
    if effect is not None:
        verdict = ("no room changed" if math.isnan(effect["z"]) else
                   "an RL effect above 2 standard errors" if effect["z"] > 2 else
                   "not above 2 standard errors")
        lines.append(f"RL effect (same rooms): {effect['difference']:+.1%} ± {effect['se']:.1%} "
                     f"paired SE, z = {effect['z']:+.1f} ({effect['gained']} rooms gained, "
                     f"{effect['lost']} lost): {verdict}")
    lines.append(f"RL phase (T={cfg.rl_temperature}): {rl_phase['responses']} responses, "
                 f"{rl_phase['invalid_ratio']:.1%} malformed; rollout success "
                 f"{rl_phase['first_success']:.0%} -> {rl_phase['last_success']:.0%}")
    lines += [f"!! CUT SHORT: {line} — these numbers are not the quickstart's" for line in short]
    lines.append(f"total {timings['total_s'] / 60:.1f} min (SFT {timings['sft_s'] / 60:.1f}, RL "
                 f"{timings['rl_s'] / 60:.1f}; {sft_threads} SFT / {rl_threads} RL thread(s))")
    return lines


def run_quickstart(cfg: QuickstartConfig) -> dict[str, Any]:
    """Run every phase; returns (and writes to ``quickstart.json``) the table's numbers.

    Raises:
        CutShort: a phase ran fewer steps than planned and ``allow_short`` is off — after the
            table (marked) and the JSON were written.
    """
    import torch

    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer
    from arlgym.sft.collect import CollectConfig, collect_sft
    from arlgym.sft.train import SFTRunConfig, train_sft

    threads = choose_threads(cfg.threads)
    sft_threads = choose_threads(cfg.sft_threads)
    if threads:
        torch.set_num_threads(threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    short: list[str] = []

    print(f"[1/5] collecting {cfg.episodes} expert episodes")
    data = out / "sft_data"
    collect_sft(CollectConfig(episodes=cfg.episodes, seed=cfg.seed, batch_tasks=64), data)
    timings["collect_s"] = time.perf_counter() - t0

    what = f"{cfg.sft_steps} steps" if cfg.sft_steps > 0 else f"{cfg.sft_epochs} epochs"
    print(f"[2/5] behaviour cloning the tiny model: {what}, {sft_threads} "
          f"thread(s){'' if cfg.sft_minutes is None else f', guard {cfg.sft_minutes} min'}")
    sft_dir = out / "sft"
    t = time.perf_counter()
    if sft_threads:
        torch.set_num_threads(sft_threads)
    sft_stats = train_sft(SFTRunConfig(data=(str(data),), model="tiny", output_dir=str(sft_dir),
                                       engine="prefix", epochs=cfg.sft_epochs,
                                       max_steps=cfg.sft_steps if cfg.sft_steps > 0 else -1, lr=cfg.sft_lr,
                                       batch_size=cfg.sft_batch_size, seed=cfg.seed,
                                       time_budget_minutes=cfg.sft_minutes, logging_steps=10))
    timings["sft_s"] = time.perf_counter() - t
    if threads:
        torch.set_num_threads(threads)
    if sft_stats["steps"] < sft_stats.get("planned_steps", cfg.sft_steps):
        short.append(f"SFT ran {sft_stats['steps']} of {sft_stats.get('planned_steps')} steps "
                     f"(--sft-minutes {cfg.sft_minutes})")

    print(f"[3/5] evaluating random and SFT policies on {cfg.eval_episodes} held-out rooms")
    t = time.perf_counter()
    from arlgym.policies import make_policy

    rows, wins = {}, {}
    rows["random"], wins["random"] = greedy_eval(make_policy("random", seed=cfg.seed), cfg.eval_episodes,
                                           out / "eval_random.jsonl")
    rows["SFT"], wins["SFT"] = greedy_eval(f"hf:{sft_dir}", cfg.eval_episodes, out / "eval_sft.jsonl")
    timings["eval_s"] = time.perf_counter() - t

    rl_threads = choose_threads(cfg.rl_threads)
    print(f"[4/5] SAMPO for {cfg.rl_steps} steps of {cfg.rl_tasks} rooms x {cfg.rl_group_size} "
          f"rollouts from the SFT checkpoint, {rl_threads} thread(s)")
    t = time.perf_counter()
    rl_dir = out / "rl"
    rl_cfg = parse_train_config([
        "--algo", "sampo", "--model", str(sft_dir), "--output_dir", str(rl_dir),
        "--max_steps", str(cfg.rl_steps), "--num_tasks", str(cfg.rl_tasks),
        "--group_size", str(cfg.rl_group_size), "--lr", str(cfg.rl_lr),
        "--mini_batch_size", str(cfg.rl_mini_batch_size),
        "--max_new_tokens", "24", "--temperature", str(cfg.rl_temperature), "--log_with", "none",
        "--seed", str(cfg.seed), "--cold_start_steps",
        str(cfg.rl_steps if cfg.rl_cold_start_steps is None else cfg.rl_cold_start_steps),
        "--torch_threads", str(rl_threads)])
    rl_log = Trainer(rl_cfg).train()
    timings["rl_s"] = time.perf_counter() - t
    if threads:
        torch.set_num_threads(threads)
    if len(rl_log) < cfg.rl_steps:
        short.append(f"SAMPO ran {len(rl_log)} of {cfg.rl_steps} steps")

    print("[5/5] evaluating SFT+SAMPO on the same rooms")
    t = time.perf_counter()
    rows["SFT+SAMPO"], wins["SFT+SAMPO"] = greedy_eval(f"hf:{rl_dir / 'final'}", cfg.eval_episodes,
                                                 out / "eval_rl.jsonl")
    timings["eval_s"] += time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0

    _plot(sft_stats["log"], rl_log, out / "curves.png")
    rl_phase = rl_phase_summary(rl_log, cfg.rl_temperature)
    effect = paired_difference(wins["SFT"], wins["SFT+SAMPO"]) if cfg.eval_episodes >= 2 else None
    report = _report_lines(cfg, rows, effect, rl_phase, short, timings, sft_threads, rl_threads)
    print("\n" + "\n".join(report) + f"\ncurves: {out / 'curves.png'}")
    (out / "report.md").write_text(
        "# arlgym quickstart\n\n```\n" + "\n".join(report) + "\n```\n\n![curves](curves.png)\n")
    result = {"rows": rows, "rl_effect": effect, "timings": timings, "rl_phase": rl_phase,
              "cut_short": short, "threads": {"sft": sft_threads, "rl": rl_threads, "eval": threads},
              "sft": {k: v for k, v in sft_stats.items() if k != "log"}}
    (out / "quickstart.json").write_text(json.dumps(result, indent=2))
    if short and not cfg.allow_short:
        raise CutShort("; ".join(short) + " (rerun without the guard, or pass --allow-short "
                       "to accept a shortened run)")
    return result
