"""Asynchronous rollouts end to end with the tiny model on CPU: max_staleness 0 is the
synchronous trainer bit for bit (metrics, weights, resume), a staleness bound of 1 holds and
switches the old log-probs to the learner's own, a killed rollout worker is replaced."""

import json
import os
import signal

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.rl import metrics as M
from arlgym.rl.cli import parse_train_config
from arlgym.rl.trainer import Trainer

TINY = ["--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3",
        "--log_with", "none", "--algo", "grpo", "--kl_coef", "0.01"]
ASYNC = ["--async_rollouts", "true"]


def _trainer(path, *extra):
    return Trainer(parse_train_config([*TINY, "--output_dir", str(path), *extra]))


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "final" / "model.safetensors"))


def _same_weights(a, b):
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _comparable(row):
    return {k: v for k, v in row.items()
            if not k.startswith(("time/", "async/", "staleness/")) and k != M.TOKENS_PER_S}


def _staleness_0_equals_sync(tmp_path, *flags):
    """Train ``flags`` synchronously and with async workers at max_staleness 0: the same
    metrics (but timings) and the same final weights, bit for bit; the async rows."""
    sync = _trainer(tmp_path / "sync", *flags).train()
    asy = _trainer(tmp_path / "async", *flags, *ASYNC, "--max_staleness", "0").train()
    assert [_comparable(r) for r in asy] == [_comparable(r) for r in sync]
    assert _same_weights(tmp_path / "sync", tmp_path / "async")
    return asy


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_staleness_0_is_the_synchronous_trainer_bit_for_bit(tmp_path):
    asy = _staleness_0_equals_sync(tmp_path, "--max_steps", "3")
    assert all(r[M.STALENESS_MAX] == 0 and r["staleness/hist_0"] == r[M.SAMPLES] for r in asy)
    assert all(M.undefined(r) == [] for r in asy)


@pytest.mark.slow  # worker processes load torch, the model and ALFWorld's engine
def test_a_worker_steps_alfworld_in_env_processes_and_equals_the_synchronous_trainer(tmp_path):
    # ALFWorld is not thread-safe: the worker's vector steps it in env processes of its own
    # (mode "auto", as the synchronous trainer's); the batches stay the synchronous ones
    asy = _staleness_0_equals_sync(tmp_path, "--env_id", "arl/ALFWorld-v0", "--env_kwargs",
                                   '{"max_steps": 2}', "--max_steps", "2")
    assert all(r[M.TURNS] == 8 for r in asy)  # 2 tasks × 2 rollouts × 2 turns


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_lora_staleness_0_is_the_synchronous_lora_trainer_bit_for_bit(tmp_path):
    # the workers wrap their copy as the learner does; pushes carry the adapters alone
    _staleness_0_equals_sync(tmp_path, "--lora_r", "4", "--lr", "1e-2", "--max_steps", "3")
    start = _trainer(tmp_path / "start", "--max_steps", "0")  # the base weights, unmerged
    try:
        base = start.accelerator.unwrap_model(start.model).state_dict()
    finally:
        start.close()
    final = _weights(tmp_path / "async")
    assert any(not torch.equal(final[k], base[k]) for k in final if k in base)  # adapters trained


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_vision_staleness_0_is_the_synchronous_trainer_bit_for_bit(tmp_path):
    # the workers sample with the processor and send each turn's image inputs back
    _staleness_0_equals_sync(tmp_path, "--env_id", "arl/SokobanVision-v0", "--model", "tiny-vl",
                             "--max_steps", "2")


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
@pytest.mark.parametrize("lora", [False, True])
def test_vllm_workers_sample_with_engines_of_their_own(tmp_path, fake_vllm, peaked_model,
                                                       monkeypatch, lora):
    # each worker builds its own engine (vLLM's interface, tests/fakes/fake_vllm.py, importable
    # in the spawned worker from a folder on sys.path) and loads every pushed version in place:
    # HF-named weights, merged ones under LoRA; staleness 0 equals the synchronous vLLM trainer
    import shutil
    from pathlib import Path

    shim = tmp_path / "shim"
    shim.mkdir()
    shutil.copy(Path(__file__).parents[1] / "fakes" / "fake_vllm.py", shim / "vllm.py")
    monkeypatch.syspath_prepend(str(shim))  # a spawned process starts with its parent's sys.path
    flags = ["--model", peaked_model, "--rollout_engine", "vllm", "--max_steps", "2",
             "--lr", "2e-2", *(["--lora_r", "4"] if lora else [])]
    asy = _staleness_0_equals_sync(tmp_path, *flags)
    # the engine sampled the learner's weights at every step (no stale copy)
    assert all(r[M.LOGPROB_DIFF_MAX] < 1e-3 for r in asy)


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_staleness_0_resume_is_exact(tmp_path):
    a, b = tmp_path / "straight", tmp_path / "resumed"
    k0 = [*ASYNC, "--max_staleness", "0"]
    _trainer(a, "--max_steps", "4", *k0).train()
    keep_all = ("--save_steps", "2", "--save_total_limit", "0")  # step 2's checkpoint is read below
    _trainer(b, "--max_steps", "2", *keep_all, *k0).train()
    _trainer(b, "--max_steps", "4", "--resume", "true", *keep_all, *k0).train()
    assert _same_weights(a, b)
    state = json.loads((b / "checkpoints" / "step-000002" / "collector_rank0.json").read_text())
    assert state["async"]["next_task"] >= 2  # tasks admitted but not trained are replayed


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_staleness_1_holds_and_stale_batches_get_the_learners_old_logprobs(tmp_path):
    rows = _trainer(tmp_path, "--max_steps", "4", *ASYNC, "--max_staleness", "1",
                    "--rollout_workers", "2", "--staleness_policy", "pace",
                    "--rollout_correction", "tis_token").train()
    assert all(0 <= r[M.STALENESS_MAX] <= 1 for r in rows)
    assert all(r["staleness/hist_0"] + r["staleness/hist_1"] == r[M.SAMPLES] for r in rows)
    stale = [r for r in rows if r[M.STALENESS_MAX] == 1]
    assert stale, "two workers and k=1: some batch is sampled one update behind"
    # the sampler was one update behind: its log-probs differ from the learner's own
    assert all(r[M.MISMATCH_KL] > 0 and r[M.LOGPROB_DIFF_MEAN] > 1e-4 for r in stale)
    assert all(0.0 <= r[M.ASYNC_BUSY] <= 1.0 for r in rows)


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_old_logprobs_rollout_anchors_a_stale_batch_at_the_sampler(tmp_path):
    # one mini-batch a step: with recomputed old log-probs the ratio is 1 before the update
    # (PPO KL 0); anchored at the sampler one update behind, it starts away from 1
    rows = _trainer(tmp_path, "--max_steps", "4", *ASYNC, "--max_staleness", "1",
                    "--rollout_workers", "2", "--old_logprobs", "rollout").train()
    stale = [r for r in rows if r[M.STALENESS_MAX] == 1]
    fresh = [r for r in rows if r[M.STALENESS_MAX] == 0]
    assert stale, "two workers and k=1: some batch is sampled one update behind"
    assert all(M.MISMATCH_KL not in r for r in rows)  # nothing recomputed to compare with
    assert all(r[M.PPO_KL_K3] > 1e-6 for r in stale)
    assert all(r[M.PPO_KL_K3] < 1e-6 for r in fresh)


@pytest.mark.slow  # worker processes load torch + the model (~20 s on 2 busy cores)
def test_a_killed_rollout_worker_is_replaced_with_a_warning(tmp_path):
    trainer = _trainer(tmp_path, "--max_steps", "3", *ASYNC, "--max_staleness", "1")
    try:
        first = trainer.train_step()
        victim = trainer.source.rollouts.workers[0].process
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        with pytest.warns(UserWarning, match="worker 0 died"):
            history = trainer.train()
    finally:
        trainer.close()
    assert first[M.ASYNC_RESTARTS] == 0
    assert sum(r[M.ASYNC_RESTARTS] for r in history) == 1
    assert [r["step"] for r in history] == [2, 3]


def test_a_lora_push_carries_adapters_to_hf_workers_and_merged_weights_to_vllm(tmp_path):
    trainer = _trainer(tmp_path, "--lora_r", "4", "--max_steps", "1", *ASYNC)
    try:
        hf = trainer._rollout_weights()
        assert hf and all("lora_" in k for k in hf)
        plain = set(trainer.accelerator.unwrap_model(trainer.model).base_model.model.state_dict())
        for engine in ("vllm", "vllm_server"):  # engines that hold a plain HF model
            trainer.engine = engine
            merged = trainer._rollout_weights()
            assert set(merged) == {k.replace(".base_layer.", ".") for k in plain if "lora_" not in k}
    finally:
        trainer.close()


def test_async_config_errors():
    with pytest.raises(ConfigError, match="staleness_policy='late'"):
        parse_train_config([*TINY, *ASYNC, "--staleness_policy", "late"])
    with pytest.raises(ConfigError, match="max_staleness"):
        parse_train_config([*TINY, *ASYNC, "--max_staleness", "-1"])
