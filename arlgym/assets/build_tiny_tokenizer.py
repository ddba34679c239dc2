"""Train the tokenizer of the ``tiny`` model on arlgym's own env text and save it as package data.

Why our own tokenizer: no tokenizer can be fetched offline, and a general-purpose one would spend
a 50k-row embedding on a model with 0.8M parameters. A byte-level BPE trained on the prompts
and expert answers the model will actually read keeps the vocabulary near 500 and the Sokoban
prompt near 200 tokens, while every byte sequence still round-trips exactly.

Design rules the files satisfy (checked by ``tests/unit/test_models.py``):

* each grid symbol ``# _ O X √ P S`` is its own pre-token, so a grid cell is always exactly one
  token (the model sees the board cell by cell; merges like ``###`` never exist);
* ``<think> </think> <action> </action>`` are single (non-special) added tokens, so decoding
  with ``skip_special_tokens=True`` keeps them for the env's parser;
* ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (EOS) are special tokens;
* digits are split one per token (step counters never merge into odd chunks);
* every fixed sentence block of the prompt templates (``arlgym.core.prompts``: the text between
  two placeholders, at least :data:`MIN_PHRASE_CHARS` long) is one added token. A 0.8M model
  cannot afford to re-read 300 tokens of boilerplate each turn: a first-turn Sokoban prompt is
  ~55 tokens instead of ~350, which makes SFT and RL ~4x cheaper per sample and lets attention
  concentrate on the board. The text is unchanged — decoding gives the same bytes back;
* the chat template is Qwen-style ChatML with ``{% generation %}`` markers around assistant
  content, which TRL's ``assistant_only_loss=True`` needs.

Run from the repository root (takes a few seconds; the output is deterministic)::

    python -m arlgym.assets.build_tiny_tokenizer            # writes arlgym/assets/tiny_tokenizer
    python -m arlgym.assets.build_tiny_tokenizer --out /tmp/tok --episodes 50

Later envs add text by appending a function to :data:`CORPORA`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from arlgym.core import prompts
from arlgym.errors import UnsolvableError
from arlgym.models import chatml_template

__all__ = [
    "GRID_SYMBOLS",
    "TAG_TOKENS",
    "SPECIAL_TOKENS",
    "PAD_TOKEN",
    "EOS_TOKEN",
    "CHAT_TEMPLATE",
    "CORPORA",
    "sokoban_corpus",
    "template_phrases",
    "build_tokenizer",
    "main",
]

#: Characters of the Sokoban text grid; each must be exactly one token.
GRID_SYMBOLS: tuple[str, ...] = ("#", "_", "O", "X", "√", "P", "S")
#: Response-format tags the env's parser looks for; one token each, kept when decoding.
TAG_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<action>", "</action>")
PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
#: Special tokens, in id order (ids 0, 1, 2).
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, "<|im_start|>", EOS_TOKEN)
DEFAULT_VOCAB_SIZE = 600
#: Literal template blocks shorter than this stay ordinary BPE text.
MIN_PHRASE_CHARS = 24
DEFAULT_OUT = Path(__file__).resolve().parent / "tiny_tokenizer"

# ChatML as Qwen renders it. The assistant turn's content and its <|im_end|> sit inside
# {% generation %} so that TRL's assistant-only loss trains the model to emit EOS; the newline
# after it is template glue, outside the mask.
CHAT_TEMPLATE = chatml_template()


def sokoban_corpus(episodes: int = 300, seed: int = 0) -> Iterator[str]:
    """Prompts and expert answers from Sokoban episodes (text and vision templates).

    Rooms of several sizes and box counts are played by the expert, with a random move mixed in
    now and then so that histories and failure feedback vary; every prompt along the way (with
    its history window) and every expert response is yielded.
    """
    import gymnasium as gym
    import numpy as np

    rng = np.random.default_rng(seed)
    moves = ("up", "down", "left", "right")
    layouts = [((6, 6), 1), ((6, 6), 2), ((7, 7), 1), ((8, 8), 2)]
    for i in range(episodes):
        dim_room, num_boxes = layouts[i % len(layouts)]
        env_id = "arl/SokobanVision-v0" if i % 10 == 9 else "arl/Sokoban-v0"
        env = gym.make(env_id, dim_room=dim_room, num_boxes=num_boxes, max_steps=12)
        prompt, _ = env.reset(seed=seed * 100_003 + i)
        done = False
        while not done:
            yield prompt["text"] if isinstance(prompt, dict) else prompt
            try:
                response = env.unwrapped.expert_response()
                yield response
            except UnsolvableError:  # a random move below pushed a box into a dead end
                response = ""
            if not response or rng.random() < 0.15:
                move = moves[rng.integers(len(moves))]
                response = f"<think>try {move}</think><action>{move}</action>"
            prompt, _, terminated, truncated, _ = env.step(response)
            done = terminated or truncated
        env.close()


#: name -> corpus function ``f(episodes) -> texts``; the tokenizer trains on all of them.
CORPORA: dict[str, Callable[[int], Iterator[str]]] = {"sokoban": sokoban_corpus}


def template_phrases(min_chars: int = MIN_PHRASE_CHARS) -> list[str]:
    """The fixed text blocks of every prompt template, longest first.

    A template is split at its ``{placeholders}``; each literal block of at least ``min_chars``
    characters becomes one token. Blocks are taken whole (never trimmed), so the tokens tile the
    rendered prompt exactly around the variable parts (board, counters, history).
    """
    from string import Formatter

    templates = [v for v in vars(prompts).values() if isinstance(v, prompts.PromptTemplate)]
    phrases: set[str] = set()
    for template in templates:
        for form in (template.first, template.later):
            for literal, _field, _spec, _conv in Formatter().parse(form):
                # Formatter un-escapes "{{" to "{", exactly as str.format renders it
                if len(literal) >= min_chars:
                    phrases.add(literal)
    return sorted(phrases, key=lambda p: (-len(p), p))


def _pre_tokenizer():
    """Grid symbols isolated, digits split, then GPT-2 style byte-level words.

    A grid symbol is cut out unless a lowercase letter follows it, so board cells are always
    single tokens while words such as "Sokoban", "Once" or "Player" stay whole (a board never
    touches a lowercase letter: rows end in a newline or a quote).
    """
    from tokenizers import Regex, pre_tokenizers

    symbols = "[" + "".join(GRID_SYMBOLS) + "](?![a-z])"
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(symbols), behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def build_tokenizer(texts: list[str], vocab_size: int = DEFAULT_VOCAB_SIZE):
    """Train the BPE and wrap it as a ``PreTrainedTokenizerFast`` with the chat template.

    Args:
        texts: training text (prompts and responses).
        vocab_size: size of the BPE part, specials and tags included; the template phrases
            come on top.

    Returns:
        A ``transformers.PreTrainedTokenizerFast``, not yet saved.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    # Specials and tags are extracted before pre-tokenisation, so the BPE never sees them.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers_alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.train_from_iterator(_without_tags(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tok.add_tokens([AddedToken(p, special=False, normalized=False) for p in template_phrases()])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )


def _without_tags(texts: list[str]) -> Iterator[str]:
    """Training text with template blocks and tags cut out, so no merges are spent on them."""
    phrases = template_phrases()
    for text in texts:
        for phrase in phrases:
            text = text.replace(phrase, " ")
        for tag in TAG_TOKENS:
            text = text.replace(tag, " ")
        yield text


def pre_tokenizers_alphabet() -> list[str]:
    """All 256 byte-level characters, so any byte sequence has a token."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel.alphabet()


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--episodes", type=int, default=300, help="episodes per env corpus")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    args = parser.parse_args(argv)

    texts: list[str] = []
    for name, corpus in CORPORA.items():
        chunk = list(corpus(args.episodes))
        print(f"corpus {name}: {len(chunk)} texts, {sum(map(len, chunk))} chars")
        texts += chunk
    tokenizer = build_tokenizer(texts, vocab_size=args.vocab_size)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(args.out)
    (args.out / "README.md").write_text(
        "Tokenizer of arlgym's `tiny` model, written by `python -m "
        "arlgym.assets.build_tiny_tokenizer`; do not edit by hand.\n"
    )
    # Record what the files were built from, so a rebuild can be checked for drift.
    meta = {"vocab_size": len(tokenizer), "episodes": args.episodes, "corpora": list(CORPORA)}
    (args.out / "build_info.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {args.out} (vocab {len(tokenizer)}, digest {_digest(args.out)})")
    return args.out


if __name__ == "__main__":
    main()
