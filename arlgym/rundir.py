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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from arlgym.errors import ConfigError

__all__ = ["SettingsMismatch", "settings_of", "PLACEMENT_NOT_SETTINGS", "settings_diff", "check_settings",
           "write_settings", "train_settings", "TRAIN_NOT_SETTINGS", "check_train_dir",
           "record_train_settings", "recorded_train_settings", "train_dir_has_results"]

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


def record_train_settings(cfg: Any) -> None:
    """Write the run's settings into its ``output_dir`` (before its first step)."""
    write_settings(Path(cfg.output_dir) / SETTINGS_FILE, train_settings(cfg))
