"""The Qwen-VL path (the paper configs' model family): 3-D multimodal rotary positions the
model derives from ids, image grid and ``mm_token_type_ids``. A tiny Qwen3-VL is built from a
config; its processor is a stand-in doing Qwen-VL's processing (``<|image_pad|>`` expanded to
grid/4 tokens, ``image_grid_thw``, flattened patches, ``mm_token_type_ids``), because
transformers' Qwen3VLProcessor insists on a video processor, which needs torchvision (not a
dependency of arlgym). Left-padded batched sampling and the trainer's forward agree to 1e-5."""

from __future__ import annotations

import pytest

from arlgym.policies import SamplingParams
from arlgym.rl.batching import token_samples, uses_mrope
from arlgym.rollout import collect

torch = pytest.importorskip("torch")


class QwenStyleProcessor:
    def __init__(self) -> None:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        from arlgym.models import load_processor

        tok = load_processor("tiny-vl").tokenizer  # template blocks already split at the image
        tok.add_special_tokens({"additional_special_tokens": ["<|vision_start|>", "<|vision_end|>",
                                                              "<|image_pad|>"]})
        self.tokenizer = tok
        self.image_processor = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2,
                                                        merge_size=2, min_pixels=64 * 64,
                                                        max_pixels=128 * 128)
        self.image_id = tok.convert_tokens_to_ids("<|image_pad|>")

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        body = "".join("<|vision_start|><|image_pad|><|vision_end|>" if p["type"] == "image"
                       else p["text"] for p in messages[0]["content"])
        return f"<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"

    def __call__(self, text, images, return_tensors="pt", add_special_tokens=False):
        from transformers import BatchFeature

        img = self.image_processor(images=images, return_tensors="pt")
        n = int(img["image_grid_thw"][0].prod()) // 4
        ids = torch.tensor([self.tokenizer(text.replace("<|image_pad|>", "<|image_pad|>" * n),
                                           add_special_tokens=False)["input_ids"]])
        return BatchFeature({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                             "mm_token_type_ids": (ids == self.image_id).long(), **img})


def test_qwen3_vl_sampling_and_trainer_forward_agree():
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from arlgym.models import tiny_config
    from arlgym.policies.hf import HFPolicy
    from arlgym.rl.trainer import sample_logprobs

    proc = QwenStyleProcessor()
    tok = proc.tokenizer
    text = tiny_config(len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).to_dict()
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                               "mrope_section": [4, 6, 6], "mrope_interleaved": True}
    ids = tok.convert_tokens_to_ids
    cfg = Qwen3VLConfig(
        text_config=text, tie_word_embeddings=True,
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                       "patch_size": 16, "out_hidden_size": 128, "num_position_embeddings": 64,
                       "deepstack_visual_indexes": []},
        image_token_id=proc.image_id, vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"), video_token_id=ids("<|vision_end|>"))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen3VLForConditionalGeneration(cfg).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    assert uses_mrope(model)
    policy = HFPolicy(model, tokenizer=tok, processor=proc, batch_size=8)
    trajs = collect("arl/SokobanVision-v0", policy, num_tasks=2, group_size=1,
                    sampling=SamplingParams(temperature=1.0, max_new_tokens=6, seed=1),
                    env_kwargs={"max_steps": 2})
    samples = token_samples(trajs)
    assert len({len(s.prompt_ids) for s in samples}) > 1  # left padding in play
    assert set(samples[0].image_inputs) == {"pixel_values", "image_grid_thw", "mm_token_type_ids"}
    with torch.no_grad():
        logp, _, _ = sample_logprobs(model, samples, tok.pad_token_id, "cpu", temperature=1.0,
                                     with_entropy=False, share_prompts=False)
    for row, s in enumerate(samples):
        torch.testing.assert_close(logp[row, : len(s.response_ids)], torch.tensor(s.rollout_logprobs),
                                   atol=1e-5, rtol=0)
