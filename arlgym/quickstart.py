"""``arlgym quickstart``: the whole pipeline on Sokoban with the tiny model, offline, on CPU.

expert demonstrations → behaviour cloning (SFT) → eval → a short SAMPO run from the SFT
checkpoint → eval again; prints a random / SFT / SFT+SAMPO table and saves a PNG of the curves.
A few minutes of RL on 2 cores will not visibly beat SFT (see README): the quickstart shows the
pieces working together and RL running stably (format validity kept).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["QuickstartConfig", "rl_phase_summary", "run_quickstart"]


@dataclass
class QuickstartConfig:
    out: str = "runs/quickstart"
    #: expert demonstrations. Measured (200 held-out rooms, seed 0, 2 threads): 2,000 rooms ×
    #: 3 epochs (615 steps) 60.5%, 2,000 × 4 (820 steps) 83.5%, 3,000 × 3 (927 steps) 93.0%
    episodes: int = 3000
    #: SFT time budget: 3 epochs of 3,000 rooms take ~6.6 min with 2 threads on 2 idle cores,
    #: so they fit (and the cosine schedule is then the same on every run, see budget_horizon)
    sft_minutes: float = 7.0
    sft_lr: float = 1e-3
    sft_batch_size: int = 32
    eval_episodes: int = 100
    rl_steps: int = 6
    rl_tasks: int = 6
    rl_group_size: int = 4
    rl_lr: float = 3e-5
    #: rollout temperature of the RL phase (log-probs are computed at the same temperature, so
    #: the policy being optimised is exactly the one sampled). Not Table 6's 1.0: at T=1 the
    #: 0.8M-parameter SFT policy puts ~0.25% of each token's mass on stray tokens and 4.3% of its
    #: responses come out malformed (measured on 200 rooms); at 0.8 it is 0.65%, and sampled
    #: success is 66% (T=1: 61%, greedy: 74%), so it still explores.
    rl_temperature: float = 0.8
    seed: int = 0
    #: torch CPU threads (0: torch's default). One thread: the tiny model's matrices are too
    #: small to split, and with a second busy process on the cores, every OpenMP barrier waits
    #: for a descheduled thread (measured: one generate 1.4 s with 1 thread, 13-27 s with 2).
    threads: int = 1
    #: torch threads of the SFT phase: its batches (32 samples × ~140 tokens) are large enough
    #: to split, and nothing else runs meanwhile (measured 1.4× faster than 1 thread)
    sft_threads: int = 2

    @classmethod
    def fast(cls, out: str = "runs/quickstart-fast") -> QuickstartConfig:
        """Tiny settings for CI: every stage runs, numbers mean nothing."""
        return cls(out=out, episodes=64, sft_minutes=0.5, eval_episodes=8, rl_steps=2,
                   rl_tasks=2, rl_group_size=2)


def _eval(policy_spec_or_obj: Any, episodes: int, out: Path) -> dict[str, Any]:
    from arlgym.evaluation.runner import evaluate
    from arlgym.policies import SamplingParams, make_policy

    policy = make_policy(policy_spec_or_obj) if isinstance(policy_spec_or_obj, str) else policy_spec_or_obj
    summary, _ = evaluate("arl/Sokoban-v0", policy, episodes=episodes, split="test", out=out,
                          batch_size=64, sampling=SamplingParams(temperature=0.0, max_new_tokens=24),
                          progress=True)
    return summary["overall"]


def _plot(sft_log: list[dict], rl_log: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    if sft_log:
        a.plot([h["step"] for h in sft_log], [h["loss"] for h in sft_log])
    a.set(title="SFT (tiny model, expert demos)", xlabel="step", ylabel="loss")
    if rl_log:
        steps = [h["step"] for h in rl_log]
        b.plot(steps, [h["env/success_rate"] for h in rl_log], label="rollout success")
        b.plot(steps, [h["env/format_valid_ratio"] for h in rl_log], label="format valid")
        b.legend()
    b.set(title="SAMPO from the SFT checkpoint", xlabel="step", ylim=(0, 1.05))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rl_phase_summary(rl_log: list[dict], temperature: float) -> dict[str, Any]:
    """Malformed-response ratio over every RL rollout turn (each step's ratio weighted by its
    number of sampled turns) and the first/last step's rollout success."""
    responses = sum(h["env/turns"] for h in rl_log)
    invalid = sum(h["env/turns"] * (1.0 - h["env/format_valid_ratio"]) for h in rl_log)
    return {"temperature": temperature, "steps": len(rl_log), "responses": int(responses),
            "invalid_ratio": invalid / responses if responses else 0.0,
            "first_success": rl_log[0]["env/success_rate"] if rl_log else 0.0,
            "last_success": rl_log[-1]["env/success_rate"] if rl_log else 0.0}


def run_quickstart(cfg: QuickstartConfig) -> dict[str, Any]:
    import torch

    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer
    from arlgym.sft.collect import CollectConfig, collect_sft
    from arlgym.sft.train import SFTRunConfig, train_sft

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    print(f"[1/5] collecting {cfg.episodes} expert episodes")
    data = out / "sft_data"
    collect_sft(CollectConfig(episodes=cfg.episodes, seed=cfg.seed, batch_tasks=64), data)
    timings["collect_s"] = time.perf_counter() - t0

    print(f"[2/5] behaviour cloning the tiny model ({cfg.sft_minutes} min budget)")
    sft_dir = out / "sft"
    t = time.perf_counter()
    threads_before = torch.get_num_threads()
    if cfg.sft_threads:
        torch.set_num_threads(cfg.sft_threads)
    sft_stats = train_sft(SFTRunConfig(data=(str(data),), model="tiny", output_dir=str(sft_dir), engine="prefix",
                                       epochs=3, lr=cfg.sft_lr, batch_size=cfg.sft_batch_size,
                                       time_budget_minutes=cfg.sft_minutes, seed=cfg.seed,
                                       logging_steps=10))
    timings["sft_s"] = time.perf_counter() - t
    torch.set_num_threads(threads_before)

    print(f"[3/5] evaluating random and SFT policies on {cfg.eval_episodes} held-out rooms")
    t = time.perf_counter()
    from arlgym.policies import make_policy

    rows = {"random": _eval(make_policy("random", seed=cfg.seed), cfg.eval_episodes, out / "eval_random.jsonl"),
            "SFT": _eval(f"hf:{sft_dir}", cfg.eval_episodes, out / "eval_sft.jsonl")}
    timings["eval_s"] = time.perf_counter() - t

    print(f"[4/5] SAMPO for {cfg.rl_steps} steps from the SFT checkpoint")
    t = time.perf_counter()
    rl_dir = out / "rl"
    rl_cfg = parse_train_config([
        "--algo", "sampo", "--model", str(sft_dir), "--output_dir", str(rl_dir),
        "--max_steps", str(cfg.rl_steps), "--num_tasks", str(cfg.rl_tasks),
        "--group_size", str(cfg.rl_group_size), "--lr", str(cfg.rl_lr),
        "--max_new_tokens", "24", "--temperature", str(cfg.rl_temperature), "--log_with", "none", "--seed", str(cfg.seed),
        "--cold_start_steps", str(cfg.rl_steps), "--torch_threads", str(cfg.threads)])  # too few steps for filtering to pay off
    rl_log = Trainer(rl_cfg).train()
    timings["rl_s"] = time.perf_counter() - t

    print("[5/5] evaluating SFT+SAMPO")
    t = time.perf_counter()
    rows["SFT+SAMPO"] = _eval(f"hf:{rl_dir / 'final'}", cfg.eval_episodes, out / "eval_rl.jsonl")
    timings["eval_s"] += time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0

    _plot(sft_stats["log"], rl_log, out / "curves.png")
    rl_phase = rl_phase_summary(rl_log, cfg.rl_temperature)
    lines = [f"{'policy':10s} {'success':>8s} {'± se':>6s} {'format ok':>9s} {'steps':>6s}"]
    for name, r in rows.items():
        lines.append(f"{name:10s} {r['success_rate']:8.1%} {r['success_se']:6.1%} "
                     f"{r['format_valid_ratio']:9.1%} {r['mean_steps']:6.2f}")
    table = "\n".join(lines)
    print(f"\nSokoban 6x6/1 box, {cfg.eval_episodes} held-out rooms, greedy:\n{table}")
    print(f"RL phase (T={cfg.rl_temperature}): {rl_phase['responses']} responses, "
          f"{rl_phase['invalid_ratio']:.1%} malformed; rollout success "
          f"{rl_phase['first_success']:.0%} -> {rl_phase['last_success']:.0%}")
    print(f"total {timings['total_s'] / 60:.1f} min; curves: {out / 'curves.png'}")
    result = {"rows": rows, "timings": timings, "rl_phase": rl_phase, "sft": {k: v for k, v in sft_stats.items() if k != "log"}}
    (out / "quickstart.json").write_text(json.dumps(result, indent=2))
    return result
