"""``arlgym arena run``: a grid of presets × overrides × seeds, one ordinary trainer run each.

Every run is a plain ``trainers/sampo.py`` job with its own folder and its own full config
file, so the grid is nothing but a list of commands: run here with ``--jobs N`` processes,
or written out with ``--print-commands`` for a cluster's scheduler (a Slurm job array, Ray
jobs). Layout::

    <out>/arena.json                           the grid as asked (for the report)
    <out>/<algo>[__<override>]/seed-<n>/
        train.yaml                             the run's complete TrainConfig
        train.log                              its stdout/stderr (local runs)
        metrics.jsonl config.json checkpoints/ best/ final/ eval/test-*.jsonl collapse.json

A run is *finished* when ``final/`` and the test eval summaries it asked for exist; rerunning
the grid skips finished runs and resumes the others from their newest complete checkpoint
(the trainer writes checkpoints atomically and drops log rows after the checkpoint it resumes
from), so a grid can be killed at any moment and loses at most the steps since a checkpoint.

Budget: every run gets the same number of optimizer steps (``max_steps``) and the same
rollout batch (``num_tasks × group_size``); env steps and tokens are measured per run and
reported beside the table.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arlgym.core.validation import did_you_mean
from arlgym.errors import ConfigError
from arlgym.rl.config import TrainConfig
from arlgym.rl.metrics import read_metrics_jsonl
from arlgym.rl.presets import PRESETS
from arlgym.rundir import SettingsMismatch, recorded_train_settings, settings_diff, train_settings

__all__ = ["ArenaSpec", "RunSpec", "plan_runs", "run_status", "run_grid", "parse_override", "parse_value",
           "threads_per_run", "check_runs", "log_tail"]

#: a run folder name may hold letters, digits and these
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def parse_override(text: str) -> tuple[str, dict[str, Any]]:
    """``name=field:value[,field:value...]`` → (name, {field: value}); values parsed as YAML.

    >>> parse_override("stale4=mini_batch_size:8,lr:1e-4")
    ('stale4', {'mini_batch_size': 8, 'lr': 0.0001})
    """
    name, sep, body = text.partition("=")
    if not sep or not name or set(name) - _SAFE:
        raise ConfigError(f"--override {text!r}: expected NAME=FIELD:VALUE[,FIELD:VALUE...] with a "
                          "NAME of letters, digits, '-', '_' or '.', e.g. stale4=mini_batch_size:8")
    values: dict[str, Any] = {}
    for item in filter(None, body.split(",")):
        key, sep, raw = item.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"--override {text!r}: {item!r} is not FIELD:VALUE")
        values[key.strip()] = parse_value(raw)
    return name, values


def parse_value(raw: str) -> Any:
    """A command-line value as YAML, except that numbers YAML 1.1 leaves as strings
    (``1e-4``) become floats."""
    import yaml

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot read the value {raw!r}: {e}") from e
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


@dataclass
class ArenaSpec:
    """A grid: ``base`` TrainConfig fields shared by every run, the axes, and the run plumbing."""

    out: str
    algos: list[str]
    seeds: list[int]
    base: dict[str, Any] = field(default_factory=dict)
    #: override axis: name -> TrainConfig fields; empty means one plain variant per algo
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.algos:
            raise ConfigError("--algos: name at least one preset, e.g. --algos grpo,sampo")
        bad = [a for a in self.algos if a not in PRESETS]
        if bad:
            raise ConfigError(f"--algos: unknown preset(s) {bad}; presets: {', '.join(PRESETS)}")
        if not self.seeds:
            raise ConfigError("--seeds: give at least one seed, e.g. --seeds 0,1,2")
        negative = [s for s in self.seeds if s < 0]
        if negative:
            raise ConfigError(f"--seeds: {negative} is negative (a seed is an integer >= 0). "
                              "Fix: e.g. --seeds 0,1,2")
        for flag, values in (("--algos", self.algos), ("--seeds", self.seeds)):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:  # the two runs would share one folder and write into each other's files
                raise ConfigError(f"{flag}: {twice} named twice (each run has its own folder)")
        from dataclasses import fields

        known = {f.name for f in fields(TrainConfig)}
        for name, values in [("base", self.base), *self.overrides.items()]:
            for key in values:
                if key not in known:
                    where = "--set/--config" if name == "base" else f"--override {name}"
                    raise ConfigError(f"{where}: unknown TrainConfig field {key!r}"
                                      f"{did_you_mean(key, known)}. Fix: see `arlgym train "
                                      "--help` for the fields")
            try:  # every field name and value checked before anything starts
                TrainConfig(**{**self.base, **values, "algo": self.algos[0]})
            except TypeError as e:
                raise ConfigError(f"arena {name}: {e}; see `arlgym train --help`") from e


@dataclass
class RunSpec:
    """One run of the grid."""

    algo: str
    variant: str  # "" or the override's name
    seed: int
    folder: Path
    config: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.algo}__{self.variant}" if self.variant else self.algo

    def train_command(self, launcher: str = "python") -> list[str]:
        cfg = str(self.folder / "train.yaml")
        if launcher == "accelerate":
            return ["accelerate", "launch", "-m", "arlgym.rl", "--config", cfg]
        return [sys.executable, "-m", "arlgym.rl", "--config", cfg]


def plan_runs(spec: ArenaSpec) -> list[RunSpec]:
    """Every run of the grid, in a fixed order (seed-major so early results cover all algos)."""
    spec.validate()
    variants = list(spec.overrides.items()) or [("", {})]
    runs = []
    for seed in spec.seeds:
        for algo in spec.algos:
            for vname, values in variants:
                label = f"{algo}__{vname}" if vname else algo
                folder = Path(spec.out).resolve() / label / f"seed-{seed}"
                config = {**spec.base, **values, "algo": algo, "seed": seed,
                          "output_dir": str(folder)}
                runs.append(RunSpec(algo, vname, seed, folder, config))
    return runs


def run_status(run: RunSpec) -> str:
    """``finished`` | ``partial`` (has a checkpoint to resume from) | ``new``."""
    f = run.folder
    want_test = int(run.config.get("test_episodes", 0) or 0) > 0
    done = (f / "final").is_dir() and (not want_test or (f / "eval" / "test-last.summary.json").exists())
    if done and want_test and run.config.get("save_best") and (f / "best" / "best.json").exists():
        done = (f / "eval" / "test-best.summary.json").exists()
    if done:
        return "finished"
    ckpts = [p for p in (f / "checkpoints").glob("step-*")
             if not p.name.endswith(".tmp") and (p / "trainer_state.json").exists()]
    return "partial" if ckpts else "new"


def check_runs(spec: ArenaSpec, runs: list[RunSpec]) -> None:
    """Refuse a grid whose folder holds finished or resumable runs of other settings (a rerun
    would skip or continue them as if they were this grid's). Runs without a checkpoint start
    afresh, so nothing of theirs is checked. Raises :class:`arlgym.rundir.SettingsMismatch`
    naming every differing setting, before anything is written."""
    differing: dict[str, list[str]] = {}
    for run in runs:
        if run_status(run) == "new":
            continue
        old = recorded_train_settings(run.folder, TrainConfig)
        if old is None:
            continue
        diff = settings_diff(old, train_settings(TrainConfig(**run.config)))
        if diff:
            differing.setdefault("; ".join(diff), []).append(f"{run.label}/seed-{run.seed}")
    if differing:
        parts = [f"{', '.join(labels)}: {diff}" for diff, labels in differing.items()]
        raise SettingsMismatch(
            f"--out {spec.out} holds runs made with other settings ({' | '.join(parts)}). Fix: "
            "rerun with those settings to continue them, choose another --out, or delete those "
            "run folders to start over")


def log_tail(path: Path, lines: int = 8) -> str:
    """The last ``lines`` non-empty lines of a run's log (why it failed), indented."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "    (no log)"
    last = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(f"    {line}" for line in last)


def _write_config(run: RunSpec, resume: bool) -> None:
    import yaml

    run.folder.mkdir(parents=True, exist_ok=True)
    if not resume:  # a fresh start: nothing of an earlier, checkpoint-less attempt survives
        import shutil

        for name in ("metrics.jsonl", "collapse.json", "settings.json", "config.json"):
            (run.folder / name).unlink(missing_ok=True)
        for name in ("best", "best.tmp", "final", "eval"):
            shutil.rmtree(run.folder / name, ignore_errors=True)
    config = {**run.config, "resume": resume}
    (run.folder / "train.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def threads_per_run(jobs: int) -> int:
    """Torch threads per run: the cores split evenly, at least one. Tiny models gain nothing
    from more than one thread and busy cores make extra threads stall each other at every
    barrier, so CPU grids run ``--jobs = cores`` runs of one thread each."""
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def print_commands(spec: ArenaSpec, launcher: str = "accelerate") -> list[str]:
    """Write every unfinished run's config and return one shell command per run."""
    lines = []
    runs = plan_runs(spec)
    check_runs(spec, runs)
    for run in runs:
        status = run_status(run)
        if status == "finished":
            continue
        _write_config(run, resume=status == "partial")
        lines.append(shlex.join(run.train_command(launcher)))
    return lines


def _steps_logged(run: RunSpec) -> int:
    """Optimizer steps a run has logged so far (its metrics.jsonl; a torn last line is skipped)."""
    path = run.folder / "metrics.jsonl"
    if not path.exists():
        return 0
    return max((int(r.get("step", 0)) for r in read_metrics_jsonl(path)), default=0)


def _show_steps(bar: Any, running: list, planned: dict[str, int], done_steps: dict[str, int]) -> None:
    """Advance ``bar`` by the steps the running runs logged since the last poll and name each
    running run's progress in the postfix (``grpo 3/8 · sampo 2/8``)."""
    parts = []
    for run, _proc, _log in running:
        key = f"{run.label}/seed-{run.seed}"
        steps = min(_steps_logged(run), planned[key])
        if steps > done_steps.get(key, 0):
            bar.update(steps - done_steps.get(key, 0))
            done_steps[key] = steps
        parts.append(f"{key} {steps}/{planned[key]}")
    bar.set_postfix_str(" · ".join(parts), refresh=True)


def run_grid(spec: ArenaSpec, jobs: int = 1, progress: bool = True,
             on_start: Any = None) -> dict[str, str]:
    """Run every unfinished run, ``jobs`` at a time; returns label/seed -> final status.

    Each run is a subprocess (``python -m arlgym.rl --config <run>/train.yaml``) with
    ``torch_threads`` and ``OMP_NUM_THREADS`` set to the cores divided by ``jobs``, its output
    in ``train.log``. A failed run is reported and the others go on; rerun to retry it.
    ``on_start(run, proc)`` is called as each run starts (tests use it to kill one mid-grid).
    """
    from tqdm.auto import tqdm

    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    runs = plan_runs(spec)
    check_runs(spec, runs)
    Path(spec.out).mkdir(parents=True, exist_ok=True)
    lock = _lock(Path(spec.out))
    (Path(spec.out) / "arena.json").write_text(json.dumps(
        {**asdict(spec), "runs": [f"{r.label}/seed-{r.seed}" for r in runs]}, indent=2, default=str))
    threads = threads_per_run(jobs)
    todo = [r for r in runs if run_status(r) != "finished"]
    results = {f"{r.label}/seed-{r.seed}": "finished (skipped)" for r in runs if r not in todo}
    # progress in optimizer steps (every run's max_steps), so the bar moves and shows an ETA
    # while runs are in flight; a finished run counts in full (one that stops early on collapse too)
    planned = {f"{r.label}/seed-{r.seed}": int(r.config.get("max_steps") or 0) or 1 for r in runs}
    done_steps = {f"{r.label}/seed-{r.seed}": planned[f"{r.label}/seed-{r.seed}"]
                  for r in runs if r not in todo}
    bar = tqdm(total=sum(planned.values()), initial=sum(done_steps.values()), desc="arena",
               unit="step", disable=not progress)
    running: list[tuple[RunSpec, subprocess.Popen, Any]] = []
    last_poll = 0.0
    try:
        while todo or running:
            while todo and len(running) < jobs:
                run = todo.pop(0)
                status = run_status(run)
                run.config.setdefault("torch_threads", threads)
                _write_config(run, resume=status == "partial")
                env = {**os.environ, "OMP_NUM_THREADS": str(threads),
                       "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
                log = (run.folder / "train.log").open("a")
                log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {status}: "
                          f"{shlex.join(run.train_command())}\n")
                log.flush()
                proc = subprocess.Popen(run.train_command(), stdout=log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True,
                                        preexec_fn=_die_with_parent)
                running.append((run, proc, log))
                if on_start is not None:
                    on_start(run, proc)
            time.sleep(0.2)
            if progress and time.monotonic() - last_poll > 2.0:
                last_poll = time.monotonic()
                _show_steps(bar, running, planned, done_steps)
            for item in list(running):
                run, proc, log = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                log.close()
                key = f"{run.label}/seed-{run.seed}"
                if proc.returncode == 0 and run_status(run) == "finished":
                    results[key] = "finished"
                else:
                    results[key] = f"failed (exit {proc.returncode}; see {run.folder / 'train.log'})"
                    bar.write(f"arena: {key} {results[key]}; its last lines:\n"
                              + log_tail(run.folder / "train.log"))
                bar.update(planned[key] - done_steps.get(key, 0))
                done_steps[key] = planned[key]
    except BaseException:
        for _run, proc, _log in running:  # a killed grid takes its runs with it
            _kill(proc)
        raise
    finally:
        bar.close()
        lock.close()
    return results


def _lock(out: Path):
    """Hold ``<out>/.arena.lock`` while the grid runs: a second grid on the same folder would
    run the same runs twice into the same files."""
    import fcntl

    fh = (out / ".arena.lock").open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise ConfigError(f"another `arlgym arena run` is running on {out}; wait for it or "
                          "stop it (its runs resume when you start again)") from None
    return fh


def _die_with_parent() -> None:
    """In the run's process: get SIGKILL when the grid process dies (Linux), so killing the
    grid — even with SIGKILL — never leaves orphaned runs writing into the folders."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _kill(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
