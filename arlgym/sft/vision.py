"""Behaviour cloning of vision-language models (``arlgym-sft train`` on vision data).

A dataset collected on a vision env (``arlgym-sft collect --env arl/SokobanVision-v0``) holds
multimodal ``messages`` and an ``images`` column of PNG paths. :func:`train_vision_sft` trains a
VLM (``tiny-vl``, SmolVLM/Idefics3, Qwen-VL, ...) on it with TRL's ``SFTTrainer`` VLM path: the
processor is the processing class, TRL's vision collator renders each conversation with the
processor's chat template, expands the image tokens and computes the image tensors batch by
batch, and ``assistant_only_loss`` trains the response and its end-of-turn token only. The
tokens it trains on are the ones the HF policy samples from (same chat template, same
processor, no extra special tokens; tested).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arlgym.errors import ConfigError
from arlgym.models import is_vision_model, load_model_and_tokenizer, load_processor
from arlgym.sft.trl_run import run_sft_trainer

__all__ = ["has_images", "load_vision_samples", "train_vision_sft"]


def _sample_files(paths: tuple[str, ...] | list[str]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        found = sorted(path.rglob("samples.jsonl")) if path.is_dir() else [path]
        if not found or not all(f.is_file() for f in found):
            raise ConfigError(f"no samples found at {p}; run `arlgym-sft collect --out {p}` first")
        files += found
    return files


def has_images(paths: tuple[str, ...] | list[str]) -> bool:
    """Whether the first sample of the data names images (a vision dataset)."""
    for f in _sample_files(paths):
        with f.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    try:
                        return bool(json.loads(line).get("images"))
                    except (json.JSONDecodeError, AttributeError):
                        return False
    return False


def load_vision_samples(paths: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """``{"messages", "images": [PIL.Image]}`` rows of vision datasets (PNG paths resolved
    against each ``samples.jsonl``'s folder)."""
    from PIL import Image

    out: list[dict[str, Any]] = []
    for f in _sample_files(paths):
        with f.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                names = row.get("images") or []
                if not names:
                    raise ConfigError(f"{f}:{n}: a vision dataset line has no 'images'; do not mix "
                                      "text and vision datasets in one --data")
                images = []
                for name in names:
                    png = f.parent / name
                    if not png.is_file():
                        raise ConfigError(f"{f}:{n}: image {png} is missing; collect the data "
                                          "again with `arlgym-sft collect`")
                    with Image.open(png) as img:
                        images.append(img.convert("RGB"))
                # one content type per column (Arrow): string contents become text parts
                messages = [{"role": m["role"], "content": (
                    [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str)
                    else m["content"])} for m in row["messages"]]
                out.append({"messages": messages, "images": images})
    if not out:
        raise ConfigError(f"the data at {list(paths)} holds no samples")
    return out


def train_vision_sft(cfg: Any) -> dict[str, Any]:
    """Fine-tune the VLM ``cfg.model`` (an :class:`~arlgym.sft.train.SFTRunConfig`) on vision
    data with TRL's ``SFTTrainer``; returns run statistics (also in ``sft_stats.json``)."""
    if cfg.engine == "prefix":
        raise ConfigError("--engine prefix is text-only; vision data trains with --engine trl")
    samples = load_vision_samples(cfg.data)
    model, _ = load_model_and_tokenizer(cfg.model, seed=cfg.seed)
    processor = load_processor(cfg.model)
    if processor is None or not is_vision_model(model):
        raise ConfigError(f"--model {cfg.model!r} is not a vision-language model, but the data "
                          "holds images; use --model tiny-vl or a VLM checkpoint")
    return run_sft_trainer(
        cfg, model, processor, samples,
        max_length=None,  # never cut image tokens off
        remove_unused_columns=False,
        # TRL turns activation checkpointing on by default; for small models it only costs
        # compute (measured on tiny-vl: a step took several times longer with it)
        gradient_checkpointing=bool(getattr(cfg, "gradient_checkpointing", False)),
    )
