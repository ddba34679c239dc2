"""The arena: controlled comparisons of policy-gradient designs (paper §3–4).

* :mod:`arlgym.arena.grid` — ``arlgym arena run``: presets × overrides × seeds, one ordinary
  trainer run each, resumable, ``--jobs`` or ``--print-commands`` for a cluster;
* :mod:`arlgym.arena.report` — ``arlgym arena report``: Table 3, curves, IS analysis,
  Sankey diagrams, ``index.html``;
* :mod:`arlgym.arena.alarm` — :func:`detect_collapse` (paper Finding 2), also run online by
  the trainer.

Data flows one way: trainer → ``metrics.jsonl`` / eval JSONL → report.
"""

from arlgym.arena.alarm import CollapseMonitor, detect_collapse

__all__ = ["detect_collapse", "CollapseMonitor"]
