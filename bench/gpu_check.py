"""The one prepared script for a lent GPU: what only a GPU can prove, in one short run.

    python bench/gpu_check.py --out $OUT               # on the device: every check (~13 min, one H100)
    python bench/gpu_check.py --device cpu --out /tmp/g  # the checks that need no GPU, CPU sizes
    python bench/gpu_check.py --smoke --out /tmp/g     # bf16 and vLLM sections at toy sizes (CI)
    python bench/gpu_check.py --dry-run --out /tmp/g   # what a GPU run checks (default on CPU)

Every run writes ``gpu_check.json`` and ``gpu_check.md`` (a table a maintainer can paste) to
``--out``. :data:`CHECKS` lists every GPU path the docs promise, what each compares, when it
passes, what it needs and how long it takes on one H100 (``--dry-run`` prints them and runs
nothing). A run goes through them in order; each is timed; one that cannot run here (no CUDA
device, vllm or an env not installed, one GPU where two are needed, the ``--budget-s`` time
budget spent) is reported as ``skipped: <reason>``, one that fails as ``error`` with its
traceback, and the next still runs. Every check runs the project's own code paths: the
trainer (:class:`arlgym.rl.trainer.Trainer`, so the engines of :mod:`arlgym.policies.engine`),
:class:`arlgym.policies.vllm.VLLMPolicy`, :mod:`arlgym.rl.logprobs`.

``--device cpu`` runs the checks that mean something without CUDA at CPU sizes: the fused
log-prob kernel against the materialized logits at the real V = 151,936 on a short sequence,
and the 2-step SAMPO runs of randomly initialised Qwen2.5/Qwen3-family models with the real
151,936-token vocabulary (narrow and shallow) on ALFWorld and WebShop.

vLLM is not in the device image and cannot travel (the pinned vllm 0.33.0 wheel is 336.4 MB and
needs a CUDA torch 2.14.0; a call carries 64 MiB), so the vLLM checks report "skipped: vllm not
installed" there unless a future image ships it; the others run on the HF engine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Qwen2.5 and Qwen3 tokenizers' embedding rows: the vocabulary the fused kernel exists for
QWEN_VOCAB = 151_936

#: the shapes of the real models (their config.json), built with random weights: no hub download
QWEN25_1_5B = dict(family="qwen2", hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960)
QWEN3_4B = dict(family="qwen3", hidden=2560, layers=36, heads=32, kv_heads=8, intermediate=9728,
                head_dim=128)
#: the same families at CPU sizes, with the real vocabulary
CPU_SHAPE = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)


def build_model_dir(out: Path, *, hidden: int, layers: int, heads: int, kv_heads: int,
                    intermediate: int, seed: int = 0, family: str = "qwen3",
                    vocab: int | None = None, head_dim: int | None = None,
                    device: str = "cpu") -> tuple[Path, int]:
    """A randomly initialised Qwen3 (or Qwen2, ``family="qwen2"``) of the given shape with the
    tiny tokenizer, saved to disk. ``vocab`` (default: the tokenizer's) sets the embedding rows:
    151,936 gives the real models' LM-head cost while the tiny tokenizer's ids stay valid."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from arlgym.models import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    common = dict(vocab_size=vocab or len(tokenizer), hidden_size=hidden,
                  intermediate_size=intermediate, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads,
                  max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=None,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if family == "qwen2":
        cfg = Qwen2Config(**common)
    else:
        cfg = Qwen3Config(**common, head_dim=head_dim or hidden // heads)
    torch.manual_seed(seed)
    with torch.device(device):  # a 4B model initialises in seconds on the GPU, minutes on CPU
        model = AutoModelForCausalLM.from_config(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    if device != "cpu":
        model = model.to(torch.bfloat16)  # half the bytes to write; the trainer loads its own dtype
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    return out, n_params


def _train(model: str, out: Path, steps: int, engine: str, extra: list[str],
           env_id: str = "arl/Sokoban-v0") -> list[dict[str, Any]]:
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config(["--algo", "sampo", "--env_id", env_id, "--model", model,
                              "--output_dir", str(out), "--max_steps", str(steps),
                              "--rollout_engine", engine, "--log_with", "none", *extra])
    return Trainer(cfg).train()


@contextlib.contextmanager
def _mixed_precision(bf16: bool) -> Iterator[None]:
    """bf16 autocast for the trainer's Accelerator (process-wide state: reset after)."""
    if bf16:
        os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
    try:
        yield
    finally:  # later checks train in fp32 (accelerate keeps its state process-wide)
        from accelerate.state import AcceleratorState

        os.environ.pop("ACCELERATE_MIXED_PRECISION", None)
        AcceleratorState._reset_state(reset_partial_state=True)


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None


def _summary(log: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """What every training check reports: steps, finite loss, step time, tokens/s, memory."""
    from arlgym.rl import metrics as M

    return {"steps": len(log), "loss_finite": all(math.isfinite(m[M.LOSS]) for m in log),
            "step_s": [round(m[M.TIME_STEP], 2) for m in log],
            "train_tokens_per_s": [round(m[M.TOKENS_PER_S]) for m in log],
            "peak_gpu_GiB": _peak_gib(),
            "passed": len(log) == steps and all(math.isfinite(m[M.LOSS]) for m in log)}


def _engine(size: str) -> str:
    return "vllm" if size == "full" and _has_vllm() else "hf"


# ------------------------------------------------------------------------------ the checks
def bf16_step(work: Path, size: str) -> dict[str, Any]:
    from arlgym.rl import metrics as M

    smoke = size == "toy"
    shape = (dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128) if smoke else
             dict(hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072))
    path, n_params = build_model_dir(work / "model", **shape, device="cuda" if size == "full" else "cpu")
    _reset_peak()
    steps = 1 if smoke else 3
    extra = ["--num_tasks", "2" if smoke else "8", "--group_size", "2" if smoke else "8",
             "--max_new_tokens", "16" if smoke else "64", "--lr", "1e-6",
             "--gradient_checkpointing", "true", "--env_kwargs", '{"max_steps": 3}',
             "--old_logprobs", "recompute"]  # to measure the sampler/trainer gap under bf16
    engine = "vllm" if _has_vllm() and not smoke else "hf"
    t = time.perf_counter()
    with _mixed_precision(True):
        log = _train(str(path), work / "run", steps, engine, extra)
    last = log[-1]
    gap = last.get(M.LOGPROB_DIFF_MAX)
    summary = _summary(log, steps)
    return {"params_M": round(n_params / 1e6, 1), "engine": engine, **summary,
            "seconds": round(time.perf_counter() - t, 1),
            "train_tokens_per_s": round(last[M.TOKENS_PER_S]),
            "rollout_s": round(last[M.TIME_ROLLOUT], 2), "logprob_gap_max": gap,
            "passed": summary["passed"] and gap is not None and gap < 0.1}


def vllm_parity(work: Path, size: str) -> dict[str, Any]:
    import gymnasium as gym
    import torch

    import arlgym  # noqa: F401

    smoke = size == "toy"
    from arlgym.models import load_model_and_tokenizer, model_path
    from arlgym.policies import SamplingParams
    from arlgym.policies.vllm import VLLMPolicy
    from arlgym.rl.distributed import set_launcher_env

    set_launcher_env(0, 0, 1)
    path = str(model_path("tiny"))
    policy = VLLMPolicy(path, gpu_memory_utilization=0.2, distributed_executor_backend="external_launcher",
                        seed=0, dtype="float32", max_model_len=2048)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    hf, _ = load_model_and_tokenizer(path)
    hf = hf.to(device).eval()
    env = gym.make("arl/Sokoban-v0")
    prompts = [env.reset(seed=s)[0] for s in range(4 if smoke else 64)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8 if smoke else 32, seed=0)

    def gap(completions: list[Any], model: Any) -> float:
        worst = 0.0
        for c in completions:
            ids = torch.tensor([c.prompt_token_ids + c.response_token_ids], device=device)
            with torch.no_grad():
                logits = model(ids).logits[0].float()
            start = len(c.prompt_token_ids)
            logp = torch.log_softmax(logits[start - 1 : -1], -1)
            ref = logp.gather(-1, torch.tensor(c.response_token_ids, device=device)[:, None])[:, 0]
            worst = max(worst, float((torch.tensor(c.logprobs, device=device) - ref).abs().max()))
        return worst

    t = time.perf_counter()
    first = policy.generate(prompts, sampling)
    gen_s = time.perf_counter() - t
    hf_gap = gap(first, hf)
    policy.load_weights(hf)  # unchanged weights
    again = policy.generate(prompts, sampling)
    identical = all(a.response_token_ids == b.response_token_ids and a.logprobs == b.logprobs
                    for a, b in zip(first, again, strict=True))
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    t = time.perf_counter()
    policy.load_weights(hf)
    sync_s = time.perf_counter() - t
    moved = policy.generate(prompts, sampling)
    moved_gap = gap(moved, hf)
    return {"vllm_vs_hf_logprob_gap_max": hf_gap, "unchanged_sync_identical": identical,
            "after_perturbed_sync_gap_max": moved_gap, "generate_s": round(gen_s, 3),
            "sync_s": round(sync_s, 4),
            "tokens": sum(len(c.response_token_ids) for c in first),
            "passed": hf_gap < 1e-4 and identical and moved_gap < 1e-4}


def _vllm_size(size: str) -> list[str]:
    return (["--num_tasks", "2", "--group_size", "2", "--max_new_tokens", "8",
             "--env_kwargs", '{"max_steps": 2}'] if size == "toy" else
            ["--num_tasks", "8", "--group_size", "8", "--max_new_tokens", "32"])


def _gaps(log: list[dict[str, Any]]) -> list[float | None]:
    from arlgym.rl import metrics as M

    return [m.get(M.LOGPROB_DIFF_MAX) for m in log]


def vllm_trainer(work: Path, size: str) -> dict[str, Any]:
    _reset_peak()
    log = _train("tiny", work / "vllm_run", 3, "vllm",
                 [*_vllm_size(size), "--lr", "1e-4", "--vllm_max_model_len", "2048"])
    gaps = _gaps(log)
    return {**_summary(log, 3), "logprob_gap_max_per_step": gaps,
            "passed": len(log) == 3 and all(g is not None and g < 1e-3 for g in gaps)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _trl_vllm_serve(model: str, log_path: Path, timeout_s: float = 300.0) -> Iterator[str]:
    """A `trl vllm-serve` of ``model`` on loopback (what ``rollout_engine vllm_server`` talks
    to, NCCL weight transfer included); yields its URL, stops it after."""
    trl = shutil.which("trl") or str(Path(sys.executable).with_name("trl"))
    port = _free_port()
    log = log_path.open("w")
    proc = subprocess.Popen([trl, "vllm-serve", "--model", model, "--port", str(port),
                             "--gpu_memory_utilization", "0.25", "--max_model_len", "2048",
                             "--dtype", "float32"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"trl vllm-serve exited ({proc.returncode}): "
                                   f"{log_path.read_text()[-1500:]}")
            try:
                for route in ("/health", "/health/"):
                    with contextlib.suppress(OSError), urllib.request.urlopen(url + route, timeout=5) as r:
                        if r.status == 200:
                            raise StopIteration
            except StopIteration:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"trl vllm-serve did not answer in {timeout_s:.0f} s")
            time.sleep(2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()


def vllm_server_pushes(work: Path, size: str) -> dict[str, Any]:
    from arlgym.models import model_path

    work.mkdir(parents=True, exist_ok=True)
    _reset_peak()
    started = time.perf_counter()
    with _trl_vllm_serve(str(model_path("tiny")), work / "server.log") as url:
        up_s = time.perf_counter() - started
        log = _train("tiny", work / "run", 3, "vllm_server",
                     [*_vllm_size(size), "--lr", "1e-4", "--vllm_server_urls", url])
    gaps = _gaps(log)
    return {**_summary(log, 3), "server_start_s": round(up_s, 1), "logprob_gap_max_per_step": gaps,
            "passed": len(log) == 3 and all(g is not None and g < 1e-3 for g in gaps)}


def async_vllm_workers(work: Path, size: str) -> dict[str, Any]:
    from arlgym.rl import metrics as M

    _reset_peak()
    log = _train("tiny", work / "run", 4, "vllm",
                 [*_vllm_size(size), "--lr", "1e-4", "--vllm_max_model_len", "2048",
                  "--async_rollouts", "true", "--rollout_workers", "1", "--max_staleness", "1",
                  "--vllm_gpu_memory_utilization", "0.2"])
    staleness = [m.get(M.STALENESS_MAX) for m in log]
    summary = _summary(log, 4)
    return {**summary, "staleness_max_per_step": staleness,
            "passed": summary["passed"] and all(s is not None and s <= 1 for s in staleness)}


def lora_pushes(work: Path, size: str) -> dict[str, Any]:
    _reset_peak()
    log = _train("tiny", work / "run", 3, "vllm",
                 [*_vllm_size(size), "--lr", "1e-3", "--vllm_max_model_len", "2048",
                  "--lora_r", "8"])
    gaps = _gaps(log)
    return {**_summary(log, 3), "logprob_gap_max_per_step": gaps,
            "passed": len(log) == 3 and all(g is not None and g < 1e-3 for g in gaps)}


def fused_logprobs_v151936(work: Path, size: str) -> dict[str, Any]:
    """The trainer's two LM-head paths (:mod:`arlgym.rl.logprobs`) on the same hidden states:
    fused (TRL's chunked kernel, logits never materialised) against materialized logits with
    :func:`selective_logprobs`, values and both gradients, at V = 151,936."""
    import torch

    from arlgym.rl.logprobs import fused_logprobs, selective_logprobs

    cuda = size == "full"
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    tokens, width = (4096, 2048) if cuda else (32 if size == "toy" else 64, 128)
    gen = torch.Generator().manual_seed(0)
    hidden0 = torch.randn(1, tokens, width, generator=gen).to(device, dtype)
    head = torch.nn.Linear(width, QWEN_VOCAB, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(QWEN_VOCAB, width, generator=gen) * width ** -0.5)
    head = head.to(device, dtype)
    ids = torch.randint(QWEN_VOCAB, (1, tokens), generator=gen).to(device)
    mask = torch.ones(1, tokens, dtype=torch.long, device=device)

    def run(path: str) -> tuple[Any, Any, Any, float, float | None]:
        hidden = hidden0.clone().requires_grad_(True)
        head.weight.grad = None
        _reset_peak()
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        if path == "fused":
            logp, _ = fused_logprobs(hidden, head, ids, mask)
        else:
            logp, _ = selective_logprobs(head(hidden), ids)
        logp.sum().backward()
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t
        return (logp.detach().float(), hidden.grad.float(), head.weight.grad.float(), seconds,
                _peak_gib())

    for path in ("fused", "materialized"):  # warm-up: kernel compilation is not timed
        run(path)
    fused, mat = run("fused"), run("materialized")

    def rel(a: Any, b: Any) -> float:
        return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))

    value_gap = float((fused[0] - mat[0]).abs().max())
    grads = {"hidden_grad_rel_gap": rel(fused[1], mat[1]), "head_grad_rel_gap": rel(fused[2], mat[2])}
    value_tol, grad_tol = (1e-2, 2e-2) if cuda else (1e-4, 1e-4)
    return {"vocab": QWEN_VOCAB, "tokens": tokens, "hidden": width, "dtype": str(dtype).split(".")[-1],
            "device": device, "logprob_gap_max": value_gap, **grads,
            "fused_s": round(fused[3], 4), "materialized_s": round(mat[3], 4),
            "fused_peak_GiB": fused[4], "materialized_peak_GiB": mat[4],
            "passed": value_gap < value_tol and max(grads.values()) < grad_tol}


#: per env: what a 2-step SAMPO check plays (short episodes: the check is of the path, not RL)
_ENV_STEPS = {"arl/ALFWorld-v0": 5, "arl/WebShop-v0": 5}


def _sampo_on_envs(work: Path, size: str, model: str, envs: tuple[str, ...],
                   gradient_checkpointing: bool = False) -> dict[str, Any]:
    """2 SAMPO steps of ``model`` on each env through the trainer (bf16 on a GPU)."""
    gpu = size == "full"
    results: dict[str, Any] = {}
    for env_id in envs:
        size_args = (["--num_tasks", "4", "--group_size", "4", "--max_new_tokens", "64"] if gpu
                     else ["--num_tasks", "1", "--group_size", "2", "--max_new_tokens", "8"])
        extra = [*size_args, "--lr", "1e-6",
                 "--env_kwargs", json.dumps({"max_steps": _ENV_STEPS[env_id] if gpu else 2}),
                 "--gradient_checkpointing", "true" if gradient_checkpointing else "false"]
        _reset_peak()
        with _mixed_precision(gpu):
            log = _train(model, work / env_id.removeprefix("arl/"), 2, _engine(size), extra, env_id)
        results[env_id] = _summary(log, 2)
    return {"model": model if not Path(model).is_absolute() else Path(model).name,
            "engine": _engine(size), "bf16": gpu, **results,
            "passed": all(r["passed"] for r in results.values())}


def sampo_alfworld_smollm2(work: Path, size: str) -> dict[str, Any]:
    return _sampo_on_envs(work, size, "smollm2-135m", ("arl/ALFWorld-v0",))


def sampo_webshop_smollm2(work: Path, size: str) -> dict[str, Any]:
    return _sampo_on_envs(work, size, "smollm2-135m", ("arl/WebShop-v0",))


def _shaped(work: Path, size: str, shape: dict[str, Any], gradient_checkpointing: bool) -> dict[str, Any]:
    dims = shape if size == "full" else {"family": shape["family"], **CPU_SHAPE}
    path, n_params = build_model_dir(work / "model", **dims, vocab=QWEN_VOCAB,
                                     device="cuda" if size == "full" else "cpu")
    result = _sampo_on_envs(work, size, str(path), ("arl/ALFWorld-v0", "arl/WebShop-v0"),
                            gradient_checkpointing)
    return {"params_M": round(n_params / 1e6, 1), "vocab": QWEN_VOCAB, "family": dims["family"],
            "hidden": dims["hidden"], "layers": dims["layers"], **result}


def sampo_qwen25_1_5b_shapes(work: Path, size: str) -> dict[str, Any]:
    return _shaped(work, size, QWEN25_1_5B, gradient_checkpointing=size == "full")


def sampo_qwen3_4b_shapes(work: Path, size: str) -> dict[str, Any]:
    return _shaped(work, size, QWEN3_4B, gradient_checkpointing=True)


def nccl_fsdp2_zero(work: Path, size: str) -> dict[str, Any]:
    """The tiny model's 3 SAMPO steps on one process, then on two GPUs under FSDP2 and (with
    deepspeed installed) ZeRO-2 via ``accelerate launch``: the loss curves must agree."""
    import importlib.util

    from arlgym.rl import metrics as M

    args = ["--algo", "sampo", "--model", "tiny", "--max_steps", "3", "--num_tasks", "4",
            "--group_size", "4", "--max_new_tokens", "16", "--env_kwargs", '{"max_steps": 3}',
            "--log_with", "none", "--rollout_engine", "hf"]

    def launch(name: str, launcher: list[str]) -> list[float]:
        out = work / name
        proc = subprocess.run([*launcher, str(ROOT / "trainers/sampo.py"), *args, "--output_dir", str(out)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
        if proc.returncode:
            raise RuntimeError(f"{name}: exit {proc.returncode}: {proc.stderr[-1500:]}")
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        return [r[M.LOSS] for r in rows]

    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes"]
    curves = {"one_process": launch("one", [*accelerate, "1", "--config_file",
                                            str(ROOT / "configs/accelerate/single_gpu.yaml")])}
    configs = ["fsdp2"] + (["zero2"] if importlib.util.find_spec("deepspeed") else [])
    for name in configs:
        curves[name] = launch(name, [*accelerate, "2", "--config_file",
                                     str(ROOT / f"configs/accelerate/{name}.yaml")])
    base = curves["one_process"]
    gaps = {name: max(abs(a - b) for a, b in zip(curve, base, strict=True))
            for name, curve in curves.items() if name != "one_process"}
    return {"loss_curves": curves, "loss_gap_max": gaps,
            "zero2": "run" if "zero2" in configs else "skipped: deepspeed not installed",
            "passed": all(g < 5e-2 for g in gaps.values())}


@dataclass(frozen=True)
class Check:
    """One GPU path the docs promise: what runs it, what it compares, when it passes."""

    name: str
    run: Callable[[Path, str], dict[str, Any]]
    what: str
    passes_if: str
    needs: tuple[str, ...]  # of: cuda, 2gpu, vllm, trl, peft, alfworld, webshop
    estimate_s: int  # wall clock on one H100 (model building and env start-up included);
    # estimated from the sizes (not yet measured on a device): --budget-s guards the total
    cpu: bool = False  # runs at CPU sizes under --device cpu
    smoke: bool = False  # runs at toy sizes under --smoke (the vLLM ones against a stand-in)


#: Every GPU path the docs promise, in the order one device run checks them.
CHECKS: list[Check] = [
    Check("bf16_step", bf16_step,
          "SAMPO steps of a random-init Qwen3-shaped ~0.45B model on Sokoban through the real "
          "trainer, bf16 autocast, gradient checkpointing",
          "finite loss; rollout/trainer log-prob gap < 0.1; reports step time, training "
          "tokens/s and peak GPU memory", ("cuda",), 75, smoke=True),
    Check("vllm_parity", vllm_parity,
          "colocated vLLM rollouts: the engine's log-probs against the learner's HF forward; an "
          "unchanged weight sync, then a perturbed one",
          "gap < 1e-4 (fp32); unchanged sync leaves tokens and log-probs identical; the engine "
          "follows perturbed weights", ("cuda", "vllm"), 45, smoke=True),
    Check("vllm_trainer", vllm_trainer,
          "3 SAMPO steps with rollout_engine vllm (colocated): every weight sync lands",
          "rollout/logprob_abs_diff_max < 1e-3 at every step", ("cuda", "vllm"), 60, smoke=True),
    Check("vllm_server_pushes", vllm_server_pushes,
          "rollout_engine vllm_server against a local `trl vllm-serve`: NCCL weight pushes "
          "after each step, log-probs vs the learner's",
          "rollout/logprob_abs_diff_max < 1e-3 after every push", ("cuda", "vllm", "trl"), 80),
    Check("async_vllm_workers", async_vllm_workers,
          "async_rollouts with a vLLM rollout worker, max_staleness 1: staleness over 4 steps",
          "staleness/max <= 1 at every step; finite loss", ("cuda", "vllm"), 60),
    Check("lora_pushes", lora_pushes,
          "LoRA training (lora_r 8) with a colocated vLLM engine: merged-adapter pushes",
          "rollout/logprob_abs_diff_max < 1e-3 after every push", ("cuda", "vllm", "peft"), 50),
    Check("fused_logprobs_v151936", fused_logprobs_v151936,
          "the fused (chunked) log-prob kernel at V = 151,936 against the materialized logits "
          "path: values and gradients, bf16, a 4k-token sequence (CPU: fp32, 64 tokens)",
          "max |log-prob difference| < 1e-2 and gradients within 2% in bf16 (1e-4 in fp32); "
          "reports both paths' time and peak memory", ("cuda",), 15, cpu=True),
    Check("sampo_alfworld_smollm2", sampo_alfworld_smollm2,
          "2-step SAMPO on ALFWorld with SmolLM2-135M (the installed weights), bf16",
          "2 steps, finite loss; reports tokens/s and peak memory", ("cuda", "alfworld"), 60),
    Check("sampo_webshop_smollm2", sampo_webshop_smollm2,
          "2-step SAMPO on WebShop with SmolLM2-135M, bf16",
          "2 steps, finite loss; reports tokens/s and peak memory", ("cuda", "webshop"), 50),
    Check("sampo_qwen2.5_1.5b_shapes", sampo_qwen25_1_5b_shapes,
          "2-step SAMPO on ALFWorld and WebShop with a randomly initialised model of "
          "Qwen2.5-1.5B's shapes and vocabulary (no hub download), bf16 (CPU: the family and "
          "V = 151,936 at hidden 64, 2 layers)",
          "2 steps each, finite loss; reports tokens/s and peak memory",
          ("cuda", "alfworld", "webshop"), 100, cpu=True),
    Check("sampo_qwen3_4b_shapes", sampo_qwen3_4b_shapes,
          "2-step SAMPO on ALFWorld and WebShop with a randomly initialised model of Qwen3-4B's "
          "shapes and vocabulary, bf16, gradient checkpointing (CPU: the family and "
          "V = 151,936 at hidden 64, 2 layers)",
          "2 steps each within one H100's 80 GB; reports tokens/s and peak memory",
          ("cuda", "alfworld", "webshop"), 150, cpu=True),
    Check("nccl_fsdp2_zero", nccl_fsdp2_zero,
          "3 SAMPO steps on two GPUs under FSDP2 and ZeRO-2 (accelerate launch, NCCL) against "
          "one process",
          "the same loss curve as one process (|difference| < 0.05)", ("2gpu",), 150),
]

#: what a lent device allows one run (15 minutes, less the machine's start and the transfers)
BUDGET_S = 840


def _unmet(check: Check, device: str, smoke: bool) -> str | None:
    """Why ``check`` cannot run here, or None."""
    import importlib.util

    import torch

    if smoke and not check.smoke:
        return "not part of --smoke (it runs the bf16 and vLLM sections at toy sizes)"
    for need in check.needs:
        if need == "cuda" and device != "cuda" and not smoke and not check.cpu:
            return "no CUDA device" if not torch.cuda.is_available() else "a GPU check (--device cpu)"
        if need == "2gpu":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count < 2:
                return f"needs 2+ GPUs, this machine has {count}"
        if need in ("vllm", "trl", "peft") and importlib.util.find_spec(need) is None:
            return f"{need} not installed"
        if need in ("alfworld", "webshop"):
            from arlgym.envs.requirements import missing

            env_id = {"alfworld": "arl/ALFWorld-v0", "webshop": "arl/WebShop-v0"}[need]
            lacking = missing(env_id)
            if lacking:
                return f"{env_id} is not usable here ({', '.join(r.what for r in lacking)})"
    return None


def dry_run(device: str) -> dict[str, Any]:
    """What a GPU run would check, written as a report; nothing is run."""
    return {"dry_run": True, "device": device, "budget_s": BUDGET_S,
            # one H100: the two-GPU check reports itself skipped there in no time
            "estimate_s": sum(c.estimate_s for c in CHECKS if "2gpu" not in c.needs),
            "checks": [{"name": c.name, "what": c.what, "passes_if": c.passes_if,
                        "needs": ", ".join(c.needs), "estimate_s": c.estimate_s,
                        "on_cpu": c.cpu, "runs_today": True} for c in CHECKS]}


def markdown(report: dict[str, Any]) -> str:
    """The report as one Markdown table a maintainer can paste (docs/scale.md, an issue)."""
    lines = [f"# gpu_check ({'dry run: nothing was run' if report.get('dry_run') else 'results'})",
             "", f"device: {report.get('device') or report.get('env', {}).get('device')}", ""]
    if report.get("dry_run"):
        lines += [f"estimate on one H100: {report['estimate_s']} s (budget {report['budget_s']} s)", "",
                  "| check | what it runs | passes if | needs | H100 estimate (s) | --device cpu |",
                  "|---|---|---|---|---|---|"]
        for c in report["checks"]:
            lines.append(f"| {c['name']} | {c['what']} | {c['passes_if']} | {c['needs']} | "
                         f"{c['estimate_s']} | {'runs' if c['on_cpu'] else 'skipped'} |")
    else:
        lines += ["| check | outcome | result |", "|---|---|---|"]
        for name, value in report.items():
            if name == "env":
                continue
            outcome = ("skipped" if "skipped" in value else "error" if "error" in value
                       else "passed" if value.get("passed") else "failed")
            text = json.dumps({k: v for k, v in value.items() if k != "traceback"}, default=str)
            lines.append(f"| {name} | {outcome} | `{text[:400]}` |")
    return "\n".join(lines) + "\n"


def _write(out: Path, report: dict[str, Any]) -> None:
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_check.md").write_text(markdown(report))


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/gpu_check", help="where gpu_check.json goes")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="cuda: every check at full size; cpu: the checks that need no GPU at "
                             "CPU sizes, the rest reported skipped (default: cuda when a GPU is "
                             "visible, else a dry run)")
    parser.add_argument("--smoke", action="store_true",
                        help="the bf16 and vLLM sections at toy sizes on CPU (CI, with a vLLM stand-in)")
    parser.add_argument("--only", default="", help="comma-separated check names to run (default: all)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"skip a check whose H100 estimate would pass this many seconds of the "
                             f"run (default: {BUDGET_S})")
    parser.add_argument("--dry-run", action="store_true", default=None,
                        help="list every check and write the plan as the report; run nothing "
                             "(default: on when no GPU is visible and neither --device nor "
                             "--smoke is given)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    names = [c.name for c in CHECKS]
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - set(names))
    if unknown:
        parser.error(f"--only: unknown check(s) {', '.join(unknown)}; the checks: {', '.join(names)}")
    gpu_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    if args.dry_run or (args.dry_run is None and not args.smoke and args.device is None
                        and gpu_name == "cpu"):
        report = dry_run(gpu_name)
        _write(out, report)
        for c in report["checks"]:
            print(f"{c['name']:28s} ~{c['estimate_s']:4d} s on one H100  "
                  f"{'(also --device cpu) ' if c['on_cpu'] else ''}{c['what']}")
        print(f"{len(report['checks'])} checks, ~{report['estimate_s']} s on one H100 (budget "
              f"{report['budget_s']} s)")
        print(f"dry run on {gpu_name}: nothing was run; plan -> {out / 'gpu_check.md'}")
        return 0
    device = "cpu" if args.smoke else args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible here. Fix: --device cpu, or --dry-run")
    size = "toy" if args.smoke else "full" if device == "cuda" else "cpu"
    results: dict[str, Any] = {"env": {
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": gpu_name,
        "run_device": device, "size": size, "vllm": _vllm_version()}}
    started = time.perf_counter()
    spent_estimate = 0
    with tempfile.TemporaryDirectory() as tmp:
        for check in CHECKS:
            if only and check.name not in only:
                results[check.name] = {"skipped": "not in --only"}
            elif (why := _unmet(check, device, args.smoke)) is not None:
                results[check.name] = {"skipped": why}
            elif size == "full" and max(time.perf_counter() - started, spent_estimate) \
                    + check.estimate_s > args.budget_s:
                results[check.name] = {"skipped": f"its ~{check.estimate_s} s would pass the "
                                                  f"{args.budget_s:.0f} s time budget (--budget-s)"}
            else:
                spent_estimate += check.estimate_s
                t = time.perf_counter()
                try:
                    results[check.name] = check.run(Path(tmp) / check.name, size)
                except Exception as e:  # record and go on: one device run must report everything
                    results[check.name] = {"error": f"{type(e).__name__}: {e}",
                                           "traceback": traceback.format_exc()[-2000:]}
                results[check.name]["section_s"] = round(time.perf_counter() - t, 1)
            _write(out, results)
            print(f"{check.name}: {json.dumps(results[check.name], default=str)[:600]}", flush=True)
    failed = [n for n, r in results.items() if n != "env" and ("error" in r or r.get("passed") is False)]
    return 1 if failed else 0


def _vllm_version() -> str | None:
    try:
        import vllm

        return getattr(vllm, "__version__", "unknown")
    except ImportError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
