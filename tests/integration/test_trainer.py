"""The RL trainer end to end on CPU with the tiny model: every preset runs a step, resume is
exact, `accelerate launch` with 2 processes completes (synchronous, and with async rollout workers per rank), the CLI validates its input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arlgym.errors import ConfigError
from arlgym.models import load_tokenizer
from arlgym.rl import metrics as M
from arlgym.rl.cli import parse_train_config
from arlgym.rl.presets import PRESETS
from arlgym.rl.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--env_id", "arl/Sokoban-v0", "--model", "tiny", "--num_tasks", "2", "--group_size", "2",
        "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 2}', "--lr", "1e-3",
        "--log_with", "none"]


def _run(tmp_path, *extra):
    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), *extra])
    trainer = Trainer(cfg)
    history = trainer.train()
    return trainer, history


@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_every_preset_runs_one_step(tmp_path, algo):
    trainer, history = _run(tmp_path, "--algo", algo, "--max_steps", "1")
    m = history[0]
    assert m["step"] == 1 and m["samples"] > 0
    for key in ("env/success_rate", "env/format_valid_ratio", "grad_norm", "entropy",
                "is/out_low_neg_adv_frac", "is/out_high_pos_adv_frac", "tokens_per_s"):
        assert key in m, key
    assert torch.isfinite(torch.tensor(m["loss"]))
    # one on-policy update: whichever way the old log-probs were obtained (the sampler's own by
    # default with HF generate, a forward pass for EMPG), the ratio starts at 1
    assert 1 - 1e-4 < m["is/ratio_min"] <= m["is/ratio_max"] < 1 + 1e-4
    assert (tmp_path / "final" / "config.json").exists()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[0]["step"] == 1
    assert M.undefined(m) == []  # every logged key is in the vocabulary, with its reduction


def test_grpo_step_on_tir_math_uses_the_tir_column(tmp_path):
    from arlgym.rl.trainer import resolve_algorithm

    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--env_id", "arl/TIRMath-v0",
                              "--env_kwargs", '{"max_steps": 2, "sandbox_timeout": 2.0}',
                              "--algo", "grpo", "--max_steps", "1"])
    algo = resolve_algorithm(cfg)
    assert algo["loss"]["clip_high"] == 0.28 and algo["kl_coef"] == 0.0  # Table 6, TIR Math
    history = Trainer(cfg).train()
    m = history[0]
    assert m["step"] == 1 and m["samples"] >= 4 and torch.isfinite(torch.tensor(m["loss"]))
    # the untrained tiny model writes neither code nor an answer: every turn is a void turn
    assert m["env/format_valid_ratio"] == 0.0 and m["env/success_rate"] == 0.0
    cfg.algo = "sampo"
    with pytest.raises(ConfigError, match="not applicable"):
        resolve_algorithm(cfg)


def test_sampo_step_on_webshop_uses_the_webshop_column(tmp_path):
    from arlgym.rl.trainer import resolve_algorithm

    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--env_id", "arl/WebShop-v0",
                              "--algo", "sampo", "--max_steps", "1"])
    algo = resolve_algorithm(cfg)
    assert algo["filter"]["cold_start_steps"] == 5 and algo["advantage"]["name"] == "gigpo"
    m = Trainer(cfg).train()[0]
    assert m["step"] == 1 and m["samples"] >= 4 and torch.isfinite(torch.tensor(m["loss"]))


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "final" / "model.safetensors"))


def test_kill_and_resume_gives_identical_weights(tmp_path):
    a, b = tmp_path / "straight", tmp_path / "resumed"
    _run(a, "--algo", "grpo", "--max_steps", "4", "--kl_coef", "0.01")
    _run(b, "--algo", "grpo", "--max_steps", "2", "--save_steps", "2", "--kl_coef", "0.01")
    _run(b, "--algo", "grpo", "--max_steps", "4", "--resume", "true", "--kl_coef", "0.01")
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    steps = [json.loads(line)["step"] for line in (b / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_run_reports_the_held_out_tasks_it_played_across_a_resume(tmp_path, capsys):
    """held_out.json: the rollouts' task ids against the eval and test panels (0 of each),
    and a resumed run counts the tasks played before its resume (from the checkpoint)."""
    _run(tmp_path, "--algo", "grpo", "--max_steps", "1", "--save_steps", "1",
         "--eval_split", "val", "--eval_episodes", "30")
    first = json.loads((tmp_path / "held_out.json").read_text())
    assert first == {"env_id": "arl/Sokoban-v0", "trained_tasks": 2,
                     "panels": {"val": {"tasks": 30, "trained_on": 0},
                                "test": {"tasks": 200, "trained_on": 0}}}
    assert ("held out: 0 of 30 val and 0 of 200 test tasks were trained on (by content)"
            in capsys.readouterr().out)
    saved = json.loads((tmp_path / "checkpoints" / "step-000001" / "held_out_tasks.json")
                       .read_text())["task_ids"]
    _run(tmp_path, "--algo", "grpo", "--max_steps", "2", "--resume", "true",
         "--eval_split", "val", "--eval_episodes", "30")
    second = json.loads((tmp_path / "held_out.json").read_text())
    assert len(saved) == 2 and second["trained_tasks"] == 4  # two tasks a step, none repeated
    assert second["panels"] == first["panels"]


def test_resume_reads_past_a_torn_last_line(tmp_path):
    """A kill while writing metrics.jsonl leaves a torn line; resume and the alarm read past it."""
    _run(tmp_path, "--algo", "grpo", "--max_steps", "2", "--save_steps", "2")
    log = tmp_path / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 3, "env/success_ra')
    _run(tmp_path, "--algo", "grpo", "--max_steps", "3", "--resume", "true")
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown preset"):
        Trainer(parse_train_config([*TINY, "--algo", "nope", "--output_dir", str(tmp_path)]))
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: sampo\nlearning_rate: 3\n")
    with pytest.raises(ConfigError, match="unknown field"):
        parse_train_config(["--config", str(bad)])
    with pytest.raises(SystemExit):  # argparse: "invalid loads value", exit code 2
        parse_train_config([*TINY, "--output_dir", str(tmp_path), "--loss_kwargs", "{oops"])
    with pytest.raises(ConfigError, match="rollout_engine"):
        parse_train_config([*TINY, "--rollout_engine", "tpu"])


def _launch_two_processes(out, *extra):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs/accelerate/cpu.yaml"), str(ROOT / "trainers/sampo.py"),
           "--config", str(ROOT / "configs/sokoban-tiny-cpu.yaml"), "--algo", "sampo",
           "--max_steps", "3", "--output_dir", str(out), "--num_tasks", "2",
           "--group_size", "2", "--max_new_tokens", "8", "--env_kwargs", '{"max_steps": 3}',
           "--save_steps", "3", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_sync_and_async(tmp_path):
    rows = _launch_two_processes(tmp_path / "sync")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert (tmp_path / "sync" / "final" / "model.safetensors").exists()
    # really two ranks (each saves its own task-stream position), one group each
    ckpt = tmp_path / "sync" / "checkpoints" / "step-000003"
    assert sorted(p.name for p in ckpt.glob("collector_rank*.json")) == [
        "collector_rank0.json", "collector_rank1.json"]
    # the held-out count gathers both ranks' tasks: one new task per rank and step
    assert json.loads((tmp_path / "sync" / "held_out.json").read_text())["trained_tasks"] >= 6
    # each rank with rollout workers of its own; staleness 0 is the synchronous run bit for bit
    asy = _launch_two_processes(tmp_path / "async", "--async_rollouts", "true",
                                "--max_staleness", "0")
    timing = ("time/", "async/", "staleness/")
    assert ([{k: v for k, v in r.items() if not k.startswith(timing) and k != M.TOKENS_PER_S}
             for r in asy] ==
            [{k: v for k, v in r.items() if not k.startswith(timing) and k != M.TOKENS_PER_S}
             for r in rows])
    wa, wb = _weights(tmp_path / "sync"), _weights(tmp_path / "async")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    for rank in (0, 1):
        state = json.loads((tmp_path / "async" / "checkpoints" / "step-000003" /
                            f"collector_rank{rank}.json").read_text())
        assert state["async"]["next_task"] >= 3


def test_shared_prompts_change_compute_not_results(tmp_path):
    """Every group's first turn shares its prompt; running it once must not change the step."""
    _, on = _run(tmp_path / "on", "--algo", "grpo", "--max_steps", "2", "--kl_coef", "0.01",
                 "--share_prompts", "true")
    _, off = _run(tmp_path / "off", "--algo", "grpo", "--max_steps", "2", "--kl_coef", "0.01",
                  "--share_prompts", "false")
    for a, b in zip(on, off, strict=True):
        assert a["samples"] == b["samples"]
        for key in ("loss", "grad_norm", "kl/ref", "entropy"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    wa, wb = _weights(tmp_path / "on"), _weights(tmp_path / "off")
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k


def test_logged_loss_does_not_depend_on_micro_batching(tmp_path):
    """A mini-batch's loss is the sum of its micro-batch losses (global denominators)."""
    _, whole = _run(tmp_path / "whole", "--algo", "grpo", "--max_steps", "1", "--kl_coef", "0.01")
    _, split = _run(tmp_path / "split", "--algo", "grpo", "--max_steps", "1", "--kl_coef", "0.01",
                    "--micro_batch_tokens", "64")
    assert whole[0]["samples"] == split[0]["samples"]
    for key in ("loss", "pg_loss", "grad_norm", "kl"):
        assert split[0][key] == pytest.approx(whole[0][key], rel=1e-4, abs=1e-7), key


def test_max_minutes_stops_early(tmp_path):
    _, history = _run(tmp_path, "--algo", "grpo", "--max_steps", "50", "--max_minutes", "0.0001")
    assert len(history) == 1


# --- vLLM rollouts, through a CPU stand-in of vLLM's interface (tests/fakes/fake_vllm.py) ------
# AdamW decay alone moves every weight (the random policy's advantages are all 0): 2% a step
_VLLM = ["--algo", "grpo", "--rollout_engine", "vllm", "--lr", "2e-2", "--weight_decay", "1.0"]


def test_vllm_rollouts_sample_from_the_updated_weights(tmp_path, fake_vllm, peaked_model):
    trainer, history = _run(tmp_path, *_VLLM, "--model", peaked_model, "--max_steps", "3",
                            "--eval_steps", "3", "--eval_episodes", "2")
    engine = fake_vllm.ENGINES[-1]
    assert engine.engine_kwargs["distributed_executor_backend"] == "external_launcher"
    assert engine.engine_kwargs["gpu_memory_utilization"] == 0.3
    assert engine.engine_model.load_calls == 1 + 3  # at start, then after every update
    live = trainer.accelerator.unwrap_model(trainer.model).state_dict()
    for name, tensor in engine.engine_model.hf.state_dict().items():
        assert torch.equal(tensor, live[name]), name
    for m in history:  # the engine's log-probs are the trainer's own at every step
        assert m["rollout/logprob_abs_diff_max"] < 1e-3, m["step"]
    assert "eval/success_rate" in history[-1]


def test_a_stale_engine_shows_in_the_rollout_logprob_gap(tmp_path, fake_vllm, peaked_model, monkeypatch):
    """Negative control: without the sync the metric must light up from step 2 on."""
    monkeypatch.setattr(Trainer, "_sync_rollout_weights", lambda self: None)
    _, history = _run(tmp_path, *_VLLM, "--model", peaked_model, "--max_steps", "2")
    assert history[0]["rollout/logprob_abs_diff_max"] < 1e-3
    assert history[1]["rollout/logprob_abs_diff_mean"] > 1e-2


def test_a_resumed_run_hands_the_engine_its_checkpoint_weights(tmp_path, fake_vllm, peaked_model,
                                                                monkeypatch):
    """The engine is built with the start model; a resume must push the checkpoint's weights
    before the first rollout (negative control: without that push the gap shows at once)."""
    _run(tmp_path, *_VLLM, "--model", peaked_model, "--max_steps", "2", "--save_steps", "2")
    # step 2's checkpoint stays the newest: the second resume starts from it again
    resume = [*_VLLM, "--model", peaked_model, "--max_steps", "3", "--resume", "true",
              "--save_steps", "2", "--save_total_limit", "0"]
    _, history = _run(tmp_path, *resume)
    assert history[0]["step"] == 3 and history[0]["rollout/logprob_abs_diff_max"] < 1e-3
    (tmp_path / "final").rename(tmp_path / "final-1")
    monkeypatch.setattr(Trainer, "_sync_rollout_weights", lambda self: None)
    _, history = _run(tmp_path, *resume)
    assert history[0]["rollout/logprob_abs_diff_mean"] > 1e-2


def test_vllm_with_lora_syncs_merged_hf_named_weights(tmp_path, fake_vllm, peaked_model):
    trainer, history = _run(tmp_path, *_VLLM, "--model", peaked_model, "--max_steps", "1",
                            "--lora_r", "4")
    engine = fake_vllm.ENGINES[-1]
    assert engine.engine_model.load_calls == 2  # the stand-in rejects any non-HF (PEFT) name
    assert history[0]["rollout/logprob_abs_diff_max"] < 1e-3


def test_gradient_checkpointing_keeps_gradients_and_is_wired(tmp_path):
    import copy

    from arlgym.models import load_model_and_tokenizer

    plain, _ = load_model_and_tokenizer("tiny")
    ckpt = copy.deepcopy(plain)
    ckpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, plain.config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0))
    for model in (plain, ckpt):
        model.train()
        logp = torch.log_softmax(model(ids).logits[:, :-1].float(), -1)
        logp.gather(-1, ids[:, 1:, None]).mean().backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), ckpt.named_parameters(), strict=True):
        assert a.grad is not None and torch.allclose(a.grad, b.grad, atol=1e-6, rtol=1e-5), name

    trainer, history = _run(tmp_path, "--algo", "grpo", "--max_steps", "1", "--gradient_checkpointing", "true")
    assert trainer.accelerator.unwrap_model(trainer.model).is_gradient_checkpointing
    assert history[0]["samples"] > 0 and 1 - 1e-4 < history[0]["is/ratio_min"]


def test_save_best_keeps_the_model_of_the_best_periodic_eval(tmp_path, monkeypatch):
    scores, snapshots = iter([0.25, 0.5, 0.5, 0.375]), {}

    def scripted_eval(self):  # the eval's verdicts are scripted; the saving is what is tested
        assert self.cfg.eval_split == "val"
        model = self.accelerator.unwrap_model(self.model)
        snapshots[self.step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {"eval/success_rate": next(scores), "eval/success_se": 0.0, "eval/format_valid_ratio": 1.0}

    monkeypatch.setattr(Trainer, "evaluate", scripted_eval)
    _run(tmp_path, "--algo", "grpo", "--max_steps", "4", "--eval_steps", "1", "--save_best", "true",
         "--eval_split", "val", "--weight_decay", "1.0")  # decay: every step changes the weights
    record = json.loads((tmp_path / "best" / "best.json").read_text())
    assert (record["step"], record["eval/success_rate"]) == (2, 0.5)  # the tie at step 3 keeps step 2
    from safetensors.torch import load_file

    best = load_file(str(tmp_path / "best" / "model.safetensors"))
    for name, tensor in best.items():
        assert torch.equal(tensor, snapshots[2][name]), name
    assert not torch.equal(best["model.norm.weight"], snapshots[4]["model.norm.weight"])
    assert not (tmp_path / "best.tmp").exists()


def test_save_best_needs_a_periodic_eval(tmp_path):
    with pytest.raises(ConfigError, match="eval_steps"):
        parse_train_config([*TINY, "--output_dir", str(tmp_path), "--save_best", "true"])


def test_periodic_eval_on_the_val_split(tmp_path):
    _, history = _run(tmp_path, "--algo", "grpo", "--max_steps", "1", "--eval_steps", "1",
                      "--eval_episodes", "3", "--eval_split", "val")
    assert 0.0 <= history[0]["eval/success_rate"] <= 1.0 and "eval/success_se" in history[0]


def test_tensorboard_tracker_gets_every_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = parse_train_config([*TINY[:-2], "--log_with", "tensorboard", "--output_dir", str(tmp_path),
                              "--algo", "grpo", "--max_steps", "2"])
    Trainer(cfg).train()
    run_dir = tmp_path / "logs" / "arlgym"  # scalars here; the hparams go to a subfolder
    assert list(run_dir.glob("events.out.tfevents.*")), list(tmp_path.rglob("*"))
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"env/success_rate", "is/out_low_neg_adv_frac", "kl"} <= tags
    assert [e.step for e in acc.Scalars("env/success_rate")] == [1, 2]


def test_old_logprobs_sources(tmp_path, monkeypatch):
    """auto + HF generate takes the sampler's log-probs (no old-log-prob forward pass); recompute
    runs the pass and logs the sampler/trainer gap, which for HF generate is rounding."""
    calls = []
    real = Trainer._logprobs
    monkeypatch.setattr(Trainer, "_logprobs", lambda self, model, sub, ent: calls.append(ent) or real(self, model, sub, ent))
    _, auto = _run(tmp_path / "auto", "--algo", "grpo", "--max_steps", "1", "--kl_coef", "0")
    assert "rollout/logprob_abs_diff_max" not in auto[0]
    assert calls and all(calls)  # only the training forward passes (with entropy) ran
    calls.clear()
    _, rec = _run(tmp_path / "rec", "--algo", "grpo", "--max_steps", "1", "--kl_coef", "0",
                  "--old_logprobs", "recompute")
    assert not all(calls)  # an old-log-prob pass (no entropy) ran as well
    assert rec[0]["rollout/logprob_abs_diff_max"] < 1e-3
    assert rec[0]["samples"] == auto[0]["samples"] and rec[0]["is/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ConfigError, match="EMPG"):
        _run(tmp_path / "empg", "--algo", "empg", "--max_steps", "1", "--old_logprobs", "rollout")


def test_a_dead_env_worker_is_replaced_and_its_group_replayed_and_logged(tmp_path):
    """A rollout worker killed mid-step: the trainer's collector replaces it, replays the
    interrupted group from reset, and the step's metrics say so (``rollout/groups_retried``);
    the step trains on whole groups only."""
    import os
    import signal

    from arlgym.rollout import RolloutCollector

    cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path), "--algo", "grpo",
                              "--max_steps", "2"])
    trainer = Trainer(cfg)
    trainer.collector.close()
    trainer.collector = coll = RolloutCollector(
        cfg.env_id, trainer.policy, group_size=2, num_tasks=2, env_kwargs={"max_steps": 2},
        mode="async", num_workers=2, seed=3, progress=False)
    generate, calls = trainer.policy.generate, []

    def generate_and_kill_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # mid-episode of the first step: the second turn's generate
            os.kill(coll.vec.worker_pid(1), signal.SIGKILL)
        return generate(*args, **kwargs)

    trainer.policy.generate = generate_and_kill_once
    history = trainer.train()
    assert coll.vec.restarts == 1
    assert history[0]["rollout/groups_retried"] == 1.0
    assert history[0]["rollout/groups_dropped"] == 0.0
    assert history[1]["rollout/groups_retried"] == 0.0  # counted once, in the step it happened
    # both groups whole, the replayed one too: 4 episodes of max_steps=2 turns each (the
    # untrained tiny model never finishes one early), every turn trained on
    assert history[0]["env/turns"] == history[0]["samples"] == 8.0
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[0]["rollout/groups_retried"] == 1.0


@pytest.mark.parametrize("method", ["tis_token", "icepop"])
def test_rollout_correction_recomputes_old_logprobs_and_logs_the_mismatch(tmp_path, method):
    """With a correction the learner recomputes its old log-probs (auto) and compares them with
    the sampler's: HF generate on the live fp32 model agrees to float rounding, so the weights
    are ~1 and nothing is masked or truncated; the mismatch diagnostics are logged."""
    _, history = _run(tmp_path, "--algo", "grpo", "--max_steps", "1",
                      "--rollout_correction", method, "--rollout_correction_cap", "3.0")
    m = history[0]
    assert 0.0 <= m["mismatch/kl"] < 1e-4
    assert abs(m["mismatch/ratio_q50"] - 1.0) < 1e-3
    assert abs(m["mismatch/weight_mean"] - 1.0) < 1e-3
    assert m["mismatch/masked_frac"] == 0.0 and m["mismatch/truncated_frac"] == 0.0
    assert "rollout/logprob_abs_diff_mean" in m  # recomputed: the old gap check runs too
    assert M.undefined(m) == []


def test_rollout_correction_none_logs_no_mismatch_when_old_logprobs_come_from_the_sampler(tmp_path):
    _, history = _run(tmp_path, "--algo", "grpo", "--max_steps", "1")
    assert not any(k.startswith("mismatch/") for k in history[0])


def test_action_credit_trains_the_action_as_if_the_reasoning_were_prompt(tmp_path):
    """credit action: a turn's loss and gradient are exactly those of the same turn with its
    reasoning moved into the prompt (the action conditioned on it, trained on its own);
    credit response trains the reasoning's tokens too, so its gradient differs."""
    from arlgym.rl.batching import TokenSample
    from arlgym.rl.credit import apply_credit

    def run(credit, prompt_ids, responses):
        cfg = parse_train_config([*TINY, "--output_dir", str(tmp_path / credit), "--algo", "grpo",
                                  "--credit", credit, "--seed", "3"])
        tr = Trainer(cfg)
        ss = [TokenSample(uid=f"u{i}", traj_id=f"t{i}", step=0, anchor="a", step_reward=r,
                          episode_return=r, format_penalty=0.0, format_valid=True,
                          action_valid=True, won=r > 0, prompt_ids=prompt_ids,
                          response_ids=resp) for i, (r, resp) in enumerate(zip((1.0, 0.0), responses, strict=True))]
        apply_credit(ss, tr.tokenizer, credit)
        tr._fill_logprobs(ss, need_entropy=False)
        grads = []
        step = tr.optimizer.step
        tr.optimizer.step = lambda *a, **k: (grads.append([p.grad.clone() for p in tr.model.parameters()]),
                                             step(*a, **k))[1]
        metrics = tr._update(ss, torch.tensor([1.0, -0.5]))
        return ss, metrics, grads[0]

    tok = load_tokenizer("tiny")
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    think = ids("<think>plan: up, left</think>")
    actions = [ids(f"<action>{a}</action>") + [tok.eos_token_id] for a in ("up", "left")]
    prompt = ids("a room")
    whole, m_action, g_action = run("action", prompt, [think + a for a in actions])
    _, m_moved, g_moved = run("response", prompt + think, actions)
    _, m_response, g_response = run("response", prompt, [think + a for a in actions])
    assert whole[0].credit_from == len(think)
    assert m_action["pg_loss"] == pytest.approx(m_moved["pg_loss"], abs=1e-6)
    gap = max(float((a - b).abs().max()) for a, b in zip(g_action, g_moved, strict=True))
    trained_think = max(float((a - b).abs().max()) for a, b in zip(g_response, g_moved, strict=True))
    scale = max(float(b.abs().max()) for b in g_moved)
    assert gap < 1e-4 * scale  # float rounding of two batch layouts
    assert trained_think > 100 * gap  # the reasoning's own tokens do move the response run
