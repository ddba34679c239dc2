"""The arena's override axes take the async and correction fields: a staleness/correction grid
plans one folder per variant with the fields set, and a bad value is refused before any run."""

import pytest

from arlgym.arena.grid import ArenaSpec, parse_override, plan_runs
from arlgym.arena.report import CURVES
from arlgym.errors import ConfigError
from arlgym.rl import metrics as M


def test_staleness_and_correction_axes(tmp_path):
    overrides = dict(parse_override(o) for o in (
        "sync=async_rollouts:false",
        "async2=async_rollouts:true,max_staleness:2,staleness_policy:drop",
        "async2tis=async_rollouts:true,max_staleness:2,rollout_correction:tis_token",
        "async2icepop=async_rollouts:true,max_staleness:2,rollout_correction:icepop"))
    spec = ArenaSpec(out=str(tmp_path), algos=["grpo"], seeds=[0, 1, 2], overrides=overrides)
    spec.validate()
    runs = {(r.label, r.seed): r.config for r in plan_runs(spec)}
    assert len(runs) == 12
    cfg = runs[("grpo__async2tis", 1)]
    assert cfg["async_rollouts"] is True and cfg["max_staleness"] == 2
    assert cfg["rollout_correction"] == "tis_token"
    assert runs[("grpo__async2", 0)]["staleness_policy"] == "drop"
    bad = ArenaSpec(out=str(tmp_path), algos=["grpo"], seeds=[0],
                    overrides=dict([parse_override("x=async_rollouts:true,staleness_policy:wait")]))
    with pytest.raises(ConfigError, match="staleness_policy"):
        bad.validate()


def test_the_report_plots_the_async_diagnostics():
    keys = {k for _title, ks in CURVES.values() for k in ks}
    assert {M.MISMATCH_KL, M.STALENESS_MEAN, M.TIME_WAIT, M.ASYNC_BUSY} <= keys
    assert M.undefined(keys) == []
