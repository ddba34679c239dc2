"""The ``arlgym`` command: play, eval, envs (and env-specific tools such as ``alfworld``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import arlgym
from arlgym.clikit import (
    ArgumentParser,
    add_env_kwargs,
    add_version,
    env_kwargs_of,
    parse_kwarg_pairs,
)
from arlgym.clirun import run_command, safe_name
from arlgym.core.validation import check_env_kwargs, check_float, check_int, did_you_mean
from arlgym.envs.requirements import install_commands, missing
from arlgym.envs.servers import add_env_servers, env_server_kwargs
from arlgym.errors import ConfigError, UnknownPolicyError
from arlgym.evaluation.decodings import (
    greedy_companion,
    is_model_policy,
    paired_on_tasks,
    success_by_task,
)
from arlgym.evaluation.metrics import format_summary, summarize
from arlgym.policies import SamplingParams
from arlgym.policies.spec import check_policy_spec, seeded_policy
from arlgym.rollout import RolloutCollector, load_jsonl

__all__ = ["main", "build_parser"]


def _parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``["dim_room=7", "num_boxes=2"]`` -> ``{"dim_room": 7, "num_boxes": 2}`` (see
    :func:`arlgym.clikit.parse_kwarg_pairs`)."""
    return parse_kwarg_pairs(pairs)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default="expert",
                   help="policy spec: expert | greedy (Sokoban teacher) | random | human | hf:<path|tiny|smollm2-135m> | "
                        "vllm:<path> | openai:<base_url>#<model> | openai-tools:<base_url>#<model> "
                        "(the model calls the env's act tool) (default: expert)")
    p.add_argument("--episodes", type=int, default=20, help="number of episodes (default: 20)")
    add_env_kwargs(p)
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature for model policies; 0 = greedy (default: 0)")
    p.add_argument("--max-new-tokens", type=int, default=256,
                   help="response length cap for model policies (default: 256)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="episodes played in parallel (one batched generate per turn)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _cmd_envs(args: argparse.Namespace) -> int:
    """Every registered env, whether it can be made on this machine, and for each that cannot,
    what it lacks and the exact command that installs it."""
    unusable = 0
    for env_id, (entry, _) in arlgym.ENV_IDS.items():
        lacking = missing(env_id)
        if not lacking:
            print(f"{env_id:24s} usable      {entry}")
            continue
        unusable += 1
        print(f"{env_id:24s} NOT usable  needs {', '.join(r.what for r in lacking)}")
        for why in filter(None, (r.why() for r in lacking)):
            print(f"{'':24s}             why: {why}")
        for command in install_commands(lacking):
            print(f"{'':24s}             install: {command}")
    if unusable:
        print(f"\n{unusable} of {len(arlgym.ENV_IDS)} envs cannot be made here until the "
              "commands above have run")
    return 0


def _check_common(args: argparse.Namespace) -> None:
    """The numeric flags of play/eval, named as the user typed them."""
    check_int("--episodes", args.episodes, min=1)
    check_int("--batch-size", args.batch_size, min=1)
    check_float("--temperature", args.temperature, min=0.0)
    check_int("--max-new-tokens", args.max_new_tokens, min=1)
    check_int("--seed", args.seed, min=0)


def _policy(spec: str, seed: int, prog: str = "arlgym"):
    """The policy a spec names; ``--seed`` seeds the random policy's own RNG too, so a random
    baseline is reproducible like everything else (model policies take it per request)."""
    check_policy_spec("--policy", spec, prog)
    if spec == "human" and (sys.stdin is None or sys.stdin.closed):
        raise ConfigError("--policy human reads moves from standard input, which is closed. Fix: "
                          "run it in a terminal, or pipe one move per line into it")
    return seeded_policy(spec, seed)


def _cmd_play(args: argparse.Namespace) -> int:
    _check_common(args)
    policy = _policy(args.policy, args.seed, f"arlgym {args.command}")
    env_kwargs = env_kwargs_of(args)
    check_env_kwargs(args.env, env_kwargs, name="--env-kwarg")
    if args.policy == "human":
        env_kwargs.setdefault("render_mode", None)
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                              seed=args.seed)
    parallel = 1 if args.policy == "human" else max(1, min(args.batch_size, args.episodes))
    trajs = []
    # full batches, then one collector the size of the rest: exactly --episodes are played (a
    # model policy's work is its generate calls). Episode i is room seed + i either way: the
    # task stream continues across batches, and the rest's collector starts where it stopped.
    full, rest = divmod(args.episodes, parallel)
    for size, batches in ((parallel, full), (rest, 1 if rest else 0)):
        if not batches:
            continue
        with RolloutCollector(args.env, policy, num_tasks=size, sampling=sampling,
                              env_kwargs=env_kwargs, seed=args.seed + len(trajs),
                              progress=not args.no_progress) as collector:
            for _ in range(batches):
                batch = collector.collect()
                trajs.extend(batch)
                if args.policy == "human":
                    t = batch[0]
                    print(f"\nepisode over: {'won' if t.won else 'not won'} in {t.length} "
                          f"steps, return {t.episode_return:.2f}")
    print(format_summary(summarize(trajs), f"{policy.name} on {args.env} (train split, seed {args.seed})"))
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from arlgym.evaluation.runner import evaluate
    _check_common(args)
    policy = _policy(args.policy, args.seed, f"arlgym {args.command}")
    out = args.out
    if out is None:
        out = Path("runs") / "eval" / f"{safe_name(args.env)}__{safe_name(args.policy)}__{args.split}.jsonl"
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                              seed=args.seed)
    from arlgym.rundir import no_trace_on_failure

    remote = env_server_kwargs(args.env_servers, "--env-servers")
    with no_trace_on_failure(out, sidecars=(".settings.json",)):
        summary, _ = evaluate(args.env, policy, episodes=args.episodes, split=args.split,
                              out=out, batch_size=args.batch_size, sampling=sampling,
                              env_kwargs=env_kwargs_of(args),
                              samples_per_task=args.samples_per_task,
                              progress=not args.no_progress, **remote)
    print(format_summary(summary, f"{args.policy} on {args.env} ({args.split} split)"))
    print(f"episodes: {out}\nsummary:  {Path(out).with_suffix('.summary.json')}")
    if args.temperature > 0 and is_model_policy(args.policy) and not args.sampled_only:
        _greedy_beside(args, policy, out, remote)
    return 0


def _greedy_beside(args: argparse.Namespace, policy: Any, out: Any, remote: dict) -> None:
    """The same tasks greedily, one episode each, and greedy − sampled paired by task: a model
    row is reported under both decodings (arlgym/evaluation/decodings.py says why)."""
    from arlgym.evaluation.runner import evaluate
    greedy_out = greedy_companion(out)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens, seed=args.seed)
    summary, greedy = evaluate(args.env, policy, episodes=args.episodes, split=args.split,
                               out=greedy_out, batch_size=args.batch_size, sampling=sampling,
                               env_kwargs=env_kwargs_of(args), progress=not args.no_progress, **remote)
    print(format_summary(summary, f"{args.policy} on {args.env} ({args.split} split), greedy"))
    effect = paired_on_tasks(success_by_task(load_jsonl(out)), success_by_task(greedy))
    print(f"greedy − sampled (same tasks): {effect['difference']:+.1%} ± {effect['se']:.1%} paired "
          f"SE ({effect['gained']} tasks gained, {effect['lost']} lost)\ngreedy episodes: {greedy_out}")


def _cmd_patterns(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from arlgym.evaluation.patterns import format_patterns, pattern_report, plot_transitions
    path = Path(args.episodes)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; give the episodes JSONL that `arlgym eval` wrote")
    trajectories = load_jsonl(path)
    if not trajectories:
        raise ConfigError(f"{path} holds no episode")
    report = pattern_report(trajectories)
    print(format_patterns(report))
    stem = path.with_suffix("")
    png = plot_transitions(report, args.out or f"{stem}.patterns.png")
    Path(f"{stem}.patterns.json").write_text(json.dumps(_jsonable(report), indent=2))
    print(f"transitions: {png}\nreport:      {stem}.patterns.json")
    return 0


def _jsonable(value: Any) -> Any:
    """Counters keyed by (a, b) pairs as {"a -> b": n}, recursively."""
    if isinstance(value, dict):
        return {(" -> ".join(k) if isinstance(k, tuple) else k): _jsonable(v) for k, v in value.items()}
    return value


def _check_quickstart(cfg: Any) -> None:
    """The quickstart's own numbers, named by their flags, before anything is printed or run."""
    for flag, name, lo in (("--episodes", "episodes", 1), ("--sft-steps", "sft_steps", 0),
                           ("--eval-episodes", "eval_episodes", 1), ("--rl-steps", "rl_steps", 1),
                           ("--rl-jobs", "rl_jobs", 1), ("--seed", "seed", 0),
                           ("--rl-val-episodes", "rl_val_episodes", 0),
                           ("--threads", "threads", 0), ("--sft-threads", "sft_threads", -1),
                           ("--rl-threads", "rl_threads", -1), ("--eval-samples", "eval_samples", 1),
                           ("--choice-episodes", "choice_episodes", 0)):
        check_int(flag, getattr(cfg, name), min=lo)
    check_int("--room-size", cfg.room_size, min=5, max=10, example=7)
    check_int("--history-length", cfg.history_length, min=0, max=8, example=0)
    _check_teacher(cfg.teacher)
    from arlgym.quickstart import DEMO_MIN_SCORE

    if cfg.panel not in ("test", "val"):
        raise ConfigError(f"--panel {cfg.panel!r}: must be test or val. Fix: --panel val to choose "
                          "a design, --panel test (default) for the final table")
    if cfg.demos not in DEMO_MIN_SCORE:
        raise ConfigError(f"--demos {cfg.demos!r}: must be won or all. Fix: --demos won (the "
                          "teacher's won episodes) or --demos all (every episode)")
    check_float("--rl-lr", cfg.rl_lr, gt=0.0, example=5e-4)
    check_float("--rl-temperature", cfg.rl_temperature, gt=0.0, example=1.0)
    check_float("--rl-kl-coef", cfg.rl_kl_coef, min=0.0, allow_none=True, example=0.2)
    check_float("--sft-minutes", cfg.sft_minutes, gt=0.0, allow_none=True)


def _check_teacher(spec: str) -> None:
    """--teacher must name a scripted Sokoban demonstrator: greedy, expert, or either with
    slips (a model would have to be trained first; random moves teach nothing)."""
    try:
        base = seeded_policy(spec, 0)
    except UnknownPolicyError:
        kind = spec.split(":")[0] if isinstance(spec, str) else spec
        guess = did_you_mean(kind, ("greedy", "expert", "slips", "mistakes"))
        raise ConfigError(f"--teacher {spec!r} names no teacher{guess}; valid specs: greedy, "
                          "expert, slips:<p>:greedy|expert, mistakes:<p>:greedy|expert (e.g. "
                          "slips:0.7:expert). See `arlgym quickstart --help`") from None
    while hasattr(base, "base"):  # slips / mistakes of another policy
        base = base.base
    if getattr(base, "name", None) not in ("greedy", "expert"):
        raise ConfigError(f"--teacher {spec!r}: the demonstrator must be the greedy teacher or the "
                          "expert, with or without slips. Fix: --teacher greedy, expert, or "
                          "slips|mistakes:<p>:greedy|expert (e.g. slips:0.75:expert)")


def _teacher_text(spec: str) -> str:
    """``slips:0.7:expert`` -> words for the quickstart's description."""
    kind, _, rest = spec.partition(":")
    if kind in ("slips", "mistakes"):
        p, _, base = rest.partition(":")
        return (f"the {base} teacher that slips (its plan in the reasoning, a random move instead "
                f"of the plan's {float(p):.0%} of the time)")
    return f"the {spec} teacher"


def _quickstart_description(d: Any) -> str:
    """The quickstart's ``--help`` description, built from its defaults so it cannot drift from
    them (it once named won episodes, 75% slips and a best-on-validation pick, none of which
    were the defaults)."""
    demos = "its won episodes" if d.demos == "won" else "all its episodes"
    algos = " and ".join(a.upper() for a in d.rl_algos)
    pick = (f"policy at half or at the end, whichever did better on {d.rl_val_episodes} "
            "validation rooms," if d.rl_val_episodes else "final policy")
    return (f"The whole pipeline offline on CPU: play {d.episodes} Sokoban episodes "
            f"({d.room_size}x{d.room_size} rooms, this seed's own training rooms) with "
            f"{_teacher_text(d.teacher)}, behaviour-clone the tiny model on {demos}, then a small "
            f"arena from the SFT checkpoint: {algos} side by side with one budget ({d.rl_steps} "
            f"steps, rollouts at temperature {d.rl_temperature:g}; `arlgym arena run`), each "
            f"run's {pick} evaluated on the same {d.eval_episodes} held-out rooms (disjoint by "
            f"content from every training room). Every model row under greedy decoding and the "
            f"paper's validation sampling ({d.eval_samples} episodes a room); RL's effect as a "
            f"paired difference against the SFT's best decoding (chosen on "
            f"{d.choice_episodes} val rooms), SAMPO vs GRPO, vs the teacher, and the collapse "
            "alarm's verdicts; saves curves.png, report.md and the arena report. --panel val "
            "measures the whole table on val rooms, for choosing a design. A rerun with "
            "the same --out resumes the RL runs.")


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from arlgym.quickstart import CutShort, QuickstartConfig, RLRunFailed, run_quickstart

    cfg = QuickstartConfig.fast() if args.fast else QuickstartConfig()
    if args.out:
        cfg.out = args.out
    for name in ("episodes", "sft_steps", "sft_minutes", "eval_episodes", "rl_steps", "rl_lr",
                 "rl_temperature", "rl_kl_coef", "rl_val_episodes",
                 "threads", "sft_threads", "rl_threads", "rl_jobs", "seed", "teacher", "demos", "eval_samples",
                 "room_size", "history_length", "panel", "choice_episodes"):
        value = getattr(args, name)
        if value is not None:
            setattr(cfg, name, value)
    if args.greedy_eval:
        if args.eval_samples not in (None, 1):
            raise ConfigError("--greedy-eval plays one episode a room; drop --eval-samples "
                              f"{args.eval_samples} (or drop --greedy-eval)")
        cfg.eval_temperature, cfg.eval_samples = 0.0, 1
    if args.rl_algos is not None:
        from arlgym.rl.presets import preset_list

        cfg.rl_algos = tuple(preset_list("--rl-algos", args.rl_algos, "arlgym quickstart"))
    _check_quickstart(cfg)
    cfg.allow_short = bool(args.allow_short)
    try:
        run_quickstart(cfg)
    except CutShort as e:
        print(f"arlgym quickstart: cut short: {e}", file=sys.stderr)
        return 3
    except RLRunFailed as e:
        print(f"arlgym quickstart: an RL run failed: {e}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="arlgym",
        description="arlgym: Gymnasium envs and RL algorithms for LLM agents (ARLArena). "
                    "Options are spelt --like-this; --like_this is accepted too.",
    )
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("envs", help="list the env ids, whether each is usable here, and how to "
                                    "install what an unusable one needs")
    p.set_defaults(func=_cmd_envs)

    p = sub.add_parser("play", help="play episodes with a policy and print a success table",
                       description="Play --episodes episodes of ENV on the train split with a "
                                   "policy (the expert by default) and print success, score, "
                                   "steps and format/action validity.")
    p.add_argument("env", help="env id, e.g. arl/Sokoban-v0 (see `arlgym envs`)")
    _add_common(p)
    p.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser("eval", help="evaluate a policy on a fixed eval task list (resumable)",
                       description="Evaluate a policy on the first --episodes tasks of the env's "
                                   "enumerated --split list. Writes one JSONL line per episode "
                                   "to --out; rerunning with the same --out skips finished "
                                   "episodes. Prints and saves a summary table.")
    p.add_argument("--env", required=True, help="env id, e.g. arl/Sokoban-v0")
    _add_common(p)
    p.add_argument("--split", default="test", help="task split (default: test)")
    p.add_argument("--out", default=None,
                   help="episodes JSONL (default: runs/eval/<env>__<policy>__<split>.jsonl)")
    p.add_argument("--samples-per-task", type=int, default=1,
                   help="episodes per task, for pass@k (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--sampled-only", action="store_true",
                   help="a model policy at --temperature > 0 is also played greedily on the same "
                        "tasks (<out>.greedy.jsonl) and the two are paired; this skips that")
    add_env_servers(p)
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("patterns", help="failure patterns of evaluated episodes (action flows, failure modes)",
                       description="Read the episodes JSONL of `arlgym eval`, print the action "
                                   "types of won and lost episodes, their most frequent "
                                   "transitions and how the lost ones failed (format collapse, "
                                   "invalid actions, loop, wrong final action, out of steps); "
                                   "save a transition heat map PNG and a JSON report next to it.")
    p.add_argument("episodes", help="episodes JSONL written by `arlgym eval`")
    p.add_argument("--out", default=None, help="PNG path (default: <episodes>.patterns.png)")
    p.set_defaults(func=_cmd_patterns)

    from arlgym.quickstart import QuickstartConfig

    p = sub.add_parser("quickstart", help="teacher demos -> SFT -> eval -> GRPO vs SAMPO (arena) -> eval (Sokoban, tiny, CPU)",
                       description=_quickstart_description(QuickstartConfig()))
    p.add_argument("--fast", action="store_true", help="tiny settings (CI smoke run, ~1 min)")
    p.add_argument("--out", default=None, help="output folder (default: runs/quickstart)")
    p.add_argument("--episodes", type=int, default=None,
                   help="teacher episodes played; they (or their won ones, --demos won) are "
                        "the demonstrations (default: 3000)")
    p.add_argument("--sft-steps", type=int, default=None,
                   help="SFT optimizer steps (default: 1500: about as good as the teacher, "
                        "its plans learned; 0 = 3 epochs of the demonstrations)")
    p.add_argument("--sft-minutes", type=float, default=None,
                   help="optional guard: stop SFT after this many minutes; the run is then marked "
                        "cut short and exits 3 unless --allow-short (default: none)")
    p.add_argument("--eval-episodes", type=int, default=None,
                   help="held-out rooms, the same for SFT and every RL run (default: 200)")
    p.add_argument("--panel", default=None, choices=("test", "val"),
                   help="the rooms the table is measured on: test (the final table) or val "
                        "(choosing a design; test stays unseen by every choice) (default: test)")
    p.add_argument("--choice-episodes", type=int, default=None,
                   help="val rooms on which the SFT's best decoding (greedy or sampled) is "
                        "chosen; RL is compared against that decoding (default: 200)")
    p.add_argument("--rl-algos", default=None,
                   help="arena presets compared from the SFT checkpoint, comma-separated; the "
                        "last is compared with the first on the same rooms (default: grpo,sampo; "
                        "see `arlgym train --help` for the presets)")
    p.add_argument("--rl-steps", type=int, default=None,
                   help="optimizer steps of every RL run, 16 rooms x 8 rollouts each (default: 8)")
    p.add_argument("--rl-lr", type=float, default=None, help="RL learning rate (default: 2e-4)")
    p.add_argument("--rl-kl-coef", type=float, default=None,
                   help="k3 KL-to-the-SFT coefficient of every RL run (default: 0.2, which "
                        "holds the imitation's plan while RL ends the slips; the paper's is 0.01)")
    p.add_argument("--rl-val-episodes", type=int, default=None,
                   help="validation rooms of each RL run, evaluated at half and at the end, the "
                        "better one reported (default: 0 = no validation, the final policy; a "
                        "choice on a few dozen rooms is noise, see docs/main_job.md)")
    p.add_argument("--rl-temperature", type=float, default=None,
                   help="sampling temperature of the RL rollouts; the PPO ratio's log-probs use "
                        "the same (default: 0.6, chosen on val rooms; the paper's is 1.0)")
    p.add_argument("--rl-jobs", type=int, default=None,
                   help="RL runs at once (default: 2; each gets cores / jobs torch threads)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads of eval (default: 1; generating for a batch of rooms "
                        "gains little from more, and on a busy machine extra threads stall each "
                        "other; 0 keeps torch's default)")
    p.add_argument("--sft-threads", type=int, default=None,
                   help="torch CPU threads of SFT (default: -1 = auto: 2 when the machine is idle "
                        "at the start, else 1, since 2 threads beside a busy process run ~10x slower)")
    p.add_argument("--rl-threads", type=int, default=None,
                   help="torch CPU threads of each RL run (default: -1 = cores / --rl-jobs, at "
                        "least 1: fixed, so a busy machine gives the same numbers, later)")
    p.add_argument("--seed", type=int, default=None,
                   help="seeds the teacher's rooms, the model init, batch order, the RL run and "
                        "the eval's draws (default: 0)")
    p.add_argument("--teacher", default=None,
                   help="the demonstrator: greedy (a heuristic box-pusher with systematic "
                        "mistakes), expert (the optimal solver), or either with slips: "
                        "slips:<p>:expert plays a random move instead of its plan's with "
                        "probability p, its reasoning kept (default: slips:0.7:expert)")
    p.add_argument("--demos", default=None,
                   help="which teacher episodes are imitated: won (the won ones) or all (every "
                        "one: the slips at the teacher's own rate, the plan on every state it "
                        "met; default: all)")
    p.add_argument("--eval-samples", type=int, default=None,
                   help="episodes a held-out room under the paper's validation sampling "
                        "(temperature 0.6, top-p 0.95, top-k 20; default: 4)")
    p.add_argument("--room-size", type=int, default=None,
                   help="Sokoban room size, walls included, for every phase (default: 7, where "
                        "random moves win 17%%; 6 is the paper's, see docs/main_job.md)")
    p.add_argument("--history-length", type=int, default=None,
                   help="past turns shown in each prompt (default: 0; the paper's 2 "
                        "makes every phase ~3x slower on the same rooms)")
    p.add_argument("--greedy-eval", action="store_true",
                   help="evaluate greedily (one episode a room) instead of the paper's sampling")
    p.add_argument("--allow-short", action="store_true",
                   help="exit 0 even if a phase was cut short (the table still says so)")
    p.set_defaults(func=_cmd_quickstart)

    for module in ("arlgym.rl.cli", "arlgym.arena.cli", "arlgym.envs.alfworld.cli",
                   "arlgym.envs.webshop.cli", "arlgym.serve.cli"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        mod.add_subparser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
