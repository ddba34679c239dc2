"""``on_collapse: rollback``: a run that survives its own collapse.

When the collapse alarm (:mod:`arlgym.rl.alarm`) fires, the run goes back to the newest
in-memory snapshot taken *before the collapse began* — the model, the optimizer, the LR
scheduler, the python/numpy/torch RNG streams and the rollout source's task stream — applies a
named *remedy* and trains on to ``max_steps``. At most ``max_rollbacks`` times; an alarm after
that ends the run as ``stop`` does, on the newest snapshot before that collapse.

Snapshots are kept every ``snapshot_steps`` steps (and at the start), the newest
:data:`KEEP` only, in CPU memory, plus the one of the best periodic eval so far (a degradation
verdict points back to it, however long ago). With none from before the collapse the run goes
back to the oldest one kept. Measured on the tiny model (0.83M parameters, one CPU
thread): 10 MB and 7 ms a snapshot, against 1.5 s a training step; for a model of P
parameters under AdamW a snapshot is ~3·P floats (weights and two moments).

A resumed run holds snapshots from its resume on only; when a collapse began before the
resume, the rollback reaches back through the run's checkpoints on disk (if one that old is
kept). With ``rollback_from: checkpoints`` the states are the run's own checkpoints on disk instead
(a step-0 checkpoint is written at the start, ``save_total_limit`` keeps 8 by default): no
memory beyond the model's, for models too big to copy every few steps — the cost is a save per
``save_steps`` (which a long GPU run pays anyway to survive a kill) and a load per rollback. A
degradation verdict then reaches back as far as the kept checkpoints do.

A rollback deletes the checkpoints of the abandoned steps, and each checkpoint carries
``rollback.json`` (rollbacks so far, remedies applied), so ``--resume`` continues the same run:
the remedies that live in the optimizer/scheduler state (``halve_lr``) come back with it, the
others are applied again.

Every rollback is logged: ``alarm/rollbacks`` (rollbacks so far) in every later row, the rows of
the abandoned steps moved from ``metrics.jsonl`` to ``rolled_back.jsonl`` (so the log stays one
row per step and ``--resume`` and the arena report read it as before), and a record in
``collapse.json`` (``rollbacks``: the alarm's step, the step returned to, the remedy).
"""

from __future__ import annotations

import copy
import json
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from arlgym.envs import env_family
from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.alarm import REMEDY_NAMES
from arlgym.rl.build import build_reference
from arlgym.rl.callbacks import CollapseAlarm, TrainerCallback
from arlgym.rl.presets import get_preset

__all__ = ["KEEP", "REMEDIES", "Snapshot", "Rollback", "take_snapshot", "restore_snapshot"]

#: snapshots kept (the newest ones): enough to reach back before a collapse that the alarm
#: judges ``patience`` + ``window`` steps late
KEEP = 4


@dataclass
class Snapshot:
    """Everything a rollback restores, at the end of trainer step ``step``."""

    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: tuple[Any, Any, torch.Tensor]
    source: dict[str, Any]
    #: ``halve_lr`` remedies in effect when it was taken (its scheduler state carries them, so
    #: restoring an older snapshot must apply the later halvings again)
    halvings: int = 0


def take_snapshot(trainer: Any) -> Snapshot:
    """A CPU copy of the trainer's state now."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    return Snapshot(
        step=trainer.step,
        model={k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        optimizer=copy.deepcopy(trainer.optimizer.state_dict()),
        scheduler=copy.deepcopy(trainer.scheduler.state_dict()),
        rng=(random.getstate(), np.random.get_state(), torch.get_rng_state()),
        source=copy.deepcopy(trainer.source.state_dict()))


def restore_snapshot(trainer: Any, snap: Snapshot) -> None:
    """Put the trainer back to ``snap`` (and an engine with its own weights copy with it)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.load_state_dict(snap.model)
    trainer.optimizer.load_state_dict(copy.deepcopy(snap.optimizer))
    trainer.scheduler.load_state_dict(copy.deepcopy(snap.scheduler))
    random.setstate(snap.rng[0])
    np.random.set_state(snap.rng[1])
    torch.set_rng_state(snap.rng[2])
    trainer.source.load_state_dict(copy.deepcopy(snap.source))
    trainer.step = snap.step
    trainer._sync_rollout_weights()


def _halve_lr(trainer: Any) -> str:
    sched = getattr(trainer.scheduler, "scheduler", trainer.scheduler)  # Accelerate's wrapper
    sched.base_lrs = [lr * 0.5 for lr in sched.base_lrs]
    for group in trainer.optimizer.param_groups:
        group["lr"] *= 0.5
    return f"learning rate halved to {sched.base_lrs[0]:.3g}"


def _raise_kl(trainer: Any) -> str:
    s = trainer.updater.s
    kl = max(2.0 * float(s.loss_kwargs.get("kl_coef") or 0.0), 0.01)
    s.loss_kwargs["kl_coef"] = kl
    if not trainer.use_ref:  # the reference: the start model (under LoRA: adapters off)
        trainer.ref_model = build_reference(trainer.cfg, kl, trainer.lora, trainer.accelerator.device)
        trainer.use_ref = s.use_ref = True
    return f"kl_coef raised to {kl:.3g}"


def _seq_mask(trainer: Any) -> str:
    s = trainer.updater.s
    if s.loss_kwargs.get("seq_mask_delta") is None:  # the sequence-masked presets' delta
        sm = get_preset("grpo_sm", env=env_family(trainer.cfg.env_id, default="alfworld"))
        s.loss_kwargs["seq_mask_delta"] = sm["seq_mask"]["delta"]
    return f"sequence mask on (delta {s.loss_kwargs['seq_mask_delta']:.3g})"


#: remedy name -> apply(trainer) -> what it did (one line)
REMEDIES: dict[str, Callable[[Any], str]] = {
    "halve_lr": _halve_lr, "raise_kl": _raise_kl, "seq_mask": _seq_mask}
assert tuple(REMEDIES) == REMEDY_NAMES  # the config checks names against the alarm's list


class Rollback(TrainerCallback):
    """The rollback callback (module docstring); runs after the alarm and the log.

    Args:
        alarm: the run's :class:`~arlgym.rl.callbacks.CollapseAlarm` (its verdicts).
        remedy: a :data:`REMEDIES` name.
        max_rollbacks: rollbacks allowed; the next alarm stops the run.
        every: snapshot every N steps.
        storage: ``memory`` (snapshots) or ``checkpoints`` (the run's checkpoints on disk).
    """

    def __init__(self, alarm: CollapseAlarm, remedy: str = "halve_lr", max_rollbacks: int = 2,
                 every: int = 2, storage: str = "memory") -> None:
        self.alarm, self.remedy, self.max_rollbacks, self.every = alarm, remedy, max_rollbacks, every
        self.on_disk = storage == "checkpoints"
        self.snapshots: list[Snapshot] = []
        self.best: tuple[float, Snapshot] | None = None  # the best periodic eval's
        self.rollbacks = 0
        self.applied: list[str] = []

    def on_train_begin(self, trainer: Any) -> None:
        if trainer.accelerator.num_processes > 1:  # the evals (and so the best snapshot and
            # the degradation verdicts) are the main process's alone
            raise ConfigError("on_collapse rollback runs in one process for now. Fix: "
                              "--on_collapse stop under accelerate launch")
        state = trainer.checkpointer.path(trainer.step) / "rollback.json"
        if trainer.cfg.resume and state.exists():
            saved = json.loads(state.read_text())
            self.rollbacks = int(saved["rollbacks"])
            for name in saved["applied"]:
                if name != "halve_lr":  # the optimizer and scheduler state carry that one
                    REMEDIES[name](trainer)
                self.applied.append(name)
        if not self.on_disk:
            self.snapshots = [self._snapshot(trainer)]
        elif trainer.checkpointer.newest_before(trainer.step + 1) is None:
            trainer.save_checkpoint()  # a state to go back to before the first update

    def _snapshot(self, trainer: Any) -> Snapshot:
        snap = take_snapshot(trainer)
        snap.halvings = self.applied.count("halve_lr")
        return snap

    def checkpoint_files(self, trainer: Any) -> dict[str, Any]:
        return {"rollback.json": {"rollbacks": self.rollbacks, "applied": self.applied}}

    def on_evaluate(self, trainer: Any, metrics: dict[str, float]) -> None:
        if not self.on_disk and (self.best is None or metrics[M.EVAL_SUCCESS] > self.best[0]):
            self.best = (metrics[M.EVAL_SUCCESS], self._snapshot(trainer))

    def on_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        metrics[M.ALARM_ROLLBACKS] = float(self.rollbacks)

    def on_log(self, trainer: Any, metrics: dict[str, float]) -> None:
        verdict = self.alarm.monitor.fired
        if verdict is None:
            if not self.on_disk and trainer.step % self.every == 0:
                self.snapshots = [*self.snapshots, self._snapshot(trainer)][-KEEP:]
            return
        at = trainer.step
        if self.on_disk or self._reach_disk(trainer, verdict["step"]):
            to, halvings = self._load_checkpoint(trainer, verdict["step"])
            self.snapshots, self.best = [], None  # in memory: all from the collapsed branch
        else:
            to, halvings = self._restore_snapshot(trainer, verdict["step"])
        for _ in range(self.applied.count("halve_lr") - halvings):
            _halve_lr(trainer)  # the remedies applied since that state stay applied
        trainer.checkpointer.drop_after(to)
        self._move_rows(trainer, to)
        self.alarm.reset([r for r in self.alarm.monitor.rows if r.get(M.STEP, 0) <= to])
        if self.rollbacks >= self.max_rollbacks:
            trainer.control.should_stop = True
            self._record(trainer, {"alarm_at": at, "to_step": to, "remedy": None,
                                   "stopped": True})
            return
        self.rollbacks += 1
        did = REMEDIES[self.remedy](trainer)
        self.applied.append(self.remedy)
        self._record(trainer, {"alarm_at": at, "to_step": to, "remedy": self.remedy,
                               "did": did})
        if trainer.accelerator.is_main_process:
            warnings.warn(f"rollback {self.rollbacks}/{self.max_rollbacks}: back to step "
                          f"{to} (alarm at step {at}); {did}", stacklevel=2)

    def _reach_disk(self, trainer: Any, before: int) -> bool:
        """Whether no snapshot in memory is from before step ``before`` but a checkpoint on disk
        is: a resumed run holds snapshots from its resume on only, and a collapse that began
        before the kill can reach back only through the run's checkpoints."""
        kept = [*self.snapshots, *([self.best[1]] if self.best else [])]
        if any(x.step < before for x in kept):
            return False
        return trainer.checkpointer.newest_before(before) is not None

    def _restore_snapshot(self, trainer: Any, before: int) -> tuple[int, int]:
        """The newest snapshot from before step ``before`` (else the oldest kept), restored:
        (its step, the halvings it carries)."""
        kept = sorted([*self.snapshots, *([self.best[1]] if self.best else [])],
                      key=lambda x: x.step)
        earlier = [x for x in kept if x.step < before]
        snap = earlier[-1] if earlier else kept[0]
        restore_snapshot(trainer, snap)
        self.snapshots = [x for x in self.snapshots if x.step <= snap.step] or [snap]
        if self.best is not None and self.best[1].step > snap.step:
            self.best = None
        return snap.step, snap.halvings

    @staticmethod
    def _load_checkpoint(trainer: Any, before: int) -> tuple[int, int]:
        """The newest checkpoint from before step ``before`` (else the oldest kept), loaded as
        ``--resume`` loads one: (its step, the halvings its scheduler state carries)."""
        ckpt = trainer.checkpointer
        path = ckpt.newest_before(before) or ckpt.list()[0]
        trainer.step = ckpt.load(path, trainer.source)
        trainer._sync_rollout_weights()
        saved = path / "rollback.json"
        applied = json.loads(saved.read_text())["applied"] if saved.exists() else []
        return trainer.step, applied.count("halve_lr")

    @staticmethod
    def _move_rows(trainer: Any, step: int) -> None:
        """The abandoned steps' rows go from ``metrics.jsonl`` to ``rolled_back.jsonl``."""
        if not trainer.accelerator.is_main_process:
            return
        log = trainer.out / "metrics.jsonl"
        rows = M.read_metrics_jsonl(log)
        with (trainer.out / "rolled_back.jsonl").open("a") as fh:
            for r in rows:
                if r.get(M.STEP, 0) > step:
                    fh.write(json.dumps(r) + "\n")
        log.write_text("".join(json.dumps(r) + "\n" for r in rows if r.get(M.STEP, 0) <= step))

    @staticmethod
    def _record(trainer: Any, entry: dict[str, Any]) -> None:
        if not trainer.accelerator.is_main_process:
            return
        path = trainer.out / "collapse.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        record.setdefault("rollbacks", []).append(entry)
        path.write_text(json.dumps(record, indent=2))
