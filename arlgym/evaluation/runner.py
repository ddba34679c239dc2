"""``arlgym eval``: a policy on a fixed, enumerated task list, resumable, one JSONL line per episode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arlgym.core.validation import check_int, check_mapping, check_str, make_checked_env
from arlgym.errors import ConfigError, WorkerError
from arlgym.evaluation.metrics import format_summary, summarize
from arlgym.policies.base import Policy, SamplingParams
from arlgym.rollout import RolloutCollector, Trajectory, iter_jsonl, save_jsonl
from arlgym.rundir import SettingsMismatch, check_settings, settings_of, write_settings
from arlgym.serve.client import server_tasks

__all__ = ["evaluate", "eval_task_list"]


def eval_task_list(env_id: str, split: str, episodes: int, env_kwargs: dict[str, Any],
                   servers: list[str] | None = None, server_token: str | None = None) -> list[str]:
    """The first ``episodes`` ids of the env's enumerated task list for ``split``; with
    ``servers``, as the first server lists them (``GET /tasks``), so this machine needs
    neither the env's package nor its data."""
    if servers:
        tasks = server_tasks(servers[0], env_id, split, episodes, server_token)
    else:
        env = make_checked_env(env_id, env_kwargs)
        try:
            tasks = env.unwrapped.list_tasks(split, episodes)
        finally:
            env.close()
    if len(tasks) < episodes:
        raise ConfigError(
            f"{env_id} split {split!r} has only {len(tasks)} tasks, fewer than --episodes {episodes}"
        )
    return tasks


def settings_path(out: str | Path) -> Path:
    """Where the settings of an episodes file are recorded: ``<out>.settings.json``."""
    return Path(out).with_suffix(".settings.json")


def eval_settings(env_id: str, policy: Policy, split: str, env_kwargs: dict[str, Any],
                  sampling: SamplingParams) -> dict[str, Any]:
    """What decides an eval's episodes: the env and its kwargs, the split, the policy and how it
    samples. (How many episodes is not among them: a rerun may extend the list.)"""
    from dataclasses import asdict

    return settings_of({"env_id": env_id, "env_kwargs": env_kwargs, "split": split,
                        "policy": getattr(policy, "name", type(policy).__name__),
                        **asdict(sampling)})


def _check_settings(out: str | Path, settings: dict[str, Any]) -> None:
    """Refuse to resume an episodes file written with other settings (its episodes would be
    read back as this eval's), or one holding episodes with no record of their settings."""
    path = Path(out)
    if not (path.is_file() and path.stat().st_size > 0):
        return  # no episode to read back: a record left beside an emptied file does not matter
    if not check_settings(settings_path(path), settings, what="episodes", flag="--out",
                          folder=path):
        raise SettingsMismatch(f"--out {path} holds episodes without a record of their settings "
                               f"({settings_path(path).name}). Fix: choose another --out, or "
                               f"delete {path} to start over")


def _check_out(out: str | Path) -> None:
    """The episodes file must be writable before any episode is played."""
    path = Path(out)
    if path.is_dir():
        raise ConfigError(f"out={str(out)!r} is a folder. Fix: give a .jsonl file path, e.g. "
                          f"{str(path / 'episodes.jsonl')!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"out={str(out)!r}: cannot create its folder ({e.strerror}). Fix: "
                          "give a path in a writable folder") from None
    try:
        with path.open("a", encoding="utf-8"):  # created now (empty) if it does not exist
            pass
    except OSError as e:
        raise ConfigError(f"out={str(out)!r} is not writable ({e.strerror}). Fix: give a path "
                          "in a writable folder") from None


def evaluate(
    env_id: str,
    policy: Policy,
    *,
    episodes: int,
    split: str = "test",
    out: str | Path | None = None,
    batch_size: int = 16,
    sampling: SamplingParams | None = None,
    env_kwargs: dict[str, Any] | None = None,
    samples_per_task: int = 1,
    progress: bool = True,
    servers: list[str] | None = None,
    server_token: str | None = None,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Evaluate ``policy`` on the first ``episodes`` tasks of ``split``.

    Episodes already in ``out`` (same task id and sample index) are skipped, so an interrupted
    run resumes where it stopped. Each finished batch is appended (and fsynced) at once.
    ``samples_per_task > 1`` plays each task that many times (for pass@k).

    ``servers`` (env server URLs, ``arlgym serve``) plays the episodes there instead of in this
    process; they equal the local ones, so the servers are not part of the recorded settings
    (:data:`arlgym.rundir.PLACEMENT_NOT_SETTINGS`) and a run may resume on other servers. The
    task list then comes from the first server; ``env_kwargs`` must equal the servers'.

    Returns:
        ``(summary, trajectories)`` over all requested episodes, old and new.
    """
    episodes = check_int("episodes", episodes, min=1)
    batch_size = check_int("batch_size", batch_size, min=1)
    samples_per_task = check_int("samples_per_task", samples_per_task, min=1)
    split = check_str("split", split)
    env_kwargs = check_mapping("env_kwargs", env_kwargs, allow_none=True) or {}
    sampling = sampling or SamplingParams(temperature=0.0)
    settings = eval_settings(env_id, policy, split, env_kwargs, sampling)
    if out is not None:
        _check_out(out)  # a folder or an unwritable path first (it creates a missing file empty)
        _check_settings(out, settings)
        write_settings(settings_path(out), settings)
    tasks = eval_task_list(env_id, split, episodes, env_kwargs, servers, server_token)
    wanted = [(t, k) for t in tasks for k in range(samples_per_task)]
    wanted_set = set(wanted)
    done: dict[tuple[str, int], Trajectory] = {}
    if out is not None and Path(out).exists():
        for traj in iter_jsonl(out):
            key = (traj.task_id, traj.member)
            if key in wanted_set:
                done[key] = traj
    todo = [t for t in tasks if any((t, k) not in done for k in range(samples_per_task))]
    from tqdm.auto import tqdm

    bar = tqdm(total=len(wanted), initial=len(wanted) - len(todo) * samples_per_task,
               desc=f"eval {env_id}", unit="ep", disable=not progress)
    collectors: dict[int, RolloutCollector] = {}
    try:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            if len(chunk) not in collectors:
                collectors[len(chunk)] = RolloutCollector(
                    env_id, policy, group_size=samples_per_task, num_tasks=len(chunk),
                    sampling=sampling, env_kwargs=env_kwargs, progress=False,
                    servers=servers, server_token=server_token)
            trajs = collectors[len(chunk)].collect(seed=0, task_ids=chunk)
            new = [t for t in trajs if (t.task_id, t.member) not in done]
            for t in new:
                done[(t.task_id, t.member)] = t
            if out is not None:
                save_jsonl(new, out, append=True)
            bar.update(len(new))
            wins = sum(t.won for t in done.values())
            bar.set_postfix(success=f"{wins / max(1, len(done)):.2f}")
    finally:
        bar.close()
        for c in collectors.values():
            c.close()
    missing = [key for key in wanted if key not in done]
    if missing:  # groups dropped after repeated worker failures (see RolloutCollector)
        raise WorkerError(f"{len(missing)} of {len(wanted)} episodes were dropped after repeated "
                          "env worker failures (see the log). Fix: rerun the same command; "
                          + ("the finished episodes in the output file are kept" if out is not None
                             else "pass out= to keep finished episodes between runs"))
    ordered = [done[key] for key in wanted]
    summary = summarize(ordered)
    summary.update({"env_id": env_id, "split": split, "policy": getattr(policy, "name", ""),
                    "episodes": len(ordered), "settings": settings})
    if out is not None:
        Path(out).with_suffix(".summary.json").write_text(json.dumps(summary, indent=2))
    return summary, ordered


def print_summary(summary: dict[str, Any]) -> None:
    title = f"{summary.get('policy', '')} on {summary.get('env_id', '')} ({summary.get('split', '')})"
    print(format_summary(summary, title))
