"""Peak memory and trained tokens/s at real vocabularies: arlgym's trainer against TRL's GRPOTrainer.

The LM head is what grows with the vocabulary: at Qwen's 151,936 tokens every sampled or trained
token has 151,936 logits. This bench isolates that cost with toy-depth models (2 layers, hidden
64, random init, arlgym's tiny tokenizer saved beside them; only ``vocab_size`` differs:
600, 49,152 as SmolLM2, 151,936 as Qwen2.5/Qwen3) and runs, for each vocabulary, the same
single-turn Sokoban GSPO step on both sides as ``bench/bench_trl_grpo.py`` (same model, seed,
prompts, completions per prompt, completion cap, learning rate; one optimizer step per batch),
each side in its own process.

Memory is sampled from ``/proc/self/statm`` every 5 ms in the side's process and attributed to
the phase running: **rollout** (arlgym's ``_rollout``: generate + env; TRL's
``_generate_and_score_completions``), taken from the first rollout, before any update (memory an
update frees stays in the process, so later rollouts' RSS includes it), and **update**
(everything else in a step: arlgym's old-log-prob pass and update, TRL's update). Reported: peak
RSS of each phase above the RSS once model and trainer are built ("setup"), and the process's
overall peak RSS. Speed: trained tokens/s =
(prompt + completion tokens of the batch) / (step time − rollout time), the median over the steps
after the first, on the wall clock and on the process's CPU clock (with one torch thread the CPU
clock hardly moves when other work shares the cores).

    python bench/bench_memory.py [--vocabs 600,49152,151936] [--prompts 8] [--generations 4]
                                 [--max-new-tokens 48] [--steps 3] [--threads 1]

Ratios are arlgym / TRL (tokens/s: > 1 is better; memory: < 1 is better). See docs/scale.md for
the figures and what they mean for a real model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_trl_grpo as base  # noqa: E402

PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20


def toy_model_dir(vocab: int, root: Path) -> Path:
    """A 2-layer, hidden-64 Qwen2 with ``vocab`` output rows and arlgym's tiny tokenizer."""
    out = root / f"toy-v{vocab}"
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from arlgym.models import load_tokenizer

    tok = load_tokenizer("tiny")
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


class PhasePeaks:
    """A thread that keeps the peak RSS seen in each phase named by ``bench_trl_grpo.PHASE``."""

    def __init__(self) -> None:
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        first_gen_done = False
        with open("/proc/self/statm") as fh:
            while not self._stop.is_set():
                fh.seek(0)
                rss = int(fh.read().split()[1]) * PAGE_MIB
                phase = base.PHASE
                # memory an update freed stays in the process (the allocator keeps it), so a
                # later rollout's RSS says little: the rollout peak is the first rollout's
                if phase == "gen" and first_gen_done:
                    phase = "gen-later"
                elif phase == "train" and "gen" in self.peaks:
                    first_gen_done = True
                if rss > self.peaks.get(phase, 0.0):
                    self.peaks[phase] = rss
                time.sleep(0.005)

    def __enter__(self) -> PhasePeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def run_side(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix=f"bench_mem_{args.side}_") as out_dir, PhasePeaks() as peaks:
        if args.side == "trl":
            result = base.run_trl(args, out_dir)
        else:
            result = base.run_arlgym(args, True, out_dir)
    result["phase_peaks_mib"] = peaks.peaks
    return result


def _child(side: str, model: Path, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        path = fh.name
    cmd = [sys.executable, __file__, "--side", side, "--json", path, "--model", str(model),
           "--prompts", str(args.prompts), "--generations", str(args.generations),
           "--max-new-tokens", str(args.max_new_tokens), "--steps", str(args.steps),
           "--lr", str(args.lr), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    result = json.loads(Path(path).read_text())
    os.unlink(path)
    return result


def summarize(result: dict[str, Any]) -> dict[str, float]:
    steps = result["steps"][1:] or result["steps"]
    med = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731
    tokens = med("prompt_tokens") + med("completion_tokens")
    train_s = med("wall/step") - med("wall/gen")
    train_cpu = med("cpu/step") - med("cpu/gen")
    setup = result["setup_rss_mib"]
    peaks = result["phase_peaks_mib"]
    return {"tok_s_train": tokens / max(1e-9, train_s), "train_s": train_s,
            "tok_s_train_cpu": tokens / max(1e-9, train_cpu),
            "rollout_s": med("wall/gen"), "tokens": tokens,
            "rollout_mib": peaks.get("gen", setup) - setup,
            "update_mib": peaks.get("train", setup) - setup,
            "peak_mib": result["peak_rss_mib"], "setup_mib": setup}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocabs", default="600,49152,151936", help="comma-separated vocabulary sizes")
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts per step")
    ap.add_argument("--generations", type=int, default=4, help="completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="completion cap, both sides")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps per side (first left out)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per side")
    ap.add_argument("--sides", default="trl,arlgym", help=argparse.SUPPRESS)
    ap.add_argument("--side", choices=["trl", "arlgym"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        Path(args.json).write_text(json.dumps(run_side(args)))
        return

    import torch
    import transformers
    import trl

    from arlgym.models import models_cache_dir

    vocabs = [int(v) for v in args.vocabs.split(",")]
    sides = args.sides.split(",")
    print(f"single-turn Sokoban GSPO step, toy models (2 layers, hidden 64): {args.prompts} prompts x "
          f"{args.generations} completions, <= {args.max_new_tokens} new tokens, {args.steps} steps "
          f"per side (medians without the first); trl {trl.__version__}, transformers "
          f"{transformers.__version__}, torch {torch.__version__}, {args.threads} torch thread(s)\n")
    head = (f"{'vocab':>8s} {'side':8s}{'tok/s train':>12s}{'(CPU clock)':>12s}{'rollout s':>10s}"
            f"{'rollout +MiB':>13s}"
            f"{'update +MiB':>12s}{'peak RSS MiB':>13s}")
    print(head)
    rows: dict[int, dict[str, dict[str, float]]] = {}
    for vocab in vocabs:
        model = toy_model_dir(vocab, models_cache_dir() / "bench")
        rows[vocab] = {}
        for side in sides:
            raw = _child(side, model, args)
            if "error" in raw:
                print(f"{vocab:8d} {side:8s} FAILED {raw['error']}")
                continue
            row = summarize(raw)
            rows[vocab][side] = row
            print(f"{vocab:8d} {side:8s}{row['tok_s_train']:12,.0f}{row['tok_s_train_cpu']:12,.0f}"
                  f"{row['rollout_s']:10.2f}"
                  f"{row['rollout_mib']:13,.0f}{row['update_mib']:12,.0f}{row['peak_mib']:13,.0f}",
                  flush=True)
        if {"trl", "arlgym"} <= set(rows[vocab]):
            a, t = rows[vocab]["arlgym"], rows[vocab]["trl"]
            print(f"{vocab:8d} {'ratio':8s}{a['tok_s_train'] / t['tok_s_train']:11.2f}x"
                  f"{a['tok_s_train_cpu'] / t['tok_s_train_cpu']:11.2f}x"
                  f"{a['rollout_s'] / t['rollout_s']:9.2f}x"
                  f"{a['rollout_mib'] / max(1.0, t['rollout_mib']):12.2f}x"
                  f"{a['update_mib'] / max(1.0, t['update_mib']):11.2f}x"
                  f"{a['peak_mib'] / t['peak_mib']:12.2f}x", flush=True)
    print("\nratio = arlgym / TRL: > 1 is better for tok/s, < 1 for seconds and memory.\n"
          "+MiB = peak RSS in that phase above the RSS once model and trainer are built.")


if __name__ == "__main__":
    main()
