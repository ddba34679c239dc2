"""Trainer callbacks: what happens around a step without living inside the step.

TRL's (and Transformers') callback idea: the trainer calls every callback at fixed points —
``on_train_begin``, ``on_evaluate`` (after a periodic eval, its numbers in the row),
``on_rollout`` (a step's trajectories are rolled, every one, kept by dynamic sampling or
not), ``on_step_end`` (the step's row is complete but not yet logged; a callback may add to it),
``on_log`` (the row is final), ``on_save`` (a checkpoint was written) and ``on_train_end``
(before ``final/`` is saved) — and a callback that wants the run to end sets
``trainer.control.should_stop``. A callback with state of its own puts it into every
checkpoint (``checkpoint_files``) and reads it back at ``on_train_begin`` of a resumed run. The built-in ones:

* :class:`MetricsLog` — ``metrics.jsonl`` (always), the progress bar, Accelerate's trackers;
* :class:`SaveBest` — ``save_best``: the model of the best periodic eval in ``best/``;
* :class:`CollapseAlarm` — the online collapse alarm (:mod:`arlgym.rl.alarm`): the
  ``alarm/collapse`` metric, a warning and ``collapse.json``; with ``on_collapse stop`` it ends
  the run and leaves ``final/`` at the newest checkpoint from before the collapse began;
* :class:`~arlgym.rl.rollback.Rollback` — ``on_collapse rollback``;
* :class:`HeldOutTasks` — always: the task ids the rollouts played, and at the end how many
  tasks of the eval and test panels they share content with (``held_out.json``; must be 0).
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arlgym.evaluation.held_out import PANEL_SIZE, format_held_out, held_out_report
from arlgym.rl import metrics as M
from arlgym.rl.alarm import CollapseMonitor

__all__ = ["Control", "TrainerCallback", "CallbackList", "MetricsLog", "SaveBest",
           "CollapseAlarm", "HeldOutTasks"]


@dataclass
class Control:
    """What callbacks tell the loop: ``should_stop`` ends the run after this step."""

    should_stop: bool = False


class TrainerCallback:
    """The hooks (each a no-op here; a callback overrides the ones it needs). ``trainer`` is
    the :class:`~arlgym.rl.trainer.Trainer`; ``metrics`` the step's row."""

    def on_train_begin(self, trainer: Any) -> None: ...

    def on_rollout(self, trainer: Any, trajectories: list[Any]) -> None: ...

    def on_evaluate(self, trainer: Any, metrics: dict[str, float]) -> None: ...

    def on_step_end(self, trainer: Any, metrics: dict[str, float]) -> None: ...

    def on_log(self, trainer: Any, metrics: dict[str, float]) -> None: ...

    def on_save(self, trainer: Any, path: Path) -> None: ...

    def on_train_end(self, trainer: Any) -> None: ...

    def checkpoint_files(self, trainer: Any) -> dict[str, Any]:
        """JSON files (name -> content) a checkpoint carries for this callback's resume."""
        return {}


class CallbackList(TrainerCallback):
    """Calls each callback in order."""

    def __init__(self, callbacks: list[TrainerCallback]) -> None:
        self.callbacks = list(callbacks)

    def on_train_begin(self, trainer: Any) -> None:
        for cb in self.callbacks:
            cb.on_train_begin(trainer)

    def on_rollout(self, trainer: Any, trajectories: list[Any]) -> None:
        for cb in self.callbacks:
            cb.on_rollout(trainer, trajectories)

    def on_evaluate(self, trainer: Any, metrics: dict[str, float]) -> None:
        for cb in self.callbacks:
            cb.on_evaluate(trainer, metrics)

    def on_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        for cb in self.callbacks:
            cb.on_step_end(trainer, metrics)

    def on_log(self, trainer: Any, metrics: dict[str, float]) -> None:
        for cb in self.callbacks:
            cb.on_log(trainer, metrics)

    def on_save(self, trainer: Any, path: Path) -> None:
        for cb in self.callbacks:
            cb.on_save(trainer, path)

    def on_train_end(self, trainer: Any) -> None:
        for cb in self.callbacks:
            cb.on_train_end(trainer)

    def checkpoint_files(self, trainer: Any) -> dict[str, Any]:
        return {k: v for cb in self.callbacks for k, v in cb.checkpoint_files(trainer).items()}


class MetricsLog(TrainerCallback):
    """``metrics.jsonl`` and the progress bar (main process), Accelerate's trackers (all)."""

    def on_train_begin(self, trainer: Any) -> None:
        from tqdm.auto import tqdm

        cfg = trainer.cfg
        self.bar = tqdm(total=cfg.max_steps, initial=trainer.step, desc=f"{cfg.algo} {cfg.env_id}",
                        disable=not trainer.accelerator.is_main_process)

    def on_log(self, trainer: Any, metrics: dict[str, float]) -> None:
        acc = trainer.accelerator
        if acc.is_main_process:
            with (trainer.out / "metrics.jsonl").open("a") as fh:
                fh.write(json.dumps(metrics) + "\n")
            self.bar.update(1)
            self.bar.set_postfix(success=f"{metrics[M.SUCCESS_RATE]:.2f}",
                                 fmt=f"{metrics[M.FORMAT_VALID]:.2f}")
        acc.log(metrics, step=trainer.step)

    def on_train_end(self, trainer: Any) -> None:
        self.bar.close()


class SaveBest(TrainerCallback):
    """``save_best``: after a periodic eval (main process), keep the model in ``best/`` when
    its ``eval/success_rate`` beats every earlier eval's.

    The record lives in ``best/best.json``, so a resumed run keeps comparing against it. Ties
    keep the earlier model. Written to a temporary folder and renamed, so a crash never leaves
    a half-written ``best/``.
    """

    def on_evaluate(self, trainer: Any, metrics: dict[str, float]) -> None:
        score = metrics[M.EVAL_SUCCESS]
        best, record = trainer.out / "best", trainer.out / "best" / "best.json"
        if record.exists() and json.loads(record.read_text())[M.EVAL_SUCCESS] >= score:
            return
        tmp = trainer.out / "best.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        trainer.save_model(tmp)
        (tmp / "best.json").write_text(json.dumps(
            {"step": trainer.step, M.EVAL_SUCCESS: score, "eval_split": trainer.cfg.eval_split,
             "eval_episodes": trainer.cfg.eval_episodes}))
        shutil.rmtree(best, ignore_errors=True)
        tmp.rename(best)


class CollapseAlarm(TrainerCallback):
    """The online collapse alarm (:class:`~arlgym.rl.alarm.CollapseMonitor`), primed with the
    rows a resumed run already logged.

    Each step: the ``alarm/collapse`` metric; the first time it fires, a warning and
    ``collapse.json``. With ``stop`` the run ends there and, at its end, reloads the newest
    checkpoint from before the collapse began, so ``final/`` is the last healthy policy (the
    live one is kept if there is none).
    """

    def __init__(self, stop: bool = False, degradation: bool = False) -> None:
        self.stop, self.degradation = stop, degradation
        self.monitor: CollapseMonitor | None = None
        self.stopped = False

    def on_train_begin(self, trainer: Any) -> None:
        self.monitor = CollapseMonitor(M.read_metrics_jsonl(trainer.out / "metrics.jsonl"),
                                       degradation=self.degradation)

    def reset(self, rows: list[dict[str, Any]]) -> None:
        """Judge anew from ``rows`` (after a rollback)."""
        self.monitor.reset(rows)

    def on_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        verdict = self.monitor.update(metrics)
        metrics[M.ALARM_COLLAPSE] = float(self.monitor.fired is not None)
        if verdict is not None and trainer.accelerator.is_main_process:
            warnings.warn(f"collapse alarm at step {verdict['detected_at']} (began at step "
                          f"{verdict['step']}): {verdict['reason']}", stacklevel=2)
            path = trainer.out / "collapse.json"
            # a rolled-back run's earlier alarms stay on record (arlgym.rl.rollback)
            before = json.loads(path.read_text()).get("rollbacks") if path.exists() else None
            path.write_text(json.dumps({**verdict, **({"rollbacks": before} if before else {})},
                                       indent=2))
        if self.stop and self.monitor.fired is not None:
            self.stopped = trainer.control.should_stop = True

    def on_train_end(self, trainer: Any) -> None:
        if self.stopped:
            self._restore_healthy(trainer, self.monitor.fired)

    @staticmethod
    def _restore_healthy(trainer: Any, verdict: dict[str, Any]) -> None:
        healthy = trainer.checkpointer.newest_before(verdict["step"])
        if healthy is not None:
            trainer.step = trainer.checkpointer.load(healthy, trainer.source)
        elif trainer.accelerator.is_main_process:
            warnings.warn("stop_on_collapse: no checkpoint from before the collapse (set "
                          "save_steps); final/ holds the policy at the alarm", stacklevel=2)
        if trainer.accelerator.is_main_process:
            record = json.loads((trainer.out / "collapse.json").read_text())
            record["stopped"] = True
            record["final_from_step"] = trainer.step if healthy is not None else None
            (trainer.out / "collapse.json").write_text(json.dumps(record, indent=2))


class HeldOutTasks(TrainerCallback):
    """The task ids the run's rollouts played (a set: per step only the ids are kept), and at
    the end how many tasks of the periodic eval panel (``eval_split``, ``eval_episodes``) and
    of the final test panel (``test_split``, ``test_episodes`` or
    :data:`~arlgym.evaluation.held_out.PANEL_SIZE`) share their content with one of them
    (:func:`~arlgym.evaluation.held_out.held_out_report`): printed and written to
    ``held_out.json`` (main process). Must be 0: the rollouts draw from ``train``, whose
    content the env keeps apart from the held-out splits.

    The ids travel in every checkpoint (``held_out_tasks.json``), so a resumed run counts the
    steps before its resume; steps a rollback abandons stay counted (they were played).
    """

    FILE = "held_out_tasks.json"

    def __init__(self) -> None:
        self.task_ids: set[str] = set()

    def on_train_begin(self, trainer: Any) -> None:
        state = trainer.checkpointer.path(trainer.step) / self.FILE
        if trainer.cfg.resume and state.exists():
            self.task_ids = set(json.loads(state.read_text())["task_ids"])

    def on_rollout(self, trainer: Any, trajectories: list[Any]) -> None:
        self.task_ids.update(t.task_id for t in trajectories)

    def _all_ranks(self, trainer: Any) -> set[str]:
        """The ids of every rank (a collective: every rank calls it)."""
        if trainer.accelerator.num_processes == 1:
            return self.task_ids
        from accelerate.utils import gather_object

        return set(gather_object(sorted(self.task_ids)))

    def checkpoint_files(self, trainer: Any) -> dict[str, Any]:
        return {self.FILE: {"task_ids": sorted(self._all_ranks(trainer))}}

    def panels(self, cfg: Any) -> dict[str, int]:
        """The panels the run's evals play: split -> tasks (one split named twice: the larger)."""
        panels = {cfg.eval_split: cfg.eval_episodes}
        test = cfg.test_episodes or PANEL_SIZE
        panels[cfg.test_split] = max(test, panels.get(cfg.test_split, 0))
        return panels

    def on_train_end(self, trainer: Any) -> None:
        ids = self._all_ranks(trainer)
        if trainer.accelerator.is_main_process:
            cfg = trainer.cfg
            report = held_out_report(cfg.env_id, cfg.env_kwargs, ids, self.panels(cfg))
            (trainer.out / "held_out.json").write_text(json.dumps(report, indent=2))
            print(format_held_out(report))
