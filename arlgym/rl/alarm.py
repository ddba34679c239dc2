"""The collapse alarm: the paper's Finding 2 as a pure function over a run's ``metrics.jsonl``.

ARLArena §4.1 / Fig. 3: runs with tolerant IS clipping (CISPO, SAPO) collapse in a recognisable
way. The fraction of tokens whose IS ratio has fallen *below* the clip band while their
advantage is *negative* (``is/out_low_neg_adv_frac``) climbs — the policy keeps pushing down
tokens it already made unlikely, so their gradients are no longer bounded — and at the same
time the responses lose their format and the success rate falls. A healthy run can be noisy in
every one of these signals; what marks a collapse is all three moving the wrong way together
and staying there.

The rule (every threshold is a keyword of :func:`detect_collapse`):

1. Each signal is smoothed by a trailing mean over ``window`` steps.
2. References come from the run's own past: the *peak* smoothed format-valid ratio and success
   rate seen so far, and the *lowest* smoothed low-ratio negative-advantage fraction seen so far.
3. The IS signal is *up* at a step when it has climbed — ``low >= max(low_ratio * floor,
   floor + low_abs)`` — or simply stands at ``low_level`` or more (a run whose very first
   updates already push 5% of the tokens below the band has no healthy floor to climb from;
   healthy runs in the paper, and here, stay well below 1%).
4. The agent is *falling* at a step when format validity (smoothed, and the step's own) is
   ``format_drop`` below its peak and
   success is ``success_rel_drop`` (relative) and ``success_abs_drop`` (absolute) below its
   peak — or the run never succeeded (peak below ``success_abs_drop``), in which case success
   cannot fall and format decides.
5. The alarm fires once the agent has been falling for ``patience`` consecutive steps and the
   IS signal was up at some step from ``lead`` steps before that fall began until now. The
   collapse *began* at the first such IS step (the IS signal leads, as in the paper's Fig. 3,
   and in a fast collapse it is gone again once every response is broken and no advantage is
   left to push on).

The rule does not read ``mismatch/kl`` (sampler/learner gap, :mod:`arlgym.rl.correction`); the
report plots it. Measured on the async CPU arena (docs/async.md, "Measured: the CPU arena": 9
async runs with ``max_staleness: 2``, 8 steps): no run collapsed, so nothing was there to lead;
the one transient crash (format validity 0.11 for one step) had its KL spike (1.06, five times
its early level) in that same step, not before — the KL is measured on the broken batch itself.
Nothing supports it as an early warning here, so it stays out of the rule.

6. **A format crash needs no IS signature.** A run can break in one update: every response
   malformed at once, so no advantage is left and the IS signal never rises (measured: CISPO at
   lr 3e-3 from a behaviour-cloned start, format validity 0.67 -> 0.0 in one step, the IS
   fraction 0.0 throughout, docs/arena.md). When the raw format-valid ratio falls to
   ``crash_frac`` of its level over the previous ``crash_steps`` steps (that level at least
   ``crash_min_peak``) and stays there for ``patience`` steps, the alarm fires too; the collapse
   began with the update before the first broken step (that update made the broken weights).
   A slow fall (the gradual drift of rule 4 without the IS signature) is not a crash.

Runs shorter than ``min_steps`` are never judged. :class:`CollapseMonitor` runs the same rule
online, one row at a time, for the trainer.

**Degradation** (:func:`detect_degradation`, the trainer's ``degradation_alarm``): a policy can
get worse with its format intact — no IS signature, no format fall, so the rule above stays
silent. The periodic greedy eval on the validation split sees it: the alarm fires when
``patience`` evals in a row sit below the best earlier eval by more than ``z`` standard errors
of the difference (and by at least ``abs_drop``). It never reads the test panel.

What the trainer does when the alarm fires is ``on_collapse`` (:data:`ON_COLLAPSE`): warn, stop,
or roll back (:mod:`arlgym.rl.rollback`, remedies :data:`REMEDY_NAMES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arlgym.rl import metrics as M

__all__ = ["detect_collapse", "detect_degradation", "CollapseMonitor", "LOW_KEY", "FORMAT_KEY",
           "SUCCESS_KEY", "ON_COLLAPSE", "REMEDY_NAMES"]

#: what the trainer does when the alarm fires (``on_collapse``)
ON_COLLAPSE = ("warn", "stop", "rollback")
#: the remedies a rollback applies (``rollback_remedy``; :data:`arlgym.rl.rollback.REMEDIES`)
REMEDY_NAMES = ("halve_lr", "raise_kl", "seq_mask")

# the three signals, named in the one metric vocabulary (arlgym.rl.metrics)
LOW_KEY = M.IS_LOW_NEG
FORMAT_KEY = M.FORMAT_VALID
SUCCESS_KEY = M.SUCCESS_RATE

_DEFAULTS: dict[str, float] = {
    "window": 3,
    "patience": 3,
    "min_steps": 6,
    "low_ratio": 2.0,
    "low_abs": 0.005,
    "low_level": 0.05,
    "lead": 5,
    "format_drop": 0.15,
    "success_rel_drop": 0.3,
    "success_abs_drop": 0.1,
    "crash_frac": 0.5,
    "crash_steps": 2,
    "crash_min_peak": 0.5,
}


def _smooth(values: Sequence[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _series(rows: Sequence[Mapping[str, Any]], key: str) -> list[float] | None:
    """The metric per row (a missing value carries the previous one forward); None if absent."""
    if not any(key in r for r in rows):
        return None
    out, last = [], 0.0
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)):
            last = float(v)
        out.append(last)
    return out


def detect_collapse(rows: Sequence[Mapping[str, Any]], **thresholds: float) -> dict[str, Any] | None:
    """Judge one run: ``None`` when healthy (or too short to judge), else where it collapsed.

    Args:
        rows: the run's ``metrics.jsonl`` rows, in step order; each a dict with ``step`` and the
            trainer's metric names (``is/out_low_neg_adv_frac``, ``env/format_valid_ratio``,
            ``env/success_rate``).
        **thresholds: override any of ``window``, ``patience``, ``lead``, ``min_steps``,
            ``low_ratio``, ``low_abs``, ``low_level``, ``format_drop``, ``success_rel_drop``,
            ``success_abs_drop``, ``crash_frac``, ``crash_steps``, ``crash_min_peak`` (module
            docstring).

    Returns:
        ``None``, or a dict with ``step`` (where the collapse began), ``detected_at`` (the step
        at which the rule fired), ``reason`` (one line) and ``evidence``: for each signal its
        reference (peak or floor) and its smoothed value at ``detected_at``; a format crash
        (rule 6) has ``kind: "crash"``. When both rules fire, the earlier verdict.

    Raises:
        ValueError: an unknown threshold name.
    """
    unknown = sorted(set(thresholds) - set(_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown threshold(s) {unknown}; known: {sorted(_DEFAULTS)}")
    th = {**_DEFAULTS, **thresholds}
    rows = [r for r in rows if "step" in r]
    if len(rows) < max(int(th["min_steps"]), int(th["patience"])):
        return None
    low_raw, fmt_raw, suc_raw = (_series(rows, k) for k in (LOW_KEY, FORMAT_KEY, SUCCESS_KEY))
    if low_raw is None or fmt_raw is None:
        return None  # without the IS signal and format validity there is nothing to judge
    suc_raw = suc_raw or [0.0] * len(rows)
    verdicts = [v for v in (_finding2(rows, low_raw, fmt_raw, suc_raw, th),
                            _format_crash(rows, fmt_raw, th)) if v is not None]
    return min(verdicts, key=lambda v: v["detected_at"]) if verdicts else None


def _format_crash(rows: Sequence[Mapping[str, Any]], fmt: list[float],
                  th: Mapping[str, float]) -> dict[str, Any] | None:
    """Rule 6: an abrupt fall of the raw format-valid ratio that stays (no IS signature needed)."""
    patience, back = int(th["patience"]), int(th["crash_steps"])
    for i in range(1, len(rows) - patience + 1):
        level = max(fmt[max(0, i - back):i])
        if level < th["crash_min_peak"] or fmt[i] > th["crash_frac"] * level:
            continue
        if any(fmt[j] > th["crash_frac"] * level for j in range(i, i + patience)):
            continue
        began = max(0, i - 1)
        at = i + patience - 1
        return {
            "step": rows[began]["step"], "detected_at": rows[at]["step"], "kind": "crash",
            "reason": (f"format validity crashed {level:.2f} -> {fmt[i]:.2f} at step "
                       f"{rows[i]['step']} and stayed at most {max(fmt[i:at + 1]):.2f} for "
                       f"{patience} steps (a crash: no IS signature needed)"),
            "evidence": {FORMAT_KEY: {"level": level, "values": fmt[i:at + 1]},
                         "crash_frac": th["crash_frac"], "patience": patience},
        }
    return None


def _finding2(rows: Sequence[Mapping[str, Any]], low_raw: list[float], fmt_raw: list[float],
              suc_raw: list[float], th: Mapping[str, float]) -> dict[str, Any] | None:
    """Rules 1-5: the IS signal up, then format and success falling together."""
    window, patience, lead = int(th["window"]), int(th["patience"]), int(th["lead"])
    low, fmt, suc = (_smooth(s, window) for s in (low_raw, fmt_raw, suc_raw))
    low_ref, fmt_peak, suc_peak = low[0], fmt[0], suc[0]
    up: list[bool] = []
    floors: list[float] = []
    falling_since: int | None = None
    for i in range(len(rows)):
        # references from strictly earlier steps, so a step is compared with the run's past
        if i:
            low_ref = min(low_ref, low[i - 1])
            fmt_peak = max(fmt_peak, fmt[i - 1])
            suc_peak = max(suc_peak, suc[i - 1])
        low_threshold = min(max(th["low_ratio"] * low_ref, low_ref + th["low_abs"]), th["low_level"])
        up.append(i >= 1 and low[i] >= low_threshold)
        floors.append(low_ref)
        # the step itself must be down too: a one-step crash keeps the trailing mean down for
        # ``window`` steps, which alone would pass for a sustained fall
        fmt_down = fmt[i] <= fmt_peak - th["format_drop"] and fmt_raw[i] <= fmt_peak - th["format_drop"]
        if suc_peak < th["success_abs_drop"]:
            suc_down = True
        else:
            suc_down = (suc[i] <= suc_peak * (1.0 - th["success_rel_drop"])
                        and suc[i] <= suc_peak - th["success_abs_drop"])
        if fmt_down and suc_down:
            falling_since = i if falling_since is None else falling_since
        else:
            falling_since = None
        if falling_since is None or i - falling_since + 1 < patience:
            continue
        first = max(0, falling_since - lead)
        signs = [j for j in range(first, i + 1) if up[j]]
        if not signs:
            continue
        began = signs[0]
        peak_low = max(low[j] for j in signs)
        return {
            "step": rows[began]["step"],
            "detected_at": rows[i]["step"],
            "reason": (f"{LOW_KEY} rose to {peak_low:.4f} (floor {floors[began]:.4f}) from step "
                       f"{rows[began]['step']}, then format validity fell {fmt_peak:.2f} -> "
                       f"{fmt[i]:.2f} and success {suc_peak:.2f} -> {suc[i]:.2f} "
                       "(paper Finding 2)"),
            "evidence": {
                LOW_KEY: {"floor": floors[began], "peak": peak_low, "threshold": low_threshold,
                          "up_steps": [rows[j]["step"] for j in signs]},
                FORMAT_KEY: {"peak": fmt_peak, "value": fmt[i]},
                SUCCESS_KEY: {"peak": suc_peak, "value": suc[i]},
                "falling_since": rows[falling_since]["step"],
                "window": window, "patience": patience, "lead": lead,
            },
        }
    return None


_DEGRADATION: dict[str, float] = {"z": 2.0, "abs_drop": 0.1, "patience": 2, "min_evals": 3}


def detect_degradation(rows: Sequence[Mapping[str, Any]], **thresholds: float) -> dict[str, Any] | None:
    """Judge a run's periodic evals: ``None``, or where its validation success degraded.

    Args:
        rows: ``metrics.jsonl`` rows; the rows with ``eval/success_rate`` (and
            ``eval/success_se``) are the evals.
        **thresholds: ``z`` (standard errors of the difference, default 2), ``abs_drop``
            (least drop, 0.1), ``patience`` (evals in a row, 2), ``min_evals`` (3).

    Returns:
        ``None``, or a verdict as :func:`detect_collapse`'s: ``step`` is the step after the
        best eval (a snapshot taken at the best eval's step is from before the fall),
        ``detected_at``, ``reason``, ``evidence`` and ``kind: "degradation"``.
    """
    unknown = sorted(set(thresholds) - set(_DEGRADATION))
    if unknown:
        raise ValueError(f"unknown threshold(s) {unknown}; known: {sorted(_DEGRADATION)}")
    th = {**_DEGRADATION, **thresholds}
    evals = [(r["step"], float(r[M.EVAL_SUCCESS]), float(r.get(M.EVAL_SUCCESS_SE, 0.0)))
             for r in rows if "step" in r and isinstance(r.get(M.EVAL_SUCCESS), (int, float))]
    if len(evals) < th["min_evals"]:
        return None
    best, down = evals[0], 0
    for i in range(1, len(evals)):
        best = max(evals[:i], key=lambda e: e[1])  # the earliest of equal peaks
        step, value, se = evals[i]
        margin = max(th["abs_drop"], th["z"] * (best[2] ** 2 + se ** 2) ** 0.5)
        down = down + 1 if best[1] - value > margin else 0
        if down >= th["patience"]:
            return {"step": best[0] + 1, "detected_at": step, "kind": "degradation",
                    "reason": (f"{M.EVAL_SUCCESS} fell from {best[1]:.3f} (step {best[0]}) to "
                               f"{value:.3f} for {down} evals in a row (more than "
                               f"{margin:.3f}: {th['z']:g} SE of the difference)"),
                    "evidence": {"best": {"step": best[0], "value": best[1], "se": best[2]},
                                 "value": value, "se": se, "margin": margin}}
    return None


class CollapseMonitor:
    """:func:`detect_collapse` online: feed one metrics row per step, get the verdict once.

    The trainer's hook: ``update(row)`` returns the verdict dict the first time the rule fires
    and ``None`` otherwise (also after it fired: one warning per run). ``fired`` keeps it.
    With ``degradation`` the validation rule (:func:`detect_degradation`) fires it too.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]] = (), degradation: bool = False,
                 **thresholds: float) -> None:
        self.thresholds = thresholds
        self.degradation = degradation
        self.reset(rows)

    def _judge(self) -> dict[str, Any] | None:
        verdict = detect_collapse(self.rows, **self.thresholds)
        if verdict is None and self.degradation:
            verdict = detect_degradation(self.rows)
        return verdict

    def reset(self, rows: Sequence[Mapping[str, Any]] = ()) -> None:
        """Judge from ``rows`` on (a rollback: the rows up to the step returned to)."""
        self.rows: list[dict[str, Any]] = [dict(r) for r in rows]
        self.fired: dict[str, Any] | None = self._judge()

    def update(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        self.rows.append(dict(row))
        if self.fired is not None:
            return None
        self.fired = self._judge()
        return self.fired
