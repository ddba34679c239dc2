"""One TRL ``SFTTrainer`` run, shared by the text and the vision path of ``arlgym-sft train``.

Both paths train the same way (assistant-only loss, no packing, the same schedule, the same
wall-clock budget, LoRA merged before saving); they differ only in what they train on and with
which processing class. Keeping the run here means a setting is added once, and neither path
imports the other.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

__all__ = ["run_sft_trainer", "time_budget_callback", "train_and_save"]


def time_budget_callback(minutes: float) -> Any:
    """A ``TrainerCallback`` that stops training (and saves) once ``minutes`` of wall clock
    are spent."""
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        """Stops training (and saves) once the wall-clock budget is spent."""

        def __init__(self) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if time.perf_counter() - self.start > minutes * 60:
                control.should_training_stop = True
            return control

    return TimeBudget()


def train_and_save(trainer: Any, cfg: Any, processing: Any, num_samples: int) -> dict[str, Any]:
    """Run a TRL ``SFTTrainer``, save the (LoRA-merged) model with its tokenizer or processor
    to ``cfg.output_dir`` and write ``sft_stats.json``; the text and vision paths share it."""
    started = time.perf_counter()
    # a rerun of an interrupted run: TRL restores weights, optimizer, schedule, RNG and the log
    # history of that checkpoint, so the log below holds each step once
    resume = getattr(cfg, "resume_from_checkpoint", None)
    result = trainer.train(resume_from_checkpoint=resume)
    elapsed = time.perf_counter() - started
    final = trainer.model
    if cfg.lora_r > 0:
        final = final.merge_and_unload()
    out = Path(cfg.output_dir)
    if trainer.accelerator.is_main_process:
        final.save_pretrained(out)
        processing.save_pretrained(out)
    stats = {
        "model": cfg.model,
        "samples": num_samples,
        "steps": int(result.global_step),
        "train_loss": float(result.training_loss),
        "seconds": elapsed,
        "epochs_done": trainer.state.epoch,
        "log": [h for h in trainer.state.log_history if "loss" in h],
    }
    if resume:
        stats["resumed_from"] = Path(resume).name
    if trainer.accelerator.is_main_process:
        (out / "sft_stats.json").write_text(json.dumps(stats, indent=2))
    return stats


def run_sft_trainer(cfg: Any, model: Any, processing: Any, samples: list[dict[str, Any]],
                    **overrides: Any) -> dict[str, Any]:
    """Train ``model`` on ``samples`` with TRL's ``SFTTrainer`` as ``cfg`` (an
    :class:`~arlgym.sft.train.SFTRunConfig`) says, save it and return the run statistics.

    ``overrides`` are ``SFTConfig`` arguments one path needs beside the shared ones (the vision
    path: no ``max_length`` cut, its own columns kept). ``model`` is trained in place (wrapped
    in LoRA when ``cfg.lora_r > 0``).
    """
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model.train()
    if cfg.lora_r > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    dataset = Dataset.from_list(samples)
    steps_per_epoch = math.ceil(len(samples) / (cfg.batch_size * cfg.grad_accum))
    settings: dict[str, Any] = dict(
        output_dir=cfg.output_dir,
        assistant_only_loss=True,
        max_length=cfg.max_length,
        packing=False,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.lr,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=int(cfg.warmup_ratio * steps_per_epoch * max(cfg.epochs, 1)),
        weight_decay=cfg.weight_decay,
        logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps > 0 else "no",
        save_steps=cfg.save_steps if cfg.save_steps > 0 else 500,
        report_to=cfg.report_to,
        seed=cfg.seed,
        bf16=cfg.bf16,
        dataloader_num_workers=0,
        disable_tqdm=not cfg.progress,
        use_cpu=not torch.cuda.is_available(),
    )
    settings.update(overrides)
    callbacks = [time_budget_callback(cfg.time_budget_minutes)] if cfg.time_budget_minutes else []
    trainer = SFTTrainer(model=model, args=SFTConfig(**settings), train_dataset=dataset,
                         processing_class=processing, callbacks=callbacks)
    return train_and_save(trainer, cfg, processing, len(samples))
