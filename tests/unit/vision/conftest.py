"""Fixtures of the vision tests: the tiny-vl policy and SokobanVision prompts."""

from __future__ import annotations

import gymnasium as gym
import pytest

import arlgym  # noqa: F401

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def vl_policy():
    from arlgym.policies.hf import HFPolicy

    return HFPolicy("tiny-vl", batch_size=4)


@pytest.fixture(scope="session")
def vision_prompts() -> list[dict]:
    """Three first-turn prompts and one with a history window (a longer prompt)."""
    out = []
    for seed in range(3):
        env = gym.make("arl/SokobanVision-v0")
        obs, _ = env.reset(seed=seed)
        out.append(obs)
    obs, *_ = env.step(env.unwrapped.expert_response())
    return out + [obs]


@pytest.fixture(name="vision_forward_logprobs")
def _vision_forward_logprobs():
    return vision_forward_logprobs


def vision_forward_logprobs(model, completion, temperature: float = 1.0):
    """log π(token) of a vision Completion's response by one unpadded forward pass over prompt +
    response with the completion's image inputs (the oracle the sampler is compared with)."""
    import torch

    ids = torch.tensor([completion.prompt_token_ids + completion.response_token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids, **completion.image_inputs).logits[0].float()
    start = len(completion.prompt_token_ids)
    step_logits = logits[start - 1 : -1] / temperature
    targets = torch.tensor(completion.response_token_ids)[:, None]
    return torch.log_softmax(step_logits, dim=-1).gather(-1, targets)[:, 0]
