"""``arlgym-sft``: collect behaviour-cloning data, show its statistics, fine-tune a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from arlgym.clikit import (
    ArgumentParser,
    add_env_kwargs,
    add_version,
    env_kwargs_of,
)
from arlgym.clirun import run_command, safe_name
from arlgym.core.validation import check_env_kwargs, check_float, check_int
from arlgym.envs.servers import add_env_servers
from arlgym.errors import ArlgymError, ConfigError
from arlgym.evaluation.held_out import format_held_out
from arlgym.models import load_tokenizer
from arlgym.policies.spec import check_policy_spec
from arlgym.rundir import no_trace_on_failure
from arlgym.sft.collect import CollectConfig, collect_sft, dataset_stats
from arlgym.sft.train import _read_samples, add_train_arguments, train_from_args

__all__ = ["main"]


def _default_out(env_id: str, policy: str, split: str) -> Path:
    return Path("sft_data") / f"{safe_name(env_id.removeprefix('arl/'))}__{safe_name(policy)}__{split}"


def _cmd_collect(args: argparse.Namespace) -> int:
    check_policy_spec("--policy", args.policy, "arlgym-sft collect")
    check_int("--workers", args.workers, min=1, allow_none=True)
    if args.workers and args.env_servers:
        raise ConfigError("--workers and --env-servers exclude each other: with --env-servers "
                          "the envs run on the servers (their --workers). Fix: drop one")
    check_float("--temperature", args.temperature, min=0.0)
    check_int("--max-new-tokens", args.max_new_tokens, min=1)
    env_kwargs = env_kwargs_of(args)
    check_env_kwargs(args.env, env_kwargs, name="--env-kwarg")
    cfg = CollectConfig(env_id=args.env, policy=args.policy, episodes=args.episodes,
                        group_size=args.group_size, temperature=args.temperature,
                        max_new_tokens=args.max_new_tokens, min_score=args.min_score,
                        split=args.split, seed=args.seed, batch_tasks=args.batch_tasks,
                        workers=args.workers, env_kwargs=env_kwargs,
                        env_servers=args.env_servers)
    out = Path(args.out) if args.out else _default_out(args.env, args.policy, args.split)
    with no_trace_on_failure(out):
        stats = collect_sft(cfg, out, progress=not args.no_progress,
                            say=lambda line: print(line, flush=True))
    if stats["run"] == "finished":
        print(f"finished: {out} holds this collection, done ({stats['episodes']} episodes, "
              f"{stats['samples']} samples); nothing to do. To collect again, choose another --out")
        return 0
    print(f"{stats['samples']} samples from {stats['kept_episodes']}/{stats['episodes']} episodes "
          f"(success {stats['success_rate']:.1%}) -> {out / 'samples.jsonl'}")
    print(format_held_out(stats["held_out"]))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    tokenizer = None
    if args.tokenizer:
        tokenizer = load_tokenizer(args.tokenizer)
    out = Path(args.data)
    if out.is_file():
        out = out.parent
    if not (out / "samples.jsonl").exists():
        raise ArlgymError(f"no samples.jsonl in {out}; run `arlgym-sft collect` first")
    try:
        stats = dataset_stats(out, tokenizer)
    except (UnicodeDecodeError, TypeError, KeyError, AttributeError, ValueError):
        _read_samples(out / "samples.jsonl")  # names the file and line of the bad sample
        raise
    print(json.dumps(stats, indent=2))
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    return train_from_args(args)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="arlgym-sft", description=__doc__)
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("collect", help="roll out a policy and write step-level chat samples",
                       description="Roll out --policy on --env through arlgym's rollout "
                                   "collector, keep episodes passing --min-score (default: won) "
                                   "and write one HF `messages` sample per step to "
                                   "OUT/samples.jsonl, with a dataset card. Interrupted runs "
                                   "resume where they stopped, without duplicates.")
    p.add_argument("--env", default="arl/Sokoban-v0", help="env id (default: arl/Sokoban-v0)")
    p.add_argument("--policy", default="expert",
                   help="policy spec: expert | greedy | hf:<path> | vllm:<path> | openai:<url>#<model>")
    p.add_argument("--episodes", type=int, default=200, help="episodes to roll out (default: 200)")
    p.add_argument("--group-size", type=int, default=1, help="rollouts per task (default: 1)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default: 0)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--min-score", type=float, default=None,
                   help="keep episodes with score >= this (default: keep won episodes)")
    p.add_argument("--split", default="train", help="task split (default: train)")
    p.add_argument("--seed", type=int, default=0, help="base seed: group g uses seed+g")
    p.add_argument("--workers", type=int, default=None,
                   help="env worker processes (default: in-process unless the env needs them; "
                        "not with --env-servers)")
    p.add_argument("--batch-tasks", type=int, default=32,
                   help="task groups played in parallel per batch (default: 32)")
    add_env_kwargs(p)
    add_env_servers(p)
    p.add_argument("--out", default=None, help="output folder (default: sft_data/<env>__<policy>__<split>)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_collect)

    p = sub.add_parser("stats", help="print counts, success and tokens per sample of a dataset")
    p.add_argument("data", help="dataset folder (or its samples.jsonl)")
    p.add_argument("--tokenizer", default=None, help="model spec whose tokenizer counts tokens (e.g. tiny)")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("train", help="SFT a model on collected samples (TRL SFTTrainer)")
    try:
        add_train_arguments(p)
    except ImportError:  # the [train] extra is missing; train_from_args will say so
        p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, "interrupted; rerun the same command to resume")


if __name__ == "__main__":
    sys.exit(main())
