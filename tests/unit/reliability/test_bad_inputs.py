"""Bad input, table-driven: env kwargs, reset options, trainer/SFT/eval configs, data files, CLIs.

Every case must end in one of arlgym's own exceptions (``ArlgymError``; never a raw
``ValueError``/``TypeError``/``JSONDecodeError`` from deep inside a library) whose message names
the parameter or file (each case lists the fragments its message must contain). CLI cases must
exit with status 2 and print one ``<prog>: error: ...`` line, no traceback (argparse's own
errors print their usage line first).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import arlgym  # noqa: F401  (registers the env ids)
from arlgym.errors import ArlgymError


@dataclass
class Case:
    id: str
    run: Callable[[Path], Any]  # gets a fresh tmp folder (also the working directory)
    needs: tuple[str, ...]  # fragments the error message must contain
    cli: str | None = None  # program name for CLI cases (exit 2, one error line)


CASES: list[Case] = []


def case(id: str, run: Callable[[Path], Any], *needs: str, cli: str | None = None) -> None:
    CASES.append(Case(id, run, needs, cli))


def make(env_id: str, **kw: Any) -> Callable[[Path], Any]:
    """Build the env and play a reset: an env may read its data files lazily."""
    def run(_tmp: Path) -> Any:
        env = gym.make(env_id, **kw)
        try:
            env.reset(seed=0)
        finally:
            env.close()

    return run


def reset(env_id: str, env_kwargs: dict | None = None, **reset_kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        env = gym.make(env_id, **(env_kwargs or {}))
        try:
            env.reset(**reset_kw)
        finally:
            env.close()

    return run


def write(tmp: Path, name: str, data: str | bytes) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


# ---------------------------------------------------------------------- Sokoban kwargs
SOK, VIS = "arl/Sokoban-v0", "arl/SokobanVision-v0"
for cid, kw, need in [
    ("search_depth-str", {"search_depth": "x"}, "search_depth"),
    ("search_depth-zero", {"search_depth": 0}, "search_depth"),
    ("search_depth-float", {"search_depth": 1.5}, "search_depth"),
    ("search_depth-none", {"search_depth": None}, "search_depth"),
    ("dim_room-str", {"dim_room": "big"}, "dim_room"),
    ("dim_room-small", {"dim_room": (3, 3)}, "dim_room"),
    ("dim_room-one", {"dim_room": (6,)}, "dim_room"),
    ("dim_room-three", {"dim_room": (6, 6, 6)}, "dim_room"),
    ("dim_room-huge", {"dim_room": 1000}, "dim_room"),
    ("dim_room-floats", {"dim_room": (6.5, 6)}, "dim_room"),
    ("num_boxes-zero", {"num_boxes": 0}, "num_boxes"),
    ("num_boxes-str", {"num_boxes": "two"}, "num_boxes"),
    ("num_boxes-too-many", {"num_boxes": 50}, "num_boxes"),
    ("num_boxes-bool", {"num_boxes": True}, "num_boxes"),
    ("max_steps-zero", {"max_steps": 0}, "max_steps"),
    ("max_steps-str", {"max_steps": "ten"}, "max_steps"),
    ("max_steps-float", {"max_steps": 2.5}, "max_steps"),
    ("max_solution_length-zero", {"max_solution_length": 0}, "max_solution_length"),
    ("max_solution_length-str", {"max_solution_length": "x"}, "max_solution_length"),
    ("expert_plan_length-zero", {"expert_plan_length": 0}, "expert_plan_length"),
    ("tile_size-zero", {"tile_size": 0}, "tile_size"),
    ("tile_size-str", {"tile_size": "big"}, "tile_size"),
    ("cell_separator-int", {"cell_separator": 5}, "cell_separator"),
    ("levels-int", {"levels": 42}, "levels"),
    ("levels-missing-file", {"levels": "/nonexistent/levels.txt"}, "levels"),
    ("levels-empty", {"levels": []}, "levels"),
    ("levels-garbage", {"levels": ["not a level"]}, "level"),
    ("unknown-kwarg", {"serch_depth": 3}, "serch_depth"),
]:
    case(f"sokoban-{cid}", make(SOK, **kw), need)
case("sokoban-levels-not-utf8",
     lambda tmp: make(SOK, levels=str(write(tmp, "lv.txt", b"\xff\xfe#\x00")))(tmp), "lv.txt")

# the AgentEnv options every env shares, on every env
BASE_BAD = [
    ("strict_format-no", {"strict_format": "no"}, "strict_format"),
    ("strict_format-false", {"strict_format": "false"}, "strict_format"),
    ("strict_format-int", {"strict_format": 1}, "strict_format"),
    ("think_prefilled-yes", {"think_prefilled": "yes"}, "think_prefilled"),
    ("history_length-neg", {"history_length": -1}, "history_length"),
    ("history_length-str", {"history_length": "2x"}, "history_length"),
    ("format_penalty_coef-str", {"format_penalty_coef": "x"}, "format_penalty_coef"),
    ("format_penalty_coef-neg", {"format_penalty_coef": -1}, "format_penalty_coef"),
    ("on_format_error", {"on_format_error": "explode"}, "on_format_error"),
    ("render_mode", {"render_mode": "human3d"}, "render_mode"),
    ("max_steps-str", {"max_steps": "ten"}, "max_steps"),
]
for cid, kw, need in BASE_BAD:
    case(f"sokoban-base-{cid}", make(SOK, **kw), need)
for env_id, short, extra in [(VIS, "vision", {}), ("arl/TIRMath-v0", "tir", {}),
                             ("arl/WebShop-v0", "webshop", {"num_products": 50}),
                             ("arl/ALFWorld-v0", "alfworld", {})]:
    for cid, kw, need in BASE_BAD[::2] if short == "vision" else BASE_BAD[:1] + BASE_BAD[4::2]:
        case(f"{short}-base-{cid}", make(env_id, **extra, **kw), need)
case("vision-dim_room", make(VIS, dim_room="x"), "dim_room")
case("vision-tile_size", make(VIS, tile_size=0), "tile_size")

# ---------------------------------------------------------------------- reset options / step
for cid, kw, need in [
    ("options-str", {"options": "x"}, "options"),
    ("options-list", {"options": [1]}, "options"),
    ("task_id-none", {"options": {"task_id": None}}, "task_id"),
    ("task_id-dict", {"options": {"task_id": {}}}, "task_id"),
    ("task_id-empty", {"options": {"task_id": " "}}, "task_id"),
    ("task_id-nonsense", {"options": {"task_id": "nonsense"}}, "task_id"),
    ("task_id-beyond-splits", {"options": {"task_id": "6x6-1b-99999999999"}}, "task_id"),
    ("task_id-other-split", {"options": {"task_id": "6x6-1b-5", "split": "test"}}, "task_id"),
    ("task_id-other-room-size", {"options": {"task_id": "7x7-1b-5"}}, "task_id"),
    ("split-unknown", {"options": {"split": "nope"}}, "split"),
    ("split-int", {"options": {"split": 3}}, "split"),
    ("level-int", {"options": {"level": 3}}, "level"),
    ("level-garbage", {"options": {"level": "no walls here"}}, "level"),
    ("seed-str", {"seed": "1"}, "seed"),
    ("seed-negative", {"seed": -1}, "seed"),
    ("seed-float", {"seed": 1.5}, "seed"),
]:
    case(f"sokoban-reset-{cid}", reset(SOK, **kw), need)


def _step(action: Any, do_reset: bool = True) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:  # unwrapped: gym.make's OrderEnforcing has its own ResetNeeded
        env = gym.make(SOK).unwrapped
        if do_reset:
            env.reset(seed=0)
        env.step(action)

    return run


case("sokoban-step-none", _step(None), "action")
case("sokoban-step-int", _step(3), "action")
case("sokoban-step-before-reset", _step("<action>up</action>", do_reset=False), "reset")


def _list_tasks(**kw: Any) -> Callable[[Path], Any]:
    return lambda _tmp: gym.make(SOK).unwrapped.list_tasks(**kw)


case("sokoban-list_tasks-split", _list_tasks(split="nope"), "split")
case("sokoban-list_tasks-limit", _list_tasks(split="test", limit="many"), "limit")

# other envs: task ids beyond their split, bad option types
TIR, SHOP, ALF = "arl/TIRMath-v0", "arl/WebShop-v0", "arl/ALFWorld-v0"
for env_id, short, extra, bad_ids in [
    (TIR, "tir", {}, ["nope", "tir-99999999999999"]),
    (SHOP, "webshop", {"num_products": 50}, ["nope", "goal-999999"]),
    (ALF, "alfworld", {}, ["nope", "gen-train-99999999"]),
]:
    for k, task_id in enumerate(bad_ids):
        case(f"{short}-reset-task_id-{k}", reset(env_id, extra, options={"task_id": task_id}),
             "task_id")
    case(f"{short}-reset-task_id-none", reset(env_id, extra, options={"task_id": None}),
         "task_id")
    case(f"{short}-reset-split", reset(env_id, extra, options={"split": "nope"}), "split")
    case(f"{short}-reset-options-str", reset(env_id, extra, options="x"), "options")
case("tir-reset-task_id-other-split", reset(TIR, options={"task_id": "tir-5", "split": "test"}),
     "task_id")
case("tir-reset-problem-dict-answer",
     reset(TIR, options={"problem": {"question": "1+1?", "answer": {"x": 2}}}), "answer")
case("tir-reset-problem-str", reset(TIR, options={"problem": "1+1"}), "problem")

# ---------------------------------------------------------------------- TIR kwargs and data files
for cid, kw, need in [
    ("sandbox_timeout-str", {"sandbox_timeout": "5"}, "sandbox_timeout"),
    ("sandbox_timeout-neg", {"sandbox_timeout": -1}, "sandbox_timeout"),
    ("sandbox_memory_mb-str", {"sandbox_memory_mb": "2G"}, "sandbox_memory_mb"),
    ("sandbox_memory_mb-zero", {"sandbox_memory_mb": 0}, "sandbox_memory_mb"),
    ("sandbox_network-str", {"sandbox_network": "no"}, "sandbox_network"),
    ("sandbox_engine", {"sandbox_engine": "gpu"}, "sandbox_engine"),
    ("sandbox", {"sandbox": "none-at-all"}, "sandbox"),
    ("max_obs_chars-str", {"max_obs_chars": "x"}, "max_obs_chars"),
    ("max_obs_chars-small", {"max_obs_chars": 3}, "max_obs_chars"),
    ("end_on_void_turn-str", {"end_on_void_turn": "no"}, "end_on_void_turn"),
    ("response_format", {"response_format": "xml"}, "response_format"),
    ("families-unknown", {"families": ["nope"]}, "families"),
    ("families-int", {"families": 3}, "families"),
    ("use_math_verify-str", {"use_math_verify": "yes"}, "use_math_verify"),
    ("data_path-missing", {"data_path": "/nonexistent/problems.jsonl"}, "data_path"),
    ("data_path-int", {"data_path": 5}, "data_path"),
]:
    case(f"tir-{cid}", make(TIR, **kw), need)
for cid, name, data in [
    ("bad-json-line", "p.jsonl", '{"question": "1+1", "answer": "2"}\n{"question": \n'),
    ("json-not-list", "p.json", '{"question": "1+1"}'),
    ("not-utf8", "p.jsonl", b"\xff\xfe\x00\x00garbage"),
    ("parquet-garbage", "p.parquet", b"not a parquet file at all"),
    ("unsupported-suffix", "p.csv", "question,answer\n1+1,2\n"),
    ("no-question", "p.jsonl", '{"foo": 1}\n'),
    ("line-not-object", "p.jsonl", "[1, 2]\n"),
]:
    case(f"tir-data-{cid}",
         lambda tmp, name=name, data=data: make(TIR, data_path=str(write(tmp, name, data)))(tmp),
         name)

# ---------------------------------------------------------------------- WebShop kwargs and files
for cid, kw, need in [
    ("num_products-str", {"num_products": "x"}, "num_products"),
    ("num_products-small", {"num_products": 2}, "num_products"),
    ("num_products-float", {"num_products": 50.5}, "num_products"),
    ("catalog_seed-str", {"catalog_seed": "y"}, "catalog_seed"),
    ("catalog_seed-neg", {"catalog_seed": -1}, "catalog_seed"),
    ("goal_source", {"goal_source": "nope"}, "goal_source"),
    ("data_dir-missing", {"data_dir": "/nonexistent/webshop"}, "data_dir"),
    ("data_dir-int", {"data_dir": 7}, "data_dir"),
]:
    case(f"webshop-{cid}", make(SHOP, **kw), need)


def _shop_files(products: str, instructions: str) -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        folder = tmp / "shop"
        write(folder, "items_shuffle_1000.json", products)
        write(folder, "items_ins_v2_1000.json", instructions)
        make(SHOP, data_dir=str(folder))(tmp)

    return run


case("webshop-files-bad-json", _shop_files("[{", "{}"), "items_shuffle_1000.json")
case("webshop-files-products-dict", _shop_files('{"a": 1}', "{}"), "items_shuffle_1000.json")
case("webshop-files-products-strings", _shop_files('["a", "b"]', "{}"), "items_shuffle_1000.json")
case("webshop-files-instructions-list", _shop_files('[{"asin": "B1", "pricing": "$1"}]', "[]"),
     "items_ins_v2_1000.json")
case("webshop-files-no-usable-product",
     _shop_files('[{"asin": "B1", "name": "x"}]', '{"B1": []}'), "shop/items_")

# ---------------------------------------------------------------------- ALFWorld kwargs
for cid, kw, need in [
    ("split", {"split": "nope"}, "split"),
    ("data_source", {"data_source": "nope"}, "data_source"),
    ("data_dir-missing", {"data_source": "official", "data_dir": "/nonexistent/alf"},
     "/nonexistent/alf"),
    ("split_sizes-str", {"split_sizes": "x"}, "split_sizes"),
    ("split_sizes-value", {"split_sizes": {"train": "many"}}, "split_sizes"),
    ("split_sizes-key", {"split_sizes": {"nope": 3}}, "split_sizes"),
    ("split_sizes-neg", {"split_sizes": {"train": -3}}, "split_sizes"),
    ("task_types-unknown", {"task_types": ["nope"]}, "task_types"),
    ("task_types-int", {"task_types": 3}, "task_types"),
    ("generator_seed-str", {"generator_seed": "x"}, "generator_seed"),
    ("generator_seed-float", {"generator_seed": 1.5}, "generator_seed"),
]:
    case(f"alfworld-{cid}", make(ALF, **kw), need)

# ---------------------------------------------------------------------- vector / collector / eval


def _vec(*args: Any, **kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.core.vector import make_group_vec

        make_group_vec(*args, **kw).close()

    return run


for cid, args, kw, need in [
    ("env_id", ("arl/Nope-v0", 1, 1), {}, "arl/Nope-v0"),
    ("env_id-int", (5, 1, 1), {}, "env id"),
    ("num_tasks-str", (SOK, "x", 1), {}, "num_tasks"),
    ("num_tasks-zero", (SOK, 0, 1), {}, "num_tasks"),
    ("group_size-zero", (SOK, 1, 0), {}, "group_size"),
    ("mode", (SOK, 1, 1), {"mode": "threads"}, "mode"),
    ("timeout-neg", (SOK, 1, 1), {"mode": "async", "timeout": -1}, "timeout"),
    ("restart-str", (SOK, 1, 1), {"mode": "async", "restart": "yes"}, "restart"),
    ("num_workers-zero", (SOK, 1, 1), {"mode": "async", "num_workers": 0}, "num_workers"),
    ("context", (SOK, 1, 1), {"mode": "async", "context": "threads"}, "context"),
    ("env-kwarg", (SOK, 1, 1), {"search_depth": "x"}, "search_depth"),
]:
    case(f"vector-{cid}", _vec(*args, **kw), need)


def _vec_call(fn: Callable[[Any], Any]) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.core.vector import make_group_vec

        vec = make_group_vec(SOK, 2, 1)
        try:
            fn(vec)
        finally:
            vec.close()

    return run


case("vector-task_ids-length", _vec_call(lambda v: v.reset(task_ids=["6x6-1b-1"])), "task_ids")
case("vector-actions-length", _vec_call(lambda v: (v.reset(), v.step([None]))), "actions")
case("vector-reset_envs-index", _vec_call(lambda v: (v.reset(), v.reset_envs([7]))), "index")


def _collector(**kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.policies import make_policy
        from arlgym.rollout import RolloutCollector

        RolloutCollector(SOK, make_policy("expert"), progress=False, **kw).close()

    return run


case("collector-max_group_retries", _collector(max_group_retries=-1), "max_group_retries")
case("collector-worker_timeout", _collector(mode="async", worker_timeout=0), "timeout")


def _evaluate(**kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.evaluation.runner import evaluate
        from arlgym.policies import make_policy

        evaluate(kw.pop("env_id", SOK), make_policy("expert"), progress=False,
                 **{"episodes": 1, **kw})

    return run


for cid, kw, need in [
    ("episodes-zero", {"episodes": 0}, "episodes"),
    ("episodes-str", {"episodes": "many"}, "episodes"),
    ("batch_size-zero", {"batch_size": 0}, "batch_size"),
    ("samples_per_task-zero", {"samples_per_task": 0}, "samples_per_task"),
    ("split-int", {"split": 3}, "split"),
    ("split-unknown", {"split": "nope"}, "split"),
    ("env_kwargs-list", {"env_kwargs": [1]}, "env_kwargs"),
    ("env_id", {"env_id": "arl/Nope-v0"}, "arl/Nope-v0"),
    ("too-many-episodes", {"episodes": 10**6, "split": "test", "env_id": SOK,
                           "env_kwargs": {"levels": ["#####\n#@$.#\n#####"]}}, "episodes"),
]:
    case(f"evaluate-{cid}", _evaluate(**kw), need)

# ---------------------------------------------------------------------- trainer config


def _train_config(**kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.rl.config import TrainConfig

        TrainConfig(**kw)

    return run


for field_name, value in [
    ("max_steps", "ten"), ("max_steps", -1), ("lr", "fast"), ("lr", 0), ("lr", -1e-6),
    ("env_kwargs", [1, 2]), ("env_kwargs", "{not json"), ("loss_kwargs", [1]),
    ("advantage_kwargs", "{bad"), ("loss", "nope"), ("aggregation", "nope"),
    ("advantage", "nope"), ("algo", "nope"), ("norm", "nope"), ("env_id", "arl/Nope-v0"),
    ("num_tasks", 0), ("group_size", "x"), ("temperature", -1), ("top_p", 1.5),
    ("top_k", -1), ("resume", "no"), ("seed", -1), ("seed", 1.5), ("max_new_tokens", 0),
    ("ppo_epochs", 0), ("kl_coef", -0.1), ("clip_low", "x"), ("clip_high", -0.2),
    ("dynamic_sampling", "yes"), ("max_tries", 0), ("old_logprobs", "nope"),
    ("rollout_engine", "tpu"), ("vllm_gpu_memory_utilization", 2), ("lora_r", -1),
    ("gamma", 2), ("grad_clip", "x"), ("micro_batch_tokens", 0), ("save_steps", "often"),
    ("max_minutes", "1h"), ("gradient_checkpointing", "on"), ("share_prompts", "false"),
    ("model", 5),
]:
    case(f"trainconfig-{field_name}-{value!r}", _train_config(**{field_name: value}), field_name)
case("trainconfig-save_best-without-eval", _train_config(save_best=True), "eval_steps")


def _check_env(**kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.rl.config import TrainConfig, check_env

        check_env(TrainConfig(**kw))

    return run


case("trainconfig-eval_split", _check_env(eval_steps=5, eval_split="nope"), "eval_split")
case("trainconfig-test_split", _check_env(test_episodes=5, test_split="nope"), "test_split")
case("trainconfig-eval_episodes-too-many",
     _check_env(eval_steps=5, eval_split="val", env_kwargs={"levels": ["#####\n#@$.#\n#####"]}),
     "eval_episodes")
case("trainconfig-env_kwargs-value", _check_env(env_kwargs={"search_depth": "x"}), "search_depth")
case("trainconfig-loss_kwargs-unknown-knob", _train_config(loss_kwargs={"sapo_tau": 1.0}),
     "loss_kwargs", "sapo_tau")
case("trainconfig-advantage_kwargs-typo", _train_config(advantage_kwargs={"cros_steps": True}),
     "advantage_kwargs", "cross_steps")


def _yaml(text: str | bytes, name: str = "cfg.yaml") -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        from arlgym.rl.cli import parse_train_config

        parse_train_config(["--config", str(write(tmp, name, text))])

    return run


for cid, text, needs in [
    ("syntax", "max_steps: [\nlr: 1\n", ("cfg.yaml", "line")),
    ("tabs", "max_steps:\n\t- 1\n", ("cfg.yaml",)),
    ("max_steps-ten", "max_steps: ten\n", ("max_steps", "ten")),
    ("lr-fast", "lr: fast\n", ("lr", "fast")),
    ("env_kwargs-list", "env_kwargs: [1, 2]\n", ("env_kwargs",)),
    ("unknown-field", "max_step: 3\n", ("max_step", "max_steps")),
    ("top-level-list", "- 1\n- 2\n", ("cfg.yaml", "mapping")),
    ("top-level-str", "just words\n", ("cfg.yaml", "mapping")),
    ("loss-nope", "loss: nope\n", ("loss", "nope")),
    ("aggregation-nope", "aggregation: nope\n", ("aggregation",)),
    ("advantage-nope", "advantage: nope\n", ("advantage",)),
    ("algo-nope", "algo: nope\n", ("algo",)),
    ("not-utf8", b"\xff\xfe\x00max_steps: 1", ("cfg.yaml",)),
    ("duplicate-key-type", "num_tasks: {a: 1}\n", ("num_tasks",)),
]:
    case(f"yaml-{cid}", _yaml(text), *needs)
case("yaml-missing-file",
     lambda tmp: __import__("arlgym.rl.cli", fromlist=["x"]).parse_train_config(
         ["--config", str(tmp / "nope.yaml")]), "nope.yaml")

# ---------------------------------------------------------------------- SFT data and config


def _sft_load(name: str, data: str | bytes) -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        from arlgym.sft.train import load_samples

        write(tmp / "data", name, data)
        load_samples([str(tmp / "data")])

    return run


GOOD = json.dumps({"messages": [{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "<action>up</action>"}]})
for cid, data, needs in [
    ("bad-json-line-3", f"{GOOD}\n{GOOD}\n{{\"messages\": [\n", ("samples.jsonl:3",)),
    ("torn-last-line", f"{GOOD}\n{GOOD[:20]}", ("samples.jsonl:2",)),
    ("not-utf8", b"\xff\xfe\x00\x01", ("samples.jsonl", "UTF-8")),
    ("line-is-list", "[1, 2]\n", ("samples.jsonl:1", "messages")),
    ("no-messages", '{"text": "hi"}\n', ("samples.jsonl:1", "messages")),
    ("messages-empty", '{"messages": []}\n', ("samples.jsonl:1", "messages")),
    ("messages-strings", '{"messages": ["hi"]}\n', ("samples.jsonl:1", "messages")),
    ("role-missing", '{"messages": [{"content": "hi"}]}\n', ("samples.jsonl:1", "role")),
    ("empty-file", "\n\n", ("holds no samples",)),
]:
    case(f"sft-data-{cid}", _sft_load("samples.jsonl", data), *needs)
case("sft-data-missing", lambda tmp: __import__("arlgym.sft.train", fromlist=["x"]).load_samples(
    [str(tmp / "nowhere")]), "nowhere")


def _sft_config(**kw: Any) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        from arlgym.sft.train import SFTRunConfig

        SFTRunConfig(**kw)

    return run


for field_name, value in [
    ("batch_size", 0), ("batch_size", "x"), ("lr", -1), ("lr", "fast"), ("epochs", "x"),
    ("warmup_ratio", 2), ("max_length", 0), ("data", "sft_data"), ("time_budget_minutes", 0),
    ("grad_accum", 0), ("engine", "nope"), ("lora_r", -1),
]:
    case(f"sftconfig-{field_name}-{value!r}", _sft_config(**{field_name: value}), field_name)

# ---------------------------------------------------------------------- CLIs


def _main(module: str, argv: list[str], stdin: str | None = None) -> Callable[[Path], Any]:
    def run(_tmp: Path) -> Any:
        import importlib

        main = importlib.import_module(module).main
        old = sys.stdin
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)
        try:
            return main(argv)
        finally:
            sys.stdin = old

    return run


ARL, SFT, SAMPO = "arlgym.cli", "arlgym.sft.cli", "arlgym.rl.cli"
EV = ["eval", "--env", SOK, "--no-progress"]
PLAY = ["play", SOK, "--no-progress"]
for cid, argv, needs in [
    ("eval-unknown-env", ["eval", "--env", "arl/Nope-v0", "--no-progress"], ("arl/Nope-v0",)),
    ("eval-episodes-neg", [*EV, "--episodes", "-1"], ("episodes",)),
    ("eval-episodes-zero", [*EV, "--episodes", "0"], ("episodes",)),
    ("eval-episodes-word", [*EV, "--episodes", "ten"], ("--episodes",)),
    ("eval-batch-size", [*EV, "--episodes", "1", "--batch-size", "0"], ("--batch-size",)),
    ("eval-samples", [*EV, "--episodes", "1", "--samples-per-task", "0"], ("samples_per_task",)),
    ("eval-split", [*EV, "--episodes", "1", "--split", "nope"], ("split",)),
    ("eval-policy", [*EV, "--episodes", "1", "--policy", "nope"], ("policy",)),
    ("eval-kwarg-syntax", [*EV, "--episodes", "1", "--env-kwarg", "foo"], ("--env-kwarg",)),
    ("eval-kwarg-value", [*EV, "--episodes", "1", "--env-kwarg", "search_depth=x"],
     ("search_depth",)),
    ("eval-kwarg-unknown", [*EV, "--episodes", "1", "--env-kwarg", "nope=1"], ("nope",)),
    ("eval-kwarg-strict", [*EV, "--episodes", "1", "--env-kwarg", "strict_format=no"],
     ("strict_format",)),
    ("eval-temperature", [*EV, "--episodes", "1", "--temperature", "hot"], ("--temperature",)),
    ("play-unknown-env", ["play", "arl/Nope-v0", "--no-progress"], ("arl/Nope-v0",)),
    ("play-episodes-neg", [*PLAY, "--episodes", "-1"], ("episodes",)),
    ("play-batch-size", [*PLAY, "--batch-size", "0"], ("batch-size",)),
    ("play-kwarg", [*PLAY, "--env-kwarg", "dim_room=2"], ("dim_room",)),
    ("play-temperature-neg", [*PLAY, "--temperature", "-1"], ("--temperature",)),
    ("play-max-new-tokens", [*PLAY, "--max-new-tokens", "0"], ("--max-new-tokens",)),
    ("play-seed-neg", [*PLAY, "--seed", "-1"], ("--seed",)),
    ("eval-seed-neg", [*EV, "--episodes", "1", "--seed", "-5"], ("--seed",)),
    ("patterns-missing", ["patterns", "nowhere.jsonl"], ("nowhere.jsonl",)),
    ("eval-out-folder", [*EV, "--episodes", "1", "--out", "."], ("out",)),
    ("eval-out-unwritable", [*EV, "--episodes", "1", "--out", "/proc/nope/ev.jsonl"], ("out",)),
    ("unknown-command", ["fly"], ("fly",)),
]:
    case(f"cli-arlgym-{cid}", _main(ARL, argv), *needs, cli="arlgym")
case("cli-arlgym-human-stdin-closed",
     _main(ARL, [*PLAY, "--policy", "human", "--episodes", "1"], stdin=""), "stdin",
     cli="arlgym")


def _no_stdin(tmp: Path) -> Any:
    old, sys.stdin = sys.stdin, None
    try:
        return _main(ARL, [*PLAY, "--policy", "human", "--episodes", "1"])(tmp)
    finally:
        sys.stdin = old


case("cli-arlgym-human-no-stdin", _no_stdin, "standard input", cli="arlgym")


def _serve_on_a_taken_port(tmp: Path) -> Any:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        return _main(ARL, ["webshop", "serve", "--port", port, "--num-products", "50"])(tmp)


case("cli-arlgym-webshop-serve-port-taken", _serve_on_a_taken_port, "port=", "--port", cli="arlgym")
case("cli-arlgym-patterns-not-utf8",
     lambda tmp: _main(ARL, ["patterns", str(write(tmp, "b.jsonl", b"\xff\xfe\x00"))])(tmp),
     "b.jsonl", cli="arlgym")
case("cli-arlgym-patterns-not-trajectory",
     lambda tmp: _main(ARL, ["patterns", str(write(tmp, "t.jsonl", '[1, 2]\n'))])(tmp),
     "t.jsonl:1", cli="arlgym")
case("cli-sft-stats-not-utf8",
     lambda tmp: (write(tmp / "s", "samples.jsonl", b"\xff\xfe"),
                  _main(SFT, ["stats", str(tmp / "s")])(tmp))[1], "samples.jsonl", cli="arlgym-sft")
case("cli-sft-stats-bad-line",
     lambda tmp: (write(tmp / "s", "samples.jsonl", '{"x": 1}\n'),
                  _main(SFT, ["stats", str(tmp / "s")])(tmp))[1], "samples.jsonl:1",
     cli="arlgym-sft")
case("cli-arlgym-patterns-empty",
     lambda tmp: _main(ARL, ["patterns", str(write(tmp, "e.jsonl", "\n"))])(tmp), "e.jsonl",
     cli="arlgym")
for cid, argv, needs in [
    ("collect-env", ["collect", "--env", "arl/Nope-v0"], ("arl/Nope-v0",)),
    ("collect-episodes", ["collect", "--episodes", "0"], ("--episodes",)),
    ("collect-workers", ["collect", "--workers", "0", "--episodes", "1"], ("workers",)),
    ("collect-group", ["collect", "--episodes", "4", "--group-size", "3"], ("--group-size",)),
    ("collect-kwarg", ["collect", "--episodes", "1", "--env-kwarg", "search_depth=x"],
     ("search_depth",)),
    ("stats-missing", ["stats", "nowhere"], ("nowhere",)),
    ("train-missing-data", ["train", "--data", "nowhere", "--max-steps", "1"], ("nowhere",)),
    ("train-lr", ["train", "--data", "nowhere", "--lr", "-1"], ("lr",)),
]:
    case(f"cli-sft-{cid}", _main(SFT, argv), *needs, cli="arlgym-sft")
case("cli-sft-train-corrupt",
     lambda tmp: (write(tmp / "d", "samples.jsonl", "{oops\n"),
                  _main(SFT, ["train", "--data", str(tmp / "d")])(tmp))[1],
     "samples.jsonl:1", cli="arlgym-sft")
for cid, argv, needs in [
    ("max_steps-word", ["--max_steps", "ten"], ("--max-steps",)),  # named in the one spelling
    ("config-missing", ["--config", "nowhere.yaml"], ("nowhere.yaml",)),
    ("loss", ["--loss", "nope"], ("loss",)),
    ("env_kwargs-json", ["--env_kwargs", "{bad"], ("--env-kwargs", "JSON")),
    ("env_kwargs-value", ["--env_kwargs", '{"search_depth": "x"}'], ("search_depth",)),
    ("env_kwargs-unknown", ["--env_kwargs", '{"serch_depth": 3}'], ("serch_depth",)),
    ("env_id", ["--env_id", "arl/Nope-v0"], ("arl/Nope-v0",)),
    ("resume", ["--resume", "maybe"], ("--resume",)),
]:
    case(f"cli-sampo-{cid}", _main(SAMPO, argv), *needs, cli="sampo")
case("cli-sampo-yaml-syntax",
     lambda tmp: _main(SAMPO, ["--config", str(write(tmp, "c.yaml", "lr: [\n"))])(tmp),
     "c.yaml", cli="sampo")


def test_there_are_enough_cases():
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_a_clear_error(c: Case, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    if c.cli is None:
        with pytest.raises(ArlgymError) as info:
            c.run(tmp_path)
        message = str(info.value)
        assert "Traceback" not in message
    else:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = c.run(tmp_path)
            except SystemExit as e:  # argparse: usage line, then "<prog>: error: ..."
                code = e.code
        text = err.getvalue()
        assert code == 2, f"exit status {code}, stderr: {text[-2000:]}"
        assert "Traceback" not in text
        lines = [line for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if ": error: " in line]
        assert len(errors) == 1, text
        assert lines[-1] == errors[0], f"the error is not the last line: {text}"
        message = errors[0]
    for fragment in c.needs:
        assert fragment in message, f"{fragment!r} not in {message!r}"
