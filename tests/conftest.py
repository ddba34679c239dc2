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
