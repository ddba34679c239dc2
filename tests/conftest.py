"""Shared fixtures. Tests run offline on CPU; see the README for the command."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def fake_vllm(monkeypatch):
    """``import vllm`` yields tests/fakes/fake_vllm.py (a CPU stand-in of vLLM's interface) for
    the duration of one test, with torch.distributed launcher variables restored afterwards."""
    spec = importlib.util.spec_from_file_location("vllm", Path(__file__).parent / "fakes" / "fake_vllm.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "vllm", module)  # before exec: its dataclasses look it up
    spec.loader.exec_module(module)
    # The trainer sets these for vLLM's launcher. Restore them by hand: monkeypatch.delenv of an
    # absent variable records nothing, and a leaked LOCAL_RANK makes later subprocesses think
    # they are ranks of a distributed job.
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    saved = {key: os.environ.pop(key, None) for key in keys}
    yield module
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def forward_logprobs(model, completion, temperature: float = 1.0):
    """log π(token) of a Completion's response by one forward pass over prompt + response (the
    independent oracle the policy tests compare sampler log-probs with)."""
    import torch

    ids = torch.tensor([completion.prompt_token_ids + completion.response_token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    start = len(completion.prompt_token_ids)
    step_logits = logits[start - 1 : -1] / temperature  # logits that predicted each response token
    targets = torch.tensor(completion.response_token_ids)[:, None]
    return torch.log_softmax(step_logits, dim=-1).gather(-1, targets)[:, 0]


@pytest.fixture(name="forward_logprobs")
def _forward_logprobs_fixture():
    return forward_logprobs


@pytest.fixture(scope="session")
def peaked_model(tmp_path_factory):
    """The tiny model with large random weights, saved to disk: far from uniform outputs, so a
    change of weights shows in the log-probs (the fresh tiny model is nearly uniform)."""
    import torch

    from arlgym.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("tiny")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
    path = tmp_path_factory.mktemp("peaked")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def chromium() -> None:
    """Skip a browser test on a machine without Chromium — except where the browser is part of
    the job (CI sets ARLGYM_REQUIRE_CHROMIUM=1 after installing it): there a missing browser fails."""
    import os

    from arlgym.envs.webshop.browser import find_chrome
    from arlgym.errors import ConfigError

    try:
        find_chrome()
    except ConfigError as e:
        if os.environ.get("ARLGYM_REQUIRE_CHROMIUM") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))
