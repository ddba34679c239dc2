"""The one prepared script for a lent GPU: what only a GPU can prove, in one short run.

    python bench/gpu_check.py --out $OUT            # on the device (about 5 min)
    python bench/gpu_check.py --smoke --out /tmp/g  # on CPU: every section at toy sizes (CI test)
    python bench/gpu_check.py --dry-run --out /tmp/g  # what a GPU run checks (default on CPU)

Every run writes ``gpu_check.json`` and ``gpu_check.md`` (a table a maintainer can paste) to
``--out``. ``--dry-run`` runs nothing: it lists every GPU path the docs promise (:data:`CHECKS`),
what each compares and when it passes, and which of them this script runs today.

Sections (each timed; a failure is recorded and the next section still runs; results in
``gpu_check.json``, a table on stdout):

1. ``bf16_step`` — SAMPO steps of a Qwen3-shaped model of ~0.45B parameters (Qwen3-0.6B's
   layers with the tiny tokenizer's vocabulary, random init: no hub on the device) on Sokoban,
   under bf16 autocast with gradient checkpointing, through the real trainer. Reports step
   time, training tokens/s, peak GPU memory and the rollout/trainer log-prob gap.
2. ``vllm_parity`` (vllm installed) — the tiny model in a colocated vLLM engine: its processed
   log-probs against an HF forward pass; a sync of *unchanged* weights must leave tokens and
   log-probs identical (the reference check); a sync of perturbed weights must make the engine
   follow them.
3. ``vllm_trainer`` (vllm installed) — 3 SAMPO steps with ``rollout_engine: vllm``: the
   per-step ``rollout/logprob_abs_diff_*`` shows every weight sync landed.

vLLM is not in the device image and cannot travel (the pinned vllm 0.33.0 wheel is 336.4 MB and
needs a CUDA torch 2.14.0; a call carries 64 MiB), so sections 2-3 report "skipped: vllm not
installed" there unless a future image ships it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_model_dir(out: Path, *, hidden: int, layers: int, heads: int, kv_heads: int,
                    intermediate: int, seed: int = 0) -> tuple[Path, int]:
    """A randomly initialised Qwen3 of the given shape with the tiny tokenizer, saved to disk."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from arlgym.models import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    cfg = Qwen3Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=hidden // heads,
                      max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=None,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out, sum(p.numel() for p in model.parameters())


def _train(model: str, out: Path, steps: int, engine: str, extra: list[str]) -> list[dict[str, Any]]:
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config(["--algo", "sampo", "--env_id", "arl/Sokoban-v0", "--model", model,
                              "--output_dir", str(out), "--max_steps", str(steps),
                              "--rollout_engine", engine, "--log_with", "none", *extra])
    return Trainer(cfg).train()


def _peak_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def bf16_step(work: Path, smoke: bool) -> dict[str, Any]:
    import torch

    shape = (dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128) if smoke else
             dict(hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072))
    path, n_params = build_model_dir(work / "model", **shape)
    os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    steps = 1 if smoke else 3
    extra = ["--num_tasks", "2" if smoke else "8", "--group_size", "2" if smoke else "8",
             "--max_new_tokens", "16" if smoke else "64", "--lr", "1e-6",
             "--gradient_checkpointing", "true", "--env_kwargs", '{"max_steps": 3}',
             "--old_logprobs", "recompute"]  # to measure the sampler/trainer gap under bf16
    engine = "vllm" if _has_vllm() and not smoke else "hf"
    t = time.perf_counter()
    try:
        log = _train(str(path), work / "run", steps, engine, extra)
    finally:  # later sections train in fp32 (accelerate keeps its state process-wide)
        from accelerate.state import AcceleratorState

        os.environ.pop("ACCELERATE_MIXED_PRECISION")
        AcceleratorState._reset_state(reset_partial_state=True)
    last = log[-1]
    return {"params_M": round(n_params / 1e6, 1), "engine": engine, "steps": len(log),
            "seconds": round(time.perf_counter() - t, 1),
            "step_s": [round(m["time/step_s"], 2) for m in log],
            "train_tokens_per_s": round(last["tokens_per_s"]),
            "rollout_s": round(last["time/rollout_s"], 2),
            "logprob_gap_max": last.get("rollout/logprob_abs_diff_max"),
            "loss_finite": all(m["loss"] == m["loss"] for m in log),
            "peak_gpu_GiB": _peak_gib()}


def vllm_parity(work: Path, smoke: bool) -> dict[str, Any]:
    import gymnasium as gym
    import torch

    import arlgym  # noqa: F401
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
    return {"vllm_vs_hf_logprob_gap_max": hf_gap, "unchanged_sync_identical": identical,
            "after_perturbed_sync_gap_max": gap(moved, hf), "generate_s": round(gen_s, 3),
            "sync_s": round(sync_s, 4),
            "tokens": sum(len(c.response_token_ids) for c in first)}


def vllm_trainer(work: Path, smoke: bool) -> dict[str, Any]:
    size = (["--num_tasks", "2", "--group_size", "2", "--max_new_tokens", "8",
             "--env_kwargs", '{"max_steps": 2}'] if smoke else
            ["--num_tasks", "8", "--group_size", "8", "--max_new_tokens", "32"])
    log = _train("tiny", work / "vllm_run", 3, "vllm", [*size, "--lr", "1e-4", "--vllm_max_model_len", "2048"])
    return {"logprob_gap_max_per_step": [m.get("rollout/logprob_abs_diff_max") for m in log],
            "step_s": [round(m["time/step_s"], 2) for m in log]}


#: Every GPU path the docs promise, in the order one device run would check them. ``section``:
#: the function of this script that runs it, or None where it is planned but not written yet
#: (a dry run says so, rather than letting a report imply it was checked).
CHECKS: list[dict[str, Any]] = [
    {"name": "bf16_step", "section": "bf16_step",
     "what": "SAMPO steps of a random-init Qwen3-shaped ~0.45B model on Sokoban through the real "
             "trainer, bf16 autocast, gradient checkpointing",
     "passes_if": "finite loss; rollout/trainer log-prob gap < 0.1; reports step time, "
                  "training tokens/s and peak GPU memory", "needs": "1 GPU"},
    {"name": "vllm_parity", "section": "vllm_parity",
     "what": "colocated vLLM rollouts: the engine's log-probs against the learner's HF forward; "
             "an unchanged weight sync, then a perturbed one",
     "passes_if": "gap < 1e-4 (fp32); unchanged sync leaves tokens and log-probs identical; the "
                  "engine follows perturbed weights", "needs": "1 GPU, vllm"},
    {"name": "vllm_trainer", "section": "vllm_trainer",
     "what": "3 SAMPO steps with rollout_engine vllm (colocated): every weight sync lands",
     "passes_if": "rollout/logprob_abs_diff_max < 1e-3 at every step", "needs": "1 GPU, vllm"},
    {"name": "vllm_server_pushes", "section": None,
     "what": "rollout_engine vllm_server against a local `trl vllm-serve`: weight pushes after "
             "each step, log-probs vs the learner's",
     "passes_if": "log-prob gap after each push as small as the colocated engine's",
     "needs": "1 GPU (server and learner share it), vllm, trl"},
    {"name": "async_vllm_workers", "section": None,
     "what": "async_rollouts with vLLM rollout workers, max_staleness 1: staleness and "
             "rollout_correction metrics over a few steps",
     "passes_if": "staleness <= max_staleness; finite loss; weight version advances",
     "needs": "1 GPU, vllm"},
    {"name": "lora_pushes", "section": None,
     "what": "LoRA training (lora_r > 0) with a vLLM engine: merged-adapter pushes",
     "passes_if": "engine log-probs follow the merged weights (gap < 1e-3 after each push)",
     "needs": "1 GPU, vllm, peft"},
    {"name": "fused_logprobs_v151936", "section": None,
     "what": "the fused (chunked, Triton) log-prob kernel at V = 151,936 against the "
             "materialized logits path, bf16, a 4k-token batch",
     "passes_if": "max |difference| < 1e-2 in bf16; reports both paths' time and peak memory",
     "needs": "1 GPU"},
    {"name": "sampo_alfworld_smollm2", "section": None,
     "what": "2-step SAMPO on ALFWorld with SmolLM2-135M (the installed weights), bf16",
     "passes_if": "2 steps, finite loss; reports tokens/s and peak memory",
     "needs": "1 GPU, alfworld"},
    {"name": "sampo_webshop_smollm2", "section": None,
     "what": "2-step SAMPO on WebShop with SmolLM2-135M, bf16",
     "passes_if": "2 steps, finite loss; reports tokens/s and peak memory",
     "needs": "1 GPU, webshop"},
    {"name": "sampo_qwen2.5_1.5b_shapes", "section": None,
     "what": "2-step SAMPO on ALFWorld and WebShop with a randomly initialised model of "
             "Qwen2.5-1.5B's shapes (no hub download on the device), bf16",
     "passes_if": "2 steps each, finite loss; reports tokens/s and peak memory",
     "needs": "1 GPU, alfworld, webshop"},
    {"name": "sampo_qwen3_4b_shapes", "section": None,
     "what": "2-step SAMPO on ALFWorld and WebShop with a randomly initialised model of "
             "Qwen3-4B's shapes, bf16, gradient checkpointing",
     "passes_if": "2 steps each within one H100's 80 GB; reports tokens/s and peak memory",
     "needs": "1 GPU (80 GB), alfworld, webshop"},
    {"name": "nccl_fsdp2_zero", "section": None,
     "what": "NCCL weight pushes and FSDP2 / ZeRO sharding across processes",
     "passes_if": "the same loss curve as one process",
     "needs": "2+ GPUs (not on a one-GPU lease)"},
]


def dry_run(device: str) -> dict[str, Any]:
    """What a GPU run would check, written as a report; nothing is run."""
    return {"dry_run": True, "device": device,
            "checks": [{**c, "runs_today": c["section"] is not None} for c in CHECKS]}


def markdown(report: dict[str, Any]) -> str:
    """The report as one Markdown table a maintainer can paste (docs/scale.md, an issue)."""
    lines = [f"# gpu_check ({'dry run: nothing was run' if report.get('dry_run') else 'results'})",
             "", f"device: {report.get('device') or report.get('env', {}).get('device')}", ""]
    if report.get("dry_run"):
        lines += ["| check | what it runs | passes if | needs | in this script |",
                  "|---|---|---|---|---|"]
        for c in report["checks"]:
            lines.append(f"| {c['name']} | {c['what']} | {c['passes_if']} | {c['needs']} | "
                         f"{'yes' if c['runs_today'] else 'planned, not written yet'} |")
    else:
        lines += ["| section | result |", "|---|---|"]
        for name, value in report.items():
            if name == "env":
                continue
            text = json.dumps({k: v for k, v in value.items() if k != "traceback"}, default=str)
            lines.append(f"| {name} | `{text[:400]}` |")
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
    parser.add_argument("--smoke", action="store_true", help="toy sizes, runs on CPU")
    parser.add_argument("--dry-run", action="store_true", default=None,
                        help="list every check and write the plan as the report; run nothing "
                             "(default: on when no GPU is visible and --smoke is not given)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    if args.dry_run or (args.dry_run is None and not args.smoke and device == "cpu"):
        report = dry_run(device)
        _write(out, report)
        for c in report["checks"]:
            print(f"{c['name']:28s} {'runs' if c['runs_today'] else 'planned':8s} {c['what']}")
        print(f"dry run on {device}: nothing was run; plan -> {out / 'gpu_check.md'}")
        return 0

    results: dict[str, Any] = {"env": {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": device,
        "vllm": _vllm_version()}}
    sections = [("bf16_step", bf16_step)]
    sections += [("vllm_parity", vllm_parity), ("vllm_trainer", vllm_trainer)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in sections:
            if name.startswith("vllm") and not _has_vllm():
                results[name] = {"skipped": "vllm not installed"}
                continue
            t = time.perf_counter()
            try:
                results[name] = fn(Path(tmp) / name, args.smoke)
            except Exception as e:  # record and go on: one device run must report everything
                results[name] = {"error": f"{type(e).__name__}: {e}",
                                 "traceback": traceback.format_exc()[-2000:]}
            results[name]["section_s"] = round(time.perf_counter() - t, 1)
            _write(out, results)
            print(f"{name}: {json.dumps(results[name], default=str)[:600]}", flush=True)
    return 1 if any("error" in r for r in results.values()) else 0


def _vllm_version() -> str | None:
    try:
        import vllm

        return getattr(vllm, "__version__", "unknown")
    except ImportError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
