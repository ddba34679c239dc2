"""RL on vision turns: the trainer's forward pass reproduces the sampled log-probs with the
image inputs each turn carries; shared-prompt batching stays off; JSONL leaves tensors out; SFT
trains on the very tokens the policy samples."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from arlgym.policies import SamplingParams
from arlgym.rl.batching import pack, token_samples
from arlgym.rollout import collect

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def vision_trajs(vl_policy):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=1)
    return collect("arl/SokobanVision-v0", vl_policy, num_tasks=2, group_size=2, sampling=sampling,
                   env_kwargs={"max_steps": 3})


def test_trainer_forward_reproduces_sampled_logprobs_on_vision_turns(vl_policy, vision_trajs):
    from arlgym.rl.trainer import sample_logprobs
    from arlgym.rl.update import micro_batches

    samples = token_samples(vision_trajs)
    assert len(samples) >= 8 and all(s.image_inputs is not None for s in samples)
    assert len({len(s.prompt_ids) for s in samples}) > 1  # first turns and turns with history
    pad = vl_policy.tokenizer.pad_token_id
    # micro-batches as the trainer cuts them (share_prompts requested: must be ignored)
    for mb in micro_batches(samples, list(range(len(samples))), 400, share_prompts=False):
        sub = [samples[i] for i in mb]
        with torch.no_grad():
            logp, _, mask = sample_logprobs(vl_policy.model, sub, pad, "cpu", temperature=1.0,
                                            with_entropy=False, share_prompts=True)
        for row, s in enumerate(sub):
            n = len(s.response_ids)
            torch.testing.assert_close(logp[row, :n], torch.tensor(s.rollout_logprobs),
                                       atol=1e-5, rtol=0)
            assert mask[row].sum() == n


def test_equal_prompt_ids_with_other_images_are_not_shared(vl_policy, vision_trajs):
    """Two first turns of different rooms have identical prompt ids (the image is placeholder
    tokens): batched with sharing requested, each keeps its own image's log-probs."""
    from arlgym.rl.trainer import sample_logprobs

    firsts = [s for s in token_samples(vision_trajs) if s.step == 0]
    a, b = firsts[0], firsts[-1]
    assert a.prompt_ids == b.prompt_ids
    assert not torch.equal(a.image_inputs["pixel_values"], b.image_inputs["pixel_values"])
    swapped = copy.copy(b)
    swapped.response_ids = a.response_ids
    with torch.no_grad():
        logp, _, _ = sample_logprobs(vl_policy.model, [a, swapped], vl_policy.tokenizer.pad_token_id,
                                     "cpu", temperature=1.0, with_entropy=False, share_prompts=True)
    n = len(a.response_ids)
    torch.testing.assert_close(logp[0, :n], torch.tensor(a.rollout_logprobs), atol=1e-5, rtol=0)
    assert not torch.allclose(logp[0, :n], logp[1, :n])


def test_pack_lays_out_image_inputs_and_refuses_mixed_batches(vision_trajs):
    samples = token_samples(vision_trajs)[:3]
    batch = pack(samples, 0)
    assert batch.image_inputs["pixel_values"].shape[0] == 3
    text = copy.copy(samples[0])
    text.image_inputs = None
    with pytest.raises(ValueError, match="mixes"):
        pack([samples[0], text], 0)


def test_jsonl_leaves_images_and_tensors_out(vision_trajs, tmp_path):
    from arlgym.rollout import load_jsonl, save_jsonl

    step = vision_trajs[0].steps[0]
    assert isinstance(step.image, np.ndarray) and step.image_inputs is not None
    save_jsonl(vision_trajs, tmp_path / "t.jsonl")
    back = load_jsonl(tmp_path / "t.jsonl")
    assert back[0].steps[0].image is None and back[0].steps[0].image_inputs is None
    assert back[0].steps[0].prompt_token_ids == step.prompt_token_ids


def test_trainer_turns_shared_prompts_off_for_a_vlm(tmp_path):
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config(["--env_id", "arl/SokobanVision-v0", "--model", "tiny-vl",
                              "--num_tasks", "1", "--group_size", "2", "--log_with", "none",
                              "--output_dir", str(tmp_path)])
    trainer = Trainer(cfg)
    assert cfg.share_prompts and not trainer.share_prompts and trainer.processor is not None
    trainer.collector.close()


def test_sft_trains_on_the_tokens_the_policy_samples(vl_policy, vision_prompts):
    """TRL's VLM collator (arlgym-sft train) tokenises a collected sample into exactly the
    policy's prompt ids followed by the response ids and EOS, with the same pixels, and its
    labels cover the response and EOS only."""
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from arlgym.policies.hf import vision_messages

    prompt = vision_prompts[-1]
    response = "<think>plan: up</think><action>up</action>"
    sampled = vl_policy.generate([prompt], SamplingParams(max_new_tokens=1, seed=0))[0]
    response_ids = vl_policy.tokenizer(response, add_special_tokens=False)["input_ids"]
    from PIL import Image

    example = {"messages": vision_messages(prompt) + [
        {"role": "assistant", "content": [{"type": "text", "text": response}]}],
        "images": [Image.fromarray(prompt["image"])]}
    collator = DataCollatorForVisionLanguageModeling(processor=vl_policy.processor,
                                                     assistant_only_loss=True)
    out = collator([example])
    ids = out["input_ids"][0].tolist()
    p = len(sampled.prompt_token_ids)
    eos = vl_policy.tokenizer.eos_token_id
    assert ids[:p] == sampled.prompt_token_ids
    assert ids[p : p + len(response_ids) + 1] == response_ids + [eos]
    labels = out["labels"][0].tolist()
    assert [t for t in labels if t != -100] == response_ids + [eos]
    torch.testing.assert_close(out["pixel_values"], sampled.image_inputs["pixel_values"])
