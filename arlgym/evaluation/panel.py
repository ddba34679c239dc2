"""Evaluation panels: the fixed task list a policy is judged on, and its fingerprint.

Two success rates are comparable only when they were measured on the same tasks of the same
env, built the same way, by the same arlgym. A *panel* records exactly that — env id, env
kwargs, split, the enumerated task ids and the arlgym version — and its ``panel_hash`` (16 hex
of BLAKE2b over the canonical JSON) travels with every eval summary, so a report can refuse to
put numbers from different panels side by side.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import arlgym
from arlgym.evaluation.runner import eval_task_list

__all__ = ["make_panel", "panel_hash"]


def panel_hash(panel: dict[str, Any]) -> str:
    """Fingerprint of a panel dict (every key but ``hash`` itself)."""
    body = {k: v for k, v in panel.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def make_panel(env_id: str, split: str, episodes: int, env_kwargs: dict[str, Any] | None = None,
               ) -> dict[str, Any]:
    """The panel of the first ``episodes`` tasks of ``split`` (what ``evaluate`` plays)."""
    env_kwargs = dict(env_kwargs or {})
    panel = {"env_id": env_id, "env_kwargs": env_kwargs, "split": split,
             "task_ids": eval_task_list(env_id, split, episodes, env_kwargs),
             "arlgym_version": arlgym.__version__}
    panel["hash"] = panel_hash(panel)
    return panel
