"""VLLMServerPolicy through TRL 1.16's real ``VLLMClient`` (its HTTP session, retries and
response parsing) against a loopback server with vLLM's routes and a real tiny model behind
them (tests/fakes/vllm_http_server.py).

One seam is patched: the client refuses to start unless ``vllm`` is installed (it imports vLLM's
NCCL helpers for weight sync), and vLLM does not install on a CPU machine. Weight sync itself
needs CUDA on the sending side; on CPU the policy refuses it with a message (tested)."""

import sys
from pathlib import Path

import pytest
import torch

from arlgym.errors import ConfigError, MissingDependency
from arlgym.models import load_model_and_tokenizer
from arlgym.policies import SamplingParams
from arlgym.policies.hf import HFPolicy
from arlgym.policies.vllm_server import VLLMServerPolicy, make_client

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from vllm_http_server import LoopbackVLLM  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model_and_tokenizer("tiny", seed=0)
    return model.eval(), tok


@pytest.fixture()
def server(tiny, monkeypatch):
    monkeypatch.setattr("trl.generation.vllm_client.is_vllm_available", lambda *a, **k: True)
    with LoopbackVLLM(*tiny) as srv:
        yield srv


def _recomputed_logprobs(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(response)[:, None])[:, 0]


def test_groups_share_one_seeded_request_and_logprobs_are_the_models(server, tiny):
    model, tok = tiny
    policy = VLLMServerPolicy(server.url, tok)
    prompts = ["room A"] * 4 + ["room B", "room C"]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    out = policy.generate(prompts, sampling)
    calls = [body for path, body in server.requests if path == "/v1/completions"]
    # one request per distinct prompt: the group of 4 as n=4 with the seed of its first index
    assert sorted((b["n"], b["seed"]) for b in calls) == [(1, 11), (1, 12), (4, 7)]
    assert all(b["logprobs"] == 0 and b["return_token_ids"] for b in calls)
    assert len(out) == 6 and len({tuple(c.response_token_ids) for c in out[:4]}) > 1
    assert out[0].prompt_token_ids == out[3].prompt_token_ids != out[4].prompt_token_ids
    for c in out:
        assert len(c.logprobs) == len(c.response_token_ids) > 0
        want = _recomputed_logprobs(model, c.prompt_token_ids, c.response_token_ids, 1.0)
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-4)
        assert c.finish_reason in ("stop", "length")
    # the same seed gives the same samples; another seed others
    again = policy.generate(prompts, sampling)
    assert [c.response_token_ids for c in again] == [c.response_token_ids for c in out]
    other = policy.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=12, seed=8))
    assert [c.response_token_ids for c in other] != [c.response_token_ids for c in out]


def test_greedy_matches_the_hf_policy_token_for_token(server, tiny):
    model, tok = tiny
    prompts = ["room A", "room B"]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=10)
    remote = VLLMServerPolicy(server.url, tok).generate(prompts, sampling)
    local = HFPolicy(model, tokenizer=tok).generate(prompts, sampling)
    assert [c.response_token_ids for c in remote] == [c.response_token_ids for c in local]
    assert [c.finish_reason for c in remote] == [c.finish_reason for c in local]
    body = next(b for p, b in server.requests if p == "/v1/completions")
    assert body["temperature"] == 0.0 and "seed" not in body and body["n"] == 1


def test_weight_sync_needs_cuda_and_says_so(server, tiny):
    policy = VLLMServerPolicy(server.url, tiny[1])
    if torch.cuda.is_available():  # pragma: no cover - the GPU check covers this
        pytest.skip("CPU behaviour")
    with pytest.raises(ConfigError, match="NCCL and needs a CUDA device"):
        policy.sync_weights(tiny[0].state_dict().items())
    assert not any(p == "/server_info" for p, _ in server.requests)  # refused before any call


def test_unreachable_server_is_a_config_error(monkeypatch):
    monkeypatch.setattr("trl.generation.vllm_client.is_vllm_available", lambda *a, **k: True)
    with pytest.raises(ConfigError, match="vllm_server_url http://127.0.0.1:9: no vLLM server"):
        make_client("http://127.0.0.1:9")


def test_without_vllm_the_client_refusal_names_the_fix():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:  # pragma: no cover
        pytest.skip("vllm is installed here")
    with pytest.raises(MissingDependency, match="arlgym\\[vllm\\]"):
        make_client("http://127.0.0.1:9")


def test_an_async_worker_plays_a_batch_through_its_server(server, tiny):
    """The worker side of rollout_engine vllm_server: worker i samples from server i, its turns
    carry the server's log-probs, version 0 is not sent (the server serves the start model)."""
    from arlgym.rl.async_rollout import _Spec, worker_engine
    from arlgym.rollout import RolloutCollector

    spec = _Spec(model="tiny", seed=0, env_id="arl/Sokoban-v0", env_kwargs={"max_steps": 2},
                 group_size=2, num_tasks=2, env_seed=0, generation_batch_size=8, torch_threads=1,
                 extra={"engine": {"kind": "vllm_server", "urls": ["http://127.0.0.1:9", server.url]}})
    policy, load = worker_engine(spec, index=1)
    assert isinstance(policy, VLLMServerPolicy) and policy.name.endswith(server.url)
    assert policy.client.group_port == 51216 + 1  # workers on one node get their own port
    load(0, tiny[0].state_dict())  # nothing to send
    collector = RolloutCollector(spec.env_id, policy, group_size=2, num_tasks=2,
                                 env_kwargs=spec.env_kwargs, seed=0, mode="sync", progress=False)
    try:
        trajs = collector.collect(sampling=SamplingParams(max_new_tokens=8, seed=3))
    finally:
        collector.close()
    assert len(trajs) == 4
    turns = [s for t in trajs for s in t.steps]
    assert turns and all(len(s.logprobs) == len(s.response_token_ids) > 0 for s in turns)
    assert sum(p == "/v1/completions" for p, _ in server.requests) >= 2  # one per turn at least
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="NCCL"):
            load(1, tiny[0].state_dict())


def test_the_synchronous_trainer_samples_from_its_server_and_pushes_every_update(
        server, tiny, tmp_path, monkeypatch):
    """Trainer wiring of rollout_engine vllm_server. Two seams are patched: the CPU refusal
    (NCCL needs CUDA) and ``sync_weights`` itself, which records what would be streamed."""
    from arlgym.rl import build
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    monkeypatch.setattr(build, "resolve_engine", lambda cfg: cfg.rollout_engine)
    pushed = []
    monkeypatch.setattr(VLLMServerPolicy, "sync_weights",
                        lambda self, pairs: pushed.append({k: v.clone() for k, v in pairs}))
    cfg = parse_train_config([
        "--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-2",
        "--log_with", "none", "--algo", "grpo", "--max_steps", "2", "--output_dir", str(tmp_path),
        "--rollout_engine", "vllm_server", "--vllm_server_urls", server.url])
    trainer = Trainer(cfg)
    assert isinstance(trainer.policy, VLLMServerPolicy)
    history = trainer.train()
    assert len(history) == 2 and len(pushed) == 2  # after every update, none at the start
    live = trainer.accelerator.unwrap_model(trainer.model).state_dict()
    assert pushed[-1].keys() == live.keys()
    assert all(torch.equal(pushed[-1][k], live[k]) for k in live)
    assert sum(p == "/v1/completions" for p, _ in server.requests) >= 2
