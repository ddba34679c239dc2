"""detect_collapse on hand-made logs: a collapse at a known step, healthy-but-noisy runs, runs
too short to judge; and the online monitor agrees with the offline verdict."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from arlgym.arena import CollapseMonitor, detect_collapse
from arlgym.arena.alarm import FORMAT_KEY, LOW_KEY, SUCCESS_KEY

DATA = Path(__file__).parent / "data"


def _rows(low, fmt, suc):
    return [{"step": i + 1, LOW_KEY: a, FORMAT_KEY: b, SUCCESS_KEY: c}
            for i, (a, b, c) in enumerate(zip(low, fmt, suc, strict=True))]


def collapsing_log(begin: int = 11, n: int = 24, seed: int = 0):
    """Healthy noise for begin-1 steps, then the Finding-2 pattern from step ``begin``."""
    rng = random.Random(seed)
    low, fmt, suc = [], [], []
    for step in range(1, n + 1):
        k = step - begin
        if k < 0:
            low.append(0.01 + rng.uniform(-0.003, 0.003))
            fmt.append(0.97 + rng.uniform(-0.02, 0.02))
            suc.append(0.55 + rng.uniform(-0.08, 0.08))
        else:  # the low-ratio fraction jumps first, format and success follow
            low.append(0.05 + 0.02 * k)
            fmt.append(max(0.1, 0.95 - 0.12 * k))
            suc.append(max(0.0, 0.55 - 0.09 * k))
    return _rows(low, fmt, suc)


def test_collapse_found_at_the_step_it_began():
    verdict = detect_collapse(collapsing_log(begin=11))
    assert verdict is not None
    # the smoothed IS signal crosses its threshold within the first window of the collapse
    assert 11 <= verdict["step"] <= 12
    assert verdict["detected_at"] > verdict["step"]
    ev = verdict["evidence"]
    assert ev[LOW_KEY]["peak"] > 2 * ev[LOW_KEY]["floor"]
    assert ev[FORMAT_KEY]["value"] < ev[FORMAT_KEY]["peak"] - 0.15
    assert ev[SUCCESS_KEY]["value"] < ev[SUCCESS_KEY]["peak"]
    assert "Finding 2" in verdict["reason"]


@pytest.mark.parametrize("seed", range(20))
def test_healthy_noisy_runs_do_not_fire(seed):
    rng = random.Random(seed)
    n = 60
    # big step-to-step noise in all three signals, slow improvement, occasional spikes
    low = [max(0.0, 0.02 + rng.gauss(0, 0.01) + (0.05 if rng.random() < 0.05 else 0)) for _ in range(n)]
    fmt = [min(1.0, 0.9 + rng.gauss(0, 0.05)) for _ in range(n)]
    suc = [min(1.0, max(0.0, 0.3 + 0.005 * i + rng.gauss(0, 0.12))) for i in range(n)]
    assert detect_collapse(_rows(low, fmt, suc)) is None


def test_one_signal_alone_is_not_a_collapse():
    n = 30
    rising_low = [0.01 * (1 + i) for i in range(n)]
    flat = [0.95] * n
    assert detect_collapse(_rows(rising_low, flat, [0.6] * n)) is None  # IS drifts, agent fine
    falling = [max(0.0, 0.95 - 0.05 * i) for i in range(n)]
    assert detect_collapse(_rows([0.01] * n, falling, falling)) is None  # no IS signature


def test_short_runs_are_not_judged():
    assert detect_collapse(collapsing_log(begin=2, n=5)) is None
    assert detect_collapse([]) is None
    assert detect_collapse([{"step": 1}]) is None


def test_missing_signals_are_not_judged():
    rows = [{"step": i, SUCCESS_KEY: 0.0} for i in range(1, 30)]
    assert detect_collapse(rows) is None


def test_thresholds_are_keywords_and_checked():
    log = collapsing_log(begin=11)
    assert detect_collapse(log, format_drop=0.99) is None  # demand an impossible drop
    with pytest.raises(ValueError, match="unknown threshold"):
        detect_collapse(log, formatdrop=0.2)


def test_online_monitor_fires_once_at_the_offline_step():
    log = collapsing_log(begin=9, n=30, seed=3)
    offline = detect_collapse(log)
    mon = CollapseMonitor()
    fired = [i for i, row in enumerate(log) if mon.update(row) is not None]
    assert len(fired) == 1
    assert log[fired[0]]["step"] == offline["detected_at"]
    assert mon.fired["step"] == offline["step"]


@pytest.mark.parametrize("name, collapsed", [("collapsed_run.jsonl", True), ("healthy_run.jsonl", False)])
def test_real_cpu_runs(name, collapsed):
    """Two real logs of the CPU arena (experiments/arena_cpu.py, tiny model on Sokoban):
    see tests/unit/arena/data/README.md for how each was made."""
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    verdict = detect_collapse(rows)
    assert (verdict is not None) == collapsed


def test_a_one_step_crash_of_an_async_run_is_not_a_collapse_and_mismatch_kl_does_not_lead_it():
    """A real async run (tests/unit/arena/data/README.md): a one-step format crash with a
    mismatch-KL spike in that same step, not before it; the alarm (3 steps of fall) is silent."""
    rows = [json.loads(line) for line in (DATA / "async_transient_run.jsonl").read_text().splitlines()]
    assert detect_collapse(rows) is None
    fmt = {r["step"]: r["env/format_valid_ratio"] for r in rows}
    kl = {r["step"]: r["mismatch/kl"] for r in rows if "mismatch/kl" in r}
    crash = min(s for s, v in fmt.items() if v < 0.5)
    spike = min(s for s, v in kl.items() if v > 2 * max(kl[s2] for s2 in kl if s2 <= 3) + 0.01)
    assert crash == spike == 5


def test_a_format_crash_without_the_is_signature_fires():
    """A real run broken in one update (tests/unit/arena/data/README.md): no IS signal at all,
    so only the crash rule can see it; it dates the collapse to the update before the crash."""
    rows = [json.loads(line) for line in (DATA / "crash_run.jsonl").read_text().splitlines()]
    assert all(r[LOW_KEY] == 0.0 for r in rows)
    verdict = detect_collapse(rows)
    assert verdict is not None and verdict["kind"] == "crash"
    assert verdict["step"] == 1 and verdict["detected_at"] == 4  # online: at step 6 (min_steps)
    assert detect_collapse(rows, crash_min_peak=2.0) is None  # the crash rule off: the old miss


def test_a_transient_or_slow_fall_is_not_a_crash():
    n = 20
    flat_low = [0.01] * n
    one_step = [0.9] * n
    one_step[8] = 0.0  # one broken batch, then back
    assert detect_collapse(_rows(flat_low, one_step, [0.5] * n)) is None
    two_steps = [0.9] * n
    two_steps[8] = two_steps[9] = 0.05  # shorter than patience (3)
    assert detect_collapse(_rows(flat_low, two_steps, [0.5] * n)) is None
    stays = [0.9] * 8 + [0.05] * (n - 8)
    verdict = detect_collapse(_rows(flat_low, stays, [0.5] * 8 + [0.0] * (n - 8)))
    assert verdict["kind"] == "crash" and verdict["step"] == 8 and verdict["detected_at"] == 11
    low_start = [0.3] * 8 + [0.0] * (n - 8)  # never had the format: nothing to crash from
    assert detect_collapse(_rows(flat_low, low_start, [0.0] * n)) is None


def test_one_broken_batch_inside_the_smoothing_window_is_not_a_collapse():
    """A real run (tests/unit/arena/data/README.md): the IS signal is up and one batch breaks,
    which keeps the 3-step trailing format mean down for 3 steps; the run itself is fine."""
    rows = [json.loads(line) for line in (DATA / "transient_is_run.jsonl").read_text().splitlines()]
    assert min(r[FORMAT_KEY] for r in rows) < 0.3 and rows[-1][FORMAT_KEY] > 0.85
    assert detect_collapse(rows) is None
