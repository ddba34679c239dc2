"""tiny-vl: built offline from a config with the shipped processor; what the model reads."""

from __future__ import annotations

import numpy as np
import pytest

from arlgym.assets.build_tiny_vl import IMAGE_SEQ_LEN, build_processor
from arlgym.models import is_vision_model, load_model_and_tokenizer, load_processor, model_path
from arlgym.policies.hf import vision_messages, vision_prompt_inputs

torch = pytest.importorskip("torch")


def test_tiny_vl_is_a_small_idefics3_with_the_tiny_text_model():
    model, tokenizer = load_model_and_tokenizer("tiny-vl", seed=0)
    assert type(model).__name__ == "Idefics3ForConditionalGeneration" and is_vision_model(model)
    assert 0.8e6 < sum(p.numel() for p in model.parameters()) < 1.2e6
    assert model.config.text_config.model_type == "qwen3"
    assert model.config.text_config.vocab_size == len(tokenizer)
    again, _ = load_model_and_tokenizer("tiny-vl", seed=0)
    other, _ = load_model_and_tokenizer("tiny-vl", seed=1)
    p0, p1, p2 = (next(iter(m.parameters())) for m in (model, again, other))
    assert torch.equal(p0, p1) and not torch.equal(p0, p2)
    tiny, _ = load_model_and_tokenizer("tiny")
    assert not is_vision_model(tiny) and load_processor("tiny") is None


def test_shipped_processor_equals_a_fresh_build():
    shipped, fresh = load_processor("tiny-vl"), build_processor()
    assert shipped.tokenizer.get_vocab() == fresh.tokenizer.get_vocab()
    assert shipped.image_seq_len == fresh.image_seq_len == IMAGE_SEQ_LEN == 36
    assert shipped.tokenizer.chat_template == fresh.tokenizer.chat_template


def test_a_vision_prompt_is_short_and_holds_one_token_per_cell(vision_prompts):
    processor = load_processor("tiny-vl")
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    for prompt in vision_prompts:
        ids, inputs = vision_prompt_inputs(processor, prompt)
        assert ids.count(image_id) == 36  # 6x6 room: one image token per cell
        assert len(ids) < 100  # template blocks stay single tokens around the image
        assert tuple(inputs["pixel_values"].shape) == (1, 1, 3, 96, 96)
        assert set(inputs) == {"pixel_values", "pixel_attention_mask"}
    # the image tokens sit where the text said <image>
    text = processor.tokenizer.decode(ids)
    before, _, after = vision_prompts[-1]["text"].partition("<image>")
    assert before in text and after in text
    assert text.index(before) < text.index("<image>") < text.index(after)


def test_vision_messages_place_the_image():
    assert vision_messages({"text": "a<image>b", "image": None})[0]["content"] == [
        {"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    assert vision_messages({"text": "no placeholder"})[0]["content"][0] == {"type": "image"}


def test_model_path_materialises_model_and_processor(tmp_path, monkeypatch):
    monkeypatch.setenv("ARLGYM_CACHE", str(tmp_path))
    path = model_path("tiny-vl")
    assert (path / "processor_config.json").is_file() and (path / "config.json").is_file()
    model, _ = load_model_and_tokenizer(str(path))
    assert is_vision_model(model) and load_processor(str(path)) is not None
    ref, _ = load_model_and_tokenizer("tiny-vl")
    for a, b in zip(model.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_image_pixels_reach_the_model_unchanged(vision_prompts):
    """Nearest-neighbour, no resize at 96 px: the normalised pixels are the env's image."""
    processor = load_processor("tiny-vl")
    _, inputs = vision_prompt_inputs(processor, vision_prompts[0])
    pixels = inputs["pixel_values"][0, 0].permute(1, 2, 0).numpy()
    expected = vision_prompts[0]["image"].astype(np.float32) / 255 * 2 - 1
    np.testing.assert_allclose(pixels, expected, atol=1e-6)
