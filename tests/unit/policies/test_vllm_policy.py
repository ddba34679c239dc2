"""VLLMPolicy against a CPU stand-in of vLLM's interface (tests/fakes/fake_vllm.py).

The real engine needs a GPU (bench/gpu_check.py runs it when a device is lent). These tests pin
down our side of the seam: the request we build, how we read tokens and log-probs back, and the
three weight-sync routes, each checked by the engine's own outputs after a sync.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import arlgym  # noqa: F401
from arlgym.models import load_model_and_tokenizer
from arlgym.policies import SamplingParams
from arlgym.policies.hf import chat_prompt_ids


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    env = gym.make("arl/Sokoban-v0")
    return [env.reset(seed=seed)[0] for seed in range(3)]


def _policy(fake_vllm, **kw):
    from arlgym.policies.vllm import VLLMPolicy

    return VLLMPolicy("tiny", **kw)


def _perturbed_tiny(path: str):
    """A model with other weights than the engine's fresh tiny one (conftest's peaked_model)."""
    model, _ = load_model_and_tokenizer(path)
    return model.eval()


def test_engine_is_built_with_processed_logprobs_and_caller_kwargs(fake_vllm):
    policy = _policy(fake_vllm, gpu_memory_utilization=0.25, seed=5)
    kwargs = fake_vllm.ENGINES[-1].engine_kwargs
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert (kwargs["gpu_memory_utilization"], kwargs["seed"], kwargs["tensor_parallel_size"]) == (0.25, 5, 1)
    assert policy.name == "vllm:tiny"


def test_generate_reads_tokens_and_logprobs_back(fake_vllm, prompts, forward_logprobs):
    policy = _policy(fake_vllm)
    sampling = SamplingParams(temperature=0.7, max_new_tokens=8, seed=11)
    completions = policy.generate(prompts + prompts[:1], sampling)
    engine_model = fake_vllm.ENGINES[-1].engine_model.hf
    for prompt, c in zip(prompts + prompts[:1], completions, strict=True):
        assert c.prompt_token_ids == chat_prompt_ids(policy.tokenizer, prompt)
        assert 0 < len(c.response_token_ids) == len(c.logprobs) <= 8
        assert c.finish_reason in ("stop", "length")
        torch.testing.assert_close(torch.tensor(c.logprobs), forward_logprobs(engine_model, c, 0.7),
                                   atol=1e-4, rtol=0)
    # request i is seeded seed + i: the repeated prompt (index 3) is not a copy of index 0
    assert completions[3].response_token_ids != completions[0].response_token_ids
    again = policy.generate(prompts + prompts[:1], sampling)
    assert [c.response_token_ids for c in again] == [c.response_token_ids for c in completions]


def test_sampling_params_translation(fake_vllm):
    policy = _policy(fake_vllm)
    greedy = policy._sampling_params(SamplingParams(temperature=0.0, top_p=0.5, top_k=4, max_new_tokens=9), 2)
    assert (greedy.temperature, greedy.top_p, greedy.top_k, greedy.max_tokens, greedy.seed) == (0.0, 1.0, -1, 9, None)
    sampled = policy._sampling_params(SamplingParams(temperature=0.9, top_k=4, seed=100), 2)
    assert (sampled.temperature, sampled.top_k, sampled.seed, sampled.logprobs) == (0.9, 4, 102, 0)


@pytest.mark.parametrize("engine", ["LLM", "ApplyModelLLM", "RpcLLM"])
def test_weight_sync_routes_make_the_engine_sample_from_the_new_weights(fake_vllm, monkeypatch, prompts, engine,
                                                                          forward_logprobs, peaked_model):
    monkeypatch.setattr(fake_vllm, "LLM", getattr(fake_vllm, engine))
    policy = _policy(fake_vllm)
    llm = fake_vllm.ENGINES[-1]
    trained = _perturbed_tiny(peaked_model)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=0)
    before = policy.generate(prompts[:1], sampling)[0]
    stale_gap = (torch.tensor(before.logprobs) - forward_logprobs(trained, before, 1.0)).abs().max()
    assert stale_gap > 1e-2  # the engine really held other weights

    policy.load_weights(trained)

    assert llm.engine_model.load_calls == 1 and llm.prefix_cache_resets == 1
    for name, tensor in trained.state_dict().items():
        torch.testing.assert_close(llm.engine_model.hf.state_dict()[name], tensor, atol=0, rtol=0)
    after = policy.generate(prompts[:1], sampling)[0]
    torch.testing.assert_close(torch.tensor(after.logprobs), forward_logprobs(trained, after, 1.0),
                               atol=1e-4, rtol=0)


def test_weight_sync_with_foreign_names_fails_loudly(fake_vllm, peaked_model):
    """Names must be the HF model's own (a PEFT-wrapped state dict must be merged first)."""
    policy = _policy(fake_vllm)
    trained = _perturbed_tiny(peaked_model)
    with pytest.raises(KeyError, match="base_model.model"):
        policy.sync_weights((f"base_model.model.{k}", v) for k, v in trained.state_dict().items())
