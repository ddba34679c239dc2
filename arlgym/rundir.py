"""The settings record of an output folder: reruns continue a folder only with its own settings.

Every command that writes results into a folder (``arlgym eval``, ``arlgym arena run``,
``arlgym-sft collect``/``train``, the RL trainer, ``arlgym quickstart``) resumes or reuses what
an earlier call left there. That is only sound when the earlier call had the same settings:
otherwise a finished 2-step run would be counted as the 3-step run just asked for, or greedy
episodes read back as sampled ones, and the records would disagree with the results next to
them. So each command writes the settings that determine its results into the folder before
it does any work, and a later call with other settings is refused — with one line that names
each differing setting and the fix — before it does any work either.

Settings that change how fast or where a run goes, not its numbers (threads, progress bars,
the output path, logging backends, time guards, and where the envs run:
:data:`PLACEMENT_NOT_SETTINGS`), are left out of the record by each caller.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["SettingsMismatch", "settings_of", "PLACEMENT_NOT_SETTINGS", "settings_diff", "check_settings",
           "write_settings", "train_settings", "TRAIN_NOT_SETTINGS", "check_train_dir",
           "record_train_settings", "recorded_train_settings", "train_dir_has_results",
           "no_trace_on_failure", "train_run_status", "prepare_train_rerun"]

#: the record's file name inside an output folder
SETTINGS_FILE = "settings.json"


class SettingsMismatch(ConfigError):
    """An output folder holds results made with other settings than the ones asked for."""


def settings_of(obj: Any, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """A dataclass or mapping as JSON-comparable values (tuples become lists, keys strings),
    without the ``exclude`` fields."""
    data = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else dict(obj)
    skip = set(exclude)
    return json.loads(json.dumps({k: v for k, v in data.items() if k not in skip}, default=str))


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``["lr 3e-05 -> 0.001", ...]`` for every key whose value differs (missing = null)."""
    return [f"{k} {_short(old.get(k))} -> {_short(new.get(k))}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def read_settings(path: Path) -> dict[str, Any] | None:
    """The settings recorded in ``path``, or None where there is no readable record."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_settings(record: str | Path, settings: Mapping[str, Any], *, what: str, flag: str,
                   folder: str | Path | None = None,
                   old: Mapping[str, Any] | None = None) -> bool:
    """Refuse to continue a folder whose record holds other settings.

    Args:
        record: the settings file (``<folder>/settings.json`` or a sidecar of an output file).
        settings: this call's settings (from :func:`settings_of`).
        what: what the folder holds, for the message (e.g. "an RL run").
        flag: the flag that chose the folder, as the user typed it (e.g. ``--out``).
        folder: the folder or file named in the message (default: the record's folder).
        old: the earlier settings when they come from elsewhere than ``record`` (an older
            record format); None reads ``record``.

    Returns:
        True when the folder holds results of these very settings (they may be reused),
        False when it holds no record (nothing to reuse).

    Raises:
        SettingsMismatch: the record holds other settings; the message names each difference.
    """
    old = read_settings(Path(record)) if old is None else old
    if old is None:
        return False
    diff = settings_diff(old, settings)
    if diff:
        where = folder if folder is not None else Path(record).parent
        raise SettingsMismatch(
            f"{flag} {where} holds {what} made with other settings ({'; '.join(diff)}). Fix: "
            f"rerun with those settings to continue it, choose another {flag}, or delete "
            f"{where} to start over")
    return True


def write_settings(record: str | Path, settings: Mapping[str, Any]) -> None:
    """Write the record atomically (several processes of one launch may write the same one)."""
    path = Path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(settings), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


#: settings that say where the envs run, not what they return: episodes played on env servers
#: (``arlgym serve``) equal the in-process ones for the same seeds (tests/unit/serve), so the
#: trainer, ``arlgym eval`` and ``arlgym-sft collect`` leave them out of their records, and a
#: run may continue its folder on other servers, or on local envs
PLACEMENT_NOT_SETTINGS = ("env_servers",)

#: TrainConfig fields that do not change a run's numbers: where it goes, how many threads, how
#: often it saves, what it logs to, guards, and throughput knobs of generation and batching
TRAIN_NOT_SETTINGS = ("output_dir", "resume", "torch_threads", "log_with", "max_minutes",
                      "save_steps", "save_total_limit", "vllm_gpu_memory_utilization",
                      "generation_batch_size", "micro_batch_tokens", "micro_batch_logits_mb",
                      "lm_head", "vllm_server_urls", *PLACEMENT_NOT_SETTINGS)


def train_settings(cfg: Any) -> dict[str, Any]:
    """The settings of an RL run that determine its results (a :class:`TrainConfig`)."""
    return settings_of(cfg, TRAIN_NOT_SETTINGS)


def train_dir_has_results(folder: str | Path) -> bool:
    """Whether an RL run folder holds anything a rerun would continue or read back."""
    folder = Path(folder)
    return any((folder / name).exists() for name in ("metrics.jsonl", "checkpoints", "final",
                                                      "best", "eval"))


def recorded_train_settings(folder: str | Path, config_cls: type) -> dict[str, Any] | None:
    """What an RL run folder records of its settings; a folder written before
    ``settings.json`` existed is read from the trainer's ``config.json``. ``config_cls`` (the
    trainer's config dataclass, :class:`arlgym.rl.config.TrainConfig`) fills in the settings
    added since the folder was written; it is passed in because this base module sits below
    the trainer."""
    folder = Path(folder)
    found = read_settings(folder / SETTINGS_FILE)
    if found is None:
        legacy = read_settings(folder / "config.json")
        if not (legacy and isinstance(legacy.get("config"), dict)):
            return None
        found = settings_of(legacy["config"], TRAIN_NOT_SETTINGS)
    # a setting added to TrainConfig after the folder was written takes its default there: new
    # fields default to the behaviour that existed before them, so such a run continues; a field
    # recorded then and counted as placement or speed since is not compared
    found = {k: v for k, v in found.items() if k not in TRAIN_NOT_SETTINGS}
    return {**_train_defaults(config_cls), **found}


def dataclass_defaults(cls: type) -> dict[str, Any]:
    """What a record written before a field of the dataclass ``cls`` existed is filled with:
    the value those records ran with — the field's ``metadata["before"]`` where its default
    is not the earlier behaviour (a better default chosen with the field), else its default."""
    values = {}
    for f in dataclasses.fields(cls):
        if "before" in f.metadata:
            values[f.name] = f.metadata["before"]
        elif f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    return values


def _train_defaults(config_cls: type) -> dict[str, Any]:
    """The config dataclass's default settings, as :func:`train_settings` records them."""
    return settings_of(dataclass_defaults(config_cls), TRAIN_NOT_SETTINGS)


def check_train_dir(cfg: Any, flag: str = "--output_dir") -> bool:
    """Refuse an RL run into an ``output_dir`` that holds results of a run with other
    settings. Returns whether it holds results of these settings. A folder without results
    (nothing ran, or a run failed before its first log row) is not checked: nothing in it
    would be mixed in."""
    folder = Path(cfg.output_dir)
    if not train_dir_has_results(folder):
        return False
    old = recorded_train_settings(folder, type(cfg))
    if old is None:
        return False
    return check_settings(folder / SETTINGS_FILE, train_settings(cfg), what="an RL run",
                          flag=flag, folder=folder, old=old)


def train_run_status(cfg: Any) -> str:
    """``"finished"`` (``final/`` and the test evals it asked for exist), ``"partial"`` (a
    complete checkpoint to continue from) or ``"new"`` — of the run ``cfg`` writes into its
    ``output_dir`` (the arena's rule for its runs, for a single one)."""
    folder = Path(cfg.output_dir)
    evals = folder / "eval"
    done = (folder / "final").is_dir() and (
        not cfg.test_episodes or (evals / "test-last.summary.json").exists())
    if done and cfg.test_episodes and cfg.save_best and (folder / "best" / "best.json").exists():
        done = (evals / "test-best.summary.json").exists()
    if done:
        return "finished"
    complete = [p for p in (folder / "checkpoints").glob("step-*")
                if not p.name.endswith(".tmp") and (p / "trainer_state.json").exists()]
    return "partial" if complete else "new"


_LEFT_BY_A_START = ("metrics.jsonl", "collapse.json")
_DIRS_LEFT_BY_A_START = ("best", "best.tmp", "final", "eval")


def prepare_train_rerun(cfg: Any) -> str:
    """Decide what the same training command does in a folder it already wrote into (after
    :func:`check_train_dir` found its settings there): returns :func:`train_run_status`, and

    * ``partial``: sets ``cfg.resume`` — the trainer continues from the newest checkpoint and
      drops the log rows after it, so ``metrics.jsonl`` never holds a step twice;
    * ``new`` (no checkpoint: killed before its first one): removes what that attempt logged,
      so its steps are not appended to again from step 1;
    * ``finished``: changes nothing (the caller says so and does no work).
    """
    import shutil

    status = train_run_status(cfg)
    folder = Path(cfg.output_dir)
    if status == "partial":
        cfg.resume = True
    elif status == "new" and not cfg.resume and folder.is_dir():
        for name in _LEFT_BY_A_START:
            (folder / name).unlink(missing_ok=True)
        for name in _DIRS_LEFT_BY_A_START:
            shutil.rmtree(folder / name, ignore_errors=True)
    return status


def record_train_settings(cfg: Any) -> None:
    """Write the run's settings into its ``output_dir`` (before its first step)."""
    write_settings(Path(cfg.output_dir) / SETTINGS_FILE, train_settings(cfg))


def _holds_results(path: Path) -> bool:
    """Whether a path written by a failed call holds anything worth resuming: a non-empty
    JSONL (episodes, samples, metrics rows) or a checkpoint."""
    if path.is_file():
        return path.stat().st_size > 0
    return (any(f.stat().st_size > 0 for f in path.rglob("*.jsonl") if f.is_file())
            or any(d.is_dir() and d.name.startswith(("checkpoint", "final", "best"))
                   for d in path.rglob("*")))


@contextmanager
def no_trace_on_failure(*outputs: str | Path | None, sidecars: Iterable[str] = ()) -> Iterator[None]:
    """Run a command's work; if it fails, remove the outputs it *created* that hold no results.

    A command writes its settings record (and an empty episodes file) before its first
    result, so that a rerun can be checked against them. If it then fails before any result
    (an unreachable env server, a model that does not load), those files would make a later
    run with other settings refused ("holds episodes of other settings") or read back an empty
    file as its own. Outputs that existed before the call, and any that hold results (they
    resume), are left alone.

    Args:
        outputs: files or folders the command writes; ``None`` entries are ignored.
        sidecars: suffixes of files next to a removed output file that go with it (its
            settings record, e.g. ``".settings.json"``).
    """
    fresh = [Path(o) for o in outputs if o is not None and not Path(o).exists()]
    try:
        yield
    except BaseException:
        for path in fresh:
            if not path.exists() or _holds_results(path):
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
                for suffix in sidecars:
                    path.with_suffix(suffix).unlink(missing_ok=True)
        raise
