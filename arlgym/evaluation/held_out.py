"""How many held-out tasks a run trained on, by content: the line every training and
collecting command prints (it must read 0).

The splits are disjoint by content (``python -m arlgym.envs.split_audit`` audits whole splits);
this is the check of one run: the task ids it actually played or trained on, keyed by the env's
content rule (:mod:`arlgym.envs.content`), against the panels its evals play — the first N
tasks of each held-out split. A task counts as trained on when some trained id has its key,
whatever that id is, so a held-out puzzle reached under a training id counts too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from arlgym.envs.content import TaskContent
from arlgym.errors import ArlgymError

__all__ = ["PANEL_SIZE", "held_out_overlap", "held_out_report", "default_panels",
           "format_held_out"]

#: Tasks per held-out panel when a command has no eval size of its own.
PANEL_SIZE = 200


def held_out_overlap(content: TaskContent, trained_ids: Iterable[str],
                     panels: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{split: {"tasks": n, "trained_on": k}}``: of the first ``panels[split]`` tasks of
    each split, ``k`` share their content key with some id of ``trained_ids``."""
    trained = content.keys(trained_ids)
    out = {}
    for split, limit in panels.items():
        tasks = content.panel(split, limit)
        out[split] = {"tasks": len(tasks), "trained_on": sum(content.key(t) in trained for t in tasks)}
    return out


def default_panels(content: TaskContent, size: int = PANEL_SIZE) -> dict[str, int]:
    """Each held-out split of the env (``test`` and ``val``; ALFWorld: its eval splits) at
    ``size`` tasks."""
    return dict.fromkeys(content.held_out_splits, size)


def held_out_report(env_id: str, env_kwargs: Mapping[str, Any] | None,
                    trained_ids: Iterable[str],
                    panels: Mapping[str, int] | None = None) -> dict[str, Any]:
    """:func:`held_out_overlap` for a run of ``env_id`` (``panels``: default
    :func:`default_panels`), as ``{"env_id", "trained_tasks", "panels"}``; where the tasks
    cannot be keyed here (the env's package or data missing on this machine, e.g. a run whose
    envs ran on ``env_servers``) ``{"env_id", "not_measured": why}`` instead of an error, so
    a finished run still ends cleanly."""
    ids = set(trained_ids)
    try:
        with TaskContent(env_id, env_kwargs) as content:
            counts = held_out_overlap(content, ids,
                                      default_panels(content) if panels is None else panels)
    except ArlgymError as e:
        return {"env_id": env_id, "not_measured": str(e).splitlines()[0]}
    return {"env_id": env_id, "trained_tasks": len(ids), "panels": counts}


def format_held_out(report: Mapping[str, Any]) -> str:
    """One line: ``held out: 0 of 200 test and 0 of 200 val tasks were trained on (by
    content)``."""
    if "not_measured" in report:
        return f"held out: not measured ({report['not_measured']})"
    parts = [f"{c['trained_on']} of {c['tasks']} {split}" for split, c in report["panels"].items()]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"held out: {listed} tasks were trained on (by content)"
