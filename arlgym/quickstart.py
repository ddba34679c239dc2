"""``arlgym quickstart``: the whole pipeline on Sokoban with the tiny model, offline, on CPU.

a teacher's episodes → behaviour cloning (SFT) → eval → a small arena from the SFT checkpoint
(GRPO and SAMPO side by side, the same budget, through ``arlgym arena run``) → each run's final
policy evaluated on the same held-out rooms; prints a random / teacher /
SFT / SFT+GRPO / SFT+SAMPO table with every effect as a paired difference (same rooms) and its
standard error, SAMPO against GRPO, the collapse alarm's verdicts, and saves the curves and the
arena report.

Why a teacher that slips (measured, docs/main_job.md): the teacher is the optimal solver's plan
with a random move instead of the plan's 70% of the time, its reasoning kept
(``slips:0.7:expert``). Imitation copies the slips at their rate — no amount of behaviour
cloning removes them — while the env's reward tells a slip from the plan, so RL has a way past
where imitation stops. Every episode is imitated, lost ones included, so the slips reach the
imitation at the teacher's own rate (won episodes alone thin them out), and 1,500 steps teach
the plan: what RL can gain is what following that plan wins (``experiments/plan_reading.py``).
A deterministic teacher (the greedy heuristic) gave a confident copy that RL moved by a few
rooms, only on some seeds; a perfect expert's full imitation leaves RL nothing to do. The rooms are 7×7 (random moves win 17%) and the prompt shows the current grid only
(``history_length`` 0: the room is fully observed, and every phase runs ~3x faster than with
the paper's two past turns).

Both decodings, for every model row: greedy (argmax, one episode a room) and the paper's
validation sampling (temperature 0.6, top-p 0.95, top-k 20, 4 episodes a room). RL's effect is
stated against the SFT's *best* decoding — the better of the two on validation rooms — because
a policy that imitates a noisy teacher copies its noise, and argmax already drops that noise
for free: an effect measured against the sampled imitation alone can be what greedy decoding
gives without any RL (docs/main_job.md). Every room is held out by content (a test puzzle cannot
be drawn for training from any seed; the report counts the panel rooms the demonstrations
played: 0), and ``--panel val`` measures the whole table on validation rooms, where designs are
chosen; ``test`` is played for the final table only.

Every phase runs a fixed number of steps (with a progress bar and ETA), never a time budget, so
a busy machine gives the same numbers later: the two RL runs each use one torch thread (the
grid's rule: cores ÷ runs), eval one thread, SFT two only when the machine is idle at the start
(two threads next to another busy process run ~10x slower than one). The SFT policy's eval runs
in a worker process beside the arena (:class:`SFTEvalBeside`): the same seeded draws, on the core
the faster RL run leaves idle at its end. If a phase is cut short
anyway (``--sft-minutes`` as an explicit guard, Ctrl-C), the table says so and the command
exits with status 3 unless ``--allow-short`` was given. A killed quickstart resumes its RL runs
from their newest checkpoint when rerun with the same ``--out``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from arlgym.evaluation.decodings import paired_difference, paired_on_tasks, success_by_task
from arlgym.policies import SamplingParams, make_policy
from arlgym.policies.spec import seeded_policy
from arlgym.rl import metrics as M
from arlgym.rollout import load_jsonl

__all__ = ["QuickstartConfig", "rl_phase_summary", "run_quickstart", "paired_difference",
           "choose_threads", "greedy_eval", "sampled_eval", "arena_spec", "read_arena_run",
           "CutShort", "RLRunFailed"]


class CutShort(RuntimeError):
    """A phase ran fewer steps than planned (the result is printed, then the exit is 3)."""


#: ``demos`` -> the collector's ``min_score`` (None: won episodes only; 0: every episode)
DEMO_MIN_SCORE: dict[str, float | None] = {"won": None, "all": 0.0}


@dataclass
class QuickstartConfig:
    out: str = "runs/quickstart"
    #: teacher episodes played (3,000 7×7 rooms: the teacher with slips wins ~47% of them;
    #: ~33,000 step samples when every episode is kept, ``demos``)
    episodes: int = 3000
    #: SFT passes over the demonstrations, used when ``sft_steps`` is 0
    sft_epochs: int = 3
    #: SFT optimizer steps (0: use sft_epochs): ~1.5 passes over every episode's turns; 600
    #: left the plans poor (docs/main_job.md: the plan-following ceiling)
    sft_steps: int = 1500
    #: optional guard (minutes): stop SFT when it is spent — the run is then marked cut short
    sft_minutes: float | None = None
    sft_lr: float = 1e-3
    sft_batch_size: int = 32
    #: held-out test rooms; the RL effect is a paired difference on them
    eval_episodes: int = 200
    #: the eval protocol of the table, the arena's validation and its test evals: the paper's
    #: validation sampling (ARLArena: temperature 0.6, top-p 0.95, top-k 20), ``eval_samples``
    #: episodes a room (temperature 0: greedy, one episode a room)
    eval_temperature: float = 0.6
    eval_top_p: float = 0.95
    eval_top_k: int = 20
    eval_samples: int = 4
    #: the demonstrator, a scripted policy spec: ``slips:0.7:expert`` (the optimal solver's
    #: plan in its reasoning, and with probability 0.7 a random move instead of the plan's:
    #: ~47% of 7×7 rooms won), ``greedy`` (a heuristic box-pusher with systematic mistakes),
    #: ``expert``, or ``slips:<p>:greedy|expert``. Why slips (docs/main_job.md): imitation copies
    #: them at their rate, the env's reward tells them apart — RL has a way past the teacher
    teacher: str = "slips:0.7:expert"
    #: which teacher episodes become demonstrations: ``won`` (the won ones only) or ``all``
    #: (every episode: the imitation then copies the teacher's slips at their true rate, not the
    #: rate that survived in won episodes, and learns the plan on every state the teacher met)
    demos: str = field(default="all", metadata={"before": "won"})
    #: Sokoban room size, walls included, for every phase (demonstrations, evals, RL): 7 (random
    #: moves win 17%, so the imitation clears random play by ~20 points); 6 is the paper's.
    #: Folders written before this setting ran on 6×6 rooms.
    room_size: int = field(default=7, metadata={"before": 6})
    #: past turns shown in the prompt: 0 (Sokoban is fully observed, and one grid instead of
    #: three makes every phase ~3x faster); the paper's 2 for its prompt. Folders written
    #: before this setting ran with 2.
    history_length: int = field(default=0, metadata={"before": 2})
    #: the arena's presets, run side by side from the SFT checkpoint with one budget
    rl_algos: tuple[str, ...] = ("grpo", "sampo")
    #: optimizer steps of every run (the budget): 8 steps of 16 rooms × 8 rollouts (1,024
    #: episodes a run), lr 2e-4, PPO mini-batches of 256 turn samples (the later ones
    #: off-policy, so the IS clipping designs differ), dynamic-sampling cold start 2. Longer
    #: runs added little on one seed and gave the gain back on another (docs/main_job.md)
    rl_steps: int = 8
    rl_tasks: int = 16
    rl_group_size: int = 8
    rl_lr: float = 2e-4
    rl_mini_batch_size: int = 256
    rl_cold_start_steps: int = 2
    #: rollout temperature (Table 6: 1.0); log-probs are computed at the same temperature.
    #: 0.6, chosen on the val panel (docs/main_job.md): rollouts nearer the evaluated decodings
    #: left greedy success intact where T = 1 lowered it. Folders written before ran at 1.0
    rl_temperature: float = field(default=0.6, metadata={"before": 1.0})
    #: k3 KL-to-reference (the SFT) coefficient of every run; None: the presets' own (Table 6:
    #: 0.01). 0.2 holds the imitation's plans while RL ends the slips (docs/main_job.md)
    rl_kl_coef: float | None = field(default=0.2, metadata={"before": None})
    #: validation rooms (Sokoban ``val`` split) of a periodic eval (the eval protocol), every
    #: ``rl_steps // 2`` steps, the best kept and reported; 0 (default): none, the final policy
    #: is reported — a choice on 40 rooms was noise (docs/main_job.md)
    rl_val_episodes: int = 0
    #: RL runs at once; each gets cores ÷ jobs torch threads (at least one)
    rl_jobs: int = 2
    seed: int = 0
    #: the rooms every table row is measured on: ``test`` (the report) or ``val`` (choosing a
    #: design: every choice of recipe is made on ``val``, and ``test`` is played once, for the
    #: final table). Splits are disjoint by room content (arlgym.envs.sokoban.env.room_split)
    panel: str = "test"
    #: validation rooms on which the SFT's best decoding (greedy or the eval protocol's
    #: sampling) is chosen; RL's effect is stated against that decoding on the panel (with
    #: ``panel`` ``val`` the panel's own evals choose)
    choice_episodes: int = field(default=200, metadata={"before": 0})
    #: each seed draws its own demonstration rooms (env seeds ``seed`` × 1,000,003 + 500,009
    #: on, disjoint from its RL draws); folders written before this setting drew the
    #: demonstrations of every seed from env seeds ``seed``, ``seed`` + 1, … (2,996 of 3,000
    #: rooms shared by seeds 0 and 4)
    seeded_demos: bool = field(default=True, metadata={"before": False})
    #: torch CPU threads of eval (0: torch's default; -1: auto). One thread: generating for a
    #: batch of rooms gains nothing from more, and with a busy neighbour every OpenMP barrier
    #: waits for a descheduled thread (measured: one generate 1.4 s with 1 thread, 13-27 s with 2)
    threads: int = 1
    #: torch threads of SFT; -1 (auto): 2 when the machine is idle at the start of the phase,
    #: else 1 — two threads beside a busy process run ~10x slower, one thread merely shares the
    #: cores (the step count is fixed either way; float sums depend on the thread count, so
    #: the last digits may differ)
    sft_threads: int = -1
    #: torch threads of each RL run; -1 (auto): the arena's rule, cores ÷ ``rl_jobs`` (one
    #: each on 2 cores — fixed, so a busy machine gives the same numbers, later)
    rl_threads: int = -1
    #: accept a cut-short run (exit 0)
    allow_short: bool = False
    #: a smoke run (``--fast``): the report says its numbers mean nothing
    smoke: bool = False

    @classmethod
    def fast(cls, out: str = "runs/quickstart-fast") -> QuickstartConfig:
        """Tiny settings for CI: every stage runs, numbers mean nothing."""
        return cls(out=out, episodes=64, sft_steps=20, eval_episodes=8, eval_samples=2, rl_steps=2,
                   rl_tasks=2, rl_group_size=2, rl_mini_batch_size=0, rl_cold_start_steps=1,
                   rl_val_episodes=4, choice_episodes=8, sft_threads=1, rl_threads=1, smoke=True)

    @property
    def demo_seed(self) -> int:
        """The env seed of the first demonstration episode (:attr:`seeded_demos`)."""
        return self.seed * 1_000_003 + 500_009 if self.seeded_demos else self.seed


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


def env_kwargs(cfg: QuickstartConfig) -> dict[str, Any]:
    """The Sokoban env kwargs of every phase (none for the paper's settings: 6×6 rooms, two
    past turns in the prompt)."""
    kwargs: dict[str, Any] = {} if cfg.room_size == 6 else {"dim_room": cfg.room_size}
    if cfg.history_length != 2:
        kwargs["history_length"] = cfg.history_length
    return kwargs


def _test_rooms_eval(policy_spec_or_obj: Any, episodes: int, out: Path, temperature: float,
                     samples: int = 1, seed: int | None = None, top_p: float = 1.0,
                     top_k: int = 0, kwargs: dict[str, Any] | None = None,
                     progress: bool = True, split: str = "test") -> tuple[dict[str, Any], list]:
    """Eval on the first ``episodes`` Sokoban rooms of ``split``, ``samples`` episodes a room:
    (overall summary, trajectories task by task in the eval list's order)."""
    from arlgym.evaluation.runner import evaluate

    policy = make_policy(policy_spec_or_obj) if isinstance(policy_spec_or_obj, str) else policy_spec_or_obj
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=24,
                              seed=seed)
    summary, trajs = evaluate("arl/Sokoban-v0", policy, episodes=episodes, split=split, out=out,
                              batch_size=64, samples_per_task=samples, sampling=sampling,
                              progress=progress, env_kwargs=kwargs or None)
    return summary["overall"], trajs


#: the two decodings every model row is measured under
DECODINGS = ("greedy", "sampled")


def panel_eval(cfg: QuickstartConfig, policy_spec_or_obj: Any, out: Path, decoding: str = "sampled",
               split: str | None = None, episodes: int | None = None, progress: bool = True
               ) -> tuple[dict[str, Any], dict[str, float]]:
    """One eval of the table: the first ``episodes`` (default ``cfg.eval_episodes``) rooms of
    ``split`` (default the table's panel, ``cfg.panel``) under ``decoding``: ``sampled`` is the
    eval protocol (by default the paper's validation sampling: temperature 0.6, top-p 0.95,
    top-k 20, ``cfg.eval_samples`` episodes a room, draws seeded by ``cfg.seed`` + 1234 — the
    seed the trainer's own evals use, so the SFT and the RL runs play the same draws where they
    agree); ``greedy`` is argmax decoding, one episode a room. Returns (overall summary, success
    rate per room in the panel's order)."""
    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
    sampled = decoding == "sampled"
    summary, trajs = _test_rooms_eval(
        policy_spec_or_obj, cfg.eval_episodes if episodes is None else episodes, out,
        temperature=cfg.eval_temperature if sampled else 0.0,
        samples=cfg.eval_samples if sampled else 1, seed=cfg.seed + 1234,
        top_p=cfg.eval_top_p if sampled else 1.0, top_k=cfg.eval_top_k if sampled else 0,
        kwargs=env_kwargs(cfg), progress=progress, split=split or cfg.panel)
    return summary, success_by_task(trajs)


def protocol_eval(cfg: QuickstartConfig, policy_spec_or_obj: Any, out: Path, progress: bool = True
                  ) -> tuple[dict[str, Any], dict[str, float]]:
    """The table's sampled eval on its panel (:func:`panel_eval` with ``decoding="sampled"``)."""
    return panel_eval(cfg, policy_spec_or_obj, out, "sampled", progress=progress)


def _protocol_eval_job(cfg: QuickstartConfig, policy_spec: str, out: Path, threads: int,
                       decoding: str = "sampled", split: str | None = None,
                       episodes: int | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """:func:`panel_eval` in a worker process: ``threads`` torch threads, niced so that the RL
    runs it shares the cores with keep their pace (it takes what they leave idle)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        os.nice(10)
    except OSError:  # not permitted: run at the default priority
        pass
    return panel_eval(cfg, policy_spec, out, decoding, split, episodes, progress=False)


class SFTEvalBeside:
    """The SFT policy's protocol eval, run in a worker process while the arena trains.

    Deterministic either way (the eval's draws are seeded per batch, one torch thread), so the
    row is the one an in-process eval gives. Used as a context manager around the arena: an
    error or Ctrl-C in the arena ends the worker too; :meth:`result` waits for the eval and
    raises its error, if any. A finished eval file is read back, not replayed (the runner's
    resume)."""

    def __init__(self, cfg: QuickstartConfig, sft_dir: Path, out: Path, threads: int,
                 more: dict[str, tuple[Path, str, str | None, int | None]] | None = None) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        self._future = self._pool.submit(_protocol_eval_job, cfg, f"hf:{sft_dir}", out, threads)
        # further evals of the same checkpoint, after it in the same worker: name ->
        # (out, decoding, split, episodes)
        self._more = {name: self._pool.submit(_protocol_eval_job, cfg, f"hf:{sft_dir}", path,
                                              threads, decoding, split, episodes)
                      for name, (path, decoding, split, episodes) in (more or {}).items()}

    def result(self) -> tuple[dict[str, Any], dict[str, float]]:
        return self._future.result()

    def more(self, name: str) -> tuple[dict[str, Any], dict[str, float]]:
        """The result of the further eval ``name`` (waits for it)."""
        return self._more[name].result()

    def __enter__(self) -> SFTEvalBeside:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None:  # a queued eval is dropped by cancel_futures, a running one here
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()  # an unfinished eval resumes from its file on the rerun
        self._pool.shutdown(wait=True, cancel_futures=True)


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


def arena_spec(cfg: QuickstartConfig, sft_dir: Path, out: Path):
    """The RL phase as an arena grid: every preset of ``cfg.rl_algos`` × the quickstart's seed,
    from ``sft_dir``, one budget; the test eval of each run plays the quickstart's panel (the
    first ``eval_episodes`` rooms of ``cfg.panel``), so its episodes pair with the SFT's."""
    from arlgym.arena.grid import ArenaSpec

    base: dict[str, Any] = {
        "env_id": "arl/Sokoban-v0", "model": str(sft_dir.resolve()), "num_tasks": cfg.rl_tasks,
        "group_size": cfg.rl_group_size, "max_new_tokens": 24, "temperature": cfg.rl_temperature,
        "lr": cfg.rl_lr, "mini_batch_size": cfg.rl_mini_batch_size, "max_steps": cfg.rl_steps,
        "cold_start_steps": cfg.rl_cold_start_steps, "micro_batch_tokens": 8192,
        "generation_batch_size": 64, "log_with": "none",
        # a checkpoint every step: a killed quickstart resumes its runs where they were
        "save_steps": 1, "save_total_limit": 2,
        # validations only when asked for: then the best of them is the reported policy
        "eval_steps": max(1, cfg.rl_steps // 2) if cfg.rl_val_episodes else 0, "eval_split": "val",
        "eval_episodes": max(1, cfg.rl_val_episodes), "save_best": bool(cfg.rl_val_episodes),
        "test_episodes": cfg.eval_episodes, "test_split": cfg.panel,
        "eval_temperature": cfg.eval_temperature, "eval_samples": cfg.eval_samples,
        "eval_top_p": cfg.eval_top_p, "eval_top_k": cfg.eval_top_k,
    }
    kwargs = env_kwargs(cfg)
    if kwargs:
        base["env_kwargs"] = kwargs
    if cfg.rl_kl_coef is not None:
        base["kl_coef"] = cfg.rl_kl_coef
    if cfg.rl_threads >= 0:
        base["torch_threads"] = cfg.rl_threads
    return ArenaSpec(out=str((out / "arena").resolve()), algos=list(cfg.rl_algos),
                     seeds=[cfg.seed], base=base)


def read_arena_run(run: Any) -> dict[str, Any]:
    """One finished RL run of the quickstart's arena (an :class:`arlgym.arena.report.RunResult`),
    as the table needs it: the checkpoint ``arlgym arena report`` reports (best-on-validation when
    there is one, else the last), its test summary and wins per room, the metric rows and the
    report's collapse verdict."""
    from arlgym.arena.report import pick_checkpoint

    checkpoint, summary = pick_checkpoint(run, "auto")
    best = run.evals.get("best", {}).get("best") if checkpoint == "best" else None
    return {"checkpoint": checkpoint,
            "best_step": best["step"] if best else max((int(r.get("step", 0)) for r in run.rows), default=0),
            "summary": summary, "rows": run.rows, "collapse": run.collapse,
            "wins": success_by_task(load_jsonl(run.folder / "eval" / f"test-{checkpoint}.jsonl"))}


def _plot(sft_log: list[dict], runs: dict[str, dict[str, Any]], sft_test: float | None, path: Path,
          baselines: dict[str, float] | None = None) -> None:
    """SFT loss; per RL run its rollout success, its validation evals, and (a star at the step
    of the checkpoint the table reports) its test success against the SFT's (eval protocol)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    if sft_log:
        a.plot([h["step"] for h in sft_log], [h["loss"] for h in sft_log])
    a.set(title="SFT (tiny model, teacher demos)", xlabel="step", ylabel="loss")
    for i, (algo, run) in enumerate(runs.items()):
        color = f"C{i}"
        rows = [r for r in run["rows"] if M.SUCCESS_RATE in r]
        b.plot([r["step"] for r in rows], [r[M.SUCCESS_RATE] for r in rows], color=color,
               label=f"{algo.upper()} rollouts (T=1)")
        val = [r for r in run["rows"] if M.EVAL_SUCCESS in r]
        if val:
            b.plot([r["step"] for r in val], [r[M.EVAL_SUCCESS] for r in val], "o--",
                   color=color, label=f"{algo.upper()} eval, val rooms")
        b.plot([run["best_step"]], [run["summary"]["success_rate"]], "*", ms=12, color=color,
               label=f"{algo.upper()} eval, test rooms ({run['checkpoint']})")
        if run["collapse"]:
            b.axvline(run["collapse"]["step"], color=color, ls=":", lw=1)
    if sft_test is not None:
        b.axhline(sft_test, color="grey", ls=":", lw=1, label="SFT start, eval, test rooms")
    for (name, value), style in zip((baselines or {}).items(), ("--", "-."), strict=False):
        b.axhline(value, color="black", ls=style, lw=0.8, label=f"{name}, eval, test rooms")
    if runs:
        b.legend(fontsize=7)
    b.set(title="RL from the SFT checkpoint: success", xlabel="step", ylim=(0, 1.05))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rl_phase_summary(rl_log: list[dict], temperature: float) -> dict[str, Any]:
    """Malformed-response ratio over every RL rollout turn (each step's ratio weighted by its
    number of sampled turns) and the first/last step's rollout success."""
    rl_log = [h for h in rl_log if M.TURNS in h]
    responses = sum(h[M.TURNS] for h in rl_log)
    invalid = sum(h[M.TURNS] * (1.0 - h[M.FORMAT_VALID]) for h in rl_log)
    return {"temperature": temperature, "steps": len(rl_log), "responses": int(responses),
            "invalid_ratio": invalid / responses if responses else 0.0,
            "first_success": rl_log[0][M.SUCCESS_RATE] if rl_log else 0.0,
            "last_success": rl_log[-1][M.SUCCESS_RATE] if rl_log else 0.0}


def _verdict(effect: dict[str, float]) -> str:
    if math.isnan(effect["z"]):
        return "no room changed"
    if abs(effect["z"]) > 2:
        return "above 2 standard errors" if effect["z"] > 0 else "below −2 standard errors"
    return "within 2 standard errors"


def _effect_text(effect: dict[str, float]) -> str:
    if math.isnan(effect["z"]):  # every room won or lost by both: no variance, no z
        return f"{effect['difference']:+.1%}: no room changed"
    return (f"{effect['difference']:+.1%} ± {effect['se']:.1%} paired SE, z = {effect['z']:+.2f} "
            f"({effect['gained']} rooms gained, {effect['lost']} lost): {_verdict(effect)}")


def _protocol_text(cfg: QuickstartConfig) -> str:
    if cfg.eval_temperature <= 0:
        return "greedy, one episode a room"
    return (f"{cfg.eval_samples} episodes a room at temperature {cfg.eval_temperature:g}, top-p "
            f"{cfg.eval_top_p:g}, top-k {cfg.eval_top_k}: the paper's validation sampling")


def _row_cells(r: dict[str, Any] | None) -> str:
    if r is None:
        return f"{'—':>8s} {'':6s}"
    return f"{r['success_rate']:8.1%} {r['success_se']:6.1%}"


def _report_lines(cfg: QuickstartConfig, found: dict[str, Any], overlap: dict[str, int],
                  short: list[str], timings: dict[str, float], sft_threads: int,
                  rl_threads: int, resumed: list[str] | None = None) -> list[str]:
    """The table (greedy and sampled decoding of every model), RL's effect against the SFT's
    best decoding under both decodings, each RL run and the timings, as printed and as written
    to ``report.md``."""
    rows, runs, best = found["rows"], found["runs"], found["best"]
    what = f"{cfg.sft_steps} steps" if cfg.sft_steps > 0 else f"{cfg.sft_epochs} epochs"
    algos = " and ".join(a.upper() for a in cfg.rl_algos)
    width = max(10, *(len(name) for name in rows))  # SFT+CISPO_SM is longer than the default names
    lines = [] if not cfg.smoke else [
        f"--fast smoke run: every stage runs at toy size ({cfg.sft_steps} SFT steps are too few "
        "to learn the response format, so most responses are malformed); the numbers mean "
        "nothing"]
    lines += [f"Sokoban {cfg.room_size}x{cfg.room_size}/1 box, {cfg.eval_episodes} {cfg.panel} "
              f"rooms; greedy: one episode a room; sampled: {_protocol_text(cfg)}",
              f"(SFT: {what} on the {cfg.teacher} teacher's {'won' if cfg.demos == 'won' else 'every'} "
              f"episode{'s' if cfg.demos == 'won' else ''} of {cfg.episodes} rooms; "
              f"RL: {algos}, {cfg.rl_steps} steps of {cfg.rl_tasks} rooms x {cfg.rl_group_size} "
              f"each, {'best of the validations kept' if cfg.rl_val_episodes else 'the final policy'}):",
              f"{'policy':{width}s} {'greedy':>8s} {'± se':>6s} {'sampled':>8s} {'± se':>6s} "
              f"{'format ok':>9s} {'steps':>6s}"]
    for name, r in rows.items():
        sampled = r.get("sampled", r)
        greedy = r.get("greedy")
        lines.append(f"{name:{width}s} {_row_cells(greedy)} {_row_cells(sampled)} "
                     f"{sampled['format_valid_ratio']:9.1%} {sampled['mean_steps']:6.2f}")
    choice = found["choice"]
    apart = cfg.choice_episodes and cfg.panel != "val"
    where = f"{cfg.choice_episodes} val rooms" if apart else f"the {cfg.panel} rooms"
    lines.append(f"SFT's best decoding: {best} (chosen on {where}: greedy "
                 f"{choice['greedy']['success_rate']:.1%}, sampled {choice['sampled']['success_rate']:.1%})")
    for algo, effect in found["effects"].items():
        run = runs[algo]
        for decoding in DECODINGS:
            lines.append(f"{algo.upper()} {decoding} − SFT {best} (same rooms): "
                         f"{_effect_text(effect[decoding])} [{run['checkpoint']} checkpoint, "
                         f"step {run['best_step']}]")
    earned = [a for a, e in found["effects"].items()
              if all(not math.isnan(e[d]["z"]) and e[d]["z"] > 2 for d in DECODINGS)]
    if found["effects"]:
        lines.append("RL beats the SFT's best decoding by > 2 paired SE under both decodings: "
                     + (", ".join(a.upper() for a in earned) if earned else "no run"))
    versus = found["versus"]
    if versus is not None:
        for decoding in DECODINGS:
            lines.append(f"{versus['b'].upper()} vs {versus['a'].upper()}, {decoding} (same rooms): "
                         f"{_effect_text(versus['effect'][decoding])}")
    for name, effect in found["versus_teacher"].items():
        label = name if name == "SFT" else f"SFT+{name.upper()}"
        lines.append(f"{label} ({best}) vs the teacher (same rooms): {_effect_text(effect)}")
    lines.append(f"{cfg.panel} rooms trained on: {overlap['overlap']} of {overlap['panel']} "
                 f"(puzzles among the {overlap['demo_rooms']} demonstration rooms; RL draws train "
                 "puzzles only)")
    for algo, run in runs.items():
        ph = run["phase"]
        if run["collapse"]:
            alarm = f"COLLAPSED from step {run['collapse']['step']} ({run['collapse']['reason']})"
        elif ph["invalid_ratio"] >= 0.5:  # the alarm watches for a decline, not for a bad start
            alarm = "no collapse (the run never had the format to lose)"
        else:
            alarm = "healthy"
        lines.append(f"{algo.upper()} run (T={cfg.rl_temperature}): {ph['responses']} responses, "
                     f"{ph['invalid_ratio']:.1%} malformed; rollout success "
                     f"{ph['first_success']:.0%} -> {ph['last_success']:.0%}; collapse alarm: {alarm}")
    lines += [f"!! CUT SHORT: {line} — these numbers are not the quickstart's" for line in short]
    lines.append(f"total {timings['total_s'] / 60:.1f} min (SFT {timings['sft_s'] / 60:.1f}, RL "
                 f"{timings['rl_s'] / 60:.1f} for {len(cfg.rl_algos)} runs, {cfg.rl_jobs} at once; "
                 f"{sft_threads} SFT / {rl_threads} thread(s) per RL run)"
                 + (f"; resumed: {', '.join(resumed)} — the times are this call's" if resumed else ""))
    return lines


#: settings that do not change the numbers (threads, guards, where), left out of the recipe
_NOT_RECIPE = ("out", "threads", "sft_threads", "rl_threads", "rl_jobs", "allow_short", "sft_minutes",
               "smoke")


def recipe_config(folder: Path, **overrides: Any) -> QuickstartConfig:
    """The settings a finished quickstart in ``folder`` ran with (its ``recipe.json``), a field
    the folder predates taking the value it had then (``metadata["before"]``, as
    :func:`_check_recipe` reads it), then ``overrides``. Why: research scripts that rerun a
    phase from an old folder must not pick up today's defaults for it."""
    from arlgym.rundir import dataclass_defaults

    known = {f.name for f in fields(QuickstartConfig)}
    values = {**dataclass_defaults(QuickstartConfig), **json.loads((folder / "recipe.json").read_text())}
    values = {k: v for k, v in values.items() if k in known}
    values["rl_algos"] = tuple(values["rl_algos"])
    return QuickstartConfig(**{**values, **overrides})


def _recipe(cfg: QuickstartConfig) -> dict[str, Any]:
    """Every setting that changes the quickstart's numbers, as JSON-comparable values."""
    from dataclasses import asdict

    return json.loads(json.dumps({k: v for k, v in asdict(cfg).items() if k not in _NOT_RECIPE}))


def _check_recipe(out: Path, recipe: dict[str, Any]) -> bool:
    """Whether ``out`` holds an earlier quickstart of this very recipe (its finished parts may
    then be reused). A rerun with other settings would mix two experiments in one folder (a
    finished RL run of the old recipe would be read back as the new one's), so it is refused
    before anything runs."""
    from arlgym.rundir import check_settings, dataclass_defaults, read_settings

    old = read_settings(out / "recipe.json")
    if old is not None:  # a setting added after the folder was written takes its default there
        defaults = {k: v for k, v in dataclass_defaults(QuickstartConfig).items()
                    if k not in _NOT_RECIPE}
        old = {**json.loads(json.dumps(defaults)), **old}
    return check_settings(out / "recipe.json", recipe, what="a quickstart", flag="--out",
                          folder=out, old=old)


def _finished_sft(sft_dir: Path) -> dict[str, Any] | None:
    """The stats of a complete earlier SFT in ``sft_dir`` (reused by a rerun), else None."""
    path = sft_dir / "sft_stats.json"
    if not (path.exists() and (sft_dir / "model.safetensors").exists()):
        return None
    stats = json.loads(path.read_text())
    return stats if stats.get("steps") == stats.get("planned_steps") else None


class RLRunFailed(RuntimeError):
    """An RL run of the quickstart's arena exited with an error (its log is named)."""


def trained_on_panel(cfg: QuickstartConfig, data: Path) -> dict[str, int]:
    """How many rooms of the table's panel the demonstrations played (by puzzle, not by seed;
    must be 0): ``{"panel": rooms, "demo_rooms": distinct demonstration rooms, "overlap": n}``.
    The RL runs draw ``train`` puzzles only (the env's content rule), so they add none."""
    import gymnasium as gym

    from arlgym.envs.sokoban.env import room_content_key

    env = gym.make("arl/Sokoban-v0", **env_kwargs(cfg)).unwrapped
    def puzzle(task_id: str) -> str:
        return room_content_key(env.room_for_seed(int(task_id.rsplit("-", 1)[1])))

    panel = {puzzle(t) for t in env.list_tasks(cfg.panel, cfg.eval_episodes)}
    demo_ids = {json.loads(line)["task_id"] for line in (data / "episodes.jsonl").read_text().splitlines()
                if line.strip()}
    demos = {puzzle(t) for t in demo_ids}
    env.close()
    return {"panel": len(panel), "demo_rooms": len(demos), "overlap": len(panel & demos)}


def _collect_phase(cfg: QuickstartConfig, out: Path) -> Path:
    """[1/5] The teacher's episodes on ``train`` rooms of this seed's own draw."""
    from arlgym.sft.collect import CollectConfig, collect_sft

    kept = "won ones kept" if cfg.demos == "won" else "every one kept"
    print(f"[1/5] collecting {cfg.episodes} episodes of the {cfg.teacher} teacher ({kept})")
    data = out / "sft_data"
    collect_sft(CollectConfig(policy=cfg.teacher, episodes=cfg.episodes, seed=cfg.demo_seed,
                              batch_tasks=64, min_score=DEMO_MIN_SCORE[cfg.demos],
                              env_kwargs=env_kwargs(cfg) or None), data)
    return data


def _sft_phase(cfg: QuickstartConfig, out: Path, data: Path, same_recipe: bool, sft_threads: int,
               resumed: list[str]) -> dict[str, Any]:
    """[2/5] Behaviour cloning (a finished SFT of this very recipe is reused)."""
    import torch

    from arlgym.sft.train import SFTRunConfig, train_sft

    what = f"{cfg.sft_steps} steps" if cfg.sft_steps > 0 else f"{cfg.sft_epochs} epochs"
    sft_dir = out / "sft"
    # reuse only what this recipe made: a folder without recipe.json may hold any settings' SFT
    sft_stats = _finished_sft(sft_dir) if same_recipe else None
    if sft_stats is not None:
        resumed.append("SFT reused")
        print(f"[2/5] behaviour cloning: reusing the finished SFT in {sft_dir} ({sft_stats['steps']} steps)")
        return sft_stats
    print(f"[2/5] behaviour cloning the tiny model: {what}, {sft_threads} "
          f"thread(s){'' if cfg.sft_minutes is None else f', guard {cfg.sft_minutes} min'}")
    # what was measured on an earlier SFT of this folder no longer belongs to the new one
    for pattern in ("eval_*.jsonl", "eval_*.summary.json", "eval_*.settings.json",
                    "choice_*.jsonl", "choice_*.summary.json", "choice_*.settings.json"):
        for stale in out.glob(pattern):  # every eval of the table: the SFT's, the runs' greedy
            stale.unlink(missing_ok=True)
    shutil.rmtree(out / "arena", ignore_errors=True)
    (sft_dir / "settings.json").unlink(missing_ok=True)  # trained afresh on purpose
    if sft_threads:
        torch.set_num_threads(sft_threads)
    return train_sft(SFTRunConfig(data=(str(data),), model="tiny", output_dir=str(sft_dir),
                                  engine="prefix", epochs=cfg.sft_epochs,
                                  max_steps=cfg.sft_steps if cfg.sft_steps > 0 else -1, lr=cfg.sft_lr,
                                  batch_size=cfg.sft_batch_size, seed=cfg.seed,
                                  time_budget_minutes=cfg.sft_minutes, logging_steps=10))


def _baselines_phase(cfg: QuickstartConfig, out: Path) -> tuple[dict[str, dict], dict[str, float]]:
    """[3/5] Random moves and the teacher on the panel (their own sampling: one decoding)."""
    print(f"[3/5] evaluating random moves and the teacher on {cfg.eval_episodes} {cfg.panel} "
          f"rooms ({_protocol_text(cfg)}); the SFT policy's evals (greedy and sampled, and the "
          f"choice of its decoding on {cfg.choice_episodes} val rooms) run beside the arena")
    rows = {}
    rows["random"], _ = protocol_eval(cfg, seeded_policy("random", cfg.seed), out / "eval_random.jsonl")
    rows["teacher"], teacher_wins = protocol_eval(cfg, seeded_policy(cfg.teacher, cfg.seed),
                                                  out / "eval_teacher.jsonl")
    return rows, teacher_wins


def _sft_evals_beside(cfg: QuickstartConfig, out: Path, threads: int) -> SFTEvalBeside:
    """The SFT's evals, in a worker beside the arena: sampled (the protocol) and greedy on the
    panel, and both on the first ``choice_episodes`` val rooms (where its best decoding is
    chosen; on the val panel itself when the table is measured there)."""
    more: dict[str, tuple[Path, str, str | None, int | None]] = {
        "greedy": (out / "eval_sft_greedy.jsonl", "greedy", None, None)}
    if cfg.choice_episodes and cfg.panel != "val":  # on val, the panel's own evals choose
        for decoding in DECODINGS:
            more[f"choice_{decoding}"] = (out / f"choice_sft_{decoding}.jsonl", decoding, "val",
                                          cfg.choice_episodes)
    return SFTEvalBeside(cfg, out / "sft", out / "eval_sft.jsonl", threads, more)


def best_decoding(choice: dict[str, dict[str, Any]]) -> str:
    """The decoding with the higher success on the validation rooms (ties: greedy, the one that
    costs no sampling)."""
    return max(DECODINGS, key=lambda d: (choice[d]["success_rate"], d == "greedy"))


def _arena_phase(cfg: QuickstartConfig, out: Path, threads: int
                 ) -> tuple[dict[str, str], dict[str, tuple[dict, dict]], float]:
    """[4/5] GRPO and SAMPO (``rl_algos``) from the SFT checkpoint, one budget, with the SFT's
    evals beside them. Returns (run statuses, the SFT's evals by name, rl threads)."""
    from arlgym.arena.grid import run_grid, threads_per_run

    spec = arena_spec(cfg, out / "sft", out)
    rl_threads = cfg.rl_threads if cfg.rl_threads >= 0 else threads_per_run(cfg.rl_jobs)
    names = " and ".join(a.upper() for a in cfg.rl_algos)
    print(f"[4/5] arena from the SFT checkpoint: {names}, {cfg.rl_steps} steps of {cfg.rl_tasks} "
          f"rooms x {cfg.rl_group_size} rollouts each, {cfg.rl_jobs} run(s) at once, "
          f"{rl_threads} thread(s) each; logs in {spec.out}/<algo>/seed-{cfg.seed}/train.log")
    # measured: eval + RL ~0.4 min shorter than the SFT's eval before the arena, same numbers
    with _sft_evals_beside(cfg, out, threads) as sft_eval:
        results = run_grid(spec, jobs=cfg.rl_jobs)
        sft = {"sampled": sft_eval.result(), "greedy": sft_eval.more("greedy")}
        for decoding in DECODINGS:
            if cfg.choice_episodes and cfg.panel != "val":
                sft[f"choice_{decoding}"] = sft_eval.more(f"choice_{decoding}")
    return results, sft, rl_threads


def _report_phase(cfg: QuickstartConfig, out: Path, rows: dict[str, dict], teacher_wins: dict,
                  sft: dict[str, tuple[dict, dict]]) -> dict[str, Any]:
    """[5/5] Each run's final policy greedily on the panel (its sampled eval is the arena's),
    and every effect: RL against the SFT's best decoding under both decodings, SAMPO against
    GRPO, each against the teacher."""
    from arlgym.arena.report import load_runs

    print(f"[5/5] greedy evals of the RL policies on the {cfg.panel} rooms, then the effects and "
          "the report")
    chosen_apart = cfg.choice_episodes and cfg.panel != "val"
    choice = ({d: sft[f"choice_{d}"][0] for d in DECODINGS} if chosen_apart else
              {"greedy": sft["greedy"][0], "sampled": sft["sampled"][0]})
    best = best_decoding(choice)
    rows["SFT"] = {"greedy": sft["greedy"][0], "sampled": sft["sampled"][0]}
    wins = {"SFT": {"greedy": sft["greedy"][1], "sampled": sft["sampled"][1]}}
    runs: dict[str, dict[str, Any]] = {}
    finished = {r.algo: r for r in load_runs([str((out / "arena").resolve())])}
    for algo in cfg.rl_algos:
        run = read_arena_run(finished[algo])
        run["phase"] = rl_phase_summary(run["rows"], cfg.rl_temperature)
        folder = finished[algo].folder / ("best" if run["checkpoint"] == "best" else "final")
        greedy = panel_eval(cfg, f"hf:{folder}", out / f"eval_{algo}_greedy.jsonl", "greedy",
                            progress=False)
        runs[algo] = run
        rows[f"SFT+{algo.upper()}"] = {"greedy": greedy[0], "sampled": run["summary"]}
        wins[algo] = {"greedy": greedy[1], "sampled": run["wins"]}
    effects: dict[str, dict[str, dict[str, float]]] = {}
    versus_teacher: dict[str, dict[str, float]] = {}
    versus = None
    if cfg.eval_episodes >= 2:
        base = wins["SFT"][best]
        for algo in cfg.rl_algos:
            effects[algo] = {d: paired_on_tasks(base, wins[algo][d]) for d in DECODINGS}
        versus_teacher = {"SFT": paired_on_tasks(teacher_wins, wins["SFT"][best]),
                          **{a: paired_on_tasks(teacher_wins, wins[a][best]) for a in cfg.rl_algos}}
        if len(cfg.rl_algos) >= 2:
            a, b = cfg.rl_algos[0], cfg.rl_algos[-1]
            versus = {"a": a, "b": b,
                      "effect": {d: paired_on_tasks(wins[a][d], wins[b][d]) for d in DECODINGS}}
    return {"rows": rows, "runs": runs, "effects": effects, "versus": versus,
            "versus_teacher": versus_teacher, "best": best, "choice": choice}


def run_quickstart(cfg: QuickstartConfig) -> dict[str, Any]:
    """Run the five phases; returns (and writes to ``quickstart.json``) the table's numbers.

    Raises:
        CutShort: a phase ran fewer steps than planned and ``allow_short`` is off — after the
            table (marked) and the JSON were written.
        RLRunFailed: an RL run crashed (rerunning resumes it from its newest checkpoint).
        ConfigError: ``cfg.out`` holds a quickstart with other settings.

    A rerun with the same settings and ``--out`` reuses the finished SFT and evals and resumes
    the RL runs (finished ones are read back): a killed quickstart loses at most one RL step.
    """
    import torch

    from arlgym.arena.report import write_report

    threads = choose_threads(cfg.threads)
    sft_threads = choose_threads(cfg.sft_threads)
    if threads:
        torch.set_num_threads(threads)
    out = Path(cfg.out)
    spec = arena_spec(cfg, out / "sft", out)
    spec.validate()  # a bad preset list or field is refused before anything runs
    recipe = _recipe(cfg)
    same_recipe = _check_recipe(out, recipe)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2))
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    short: list[str] = []
    resumed: list[str] = []

    data = _collect_phase(cfg, out)
    timings["collect_s"] = time.perf_counter() - t0
    t = time.perf_counter()
    sft_stats = _sft_phase(cfg, out, data, same_recipe, sft_threads, resumed)
    timings["sft_s"] = time.perf_counter() - t
    if threads:
        torch.set_num_threads(threads)
    if sft_stats["steps"] < sft_stats.get("planned_steps", cfg.sft_steps):
        short.append(f"SFT ran {sft_stats['steps']} of {sft_stats.get('planned_steps')} steps "
                     f"(--sft-minutes {cfg.sft_minutes})")
    t = time.perf_counter()
    rows, teacher_wins = _baselines_phase(cfg, out)
    timings["eval_s"] = time.perf_counter() - t
    t = time.perf_counter()
    results, sft, rl_threads = _arena_phase(cfg, out, threads)
    timings["rl_s"] = time.perf_counter() - t
    skipped = sum(v == "finished (skipped)" for v in results.values())
    if skipped:
        resumed.append(f"{skipped} of {len(results)} RL runs read back")
    failed = {k: v for k, v in results.items() if v.startswith("failed")}
    if failed:
        raise RLRunFailed("; ".join(f"{k}: {v}" for k, v in failed.items())
                          + " — rerun the same command to resume it from its newest checkpoint")

    t = time.perf_counter()
    found = _report_phase(cfg, out, rows, teacher_wins, sft)
    timings["greedy_s"] = time.perf_counter() - t
    runs = found["runs"]
    for algo, run in runs.items():
        if run["phase"]["steps"] < cfg.rl_steps and not run["collapse"]:
            short.append(f"{algo.upper()} ran {run['phase']['steps']} of {cfg.rl_steps} steps")
    overlap = trained_on_panel(cfg, data)
    arena_report = write_report([spec.out])
    timings["total_s"] = time.perf_counter() - t0

    _plot(sft_stats["log"], runs, rows["SFT"]["sampled"]["success_rate"], out / "curves.png",
          {"teacher": rows["teacher"]["success_rate"], "random moves": rows["random"]["success_rate"],
           "SFT, greedy": rows["SFT"]["greedy"]["success_rate"]})
    report = _report_lines(cfg, found, overlap, short, timings, sft_threads, rl_threads, resumed)
    print("\n" + "\n".join(report) + f"\ncurves: {out / 'curves.png'}; arena report: "
          f"{arena_report / 'index.html'}")
    (out / "report.md").write_text(
        "# arlgym quickstart\n\n```\n" + "\n".join(report) + "\n```\n\n![curves](curves.png)\n\n"
        "The arena's own report (every diagnostic's curves, the IS analysis, action flows): "
        "[arena/report/index.html](arena/report/index.html)\n")
    versus = found["versus"]
    result = {"rows": found["rows"], "rl_effects": found["effects"],
              "versus_teacher": found["versus_teacher"], "panel": cfg.panel,
              "best_decoding": found["best"], "decoding_choice": found["choice"],
              "trained_on_panel": overlap,
              "versus": None if versus is None else versus,
              "runs": {a: {k: v for k, v in r.items() if k not in ("rows", "wins")} for a, r in runs.items()},
              "timings": timings, "cut_short": short, "resumed": resumed,
              "threads": {"sft": sft_threads, "rl_per_run": rl_threads, "rl_jobs": cfg.rl_jobs, "eval": threads},
              "arena_report": str(arena_report),
              "sft": {k: v for k, v in sft_stats.items() if k != "log"}}
    (out / "quickstart.json").write_text(json.dumps(result, indent=2, default=str))
    if short and not cfg.allow_short:
        raise CutShort("; ".join(short) + " (rerun without the guard, or pass --allow-short "
                       "to accept a shortened run)")
    return result
