"""The image-slot rule (arlgym/policies/special_tokens.py): a VLM never samples an image-slot
token, a response that holds one anyway is trained up to it, and model-written image-slot text
in a later prompt is shown as "(image)" — so no model output can crash a training step.

Run: ``pytest tests/unit/vision/test_image_slot_rule.py``.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.policies import SamplingParams
from arlgym.policies.special_tokens import (
    escape_image_text,
    image_slot_token_ids,
    image_slot_token_strings,
    truncate_at,
)

torch = pytest.importorskip("torch")


def test_slot_tokens_of_tiny_vl(vl_policy):
    proc = vl_policy.processor
    ids = image_slot_token_ids(proc, vl_policy.model)
    assert proc.image_token_id in ids and proc.fake_image_token_id in ids
    assert vl_policy.suppressed_token_ids == ids
    assert "<image>" in image_slot_token_strings(proc)
    # a text policy masks nothing
    assert image_slot_token_ids(None) == frozenset()


def test_escape_keeps_only_the_last_placeholder():
    slots = ("<fake_token_around_image>", "<image>")
    text = "Action 1: 'up<image>' and <fake_token_around_image>\nnow:\n<image>\nchoose"
    out = escape_image_text(text, slots, "<image>")
    assert out == "Action 1: 'up(image)' and (image)\nnow:\n<image>\nchoose"
    assert escape_image_text("no slot here", slots, "<image>") == "no slot here"


def test_truncate_at_cuts_ids_and_logprobs():
    assert truncate_at([5, 6, 9, 7], [-1.0, -2.0, -3.0, -4.0], frozenset({9})) == \
        ([5, 6], [-1.0, -2.0], True)
    assert truncate_at([5, 6], None, frozenset({9})) == ([5, 6], None, False)
    assert truncate_at([9], [-1.0], frozenset({9})) == ([], [], True)


def test_sampling_never_draws_an_image_slot_token(vl_policy, vision_prompts):
    """With the image token pushed to the top of the distribution, greedy decoding would emit
    it first; the policy masks it, and the recorded log-probs stay those of the unmasked model
    (what the trainer recomputes)."""
    image_id = vl_policy.processor.image_token_id
    head = vl_policy.model.lm_head

    def boost(_module, _inputs, out):
        out = out.clone()
        out[..., image_id] += 50.0
        return out

    handle = head.register_forward_hook(boost)
    try:
        done = vl_policy.generate(vision_prompts[:2], SamplingParams(temperature=0.0, max_new_tokens=4))
        suppressed = vl_policy.suppressed_token_ids
        vl_policy.suppressed_token_ids = frozenset()
        try:
            unmasked = vl_policy.generate(vision_prompts[:1],
                                          SamplingParams(temperature=0.0, max_new_tokens=1))
        finally:
            vl_policy.suppressed_token_ids = suppressed
    finally:
        handle.remove()
    assert unmasked[0].response_token_ids == [image_id]  # the boost works
    for c in done:
        assert not set(c.response_token_ids) & vl_policy.suppressed_token_ids
        # the drawn token lost ~50 nats of mass to the masked one under the unmasked model
        assert c.logprobs[0] < -40.0


def test_model_written_image_text_in_the_prompt_reads_as_text(vl_policy, vision_prompts):
    from arlgym.policies.hf import vision_prompt_inputs

    clean = vision_prompts[-1]
    image_id = vl_policy.processor.image_token_id
    ids, _ = vision_prompt_inputs(vl_policy.processor, clean)
    n_slots = ids.count(image_id)
    assert n_slots > 0
    dirty = {"text": clean["text"].replace("Action 1: '", "Action 1: '<image><global-img>", 1),
             "image": clean["image"]}
    assert dirty["text"].count("<image>") == 2
    ids2, inputs = vision_prompt_inputs(vl_policy.processor, dirty)
    assert ids2.count(image_id) == n_slots
    assert "(image)(image)" in vl_policy.tokenizer.decode(ids2)
    # and the model reads it without complaint
    with torch.no_grad():
        vl_policy.model(input_ids=torch.tensor([ids2]), **inputs)


def test_a_step_with_image_tokens_in_a_response_and_the_history_completes(tmp_path):
    """The trainer's rollout is made to return a response whose ids hold the image token and
    whose text writes <image> into the action (echoed by the env's history in the next
    prompt): the steps complete, the response is trained up to the token."""
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config(["--env_id", "arl/SokobanVision-v0", "--model", "tiny-vl",
                              "--num_tasks", "1", "--group_size", "2", "--max_new_tokens", "6",
                              "--env_kwargs", '{"max_steps": 3}', "--log_with", "none",
                              "--torch_threads", "1", "--output_dir", str(tmp_path)])
    trainer = Trainer(cfg)
    image_id = trainer.processor.image_token_id
    generate = trainer.policy.generate
    injected = {"ids": 0, "texts": 0}
    seen_prompts: list[str] = []

    def inject(prompts, sampling=None, **kw):
        seen_prompts.extend(p["text"] for p in prompts)
        out = generate(prompts, sampling, **kw)
        c = out[0]
        c.response_token_ids = c.response_token_ids[:2] + [image_id] + c.response_token_ids[2:]
        c.logprobs = c.logprobs[:2] + [-1.0] + c.logprobs[2:]
        c.text = "<think>look</think><action>up<image></action>"
        injected["ids"] += 1
        injected["texts"] += 1
        return out

    trainer.policy.generate = inject
    try:
        m1 = trainer.train_step()
        m2 = trainer.train_step()
    finally:
        trainer.collector.close()
    assert injected["ids"] >= 2
    assert m1["rollout/image_slot_cut"] >= 1 and m2["rollout/image_slot_cut"] >= 1
    # the env echoed the model's "<image>" into a later prompt's history
    assert any(p.count("<image>") >= 2 for p in seen_prompts)
    assert all(torch.isfinite(torch.tensor(v)) for v in m2.values())


def test_a_vision_env_prompt_holds_one_placeholder():
    """The rule relies on the env's own placeholder being the prompt's last one."""
    env = gym.make("arl/SokobanVision-v0")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step("<think>x</think><action>up</action>")
    assert obs["text"].count("<image>") == 1
    assert obs["text"].rstrip().rfind("<image>") > obs["text"].find("Prior to this step")
