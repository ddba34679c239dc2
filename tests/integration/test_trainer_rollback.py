"""``on_collapse``: warn, stop and rollback with the tiny model.

The alarm's verdict is forced (the seam: ``arlgym.rl.alarm.detect_collapse``), so the trainer's
side of a rollback — restore the snapshot from before the collapse, apply the remedy, log it,
train on to the budget — runs for real. The replayed step is the proof that the restore is
exact: its rollout (same weights, task stream and seeds) and its loss and gradient (taken before
the optimizer step) equal the abandoned step's bit for bit; only the learning rate differs,
which the remedy halved.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import arlgym.rl.alarm as alarm
from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.cli import parse_train_config
from arlgym.rl.trainer import Trainer

TINY = ["--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3",
        "--log_with", "none", "--algo", "grpo", "--torch_threads", "1",
        "--weight_decay", "1.0"]  # decay: every step changes the weights of the random model
TIMING = ("time/",)


def _cfg(path, *extra):
    return parse_train_config([*TINY, "--output_dir", str(path), *extra])


def _rows(path, name="metrics.jsonl"):
    return [json.loads(x) for x in (path / name).read_text().splitlines() if x]


def _fire_once(at: int, began: int):
    """A verdict the first time a row of step ``at`` is judged, never again."""
    fired: list[int] = []

    def fake(rows, **_):
        if rows and rows[-1].get("step") == at and not fired:
            fired.append(at)
            return {"step": began, "detected_at": at, "reason": "forced", "evidence": {}}
        return None
    return fake


def _fire_from(n: int):
    """A verdict whenever at least ``n`` rows are judged (the collapse began at the last)."""
    def fake(rows, **_):
        if len(rows) >= n:
            return {"step": rows[-1]["step"], "detected_at": rows[-1]["step"],
                    "reason": "forced", "evidence": {}}
        return None
    return fake


def _same(row_a, row_b, but=()):
    skip = lambda k: k.startswith(TIMING) or k == M.TOKENS_PER_S or k in but  # noqa: E731
    return ({k: v for k, v in row_a.items() if not skip(k)}
            == {k: v for k, v in row_b.items() if not skip(k)})


#: where the states to go back to live: in-memory snapshots, or the run's checkpoints on disk
STORAGE = {"memory": [], "checkpoints": ["--rollback_from", "checkpoints", "--save_steps", "1"]}


@pytest.mark.parametrize("storage", STORAGE)
def test_rollback_restores_the_snapshot_before_the_collapse_and_trains_to_the_budget(
        tmp_path, monkeypatch, storage):
    monkeypatch.setattr(alarm, "detect_collapse", _fire_once(at=4, began=3))
    cfg = _cfg(tmp_path, "--max_steps", "6", "--on_collapse", "rollback",
               "--snapshot_steps", "2", "--rollback_remedy", "halve_lr", *STORAGE[storage])
    with pytest.warns(UserWarning, match="rollback 1/2: back to step 2"):
        history = Trainer(cfg).train()
    # steps 3 and 4 were played, abandoned at the alarm (step 4), and played again from step 2
    assert [h[M.STEP] for h in history] == [1, 2, 3, 4, 3, 4, 5, 6]
    rows, gone = _rows(tmp_path), _rows(tmp_path, "rolled_back.jsonl")
    assert [r[M.STEP] for r in rows] == [1, 2, 3, 4, 5, 6]  # one row per step
    assert [r[M.STEP] for r in gone] == [3, 4]
    assert [r[M.ALARM_ROLLBACKS] for r in rows] == [0, 0, 1, 1, 1, 1]
    assert gone[-1][M.ALARM_COLLAPSE] == 1.0 and rows[-1][M.ALARM_COLLAPSE] == 0.0
    # the replayed step 3 is the abandoned one but for the halved learning rate
    assert rows[2][M.LEARNING_RATE] == pytest.approx(gone[0][M.LEARNING_RATE] / 2)
    assert _same(rows[2], gone[0], but=(M.LEARNING_RATE, M.ALARM_ROLLBACKS))
    assert rows[2][M.PG_LOSS] == gone[0][M.PG_LOSS] and rows[2][M.GRAD_NORM] == gone[0][M.GRAD_NORM]
    record = json.loads((tmp_path / "collapse.json").read_text())
    assert record["rollbacks"] == [{"alarm_at": 4, "to_step": 2, "remedy": "halve_lr",
                                    "did": "learning rate halved to 0.0005"}]
    assert (tmp_path / "final" / "model.safetensors").exists()


def test_rollbacks_are_bounded_and_the_last_alarm_stops_on_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(alarm, "detect_collapse", _fire_from(3))
    snaps = {}
    real = Trainer.train_step

    def recording_step(self):
        out = real(self)
        model = self.accelerator.unwrap_model(self.model)
        snaps[self.step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return out

    monkeypatch.setattr(Trainer, "train_step", recording_step)
    cfg = _cfg(tmp_path, "--max_steps", "8", "--on_collapse", "rollback", "--snapshot_steps", "1",
               "--max_rollbacks", "1", "--rollback_remedy", "raise_kl")
    with pytest.warns(UserWarning, match="rollback 1/1"):
        Trainer(cfg).train()
    record = json.loads((tmp_path / "collapse.json").read_text())
    assert [(r["alarm_at"], r["to_step"], r["remedy"]) for r in record["rollbacks"]] == [
        (3, 2, "raise_kl"), (3, 2, None)]
    assert record["rollbacks"][-1]["stopped"]
    assert [r[M.STEP] for r in _rows(tmp_path)] == [1, 2]
    final = load_file(tmp_path / "final" / "model.safetensors")
    assert all(torch.equal(final[k], snaps[2][k]) for k in final)  # the snapshot of step 2


@pytest.mark.parametrize("storage", STORAGE)
def test_a_healthy_run_with_rollback_equals_the_warn_run(tmp_path, storage):
    warn = Trainer(_cfg(tmp_path / "warn", "--max_steps", "4")).train()
    roll = Trainer(_cfg(tmp_path / "roll", "--max_steps", "4", "--on_collapse", "rollback",
                        "--snapshot_steps", "1", *STORAGE[storage])).train()
    assert all(r[M.ALARM_ROLLBACKS] == 0 for r in roll)
    assert all(_same(a, b, but=(M.ALARM_ROLLBACKS,)) for a, b in zip(warn, roll, strict=True))
    wa = load_file(tmp_path / "warn" / "final" / "model.safetensors")
    wb = load_file(tmp_path / "roll" / "final" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_rollback_from_checkpoints_settings(tmp_path):
    cfg = _cfg(tmp_path, "--on_collapse", "rollback", "--rollback_from", "checkpoints")
    assert cfg.checkpoints_kept == 8  # auto: enough to reach back before a collapse
    with pytest.raises(ConfigError, match="save_steps 0 writes none"):
        _cfg(tmp_path, "--on_collapse", "rollback", "--rollback_from", "checkpoints", "--save_steps", "0")
    with pytest.raises(ConfigError, match="save_total_limit 4 keeps too few"):
        _cfg(tmp_path, "--on_collapse", "rollback", "--rollback_from", "checkpoints",
             "--save_total_limit", "4")
    with pytest.raises(ConfigError, match="rollback_from='disk' is unknown"):
        _cfg(tmp_path, "--on_collapse", "rollback", "--rollback_from", "disk")


def test_on_collapse_settings(tmp_path):
    assert _cfg(tmp_path, "--stop_on_collapse", "true").on_collapse == "stop"  # the old name
    with pytest.raises(ConfigError, match="contradict"):
        _cfg(tmp_path, "--stop_on_collapse", "true", "--on_collapse", "rollback")
    with pytest.raises(ConfigError, match="on_collapse='undo'"):
        _cfg(tmp_path, "--on_collapse", "undo")
    with pytest.raises(ConfigError, match="rollback_remedy='pray'"):
        _cfg(tmp_path, "--on_collapse", "rollback", "--rollback_remedy", "pray")
    with pytest.raises(ConfigError, match="async_rollouts"):
        _cfg(tmp_path, "--on_collapse", "rollback", "--async_rollouts", "true")
    with pytest.raises(ConfigError, match="collapse_alarm"):
        _cfg(tmp_path, "--on_collapse", "stop", "--collapse_alarm", "false")
    with pytest.raises(ConfigError, match="eval_split val"):
        _cfg(tmp_path, "--degradation_alarm", "true", "--eval_steps", "2")


def _killed(monkeypatch, cfg, save_then_die, real_save) -> None:
    """Train ``cfg`` until ``save_then_die`` raises ("killed" after a checkpoint)."""
    monkeypatch.setattr(Trainer, "save_checkpoint", save_then_die)
    trainer = Trainer(cfg)
    with pytest.raises(RuntimeError, match="killed"):
        trainer.train()
    trainer.close()
    monkeypatch.setattr(Trainer, "save_checkpoint", real_save)


def _assert_same_run(a, b) -> None:
    """The resumed run ``b`` logged the straight run ``a``'s rows and ends on its weights."""
    ra, rb = _rows(a), _rows(b)
    assert [r[M.STEP] for r in rb] == [1, 2, 3, 4, 5, 6]
    assert all(_same(x, y) for x, y in zip(ra, rb, strict=True))
    wa = load_file(a / "final" / "model.safetensors")
    wb = load_file(b / "final" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_run_killed_after_a_rollback_resumes_into_the_same_run(tmp_path, monkeypatch):
    """The remedy (here the sequence mask, which no optimizer state carries) and the rollback
    count come back from the checkpoint; the abandoned branch's checkpoints are gone."""
    a, b = tmp_path / "straight", tmp_path / "resumed"
    flags = ["--on_collapse", "rollback", "--snapshot_steps", "2", "--rollback_remedy",
             "seq_mask", "--save_steps", "1", "--save_total_limit", "0"]  # every checkpoint kept
    monkeypatch.setattr(alarm, "detect_collapse", _fire_once(at=4, began=3))
    Trainer(_cfg(a, "--max_steps", "6", *flags)).train()
    fire = _fire_once(at=4, began=3)  # one rule for both processes of the resumed run: it
    monkeypatch.setattr(alarm, "detect_collapse", fire)  # judges the replayed step 4 healthy
    saved, real_save = [], Trainer.save_checkpoint

    def save_then_die(self):  # killed right after the replayed step 3's checkpoint
        path = real_save(self)
        saved.append(self.step)
        if saved.count(3) == 2:
            raise RuntimeError("killed")
        return path

    _killed(monkeypatch, _cfg(b, "--max_steps", "6", *flags), save_then_die, real_save)
    assert sorted(p.name for p in (b / "checkpoints").iterdir()) == [
        "step-000001", "step-000002", "step-000003"]
    assert json.loads((b / "checkpoints" / "step-000003" / "rollback.json").read_text()) == {
        "rollbacks": 1, "applied": ["seq_mask"]}
    Trainer(_cfg(b, "--max_steps", "6", "--resume", "true", *flags)).train()
    _assert_same_run(a, b)


def test_a_degrading_validation_eval_rolls_back_to_the_best_evals_policy(tmp_path, monkeypatch):
    """degradation_alarm: the format is intact (nothing for the collapse rule), the val eval
    falls from its best (scripted) for two evals in a row; the run returns to the step of the
    best eval and trains on."""
    scores = iter([0.5, 0.8, 0.3, 0.3] + [0.8] * 10)

    def scripted_eval(self):
        assert self.cfg.eval_split == "val"
        return {M.EVAL_SUCCESS: next(scores), M.EVAL_SUCCESS_SE: 0.0,
                "eval/format_valid_ratio": 1.0}

    monkeypatch.setattr(Trainer, "evaluate", scripted_eval)
    cfg = _cfg(tmp_path, "--max_steps", "6", "--on_collapse", "rollback", "--eval_steps", "1",
               "--eval_split", "val", "--degradation_alarm", "true", "--snapshot_steps", "4")
    with pytest.warns(UserWarning, match="rollback 1/2: back to step 2"):
        Trainer(cfg).train()
    record = json.loads((tmp_path / "collapse.json").read_text())
    assert record["kind"] == "degradation" and record["detected_at"] == 4
    assert [(r["alarm_at"], r["to_step"]) for r in record["rollbacks"]] == [(4, 2)]
    rows = _rows(tmp_path)
    assert [r[M.STEP] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r[M.EVAL_SUCCESS] for r in rows] == [0.5, 0.8, 0.8, 0.8, 0.8, 0.8]


def test_a_real_one_update_crash_rolls_back_unforced(tmp_path):
    """No forced verdict: CISPO at lr 3e-3 from the behaviour-cloned start breaks every
    response in its first update with no IS signature (tests/unit/arena/data/crash_run.jsonl is
    this run's log). The format-crash rule fires, the run goes back to the snapshot from before
    the breaking update (step 0) with the remedy, and trains on to its budget."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_trainer_pinned import _flags, clone_tiny

    model = clone_tiny(tmp_path / "cloned")
    # on disk: the state before the first update is the step-0 checkpoint the rollback writes
    flags = _flags(model, tmp_path / "run", "--algo", "cispo", "--lr", "3e-3", "--max_steps", "8",
                   "--save_steps", "1", "--on_collapse", "rollback", "--rollback_remedy", "halve_lr",
                   "--max_rollbacks", "3", "--rollback_from", "checkpoints")
    history = Trainer(parse_train_config(flags)).train()
    record = json.loads((tmp_path / "run" / "collapse.json").read_text())
    first = record["rollbacks"][0]
    assert first["to_step"] == 0 and first["remedy"] == "halve_lr" and first["alarm_at"] == 6
    assert history[-1][M.ALARM_ROLLBACKS] >= 1
    assert (tmp_path / "run" / "rolled_back.jsonl").exists()
    # a rollback to a snapshot from before earlier halvings keeps them: the remedies compound
    halved = [float(x["did"].rsplit(" ", 1)[1]) for x in record["rollbacks"] if x.get("remedy")]
    assert halved == pytest.approx([3e-3 / 2 ** (k + 1) for k in range(len(halved))])
    steps = [r["step"] for r in _rows(tmp_path / "run")]
    assert steps == sorted(set(steps))  # one row a step after the rollback(s)


def test_a_run_killed_inside_a_collapse_rolls_back_through_its_checkpoints(tmp_path, monkeypatch):
    """Killed after step 3, where the collapse had begun (step 3) but not yet been judged (step 4):
    the resumed run's memory holds no snapshot from before it, so the rollback goes back through
    the checkpoint of step 2 on disk, and the run equals the one never killed."""
    a, b = tmp_path / "straight", tmp_path / "resumed"
    flags = ["--on_collapse", "rollback", "--snapshot_steps", "2", "--rollback_remedy",
             "halve_lr", "--save_steps", "1", "--save_total_limit", "0"]
    monkeypatch.setattr(alarm, "detect_collapse", _fire_once(at=4, began=3))
    Trainer(_cfg(a, "--max_steps", "6", *flags)).train()
    real_save = Trainer.save_checkpoint

    def save_then_die(self):
        path = real_save(self)
        if self.step == 3:
            raise RuntimeError("killed")
        return path

    _killed(monkeypatch, _cfg(b, "--max_steps", "6", *flags), save_then_die, real_save)
    monkeypatch.setattr(alarm, "detect_collapse", _fire_once(at=4, began=3))
    Trainer(_cfg(b, "--max_steps", "6", "--resume", "true", *flags)).train()
    for run in (a, b):
        record = json.loads((run / "collapse.json").read_text())
        assert [(x["alarm_at"], x["to_step"]) for x in record["rollbacks"]] == [(4, 2)]
    _assert_same_run(a, b)
