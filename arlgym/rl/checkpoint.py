"""Checkpoints and resume: everything a run needs to continue exactly where it stopped.

A checkpoint ``output_dir/checkpoints/step-N/`` holds Accelerate's state (model, optimizer,
scheduler, every RNG stream: ``accelerator.save_state``), ``trainer_state.json`` (the step) and
one ``collector_rank{r}.json`` per rank (its task stream: ranks draw disjoint tasks). It is
written under ``step-N.tmp`` and renamed when complete, so a run killed while saving never
leaves a half-written checkpoint for ``--resume`` to trip on. A resumed run drops the
``metrics.jsonl`` rows logged after its checkpoint (it replays those steps), so the log of an
interrupted and resumed run equals that of an uninterrupted one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.lora import merged_copy

__all__ = ["Checkpoints", "save_model"]


class Checkpoints:
    """The run's checkpoint folder (every rank calls :meth:`save` and :meth:`load` together).

    Args:
        accelerator: the run's Accelerator (its registered objects are what ``save_state``
            writes).
        out: the run's output directory.
        total_limit: keep only the newest N checkpoints (0: all).
    """

    def __init__(self, accelerator: Any, out: Path, total_limit: int = 0) -> None:
        self.acc, self.out, self.total_limit = accelerator, Path(out), total_limit

    @property
    def root(self) -> Path:
        return self.out / "checkpoints"

    def path(self, step: int) -> Path:
        return self.root / f"step-{step:06d}"

    def list(self) -> list[Path]:
        """Complete checkpoints, oldest first (``.tmp`` folders of an interrupted save are not)."""
        return sorted(p for p in self.root.glob("step-*")
                      if not p.name.endswith(".tmp") and (p / "trainer_state.json").exists())

    @staticmethod
    def step_of(path: Path) -> int:
        return int(json.loads((path / "trainer_state.json").read_text())["step"])

    def newest_before(self, step: int) -> Path | None:
        """The newest checkpoint of a step before ``step`` (None: there is none)."""
        before = [p for p in self.list() if self.step_of(p) < step]
        return before[-1] if before else None

    def save(self, step: int, source: Any, files: dict[str, Any] | None = None) -> Path:
        """Write checkpoint ``step`` (``source``: the rollout source, for its task stream;
        ``files``: more JSON files of the main process, by name, inside the same rename)."""
        acc = self.acc
        path = self.path(step)
        tmp = path.with_name(path.name + ".tmp")
        if acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        if acc.is_main_process:
            (tmp / "trainer_state.json").write_text(json.dumps({"step": step}))
            for name, content in (files or {}).items():
                (tmp / name).write_text(json.dumps(content))
        (tmp / f"collector_rank{acc.process_index}.json").write_text(
            json.dumps(source.state_dict()))
        acc.wait_for_everyone()
        if acc.is_main_process:
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            if self.total_limit:
                for old in self.list()[: -self.total_limit]:
                    shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()
        return path

    def drop_after(self, step: int) -> None:
        """Delete the checkpoints of steps after ``step`` (a rollback abandoned them: a resume
        must not continue the collapsed branch). Main process."""
        if self.acc.is_main_process:
            for p in self.list():
                if self.step_of(p) > step:
                    shutil.rmtree(p, ignore_errors=True)
        self.acc.wait_for_everyone()

    def load(self, path: Path, source: Any) -> int:
        """Restore checkpoint ``path`` into the registered objects and ``source``; its step."""
        self.acc.load_state(str(path))
        state = json.loads((path / f"collector_rank{self.acc.process_index}.json").read_text())
        source.load_state_dict(state)
        return self.step_of(path)

    def newest(self) -> Path:
        """The checkpoint ``--resume`` continues from (refused when there is none)."""
        ckpts = self.list()
        if not ckpts:
            raise ConfigError(f"--resume: no checkpoint under {self.root}")
        return ckpts[-1]

    def trim_log(self, step: int) -> None:
        """Drop the ``metrics.jsonl`` rows logged after ``step`` (a resumed run replays them)."""
        log = self.out / "metrics.jsonl"
        if self.acc.is_main_process and log.exists():
            kept = [r for r in M.read_metrics_jsonl(log) if r.get(M.STEP, 0) <= step]
            log.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self.acc.wait_for_everyone()


def save_model(model: Any, path: Path, saver: Any, *, lora: bool) -> None:
    """An HF model directory that loads with ``hf:<dir>`` (``model`` unwrapped; ``saver``: the
    processor or tokenizer); under LoRA the merged model, plus the adapter alone."""
    if lora:
        merged_copy(model).save_pretrained(path)
        model.save_pretrained(path / "adapter")
    else:
        model.save_pretrained(path)
    saver.save_pretrained(path)
