"""detect_degradation on hand-made eval rows: a validation success that falls well below its
peak (in standard errors of the difference) for ``patience`` evals fires; noise within the
standard errors, a single bad eval, or too few evals do not; the monitor runs it when asked."""

import pytest

from arlgym.rl.alarm import CollapseMonitor, detect_degradation


def _rows(evals, se=0.03, every=2):
    """Rows of a run with a periodic eval every ``every`` steps (healthy training signals)."""
    rows = []
    for i, value in enumerate(evals):
        for j in range(every):
            step = i * every + j + 1
            row = {"step": step, "env/format_valid_ratio": 0.9, "env/success_rate": 0.5,
                   "is/out_low_neg_adv_frac": 0.001}
            if j == every - 1:
                row.update({"eval/success_rate": value, "eval/success_se": se})
            rows.append(row)
    return rows


def test_a_sustained_fall_fires_at_the_second_low_eval_and_points_after_the_peak():
    verdict = detect_degradation(_rows([0.5, 0.7, 0.72, 0.45, 0.44, 0.43]))
    assert verdict is not None and verdict["kind"] == "degradation"
    assert verdict["evidence"]["best"] == {"step": 6, "value": 0.72, "se": 0.03}
    assert (verdict["step"], verdict["detected_at"]) == (7, 10)  # the evals at steps 8 and 10


@pytest.mark.parametrize("evals", [
    [0.5, 0.55, 0.5, 0.52, 0.49, 0.53],  # noise within 2 SE of the difference (0.085)
    [0.5, 0.7, 0.4, 0.7, 0.4, 0.7],  # single bad evals, never two in a row
    [0.7, 0.3],  # too few evals to judge
])
def test_noise_and_single_dips_do_not_fire(evals):
    assert detect_degradation(_rows(evals)) is None


def test_wide_standard_errors_need_a_larger_fall():
    falling = [0.6, 0.6, 0.45, 0.45]
    assert detect_degradation(_rows(falling, se=0.03)) is not None
    assert detect_degradation(_rows(falling, se=0.1)) is None  # 2 SE of the difference: 0.28


def test_unknown_threshold_is_refused():
    with pytest.raises(ValueError, match="unknown threshold"):
        detect_degradation([], zz=1)


def test_the_monitor_judges_degradation_only_when_asked_and_resets():
    rows = _rows([0.5, 0.7, 0.72, 0.45, 0.44, 0.43])
    plain, both = CollapseMonitor(), CollapseMonitor(degradation=True)
    fired = [both.update(r) for r in rows]
    assert all(plain.update(r) is None for r in rows)
    assert [v["detected_at"] for v in fired if v] == [10]
    both.reset(rows[:6])
    assert both.fired is None and len(both.rows) == 6
