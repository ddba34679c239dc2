"""The collapse alarm lives in :mod:`arlgym.rl.alarm` (the trainer runs it online); the arena
reads runs with the same rule, re-exported here."""

from arlgym.rl.alarm import FORMAT_KEY, LOW_KEY, SUCCESS_KEY, CollapseMonitor, detect_collapse

__all__ = ["detect_collapse", "CollapseMonitor", "LOW_KEY", "FORMAT_KEY", "SUCCESS_KEY"]
