"""Two checks of the RL update itself, from a quickstart's SFT checkpoint (docs/quickstart_one_run.md, "Where the update goes").

``same-rooms``: every step plays the same rooms (the collector's task seed is reset before each
step), so the rollout success of step k is the sampled (T = 1) success on the rooms the policy is
trained on — the easiest test an RL loop must pass. Prints success and KL a step.

``one-update``: one ``train_step``, then each turn sample's response log-probability is computed
again and its change set against the sample's advantage: the correlation, and the mean change
for positive, negative and zero advantages. A healthy update raises what it reinforces.

    python experiments/rl_update_checks.py same-rooms --start runs/quickstart --steps 10 \\
        --algo sampo --lr 2e-4 --num_tasks 16 --group_size 8 --mini_batch_size 256 --cold_start_steps 100
    python experiments/rl_update_checks.py one-update --start runs/quickstart \\
        --algo sampo --lr 5e-4 --num_tasks 16 --group_size 8 --mini_batch_size 0 --cold_start_steps 100

Unknown flags go to the trainer; the check fixes ``--model`` (the start's ``sft/``),
``--output_dir`` (``--out``), ``--max_new_tokens 24``, ``--log_with none`` and one torch thread.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from arlgym.rl import metrics as M


def _trainer(start: Path, out: Path, steps: int, flags: list[str]) -> Any:
    import torch

    torch.set_num_threads(1)
    from arlgym.rl.cli import parse_train_config
    from arlgym.rl.trainer import Trainer

    cfg = parse_train_config(["--model", str(start / "sft"), "--output_dir", str(out), "--log_with", "none",
                              "--torch_threads", "1", "--max_new_tokens", "24", *flags,
                              "--max_steps", str(steps)])
    return Trainer(cfg)


def same_rooms(trainer: Any) -> list[dict[str, float]]:
    first = trainer.collector.vec._next_seed  # the task seed of step 1's rooms
    rows = []
    while trainer.step < trainer.cfg.max_steps:
        trainer.collector.vec._next_seed = first
        m = trainer.train_step()
        rows.append({"step": trainer.step, "success": m[M.SUCCESS_RATE], "kl": m.get("kl", 0.0)})
        print(f"step {trainer.step}: rollout success on the same rooms {m['env/success_rate']:.1%}, "
              f"KL {m.get('kl', 0.0):.4f}", flush=True)
    return rows


def one_update(trainer: Any) -> dict[str, float]:
    import numpy as np
    import torch

    from arlgym.rl.update import micro_batches

    seen: dict[str, Any] = {}
    update = trainer._update

    def capture(samples: list, adv: torch.Tensor) -> dict[str, float]:
        seen.update(samples=samples, adv=adv.clone(), old=[s.old_logprobs.clone() for s in samples])
        return update(samples, adv)

    trainer._update = capture
    metrics = trainer.train_step()
    samples, adv = seen["samples"], seen["adv"]
    model = trainer.accelerator.unwrap_model(trainer.model)
    new: list[Any] = [None] * len(samples)
    with torch.no_grad():
        for mb in micro_batches(samples, list(range(len(samples))), trainer.cfg.micro_batch_tokens,
                                 trainer.share_prompts):
            logp, _, _ = trainer._logprobs(model, [samples[i] for i in mb], False)
            for row, i in enumerate(mb):
                new[i] = logp[row, : len(samples[i].response_ids)].cpu()
    a = (adv if adv.dim() == 1 else adv.mean(-1)).float().numpy()
    d = np.array([float(n.sum() - o.sum()) for n, o in zip(new, seen["old"], strict=True)])
    pos, neg = a > 1e-6, a < -1e-6
    zero = ~pos & ~neg
    result = {"samples": len(a), "corr": float(np.corrcoef(a, d)[0, 1]),
              "dlogp_pos": float(d[pos].mean()), "dlogp_neg": float(d[neg].mean()),
              "dlogp_zero": float(d[zero].mean()) if zero.any() else float("nan"), "kl": metrics.get("kl", 0.0),
              # the batch's balance over turn samples: if failing trajectories (more turns) carried
              # most of the advantage mass, an update would mostly push down (measured: balanced)
              "share_pos": float(pos.mean()), "share_neg": float(neg.mean()), "share_zero": float(zero.mean()),
              "adv_pos_sum": float(a[pos].sum()), "adv_neg_sum": float(a[neg].sum())}
    print(f"one update, {len(a)} turn samples: corr(advantage, Δ log-prob) {result['corr']:+.3f}; "
          f"mean Δ log-prob: advantage > 0 {result['dlogp_pos']:+.3f}, < 0 {result['dlogp_neg']:+.3f}, "
          f"= 0 {result['dlogp_zero']:+.3f} nats; samples > 0 / < 0 / = 0: {result['share_pos']:.0%} / "
          f"{result['share_neg']:.0%} / {result['share_zero']:.0%}, advantage sum > 0 "
          f"{result['adv_pos_sum']:+.1f}, < 0 {result['adv_neg_sum']:+.1f}", flush=True)
    return result


def main(argv: list[str] | None = None) -> Any:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["same-rooms", "one-update"])
    ap.add_argument("--start", required=True, help="a quickstart's output folder (its sft/ is the start)")
    ap.add_argument("--out", default="runs/rl_update_checks", help="the trainer's output folder")
    ap.add_argument("--steps", type=int, default=10, help="same-rooms: RL steps")
    args, flags = ap.parse_known_args(argv)
    out = Path(args.out) / args.check
    trainer = _trainer(Path(args.start), out, args.steps if args.check == "same-rooms" else 1, flags)
    try:
        result = same_rooms(trainer) if args.check == "same-rooms" else one_update(trainer)
    finally:
        trainer.collector.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps({"flags": flags, "result": result}, indent=1))
    return result


if __name__ == "__main__":
    main()
