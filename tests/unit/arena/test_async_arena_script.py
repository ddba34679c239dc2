"""experiments/async_arena.py: the mismatch-KL rise rule and the per-variant table, on
hand-written metric rows."""

import importlib.util
from pathlib import Path

from arlgym.arena.report import RunResult

_PATH = Path(__file__).resolve().parents[3] / "experiments" / "async_arena.py"
_spec = importlib.util.spec_from_file_location("async_arena", _PATH)
aa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(aa)


def _rows(kl):
    return [{"step": i + 1, **({"mismatch/kl": v} if v is not None else {})}
            for i, v in enumerate(kl)]


def test_first_exceed_needs_twice_the_early_level_and_the_absolute_margin():
    # early level = the largest value of steps 1..3 (step 1 not logged), 0.02; 0.039 is below
    # twice that, 0.045 is above it and more than 0.01 over the level: the first exceed is step 5
    got = aa.first_exceed(_rows([None, 0.01, 0.02, 0.039, 0.045]), early=3, kl_abs=0.01)
    assert got == {"early_level": 0.02, "first_exceed_step": 5, "logged_steps": 4}
    # a near-zero early level: 0.004 doubles it many times but is not 0.01 above it
    got = aa.first_exceed(_rows([0.0, 0.0001, 0.004, 0.0102]), early=2, kl_abs=0.01)
    assert got["first_exceed_step"] == 4
    assert aa.first_exceed(_rows([0.1, 0.1, 0.15]), 2, 0.01)["first_exceed_step"] is None
    assert aa.first_exceed(_rows([None, None, None, 0.3]), 3, 0.01)["early_level"] is None


def test_idle_fractions_and_table_for_a_sync_and_an_async_run(tmp_path):
    sync_rows = [{"step": s, "time/step_s": 10.0, "time/rollout_s": 4.0, "env/success_rate": 0.1 * s}
                 for s in (1, 2, 3, 4)]
    async_rows = [{"step": s, "time/step_s": 8.0, "time/learner_wait_s": 2.0 if s == 1 else 0.0,
                   "async/rollout_busy_frac": 0.75, "staleness/mean": min(s - 1, 2),
                   "mismatch/kl": 0.01 * s, "env/success_rate": 0.2} for s in (1, 2, 3, 4)]
    ev = {"last": {"overall": {"success_rate": 0.3}}}
    runs = [RunResult(tmp_path, "grpo__sync", "grpo", 0, {"async_rollouts": False}, sync_rows, ev),
            RunResult(tmp_path, "grpo__async2", "grpo", 0, {"async_rollouts": True}, async_rows, ev)]
    per_run = [aa.run_figures(r, early=3, kl_abs=0.01) for r in runs]
    sync, asy = per_run
    assert sync["learner_idle"] == 0.4 and sync["rollout_idle"] == 0.6
    assert asy["learner_idle"] == 2.0 / 32 and asy["rollout_idle"] == 0.25
    assert asy["staleness"] == 1.25 and abs(asy["mismatch_kl"] - 0.025) < 1e-12
    assert abs(sync["rollout_last3"] - 0.3) < 1e-12 and sync["test_best"] != sync["test_best"]
    table, leads, summary = aa.build_tables(per_run)
    assert table.splitlines()[2].startswith("| sync | 1 | 30.0 | — | 30.0 | — | 0.00 | 0.40 |")
    assert summary["async2"]["staleness"]["mean"] == 1.25 and summary["async2"]["collapsed"] == []
    assert "| grpo__async2/seed-0 | healthy | 0.0300 | never |" in leads
