"""HFPolicy (token-in/token-out sampling from a transformers model) and the VLLMPolicy guard.

Run: ``pytest tests/unit/policies/test_hf_policy.py -m "not slow"``.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import pytest

import arlgym  # noqa: F401
from arlgym.errors import ConfigError, MissingDependency
from arlgym.policies import SamplingParams, make_policy

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from arlgym.policies.hf import HFPolicy  # noqa: E402


@pytest.fixture(scope="module")
def tiny_policy() -> HFPolicy:
    return HFPolicy("tiny", batch_size=4)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    out = []
    for seed in range(3):
        env = gym.make("arl/Sokoban-v0")
        prompt, _ = env.reset(seed=seed)
        out.append(prompt)
    prompt, *_ = env.step(env.unwrapped.expert_response())  # one with a history window
    return out + [prompt]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_a_forward_pass(tiny_policy, prompts, temperature, forward_logprobs):
    sampling = SamplingParams(temperature=temperature, max_new_tokens=20, seed=7)
    completions = tiny_policy.generate(prompts, sampling)
    assert len(completions) == len(prompts)
    for completion in completions:
        assert len(completion.logprobs) == len(completion.response_token_ids) > 0
        expected = forward_logprobs(tiny_policy.model, completion, temperature)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected,
                                   atol=1e-4, rtol=0)


def test_prompt_ids_are_the_chat_template_unpadded(tiny_policy, prompts):
    tok = tiny_policy.tokenizer
    [completion] = tiny_policy.generate(prompts[:1], SamplingParams(max_new_tokens=2, seed=0))
    expected = tok.apply_chat_template([{"role": "user", "content": prompts[0]}],
                                       tokenize=True, return_dict=False,
                                       add_generation_prompt=True)
    assert completion.prompt_token_ids == list(expected)
    assert tok.pad_token_id not in completion.prompt_token_ids


def test_seeded_sampling_is_deterministic_and_leaves_global_rng(tiny_policy, prompts):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=123)
    state = torch.random.get_rng_state()
    a = tiny_policy.generate(prompts, sampling)
    assert torch.equal(state, torch.random.get_rng_state())
    b = tiny_policy.generate(prompts, sampling)
    c = tiny_policy.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=16, seed=124))
    assert [x.response_token_ids for x in a] == [x.response_token_ids for x in b]
    assert [x.response_token_ids for x in a] != [x.response_token_ids for x in c]


def test_greedy_is_deterministic_and_batch_equals_single(tiny_policy, prompts, forward_logprobs):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    batched = tiny_policy.generate(prompts, greedy)
    again = tiny_policy.generate(prompts, greedy)
    single = [tiny_policy.generate([p], greedy)[0] for p in prompts]
    assert [c.text for c in batched] == [c.text for c in again] == [c.text for c in single]
    for completion in batched:  # greedy log-probs are under the raw model (T = 1)
        expected = forward_logprobs(tiny_policy.model, completion)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected,
                                   atol=1e-4, rtol=0)


def _model_that_says(policy: HFPolicy, text: str):
    """A copy of the tiny model whose forward is steered to emit ``text`` then EOS.

    The step index is read from the attention mask, which ``generate`` widens by one column
    per new token.
    """
    import copy

    tok = policy.tokenizer
    model = copy.deepcopy(policy.model)
    script = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    original_forward = model.forward
    prompt_width: list[int] = []

    def forward(*args, **kwargs):
        out = original_forward(*args, **kwargs)
        width = kwargs["attention_mask"].shape[1]
        if not prompt_width:
            prompt_width.append(width)
        target = script[min(width - prompt_width[0], len(script) - 1)]
        out.logits[:, -1, :] = -1e4
        out.logits[:, -1, target] = 0.0
        return out

    model.forward = forward
    return HFPolicy(model, tokenizer=tok), script


def test_eos_stops_and_is_included(tiny_policy, prompts):
    answer = "<think>plan: up</think><action>up</action>"
    policy, script = _model_that_says(tiny_policy, answer)
    [completion] = policy.generate(prompts[:1], SamplingParams(temperature=1.0, max_new_tokens=40,
                                                                seed=0))
    assert completion.finish_reason == "stop"
    assert completion.response_token_ids == script  # EOS included, nothing after it
    assert completion.text == answer  # special tokens removed, tags kept
    assert arlgym.parse_response(completion.text).format_valid


def test_length_finish_reason(tiny_policy, prompts):
    completions = tiny_policy.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=3))
    for completion in completions:
        assert completion.finish_reason in {"stop", "length"}
        if completion.finish_reason == "length":
            assert len(completion.response_token_ids) == 3
            assert tiny_policy.tokenizer.eos_token_id not in completion.response_token_ids


def test_live_model_object_and_spec(tiny_policy, prompts):
    policy = HFPolicy(tiny_policy.model, tokenizer=tiny_policy.tokenizer)
    assert policy.model is tiny_policy.model  # shares the trainer's weights
    tiny_policy.model.train()
    policy.generate(prompts[:1], SamplingParams(max_new_tokens=2, seed=0))
    assert tiny_policy.model.training  # mode restored
    tiny_policy.model.eval()
    assert make_policy("hf:tiny").name == "hf:tiny"
    with pytest.raises(ConfigError):
        HFPolicy(tiny_policy.model)
    with pytest.raises(ConfigError):
        HFPolicy("tiny", batch_size=0)


def test_vision_prompt_uses_its_text(tiny_policy):
    env = gym.make("arl/SokobanVision-v0")
    obs, _ = env.reset(seed=0)
    [completion] = tiny_policy.generate([obs], SamplingParams(max_new_tokens=2, seed=0))
    assert completion.prompt_token_ids


@pytest.mark.slow
def test_smollm2_answers_a_sokoban_prompt(monkeypatch, prompts):
    pytest.importorskip("gguf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy = HFPolicy("smollm2-135m", batch_size=2)
    completions = policy.generate(prompts[:2], SamplingParams(temperature=0.0, max_new_tokens=24))
    for completion in completions:
        print(repr(completion.text))
        assert completion.text.strip()
        assert completion.finish_reason in {"stop", "length"}
        assert len(completion.logprobs) == len(completion.response_token_ids)


# --- vLLM ------------------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_missing_is_a_clear_error():
    with pytest.raises(MissingDependency, match=r"arlgym\[vllm\]"):
        make_policy("vllm:tiny")
    with pytest.raises(ImportError):  # also catchable as the builtin type
        make_policy("vllm:/some/model/dir", gpu_memory_utilization=0.3)
