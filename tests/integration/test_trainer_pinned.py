"""The trainer's own numbers, pinned: a refactor of the update path must not move them.

Every other end-to-end trainer test starts from the untrained tiny model, whose returns are all
equal — every advantage is 0 and the policy-gradient term contributes nothing, so a change in
how advantages meet samples, how the loss is aggregated or how the masks apply would pass them.
Here the start is the tiny model behaviour-cloned for 42 steps on Sokoban prompts
(:func:`cloned_model`): about half its responses are well-formed moves, the rest break the
format, so returns (format penalty, box pushes) differ inside a group and every preset sees
non-zero advantages.

For GRPO, SAMPO, GiGPO, EMPG and CISPO, 3 steps on one thread pin every logged metric (timings
aside, rounded to 6 significant digits) and two checksums of the weight change, in
``tests/fixtures/trainer_pinned.json``. The numbers are CPU float arithmetic: another CPU or
torch build may round differently; to re-pin after a change that is *meant* to move them, run
this file with ``ARLGYM_REPIN=1`` and review the diff of the fixture.

The end-to-end equalities are rerun from this start too: a resumed run equals a straight one,
and async workers at ``max_staleness 0`` equal the synchronous trainer, bit for bit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from arlgym.rl import metrics as M
from arlgym.rl.cli import parse_train_config
from arlgym.rl.trainer import Trainer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "trainer_pinned.json"
ALGOS = ("grpo", "sampo", "gigpo", "empg", "cispo")
STEPS = 3
ADV_STD = "adv/std"  # advantage_metrics


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def clone_tiny(path: Path, steps: int = 42) -> str:
    """The tiny model (seed 0) after 42 Adam steps of next-token loss on ``<think>go</think>
    <action>{move}</action>`` for four Sokoban prompts, saved to disk. Deterministic on one
    thread; about half of its sampled responses (temperature 1) are valid moves."""
    import gymnasium as gym

    import arlgym.envs  # noqa: F401  (registers the envs)
    from arlgym.models import load_model_and_tokenizer
    from arlgym.policies.base import prompt_text
    from arlgym.policies.hf import chat_prompt_ids

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model, tok = load_model_and_tokenizer("tiny", seed=0)
        env = gym.make("arl/Sokoban-v0", max_steps=2)
        prompts = [chat_prompt_ids(tok, prompt_text(env.reset(seed=s)[0])) for s in range(4)]
        env.close()
        targets = [tok(f"<think>go</think><action>{a}</action>", add_special_tokens=False)
                   ["input_ids"] + [tok.eos_token_id] for a in ("up", "down", "left", "right")]
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.train()
        for it in range(steps):
            p, t = prompts[it % 4], targets[it % 4]
            logits = model(torch.tensor([p + t])).logits[0, len(p) - 1 : -1]
            loss = torch.nn.functional.cross_entropy(logits, torch.tensor(t))
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def cloned_model(tmp_path_factory) -> str:
    return clone_tiny(tmp_path_factory.mktemp("cloned"))


def _flags(model: str, out: Path, *extra: str) -> list[str]:
    return ["--env_id", "arl/Sokoban-v0", "--model", model, "--num_tasks", "2",
            "--group_size", "4", "--max_new_tokens", "12", "--env_kwargs", '{"max_steps": 2}',
            "--lr", "3e-4", "--log_with", "none", "--torch_threads", "1",
            "--output_dir", str(out), *extra]


def _train(model: str, out: Path, *extra: str) -> list[dict[str, float]]:
    return Trainer(parse_train_config(_flags(model, out, *extra))).train()


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "final" / "model.safetensors"))


def _pinned_row(row: dict[str, float]) -> dict[str, float]:
    """A metrics row without its timings, rounded to 6 significant digits."""
    return {k: _sig(v) for k, v in sorted(row.items())
            if not k.startswith("time/") and k != M.TOKENS_PER_S}


def _weight_change(start: dict[str, torch.Tensor], end: dict[str, torch.Tensor]) -> dict[str, float]:
    """Two checksums of ``end - start`` over every tensor: its L1 norm and its projection on a
    fixed pseudo-random direction (which a permutation of the update would change)."""
    l1 = proj = 0.0
    gen = torch.Generator().manual_seed(1234)
    for name in sorted(end):
        delta = (end[name].double() - start[name].double()).flatten()
        l1 += float(delta.abs().sum())
        proj += float((delta * torch.randn(delta.numel(), generator=gen, dtype=torch.float64)).sum())
    return {"l1": _sig(l1), "projection": _sig(proj)}


@pytest.fixture(scope="module")
def pinned() -> dict:
    return json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}


@pytest.mark.parametrize("algo", ALGOS)
def test_trainer_numbers_are_pinned(tmp_path, cloned_model, pinned, algo):
    from safetensors.torch import load_file

    history = _train(cloned_model, tmp_path, "--algo", algo, "--max_steps", str(STEPS))
    # the start carries a learning signal: advantages spread and the policy gradient is not 0
    assert all(r[ADV_STD] > 0.5 for r in history), [r[ADV_STD] for r in history]
    assert all(r[M.GRAD_NORM] > 1e-3 for r in history), [r[M.GRAD_NORM] for r in history]
    if algo != "sampo":  # SAMPO's sequence-mean of normalised advantages at ratio 1 is 0 by
        # construction (only its gradient is not): its pg_loss is float noise, pinned loosely
        assert all(abs(r[M.PG_LOSS]) > 1e-3 for r in history), [r[M.PG_LOSS] for r in history]
    assert 0 < history[0][M.FORMAT_VALID] < 1
    got = {"rows": [_pinned_row(r) for r in history],
           "weights": _weight_change(load_file(str(Path(cloned_model) / "model.safetensors")),
                                     _weights(tmp_path))}
    if os.environ.get("ARLGYM_REPIN"):
        table = {**pinned, algo: got}
        FIXTURE.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
        pinned[algo] = got
    assert algo in pinned, f"no pinned numbers for {algo}: run with ARLGYM_REPIN=1"
    want = pinned[algo]
    assert [sorted(r) for r in got["rows"]] == [sorted(r) for r in want["rows"]]
    for step, (g, w) in enumerate(zip(got["rows"], want["rows"], strict=True), start=1):
        for key in w:
            assert g[key] == pytest.approx(w[key], rel=2e-5, abs=1e-6), (algo, step, key)
    for key, value in want["weights"].items():
        assert got["weights"][key] == pytest.approx(value, rel=1e-4), (algo, key)


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("algo", ["sampo", "cispo"])
def test_resumed_run_equals_the_straight_run_with_a_learning_signal(tmp_path, cloned_model, algo):
    a, b = tmp_path / "straight", tmp_path / "resumed"
    straight = _train(cloned_model, a, "--algo", algo, "--max_steps", "3", "--kl_coef", "0.01")
    _train(cloned_model, b, "--algo", algo, "--max_steps", "1", "--save_steps", "1",
           "--kl_coef", "0.01")
    resumed = _train(cloned_model, b, "--algo", algo, "--max_steps", "3", "--resume", "true",
                     "--kl_coef", "0.01")
    assert any(r[M.PG_LOSS] != 0 for r in straight)
    assert _same_weights(a, b)
    rows = [json.loads(x) for x in (b / "metrics.jsonl").read_text().splitlines()]
    assert [_pinned_row(r) for r in rows] == [_pinned_row(r) for r in straight]
    assert [r[M.STEP] for r in resumed] == [2, 3]


@pytest.mark.slow  # a worker process loads torch + the model
def test_staleness_0_equals_the_synchronous_trainer_with_a_learning_signal(tmp_path, cloned_model):
    sync = _train(cloned_model, tmp_path / "sync", "--algo", "grpo", "--max_steps", "3",
                  "--kl_coef", "0.01")
    asy = _train(cloned_model, tmp_path / "async", "--algo", "grpo", "--max_steps", "3",
                 "--kl_coef", "0.01", "--async_rollouts", "true", "--max_staleness", "0")
    assert all(r[ADV_STD] > 0 and r[M.PG_LOSS] != 0 for r in sync)

    def comparable(row: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in row.items()
                if not k.startswith(("time/", "async/", "staleness/")) and k != M.TOKENS_PER_S}

    assert [comparable(r) for r in asy] == [comparable(r) for r in sync]
    assert _same_weights(tmp_path / "sync", tmp_path / "async")
