"""The run's evals: the periodic one on ``eval_split`` and the final one on the test panel.

Both decode as :func:`eval_sampling` says (greedy by default) and run the envs where the
rollouts run (local, or ``env_servers``). They read the trainer's live model and settings and
write nothing but their own files.

Why the final eval plays both decodings by default (``test_both_decodings``): a policy that
imitates a noisy demonstrator copies the noise, and argmax drops it for free, so an RL effect
read under sampling alone can be what greedy decoding of the start already gives
(docs/main_job.md). The arena report therefore shows every run under greedy decoding and the
paper's validation sampling side by side.
"""

from __future__ import annotations

import json
from typing import Any

from arlgym.evaluation.panel import make_panel
from arlgym.evaluation.runner import evaluate
from arlgym.policies import SamplingParams, make_policy
from arlgym.policies.hf import HFPolicy
from arlgym.rl import metrics as M
from arlgym.rl.build import env_server_kwargs

__all__ = ["eval_sampling", "decoding_of", "companion_decoding", "final_evaluation",
           "periodic_eval", "PAPER_SAMPLING"]

#: the paper's validation sampling: temperature, top-p, top-k, episodes a task
PAPER_SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "samples": 4}


def eval_sampling(cfg: Any) -> SamplingParams:
    """How the periodic and final evals decode: greedy by default; with eval_temperature the
    paper's validation protocol (0.6, top-p 0.95, top-k 20), seeded by the run's seed so a
    checkpoint's eval is reproducible and two runs of one seed play the same draws."""
    if cfg.eval_temperature <= 0:
        return SamplingParams(temperature=0.0, max_new_tokens=cfg.max_new_tokens)
    return SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.eval_top_p,
                          top_k=cfg.eval_top_k, max_new_tokens=cfg.max_new_tokens,
                          seed=cfg.seed + 1234)


def decoding_of(sampling: SamplingParams) -> str:
    """``greedy`` or ``sampled``: the name an eval's files and the report use for it."""
    return "greedy" if sampling.temperature <= 0 else "sampled"


def companion_decoding(cfg: Any) -> tuple[SamplingParams, int]:
    """The final eval's other decoding (``test_both_decodings``): greedy, one episode a task,
    beside a sampled eval; beside a greedy one, the paper's validation sampling with the same
    seed rule as :func:`eval_sampling`. Returns (sampling, episodes a task)."""
    if cfg.eval_temperature > 0:
        return SamplingParams(temperature=0.0, max_new_tokens=cfg.max_new_tokens), 1
    ps = PAPER_SAMPLING
    return (SamplingParams(temperature=ps["temperature"], top_p=ps["top_p"], top_k=ps["top_k"],
                           max_new_tokens=cfg.max_new_tokens, seed=cfg.seed + 1234), ps["samples"])


def _live_policy(trainer: Any) -> Any:
    """An HF policy on the trainer's live (unwrapped) model."""
    return HFPolicy(trainer.accelerator.unwrap_model(trainer.model), tokenizer=trainer.tokenizer,
                    processor=trainer.processor, batch_size=trainer.cfg.generation_batch_size)


def periodic_eval(trainer: Any) -> dict[str, float]:
    """The live policy on the ``eval_split`` task list: ``eval/*`` metrics."""
    cfg = trainer.cfg
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.eval()
    try:  # vLLM holds the synced weights (and a sharded model cannot generate on one rank)
        policy = trainer.policy if trainer.engine == "vllm" else _live_policy(trainer)
        summary, _ = evaluate(cfg.env_id, policy, episodes=cfg.eval_episodes,
                              split=cfg.eval_split, batch_size=64, env_kwargs=cfg.env_kwargs,
                              sampling=eval_sampling(cfg), samples_per_task=cfg.eval_samples,
                              progress=False, **env_server_kwargs(cfg.env_servers))
    finally:
        model.train()
    o = summary["overall"]
    return {M.EVAL_SUCCESS: o["success_rate"], M.EVAL_SUCCESS_SE: o["success_se"],
            M.EVAL_SCORE: o["mean_score"], M.EVAL_FORMAT_VALID: o["format_valid_ratio"]}


def final_evaluation(trainer: Any) -> dict[str, dict[str, Any]]:
    """Eval of final/ (and best/) on the test panel under :func:`eval_sampling`:
    ``eval/test-{last,best}.jsonl`` and ``.summary.json`` files that carry the panel, its hash
    and the decoding (main process); with ``test_both_decodings`` also under
    :func:`companion_decoding`, in ``eval/test-{last,best}.{greedy,sampled}.jsonl``. Returns
    the primary summaries by checkpoint name."""
    cfg, out_dir = trainer.cfg, trainer.out
    panel = make_panel(cfg.env_id, cfg.test_split, cfg.test_episodes, cfg.env_kwargs)
    folder = out_dir / "eval"
    folder.mkdir(exist_ok=True)
    model = trainer.accelerator.unwrap_model(trainer.model)
    policies = {"last": _live_policy(trainer)}
    # the live model holds final/'s weights: the eval's settings name that folder, not the
    # model the run started from (which is what the live model's config still names)
    policies["last"].name = f"hf:{out_dir / 'final'}"
    if (out_dir / "best" / "best.json").exists():
        policies["best"] = make_policy(f"hf:{out_dir / 'best'}")
    out: dict[str, dict[str, Any]] = {}
    model.eval()
    try:
        # the companion first: a primary summary on disk then means the checkpoint is done
        # (the arena's finished-run check reads it)
        decodings = [(eval_sampling(cfg), cfg.eval_samples, "")]
        if cfg.test_both_decodings:
            other, samples = companion_decoding(cfg)
            decodings.insert(0, (other, samples, "." + decoding_of(other)))
        for name, policy in policies.items():
            for sampling, samples, suffix in decodings:
                path = folder / f"test-{name}{suffix}.jsonl"
                summary, _ = evaluate(
                    cfg.env_id, policy, episodes=cfg.test_episodes, split=cfg.test_split,
                    out=path, batch_size=64, env_kwargs=cfg.env_kwargs, progress=False,
                    sampling=sampling, samples_per_task=samples,
                    **env_server_kwargs(cfg.env_servers))
                summary.update({"checkpoint": name, "panel": panel, "panel_hash": panel["hash"],
                                "train_step": trainer.step, "decoding": decoding_of(sampling)})
                if name == "best":
                    summary["best"] = json.loads((out_dir / "best" / "best.json").read_text())
                path.with_name(path.stem + ".summary.json").write_text(json.dumps(summary, indent=2))
                if not suffix:
                    out[name] = summary
    finally:
        model.train()
    return out
