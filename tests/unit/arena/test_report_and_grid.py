"""The report's numbers on hand-made run folders, and the grid's plan (no training here; the
slow test tests/integration/test_arena.py runs a real grid)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from arlgym.arena.grid import ArenaSpec, parse_override, plan_runs, print_commands, run_status
from arlgym.arena.report import build_table, load_runs, write_report
from arlgym.errors import ConfigError

ENV = "arl/Sokoban-v0"


def make_run(root: Path, label: str, seed: int, success: float, *, best: float | None = None,
             panel: str = "p" * 16, rows: list[dict] | None = None) -> Path:
    folder = root / label / f"seed-{seed}"
    (folder / "eval").mkdir(parents=True)
    algo = label.split("__")[0]
    (folder / "config.json").write_text(json.dumps(
        {"config": {"algo": algo, "seed": seed, "env_id": ENV, "output_dir": str(folder)}}))
    rows = rows or [{"step": s, "env/success_rate": success, "env/format_valid_ratio": 1.0,
                     "is/out_low_neg_adv_frac": 0.01, "env/turns": 10.0, "tokens": 100.0}
                    for s in (1, 2, 3)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, value in (("last", success), ("best", best)):
        if value is not None:
            (folder / "eval" / f"test-{name}.summary.json").write_text(json.dumps(
                {"overall": {"success_rate": value, "mean_score": value}, "panel_hash": panel}))
    return folder


def test_table_mean_se_change_and_order(tmp_path):
    for seed, s in enumerate((0.4, 0.5, 0.6)):
        make_run(tmp_path, "grpo", seed, s)
    for seed, s in enumerate((0.6, 0.7, 0.8)):
        make_run(tmp_path, "sampo", seed, s)
    for seed, s in enumerate((0.5, 0.5)):
        make_run(tmp_path, "cispo", seed, s)
    table = build_table(load_runs([tmp_path]))
    assert [r["method"] for r in table["rows"]] == ["grpo", "cispo", "sampo"]
    assert [r["dimension"] for r in table["rows"]] == ["Baseline", "IS clipping", "Ours"]
    grpo, cispo, sampo = (r["envs"][ENV] for r in table["rows"])
    assert grpo["success_mean"] == pytest.approx(0.5)
    assert grpo["success_se"] == pytest.approx(0.1 / math.sqrt(3))  # sd 0.1 over 3 seeds
    assert sampo["vs_grpo_pct"] == pytest.approx(40.0)
    assert cispo["success_se"] == 0.0 and cispo["vs_grpo_pct"] == pytest.approx(0.0)
    assert grpo["env_steps"] == 30.0 and grpo["tokens"] == 300.0


def test_checkpoint_choice(tmp_path):
    make_run(tmp_path, "grpo", 0, 0.3, best=0.6)
    make_run(tmp_path, "grpo", 1, 0.5)  # no best/: auto falls back to last
    runs = load_runs([tmp_path])
    auto = build_table(runs, "auto")["rows"][0]["envs"][ENV]
    assert auto["success_mean"] == pytest.approx(0.55) and auto["checkpoint"] == ["best", "last"]
    last = build_table(runs, "last")["rows"][0]["envs"][ENV]
    assert last["success_mean"] == pytest.approx(0.4)
    best = build_table(runs, "best")["rows"][0]["envs"][ENV]
    assert best["n_eval"] == 1 and best["success_mean"] == pytest.approx(0.6)


def test_refuses_runs_on_different_panels(tmp_path):
    make_run(tmp_path, "grpo", 0, 0.3, panel="a" * 16)
    make_run(tmp_path, "sampo", 0, 0.5, panel="b" * 16)
    with pytest.raises(ConfigError, match="different panels"):
        build_table(load_runs([tmp_path]))


def test_report_files_and_collapse_verdict(tmp_path):
    make_run(tmp_path, "grpo", 0, 0.5)
    collapse_rows = [{"step": s, "is/out_low_neg_adv_frac": 0.01 if s < 6 else 0.1 * (s - 4),
                      "env/format_valid_ratio": 0.95 if s < 6 else max(0.0, 0.95 - 0.2 * (s - 5)),
                      "env/success_rate": 0.5 if s < 6 else max(0.0, 0.5 - 0.15 * (s - 5)),
                      "env/turns": 10.0, "tokens": 100.0} for s in range(1, 15)]
    make_run(tmp_path, "cispo", 0, 0.1, rows=collapse_rows)
    folder = write_report([tmp_path])
    report = json.loads((folder / "report.json").read_text())
    verdicts = {r["run"]: r["verdict"] for r in report["runs"]}
    assert verdicts == {"cispo/seed-0": "collapsed", "grpo/seed-0": "healthy"}
    table = (folder / "table.md").read_text()
    assert "1/1 (step 6)" in table and "-80.0%" in table
    html = (folder / "index.html").read_text()
    assert "collapsed at step 6" in html and "curves/success.png" in html
    assert (folder / "curves" / "success.png").exists()


def test_load_runs_errors(tmp_path):
    with pytest.raises(ConfigError, match="not a folder"):
        load_runs([tmp_path / "nope"])
    with pytest.raises(ConfigError, match="no finished runs"):
        load_runs([tmp_path])


def test_parse_override():
    assert parse_override("stale4=mini_batch_size:16,lr:1e-4") == ("stale4", {"mini_batch_size": 16, "lr": 1e-4})
    for bad in ("nofields", "=lr:1", "a b=lr:1", "x=lr"):
        with pytest.raises(ConfigError, match="override"):
            parse_override(bad)


def test_plan_layout_and_validation(tmp_path):
    spec = ArenaSpec(out=str(tmp_path), algos=["grpo", "sampo"], seeds=[0, 1],
                     base={"max_steps": 2}, overrides={"fresh": {}, "stale": {"mini_batch_size": 4}})
    runs = plan_runs(spec)
    assert len(runs) == 8
    assert {r.folder.relative_to(tmp_path).as_posix() for r in runs} >= {
        "grpo__fresh/seed-0", "sampo__stale/seed-1"}
    stale = next(r for r in runs if r.label == "sampo__stale" and r.seed == 1)
    assert stale.config["mini_batch_size"] == 4 and stale.config["algo"] == "sampo"
    assert run_status(stale) == "new"
    for bad in (ArenaSpec(out="x", algos=["nope"], seeds=[0]),
                ArenaSpec(out="x", algos=[], seeds=[0]),
                ArenaSpec(out="x", algos=["grpo"], seeds=[]),
                ArenaSpec(out="x", algos=["grpo", "grpo"], seeds=[0]),
                ArenaSpec(out="x", algos=["grpo"], seeds=[1, 1]),
                ArenaSpec(out="x", algos=["grpo"], seeds=[0], base={"max_stepz": 1})):
        with pytest.raises(ConfigError):
            plan_runs(bad)


def test_print_commands_write_configs(tmp_path):
    import yaml

    spec = ArenaSpec(out=str(tmp_path), algos=["grpo"], seeds=[3], base={"max_steps": 2})
    (cmd,) = print_commands(spec)
    assert cmd.startswith("accelerate launch -m arlgym.rl --config ")
    cfg = yaml.safe_load((tmp_path / "grpo" / "seed-3" / "train.yaml").read_text())
    assert cfg["seed"] == 3 and cfg["resume"] is False and cfg["max_steps"] == 2
    # a complete checkpoint makes the run resumable
    ck = tmp_path / "grpo" / "seed-3" / "checkpoints" / "step-000001"
    ck.mkdir(parents=True)
    (ck / "trainer_state.json").write_text('{"step": 1}')
    print_commands(spec)
    assert yaml.safe_load((tmp_path / "grpo" / "seed-3" / "train.yaml").read_text())["resume"] is True


def test_unfinished_runs_are_left_out(tmp_path):
    make_run(tmp_path, "grpo", 0, 0.5)
    running = make_run(tmp_path, "sampo", 0, 0.5)
    cfg = json.loads((running / "config.json").read_text())
    cfg["config"]["test_episodes"] = 100
    (running / "config.json").write_text(json.dumps(cfg))
    for f in (running / "eval").iterdir():
        f.unlink()
    skipped: list[str] = []
    runs = load_runs([tmp_path], skipped)
    assert [r.label for r in runs] == ["grpo"] and skipped == [str(running)]
    report = json.loads((write_report([tmp_path]) / "report.json").read_text())
    assert report["skipped_unfinished"] == [str(running)]


def test_one_curve_per_listed_metric(tmp_path):
    """Every metric of the issue's list gets its PNG when the runs log it (masked fraction only
    comes from *_sm presets, so the slow grid of grpo/cispo/sampo cannot show it)."""
    from arlgym.arena.report import CURVES

    keys = {k for _title, ks in CURVES.values() for k in ks}
    for seed in (0, 1):
        rows = [{"step": s, "env/turns": 10.0, "tokens": 100.0,
                 **{k: 0.1 * s + 0.01 * seed for k in keys}} for s in (1, 2, 3)]
        make_run(tmp_path, "cispo_sm", seed, 0.5, rows=rows)
    folder = write_report([tmp_path])
    assert {"success", "format_valid", "kl_ref", "kl_old_new", "entropy", "grad_norm", "clip_low",
            "clip_high", "is_low_neg", "is_high_pos", "response_length", "masked_frac"} <= set(CURVES)
    for name in CURVES:
        assert (folder / "curves" / f"{name}.png").stat().st_size > 1000, name
    html = (folder / "index.html").read_text()
    assert all(f"curves/{name}.png" in html for name in CURVES)


def test_both_decodings_and_rollbacks_in_the_table(tmp_path):
    """A run's own (sampled) test eval and its greedy companion both reach the table, per
    checkpoint; a run without a companion shows '–'; rollbacks from collapse.json are counted."""
    for seed, (sampled, greedy) in enumerate(((0.4, 0.7), (0.6, 0.5))):
        folder = make_run(tmp_path, "grpo", seed, sampled)
        cfg = json.loads((folder / "config.json").read_text())
        cfg["config"]["eval_temperature"] = 0.6  # the own eval is the sampled one
        (folder / "config.json").write_text(json.dumps(cfg))
        (folder / "eval" / "test-last.greedy.summary.json").write_text(json.dumps(
            {"overall": {"success_rate": greedy}, "panel_hash": "p" * 16, "decoding": "greedy"}))
    sampo = make_run(tmp_path, "sampo", 0, 0.5)  # greedy own eval, no sampled companion
    (sampo / "collapse.json").write_text(json.dumps(
        {"rollbacks": [{"alarm_at": 9, "to_step": 6, "remedy": "seq_mask"}]}))
    runs = load_runs([tmp_path])
    table = build_table(runs)
    grpo, sampo_row = (r["envs"][ENV] for r in table["rows"])
    assert grpo["decodings"]["sampled"]["mean"] == pytest.approx(0.5)
    assert grpo["decodings"]["greedy"]["mean"] == pytest.approx(0.6)
    assert grpo["decodings"]["greedy"]["se"] == pytest.approx(0.1)
    assert sampo_row["decodings"]["greedy"]["mean"] == pytest.approx(0.5)
    assert sampo_row["decodings"]["sampled"]["n"] == 0
    assert sampo_row["rollbacks"] == [{"seed": 0, "alarm_at": 9, "to_step": 6, "remedy": "seq_mask"}]
    folder = write_report([tmp_path])
    lines = (folder / "table.md").read_text().splitlines()
    assert "Sokoban-v0 greedy %" in lines[0] and "Sokoban-v0 sampled %" in lines[0]
    assert "| grpo | 60.0 ± 10.0 | 50.0 ± 10.0 |" in lines[2]
    assert "| sampo | 50.0 | – |" in lines[3] and "1 (s0:9→6 seq_mask)" in lines[3]
    assert "rolled back at step 9 to step 6 (seq_mask)" in (folder / "index.html").read_text()
