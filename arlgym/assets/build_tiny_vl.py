"""Build the processor of the ``tiny-vl`` model (tokenizer + image processor) as package data.

``tiny-vl`` is the ``tiny`` model with eyes: an Idefics3/SmolVLM-style image-text-to-text model
(SigLIP-style vision tower → pixel-shuffle connector → the ``tiny`` Qwen3 text model). Its
processor is written here from local parts only, nothing downloaded:

* the ``tiny`` tokenizer (``arlgym/assets/tiny_tokenizer``), extended with Idefics3's image
  tokens as special tokens (``<fake_token_around_image>``, ``<image>``, ``<end_of_utterance>``,
  ``<global-img>``) and with the template blocks that contain the ``<image>`` placeholder split
  at it: the processor replaces ``<image>`` by the image's tokens before tokenising, so the
  block that spans the placeholder no longer matches, and its two halves must be tokens of
  their own (otherwise a vision prompt costs ~300 BPE tokens instead of ~40);
* a ChatML template that renders list content (``{"type": "image"}`` → ``<image>``,
  ``{"type": "text"}`` → its text), with ``{% generation %}`` around assistant content;
* Idefics3's PIL image processor: no splitting, longest edge resized to
  :data:`IMAGE_SIZE` = 96 px (a 6×6 room of 16-px tiles is 96 px: kept as is, nearest-neighbour
  resampling so tiles stay crisp; larger rooms are downscaled), normalised to [-1, 1]. With the
  vision tower's 8-px patches and pixel shuffle 2, the image becomes 36 tokens: one per cell of
  a 6×6 room.

Run from the repository root (deterministic; seconds)::

    python -m arlgym.assets.build_tiny_vl           # writes arlgym/assets/tiny_vl
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from arlgym.models import IMAGE_SIZE, PATCH_SIZE, SCALE_FACTOR

__all__ = ["IMAGE_SIZE", "PATCH_SIZE", "SCALE_FACTOR", "IMAGE_SEQ_LEN", "IMAGE_TOKENS",
           "CHAT_TEMPLATE", "build_processor", "main"]

#: image tokens per image: (96 / 8)^2 / 2^2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
IMAGE_TOKENS = ("<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>")
DEFAULT_OUT = Path(__file__).resolve().parent / "tiny_vl"
#: the shipped ``tiny`` tokenizer this processor extends (package data beside this file)
TINY_TOKENIZER = Path(__file__).resolve().parent / "tiny_tokenizer"

_RENDER = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)
#: ChatML over string or list content; assistant content inside {% generation %}.
CHAT_TEMPLATE = (
    _RENDER
    + "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- render(message['content']) + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + render(message['content']) + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_processor() -> Any:
    """The tiny-vl processor (an ``Idefics3Processor``), built from the shipped tiny tokenizer."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    tok = AutoTokenizer.from_pretrained(str(TINY_TOKENIZER))
    tok.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    pieces: list[str] = []
    for added in tok.added_tokens_decoder.values():
        text = added.content
        if "<image>" in text and text != "<image>":
            pieces += [p for p in text.split("<image>") if p and p not in pieces]
    tok.add_tokens([AddedToken(p, special=False, normalized=False) for p in pieces])
    tok.chat_template = CHAT_TEMPLATE
    image_processor = Idefics3ImageProcessorPil(
        do_resize=True, size={"longest_edge": IMAGE_SIZE}, max_image_size={"longest_edge": IMAGE_SIZE},
        do_image_splitting=False, resample=0,  # 0 = nearest: tiles stay crisp
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    return Idefics3Processor(image_processor=image_processor, tokenizer=tok,
                             image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    processor = build_processor()
    args.out.mkdir(parents=True, exist_ok=True)
    processor.save_pretrained(args.out)
    (args.out / "README.md").write_text(
        "Processor of arlgym's `tiny-vl` model (tokenizer + Idefics3 image processor), written "
        "by `python -m arlgym.assets.build_tiny_vl`; do not edit by hand.\n", encoding="utf-8")
    print(f"tiny-vl processor ({len(processor.tokenizer)} tokens) -> {args.out}")
    return args.out


if __name__ == "__main__":
    main()
