"""``arlgym-sft train``: supervised fine-tuning on collected samples with TRL's ``SFTTrainer``.

The loss is on assistant tokens only (``assistant_only_loss``; the chat templates arlgym ships
mark assistant content with ``{% generation %}``), so the model learns the responses, not the
long, repetitive prompts (Sokoban prompts differ in length by < 10%, so padding waste is small). The output
directory is a plain HF checkpoint (model + tokenizer + chat template) that loads everywhere as
``hf:<dir>``. Works on CPU (``python -m``/``arlgym-sft train``) and multi-GPU
(``accelerate launch -m arlgym.sft.cli train ...``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arlgym.core.validation import check_float, check_int, check_str
from arlgym.errors import ConfigError, MissingDependency
from arlgym.evaluation.held_out import format_held_out, held_out_report
from arlgym.models import load_model_and_tokenizer
from arlgym.rundir import check_settings, read_settings, settings_of, write_settings
from arlgym.sft.collect import read_jsonl_lines
from arlgym.sft.trl_run import run_sft_trainer
from arlgym.sft.vision import has_images, train_vision_sft

__all__ = ["SFTRunConfig", "train_sft", "add_train_arguments", "train_from_args", "load_samples",
           "data_held_out", "sft_run_status", "prepare_sft_rerun", "sft_checkpoints"]


@dataclass
class SFTRunConfig:
    """Settings of one SFT run (CLI flags of ``arlgym-sft train``)."""

    data: tuple[str, ...] = ("sft_data",)
    model: str = "tiny"
    output_dir: str = "runs/sft"
    epochs: float = 3.0
    lr: float = 1e-3
    batch_size: int = 32
    grad_accum: int = 1
    max_length: int = 1024
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    lr_scheduler: str = "cosine"
    max_steps: int = -1
    time_budget_minutes: float | None = None
    seed: int = 0
    logging_steps: int = 10
    save_steps: int = 0
    lora_r: int = 0
    bf16: bool = False
    report_to: str = "none"
    progress: bool = True
    engine: str = "trl"
    #: set by a rerun (prepare_sft_rerun), not a flag: the TRL checkpoint to continue from
    resume_from_checkpoint: str | None = None


    def __post_init__(self) -> None:
        where = "arlgym-sft train"
        for name, lo in (("batch_size", 1), ("grad_accum", 1), ("max_length", 8), ("seed", 0),
                         ("logging_steps", 1), ("save_steps", 0), ("lora_r", 0),
                         ("max_steps", -1)):
            setattr(self, name, check_int(name, getattr(self, name), min=lo, where=where))
        for name, lo in (("epochs", 0.0), ("lr", None), ("weight_decay", 0.0)):
            setattr(self, name, check_float(name, getattr(self, name), min=lo, where=where))
        self.warmup_ratio = check_float("warmup_ratio", self.warmup_ratio, min=0.0, max=1.0,
                                        where=where)
        self.time_budget_minutes = check_float("time_budget_minutes", self.time_budget_minutes,
                                               gt=0.0, allow_none=True, where=where)
        check_str("model", self.model, where=where)
        check_str("output_dir", self.output_dir, where=where)
        if isinstance(self.data, str) or not self.data:
            raise ConfigError(f"{where}: data={self.data!r} is invalid: expected a list of dataset "
                              "folders or .jsonl files. Fix: pass e.g. --data sft_data")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ConfigError("--batch-size and --grad-accum must be >= 1")
        if self.lr <= 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ConfigError("give --epochs > 0 or --max-steps > 0")
        if self.engine not in ("trl", "prefix"):
            raise ConfigError(f"--engine must be 'trl' or 'prefix', got {self.engine!r}")


def load_samples(paths: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """``messages`` samples from dataset folders or ``.jsonl`` files (collect's output)."""
    out: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        files = sorted(path.rglob("samples.jsonl")) if path.is_dir() else [path]
        if not files or not all(f.exists() for f in files):
            raise ConfigError(f"no samples found at {p}; run `arlgym-sft collect --out {p}` first")
        for f in files:
            out.extend(_read_samples(f))
    if not out:
        raise ConfigError(f"the data at {list(paths)} holds no samples")
    return out


def _read_samples(f: Path) -> list[dict[str, Any]]:
    """The ``messages`` of each line of one samples.jsonl; a bad line raises ConfigError naming
    the file and line."""
    fix = ("Fix: delete or repair that line (a crash mid-write leaves a torn last line), or "
           "collect the data again with `arlgym-sft collect`")
    rows: list[dict[str, Any]] = []
    try:
        with f.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{f}:{n}: not a JSON line ({e.msg} at column {e.colno}). "
                                      f"{fix}") from None
                messages = row.get("messages") if isinstance(row, dict) else None
                if not isinstance(messages, list) or not messages or not all(
                        isinstance(m, dict) and isinstance(m.get("role"), str)
                        and isinstance(m.get("content"), (str, list)) for m in messages):
                    raise ConfigError(f"{f}:{n}: each line needs a non-empty 'messages' list of "
                                      "{'role': ..., 'content': ...} dicts (HF chat format). "
                                      f"{fix}")
                rows.append({"messages": messages})
    except UnicodeDecodeError as e:
        raise ConfigError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start}); is it really "
                          "a samples.jsonl? Fix: point --data at the folder `arlgym-sft collect` "
                          "wrote") from None
    except IsADirectoryError:
        raise ConfigError(f"{f} is a folder named like a data file. Fix: point --data at the "
                          "dataset folder or a .jsonl file") from None
    return rows


def data_held_out(paths: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """:func:`~arlgym.evaluation.held_out.held_out_report` of the data SFT trains on: the
    ``episodes.jsonl`` task ids of each collected folder under ``paths``, one report per env
    and env kwargs (from the folder's ``meta.json``). A samples file with no collection record
    beside it is reported as not measured."""
    groups: dict[str, tuple[str, dict[str, Any], list[str]]] = {}
    missing = []
    for p in paths:
        path = Path(p)
        found = [f.parent for f in sorted(path.rglob("samples.jsonl"))] if path.is_dir() \
            else [path.parent]
        for folder in found:
            meta, episodes = folder / "meta.json", folder / "episodes.jsonl"
            if not (meta.is_file() and episodes.is_file()):
                missing.append(str(folder))
                continue
            identity = json.loads(meta.read_text()).get("identity") or {}
            env_id, kwargs = identity.get("env_id", ""), identity.get("env_kwargs") or {}
            group = groups.setdefault(json.dumps([env_id, kwargs], sort_keys=True),
                                      (env_id, kwargs, []))
            group[2].extend(e["task_id"] for e in read_jsonl_lines(episodes))
    reports = [held_out_report(env_id, kwargs, ids) for env_id, kwargs, ids in groups.values()]
    if missing:
        reports.append({"env_id": "?", "not_measured": f"no meta.json and episodes.jsonl of "
                        f"`arlgym-sft collect` beside the samples in {', '.join(missing)}"})
    return reports


#: SFTRunConfig fields that do not change the checkpoint: where it goes, logging, progress, and
#: where a rerun continues from (chosen by :func:`prepare_sft_rerun`, not by the user)
_NOT_SETTINGS = ("output_dir", "logging_steps", "save_steps", "report_to", "progress",
                 "resume_from_checkpoint")

#: what a finished run leaves (written last, after the model: its presence means done)
STATS_FILE = "sft_stats.json"


def sft_checkpoints(out: str | Path) -> list[Path]:
    """The complete TRL checkpoints (``checkpoint-<step>`` with its ``trainer_state.json``)
    of an SFT folder, oldest first."""
    found = [p for p in Path(out).glob("checkpoint-*") if p.is_dir()
             and p.name.removeprefix("checkpoint-").isdigit() and (p / "trainer_state.json").exists()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("checkpoint-")))


def sft_run_status(cfg: SFTRunConfig) -> str:
    """``"finished"`` (its ``sft_stats.json`` is there), ``"partial"`` (a complete checkpoint to
    continue from) or ``"new"`` — of the run ``cfg`` writes into its ``output_dir``."""
    out = Path(cfg.output_dir)
    if (out / STATS_FILE).is_file():
        return "finished"
    return "partial" if sft_checkpoints(out) else "new"


def check_sft_dir(cfg: SFTRunConfig) -> bool:
    """Refuse to train into an ``output_dir`` holding a checkpoint (final or intermediate)
    trained with other settings (it would be overwritten, or continued, by one that its
    folder's records no longer describe). Returns whether an earlier call of these settings
    started there (its record is there), before this one records its own."""
    out = Path(cfg.output_dir)
    settings = settings_of(cfg, _NOT_SETTINGS)
    if any((out / name).exists() for name in (STATS_FILE, "model.safetensors", "config.json")) \
            or sft_checkpoints(out):
        check_settings(out / "settings.json", settings, what="an SFT checkpoint",
                       flag="--output-dir")
    return read_settings(out / "settings.json") == settings


def prepare_sft_rerun(cfg: SFTRunConfig, started_before: bool) -> tuple[str, str | None]:
    """Decide what the same ``arlgym-sft train`` does in a folder it already wrote into, after
    :func:`check_sft_dir` accepted its settings. Returns ``(status, message)``:

    Only a folder whose record holds these settings (``started_before``) is continued or
    reported finished; any other is trained afresh, nothing in it removed.

    * ``finished``: nothing changes; the caller reads ``sft_stats.json`` and does no work;
    * ``partial`` (TRL engine): ``cfg.resume_from_checkpoint`` is set to the newest complete
      checkpoint — TRL restores the weights, optimizer, schedule, RNG and log history there, so
      the log holds each step once;
    * ``new``: a fresh folder; or an earlier attempt that left no checkpoint (``--save-steps
      0``, or the prefix engine, which keeps none): it starts over, and what that attempt left
      (torn checkpoints, a half-written model) is removed so nothing of it is read back.
    """
    out = Path(cfg.output_dir)
    if not started_before:  # a fresh folder, or one without this run's record: trained afresh
        return "new", None
    status = sft_run_status(cfg)
    if status == "finished":
        return status, None
    if status == "partial" and cfg.engine == "trl":
        newest = sft_checkpoints(out)[-1]
        cfg.resume_from_checkpoint = str(newest)
        return status, f"continuing the SFT run in {out} from its newest checkpoint ({newest.name})"
    for leftover in [p for p in out.glob("checkpoint-*") if p.is_dir()]:
        shutil.rmtree(leftover, ignore_errors=True)
    for name in ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors"):
        (out / name).unlink(missing_ok=True)
    why = ("the prefix engine keeps no checkpoints" if cfg.engine == "prefix"
           else "it saved no checkpoint (--save-steps 0, or stopped before the first)")
    return "new", f"{out} holds an unfinished SFT run that cannot be continued ({why}): training it again from the start"


_TRAIN_EXTRA = ("arlgym-sft train needs the [train] extra: pip install torch==2.13.0 && "
                "pip install 'arlgym[train]'")


def train_sft(cfg: SFTRunConfig, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Fine-tune ``cfg.model`` on ``cfg.data``; returns run statistics (also in the output dir)
    with ``run``: ``"new"``, ``"continued"`` (from the folder's newest checkpoint) or
    ``"finished"`` (the folder already held this run: nothing was trained). ``say`` gets the
    one line that tells a rerun what it does (continue, or start over and why).

    Raises:
        SettingsMismatch: ``output_dir`` holds a checkpoint of other settings.
    """
    started_before = check_sft_dir(cfg)  # other settings: refused before anything is touched
    status, message = prepare_sft_rerun(cfg, started_before)
    write_settings(Path(cfg.output_dir) / "settings.json", settings_of(cfg, _NOT_SETTINGS))
    if status == "finished":
        stats = json.loads((Path(cfg.output_dir) / STATS_FILE).read_text(encoding="utf-8"))
        return {**stats, "run": "finished"}
    if message:
        say(message)
    stats = _train(cfg)
    return {**stats, "run": "continued" if status == "partial" else "new"}


def _train(cfg: SFTRunConfig) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise MissingDependency(_TRAIN_EXTRA) from e
    if has_images(cfg.data):  # a vision dataset: TRL's VLM path with the model's processor
        return train_vision_sft(cfg)
    samples = load_samples(cfg.data)
    if cfg.engine == "prefix":
        if cfg.lora_r or cfg.bf16:
            raise ConfigError("--engine prefix supports full fine-tuning in fp32 only; use --engine trl")
        from arlgym.sft.prefix_sft import train_prefix_sft

        # without TRL: importing it costs ~5 s that the prefix engine never uses
        return train_prefix_sft(cfg, samples)
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        raise MissingDependency(_TRAIN_EXTRA) from e
    model, tokenizer = load_model_and_tokenizer(cfg.model, seed=cfg.seed)
    return run_sft_trainer(cfg, model, tokenizer, samples)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    d = SFTRunConfig()
    p.add_argument("--data", nargs="+", default=list(d.data),
                   help="dataset folders (searched for samples.jsonl) or .jsonl files (default: sft_data)")
    p.add_argument("--model", default=d.model,
                   help="model spec: tiny | smollm2-135m | local dir | HF hub id (default: tiny)")
    p.add_argument("--output-dir", default=d.output_dir, help="where the checkpoint goes (loads as hf:<dir>)")
    p.add_argument("--epochs", type=float, default=d.epochs, help="training epochs (default: 3)")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (default: 1e-3, for tiny)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per-device batch (default: 32)")
    p.add_argument("--grad-accum", type=int, default=d.grad_accum)
    p.add_argument("--max-length", type=int, default=d.max_length, help="token cap per sample")
    p.add_argument("--warmup-ratio", type=float, default=d.warmup_ratio)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--lr-scheduler", default=d.lr_scheduler, help="HF scheduler name (default: cosine)")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="stop after this many steps (-1: off)")
    p.add_argument("--time-budget-minutes", type=float, default=None,
                   help="stop (and save) once this much wall-clock time has passed; the prefix "
                        "engine fits its cosine schedule to it, and a run whose steps fit within "
                        "the budget + 10%% keeps its full schedule (reproducible)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--logging-steps", type=int, default=d.logging_steps)
    p.add_argument("--save-steps", type=int, default=d.save_steps, help="checkpoint every N steps (0: only at the end)")
    p.add_argument("--lora-r", type=int, default=d.lora_r, help="LoRA rank (0: full fine-tuning)")
    p.add_argument("--bf16", action="store_true", help="bf16 mixed precision (GPU)")
    p.add_argument("--report-to", default=d.report_to, help="none | tensorboard | wandb | trackio")
    p.add_argument("--engine", choices=["trl", "prefix"], default=d.engine,
                   help="trl: TRL SFTTrainer (any model, LoRA, accelerate multi-GPU). prefix: "
                        "single-process fp32 trainer that runs the prompt prefix all samples "
                        "share (the env's instruction) once per batch; same loss, less compute")
    p.add_argument("--no-progress", action="store_true")


def train_from_args(args: argparse.Namespace) -> int:
    if hasattr(args, "rest"):
        raise MissingDependency("arlgym-sft train needs the [train] extra: pip install 'arlgym[train]'")
    cfg = SFTRunConfig(
        data=tuple(args.data), model=args.model, output_dir=args.output_dir, epochs=args.epochs,
        lr=args.lr, batch_size=args.batch_size, grad_accum=args.grad_accum,
        max_length=args.max_length, warmup_ratio=args.warmup_ratio,
        weight_decay=args.weight_decay, lr_scheduler=args.lr_scheduler,
        max_steps=args.max_steps, time_budget_minutes=args.time_budget_minutes, seed=args.seed,
        logging_steps=args.logging_steps, save_steps=args.save_steps, lora_r=args.lora_r,
        bf16=args.bf16, report_to=args.report_to, progress=not args.no_progress,
        engine=args.engine)
    import os

    speaks = os.environ.get("RANK", "0") == "0"  # under accelerate launch: one line, not one a rank
    stats = train_sft(cfg, say=lambda line: print(line, flush=True) if speaks else None)
    if not speaks:
        return 0
    if stats["run"] == "finished":
        print(f"finished: {cfg.output_dir} holds this SFT run, done ({stats['steps']} steps); "
              "nothing to do. To train again, choose another --output-dir")
        return 0
    print(f"trained {stats['steps']} steps in {stats['seconds']:.0f} s, final loss "
          f"{stats['train_loss']:.4f} -> {cfg.output_dir} (load with hf:{cfg.output_dir})")
    held_out = data_held_out(cfg.data)
    (Path(cfg.output_dir) / "held_out.json").write_text(json.dumps(held_out, indent=2))
    for report in held_out:
        print(f"{report['env_id']}: {format_held_out(report)}")
    return 0
