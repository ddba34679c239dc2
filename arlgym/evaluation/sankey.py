"""Step-wise action-transition Sankey diagrams (the paper's Appendix F, Figs. 5–9).

Column ``k`` holds the action types taken at step ``k`` (:func:`~arlgym.evaluation.patterns.
action_type`), the last column the outcome; a band from ``(k, a)`` to ``(k+1, b)`` is as wide as
the number of episodes that took ``a`` then ``b``, green for won episodes and red for lost
ones. Steps past ``max_steps`` fold into one ``…`` column so long episodes stay readable.

Two renderings of the same flows: an interactive plotly HTML (hover shows the counts) and a
PNG drawn with matplotlib — plotly's PNG export needs kaleido plus a Chrome at run time, which
an offline CI box or laptop may lack, while matplotlib is already a dependency.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arlgym.evaluation.patterns import action_type
from arlgym.rollout import Trajectory

__all__ = ["sankey_flows", "write_sankey_html", "plot_sankey_png"]

_WON, _LOST = "won", "lost"
_COLORS = {_WON: (0.17, 0.63, 0.17), _LOST: (0.84, 0.15, 0.16)}


def sankey_flows(trajectories: Sequence[Trajectory], max_steps: int = 8) -> dict[str, Any]:
    """Nodes ``(column, label)`` and links ``(src, dst, outcome) -> count`` of the episodes."""
    links: Counter = Counter()
    for traj in trajectories:
        outcome = _WON if traj.won else _LOST
        kinds = [action_type(traj.env_id, s) for s in traj.steps]
        if len(kinds) > max_steps:
            kinds = kinds[:max_steps] + ["…"]
        path = [(k, kind) for k, kind in enumerate(kinds)] + [(len(kinds), f"({outcome})")]
        for a, b in zip(path, path[1:], strict=False):
            links[(a, b, outcome)] += 1
    nodes = sorted({n for (a, b, _o) in links for n in (a, b)}, key=lambda n: (n[0], n[1]))
    return {"nodes": nodes, "links": dict(links), "episodes": len(trajectories),
            "won": sum(t.won for t in trajectories)}


def write_sankey_html(flows: dict[str, Any], path: str | Path, title: str) -> Path:
    """Interactive plotly Sankey (one self-contained HTML file; plotly.js inlined, so it opens
    offline)."""
    import plotly.graph_objects as go

    index = {n: i for i, n in enumerate(flows["nodes"])}
    src, dst, val, col = [], [], [], []
    for (a, b, outcome), count in flows["links"].items():
        src.append(index[a])
        dst.append(index[b])
        val.append(count)
        r, g, bl = _COLORS[outcome]
        col.append(f"rgba({int(r * 255)},{int(g * 255)},{int(bl * 255)},0.45)")
    columns = max((n[0] for n in flows["nodes"]), default=0) or 1
    fig = go.Figure(go.Sankey(
        arrangement="snap",
        node={"label": [f"{lab} @{k}" if not lab.startswith("(") else lab for k, lab in flows["nodes"]],
              "x": [0.01 + 0.98 * k / columns for k, _ in flows["nodes"]], "pad": 8},
        link={"source": src, "target": dst, "value": val, "color": col}))
    fig.update_layout(title=f"{title} — {flows['won']}/{flows['episodes']} won", font_size=11)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
    return path


def plot_sankey_png(flows: dict[str, Any], path: str | Path, title: str) -> Path:
    """The same flows as a static PNG: stacked node bars per column, bands between them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path as MPath

    nodes = flows["nodes"]
    out_flow: dict[tuple, float] = defaultdict(float)
    in_flow: dict[tuple, float] = defaultdict(float)
    for (a, b, _o), c in flows["links"].items():
        out_flow[a] += c
        in_flow[b] += c
    size = {n: max(out_flow[n], in_flow[n]) for n in nodes}
    columns = sorted({k for k, _ in nodes})
    total = max((sum(size[n] for n in nodes if n[0] == k) for k in columns), default=1) or 1
    gap = 0.04 * total
    pos: dict[tuple, float] = {}
    for k in columns:
        y = 0.0
        for n in [n for n in nodes if n[0] == k]:
            pos[n] = y
            y += size[n] + gap
    width = 0.18
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(columns)), 5))
    cursor_out = dict(pos)
    cursor_in = dict(pos)
    # won bands first, then lost, so each node's bands are grouped by outcome
    for outcome in (_WON, _LOST):
        for (a, b, o), c in sorted(flows["links"].items(), key=lambda kv: (kv[0][0], kv[0][1])):
            if o != outcome:
                continue
            y0, y1 = cursor_out[a], cursor_in[b]
            cursor_out[a] += c
            cursor_in[b] += c
            x0, x1 = a[0] + width / 2, b[0] - width / 2
            xm = (x0 + x1) / 2
            verts = [(x0, y0), (xm, y0), (xm, y1), (x1, y1), (x1, y1 + c), (xm, y1 + c),
                     (xm, y0 + c), (x0, y0 + c), (x0, y0)]
            codes = [MPath.MOVETO, MPath.CURVE4, MPath.CURVE4, MPath.CURVE4, MPath.LINETO,
                     MPath.CURVE4, MPath.CURVE4, MPath.CURVE4, MPath.CLOSEPOLY]
            ax.add_patch(PathPatch(MPath(verts, codes), facecolor=_COLORS[o], alpha=0.35, lw=0))
    for n in nodes:
        k, label = n
        ax.add_patch(plt.Rectangle((k - width / 2, pos[n]), width, size[n], color="0.25"))
        ax.text(k, pos[n] + size[n] / 2, label, ha="center", va="center", fontsize=7,
                color="white", clip_on=False)
    ax.set_xlim(-0.5, max(columns, default=0) + 0.5)
    ax.set_ylim(max((pos[n] + size[n] for n in nodes), default=1), 0)
    ax.set_xticks(columns, [f"step {k}" for k in columns], fontsize=8)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{title} — {flows['won']}/{flows['episodes']} won "
                 "(green: won episodes, red: lost)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
