"""Model/tokenizer resolution (``arlgym.models``) and the shipped tiny tokenizer.

Run: ``pytest tests/unit/test_models.py -m "not slow"`` (the smollm2 test is ``slow``: its first
run dequantises the GGUF file, ~40 s on two cores).
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.assets.build_tiny_tokenizer import GRID_SYMBOLS, SPECIAL_TOKENS, TAG_TOKENS
from arlgym.errors import ArlgymError, ModelNotFound

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from arlgym.models import load_model_and_tokenizer, load_tokenizer, models_cache_dir  # noqa: E402


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return load_tokenizer("tiny")


def _sokoban_prompts(turns: int = 0, seed: int = 0) -> list[str]:
    """The prompt at reset and after each of ``turns`` expert moves."""
    env = gym.make("arl/Sokoban-v0")
    prompt, _ = env.reset(seed=seed)
    prompts = [prompt]
    for _ in range(turns):
        prompt, *_ = env.step(env.unwrapped.expert_response())
        prompts.append(prompt)
    return prompts


# --- tiny tokenizer --------------------------------------------------------------------------
@pytest.mark.parametrize("piece", GRID_SYMBOLS + TAG_TOKENS + SPECIAL_TOKENS)
def test_symbols_and_tags_are_single_tokens(tiny_tokenizer, piece):
    assert len(tiny_tokenizer.encode(piece, add_special_tokens=False)) == 1


def test_grid_cells_are_one_token_each(tiny_tokenizer):
    grid = "######\n#_√SO#\n#XP__#\n######"
    tokens = tiny_tokenizer.convert_ids_to_tokens(
        tiny_tokenizer.encode(grid, add_special_tokens=False)
    )
    assert len(tokens) == len(grid)  # one token per cell and per newline


def test_digits_are_split(tiny_tokenizer):
    ids = tiny_tokenizer.encode("12345", add_special_tokens=False)
    assert len(ids) == 5


@pytest.mark.parametrize("turns", [0, 2])
def test_sokoban_prompt_round_trips(tiny_tokenizer, turns):
    prompt = _sokoban_prompts(turns)[-1]
    ids = tiny_tokenizer.encode(prompt, add_special_tokens=False)
    assert tiny_tokenizer.decode(ids) == prompt
    print(f"tokens per Sokoban prompt ({turns}-turn history): {len(ids)}")


def test_expert_response_round_trips_without_special_tokens(tiny_tokenizer):
    env = gym.make("arl/Sokoban-v0")
    env.reset(seed=1)
    response = env.unwrapped.expert_response()
    ids = tiny_tokenizer.encode(response, add_special_tokens=False) + [
        tiny_tokenizer.eos_token_id
    ]
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == response


def test_unseen_unicode_round_trips(tiny_tokenizer):
    text = "héllo wörld ✓ 日本"
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(text, add_special_tokens=False)) == text


def test_chat_template_and_assistant_mask(tiny_tokenizer):
    tok = tiny_tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    user = [{"role": "user", "content": "hi"}]
    rendered = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    answer = "<think>go</think><action>up</action>"
    out = tok.apply_chat_template(
        user + [{"role": "assistant", "content": answer}],
        tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
    )
    masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    # The assistant mask covers exactly the answer and its EOS (what TRL's assistant-only
    # loss trains on).
    assert tok.decode(masked) == answer + "<|im_end|>"


# --- tiny model ------------------------------------------------------------------------------
def test_tiny_model_is_deterministic_from_seed():
    rng_before = torch.random.get_rng_state()
    m0, tok = load_model_and_tokenizer("tiny", seed=0)
    assert torch.equal(rng_before, torch.random.get_rng_state())  # global RNG untouched
    m0b, _ = load_model_and_tokenizer("tiny", seed=0)
    m1, _ = load_model_and_tokenizer("tiny", seed=1)
    sd0, sd0b, sd1 = m0.state_dict(), m0b.state_dict(), m1.state_dict()
    assert all(torch.equal(sd0[k], sd0b[k]) for k in sd0)
    assert not all(torch.equal(sd0[k], sd1[k]) for k in sd0)
    n_params = sum(p.numel() for p in m0.parameters())
    print(f"tiny params: {n_params}")
    assert 700_000 < n_params < 1_000_000
    assert m0.config.model_type == "qwen3" and m0.config.tie_word_embeddings
    assert m0.config.vocab_size == len(tok)
    assert next(m0.parameters()).dtype == torch.float32


def test_tiny_dtype():
    model, _ = load_model_and_tokenizer("tiny", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16


# --- errors ----------------------------------------------------------------------------------
def test_unknown_hub_id_offline_is_our_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound) as info:
        load_model_and_tokenizer("no-such-org/no-such-model-xyz")
    message = str(info.value)
    assert "tiny" in message and "smollm2-135m" in message and "HF_HUB_OFFLINE" in message
    assert isinstance(info.value, ArlgymError) and isinstance(info.value, ValueError)
    assert info.value.__cause__ is None  # no chained traceback from huggingface_hub


@pytest.mark.parametrize("name", ["not a valid id!", "./no/such/dir", ""])
def test_bad_names_are_our_error(monkeypatch, name):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound):
        load_tokenizer(name)


def test_local_directory_loads(tmp_path):
    model, tok = load_model_and_tokenizer("tiny", seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_model_and_tokenizer(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  again.state_dict().values(), strict=True))
    assert len(tok2) == len(tok)


# --- smollm2 ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_loads_offline_and_caches(monkeypatch):
    pytest.importorskip("gguf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    model, tok = load_model_and_tokenizer("smollm2-135m")
    first = time.perf_counter() - start
    cached = models_cache_dir() / "smollm2-135m"
    written = {p: p.stat().st_mtime_ns for p in cached.rglob("*")}
    start = time.perf_counter()
    model, tok = load_model_and_tokenizer("smollm2-135m")
    second = time.perf_counter() - start
    print(f"smollm2-135m: first load {first:.1f} s (conversion if not cached), cached {second:.2f} s")
    # the second load reads the converted checkpoint: nothing is converted or written again
    assert any(p.suffix == ".safetensors" for p in written)
    assert {p: p.stat().st_mtime_ns for p in cached.rglob("*")} == written
    assert model.config.model_type == "llama" and len(tok) == 49152
    assert tok.eos_token == "<|im_end|>"
    assert "{% generation %}" in tok.chat_template or "{%- generation %}" in tok.chat_template
