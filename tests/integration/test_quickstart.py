"""`arlgym quickstart --fast` end to end: every stage runs, the arena of GRPO and SAMPO included,
and the four-row table is printed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fast_quickstart(tmp_path_factory):
    """One `arlgym quickstart --fast` run shared by the tests below (it costs ~1-2 min)."""
    out = tmp_path_factory.mktemp("quickstart") / "qs"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--fast", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200)
    return out, proc


@pytest.mark.slow
def test_quickstart_fast(fast_quickstart):
    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout[proc.stdout.index("\npolicy ") + 1:]
    assert [line.split()[0] for line in table.splitlines()[1:6]] == ["random", "teacher", "SFT",
                                                                     "SFT+GRPO", "SFT+SAMPO"]
    # a smoke run says so, and a run that never learned the format is not called healthy
    assert "--fast smoke run" in proc.stdout and "collapse alarm: healthy" not in proc.stdout
    result = json.loads((out / "quickstart.json").read_text())
    assert set(result["rows"]) == {"random", "teacher", "SFT", "SFT+GRPO", "SFT+SAMPO"}
    assert set(result["versus_teacher"]) == {"SFT", "grpo", "sampo"}
    assert set(result["rl_effects"]) == {"grpo", "sampo"} and result["versus"]["b"] == "sampo"
    # the arena ran both presets from the SFT checkpoint, one budget, the same test rooms
    for algo in ("grpo", "sampo"):
        run = out / "arena" / algo / "seed-0"
        assert (run / "final").is_dir() and (run / "eval" / "test-last.jsonl").exists()
        cfg = json.loads((run / "config.json").read_text())["config"]
        settings = json.loads((run / "eval" / "test-last.settings.json").read_text())
        assert settings["policy"] == f"hf:{Path(cfg['output_dir']) / 'final'}"  # the weights it played
        assert cfg["model"] == str((out / "sft").resolve()) and cfg["max_steps"] == 2
        assert cfg["test_episodes"] == 8 and cfg["eval_split"] == "val"
        # the arena's evals use the table's protocol: the paper's sampling, 2 episodes a room
        assert (cfg["eval_temperature"], cfg["eval_top_p"], cfg["eval_top_k"], cfg["eval_samples"]) == (0.6, 0.95, 20, 2)
        rooms = [json.loads(line)["task_id"] for line in (run / "eval" / "test-last.jsonl").read_text().splitlines()]
        sft_rooms = [json.loads(line)["task_id"] for line in (out / "eval_sft.jsonl").read_text().splitlines()]
        assert rooms == sft_rooms
        # the run's own greedy companion of its reported checkpoint is the table's greedy eval
        def episodes(path):
            return [(r["task_id"], [st["response"] for st in r["steps"]])
                    for r in map(json.loads, path.read_text().splitlines())]
        checkpoint = result["runs"][algo]["checkpoint"]
        assert episodes(run / "eval" / f"test-{checkpoint}.greedy.jsonl") == episodes(out / f"eval_{algo}_greedy.jsonl")
        assert result["runs"][algo]["phase"]["steps"] == 2
        assert result["runs"][algo]["checkpoint"] in ("best", "last")
        assert f"{algo.upper()} run (T=0.6)" in proc.stdout and "collapse alarm:" in proc.stdout
    assert "SAMPO vs GRPO, greedy (same rooms)" in proc.stdout
    assert "SAMPO vs GRPO, sampled (same rooms)" in proc.stdout
    # both decodings of every model, RL against the SFT's best decoding chosen on val rooms
    assert result["best_decoding"] in ("greedy", "sampled")
    choice = result["decoding_choice"]
    best = max(("greedy", "sampled"), key=lambda d: (choice[d]["success_rate"], d == "greedy"))
    assert result["best_decoding"] == best
    for name in ("SFT", "SFT+GRPO", "SFT+SAMPO"):
        assert set(result["rows"][name]) == {"greedy", "sampled"}
    for algo in ("grpo", "sampo"):
        assert set(result["rl_effects"][algo]) == {"greedy", "sampled"}
        greedy_rooms = [json.loads(x)["task_id"] for x in (out / f"eval_{algo}_greedy.jsonl").read_text().splitlines()]
        assert greedy_rooms == list(dict.fromkeys(sft_rooms))  # one greedy episode a room, same rooms
    choice_rooms = {json.loads(x)["task_id"] for x in (out / "choice_sft_greedy.jsonl").read_text().splitlines()}
    import gymnasium as gym

    import arlgym  # noqa: F401

    env = gym.make("arl/Sokoban-v0", dim_room=7, history_length=0).unwrapped
    assert choice_rooms == set(env.list_tasks("val", 8)) and not choice_rooms & set(sft_rooms)
    # no room of the panel was trained on, by puzzle
    assert result["trained_on_panel"] == {"panel": 8, "demo_rooms": result["trained_on_panel"]["demo_rooms"],
                                          "overlap": 0}
    assert "test rooms trained on: 0 of 8" in proc.stdout
    assert (out / "curves.png").stat().st_size > 1000
    assert (out / "arena" / "report" / "index.html").exists()
    assert (out / "arena" / "report" / "table.md").read_text().count("| ") > 4
    report = (out / "report.md").read_text()  # the printed table, effects and timings, kept
    assert f"SAMPO greedy − SFT {result['best_decoding']} (same rooms)" in report and "SFT+GRPO" in report
    assert "RL beats the SFT's best decoding by > 2 paired SE under both decodings:" in report
    assert "curves.png" in report and "arena/report/index.html" in report
    assert (out / "sft" / "model.safetensors").exists()
    # the default design: the teacher with slips on 7×7 rooms, the current grid only
    identity = json.loads((out / "sft_data" / "meta.json").read_text())["identity"]
    assert identity["policy"] == "slips:0.7:expert"
    # every teacher episode is a demonstration (--demos all), lost ones included
    episodes = [json.loads(x) for x in (out / "sft_data" / "episodes.jsonl").read_text().splitlines()]
    assert all(e["kept"] for e in episodes) and any(not e["won"] for e in episodes)
    assert identity["env_kwargs"] == {"dim_room": 7, "history_length": 0}
    samples = [json.loads(x) for x in (out / "sft_data" / "samples.jsonl").read_text().splitlines()]
    assert samples and not any("most recent" in x["messages"][0]["content"] for x in samples)
    assert all(x["messages"][0]["content"].count("#######") >= 2 for x in samples)  # 7-wide walls


@pytest.mark.slow
def test_the_sft_eval_beside_the_arena_gives_the_in_process_numbers(fast_quickstart, tmp_path):
    """The worker process plays the same seeded draws: the same episodes, row and wins."""
    from arlgym.quickstart import QuickstartConfig, SFTEvalBeside, protocol_eval

    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = QuickstartConfig.fast(out=str(out))
    with SFTEvalBeside(cfg, out / "sft", tmp_path / "beside.jsonl", threads=1) as beside:
        row_beside, wins_beside = beside.result()
    row_here, wins_here = protocol_eval(cfg, f"hf:{out / 'sft'}", tmp_path / "here.jsonl")
    assert wins_beside == wins_here and len(wins_here) == cfg.eval_episodes
    assert row_beside == row_here
    # the quickstart's own SFT row was played beside its arena: the same responses, token by token
    def responses(path):
        return [[step["response_token_ids"] for step in json.loads(line)["steps"]]
                for line in path.read_text().splitlines()]

    assert responses(tmp_path / "here.jsonl") == responses(out / "eval_sft.jsonl") == \
        responses(tmp_path / "beside.jsonl")
    assert len(responses(out / "eval_sft.jsonl")) == cfg.eval_episodes * cfg.eval_samples


def test_an_error_in_the_eval_beside_the_arena_reaches_the_caller(tmp_path):
    from arlgym.quickstart import QuickstartConfig, SFTEvalBeside

    cfg = QuickstartConfig.fast(out=str(tmp_path))
    with SFTEvalBeside(cfg, tmp_path / "no-such-checkpoint", tmp_path / "e.jsonl", threads=1) as beside:
        with pytest.raises(Exception, match="no-such-checkpoint"):
            beside.result()


@pytest.mark.slow
def test_an_error_in_the_arena_ends_the_eval_beside_it(fast_quickstart, tmp_path):
    """Ctrl-C or a crash in the arena: the error reaches the caller at once, the eval's worker is
    ended mid-eval (not waited for) and no process is left."""
    import time

    from arlgym.quickstart import QuickstartConfig, SFTEvalBeside

    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = QuickstartConfig.fast(out=str(out))
    cfg.eval_episodes, cfg.eval_samples = 200, 4  # ~1 min of eval on one core
    with pytest.raises(KeyboardInterrupt):
        with SFTEvalBeside(cfg, out / "sft", tmp_path / "e.jsonl", threads=1) as beside:
            workers = list(beside._pool._processes.values())
            assert workers and all(w.is_alive() for w in workers)
            time.sleep(8)  # the worker is playing episodes by now
            started = time.perf_counter()
            raise KeyboardInterrupt
    # the worker is gone, mid-eval (800 lines = the whole eval): ended, not waited for; the
    # bound only catches a hang (10x the second the shutdown takes on an idle machine)
    assert not any(w.is_alive() for w in workers)
    done = (tmp_path / "e.jsonl").read_text().count("\n") if (tmp_path / "e.jsonl").exists() else 0
    assert done < 800  # ended mid-eval: the rerun resumes from what was written
    assert time.perf_counter() - started < 50


def _rates(rows):
    """Success rate of every row and decoding (baselines have one, the models two)."""
    return {(k, d): r["success_rate"] for k, v in rows.items()
            for d, r in (v.items() if "greedy" in v else [("sampled", v)])}


@pytest.mark.slow
def test_quickstart_rerun_resumes_finished_runs(fast_quickstart, tmp_path):
    """A second quickstart on the same folder skips the finished RL runs (the arena's resume)
    and prints the same table — the way a killed quickstart is continued."""
    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads((out / "quickstart.json").read_text())
    again = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--fast", "--out", str(out)],
                           capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads((out / "quickstart.json").read_text())
    assert "reusing the finished SFT" in again.stdout
    assert "resumed: SFT reused, 2 of 2 RL runs read back" in again.stdout
    assert second["resumed"] == ["SFT reused", "2 of 2 RL runs read back"] and first["resumed"] == []
    assert second["timings"]["rl_s"] < first["timings"]["rl_s"]  # nothing retrained
    assert _rates(second["rows"]) == _rates(first["rows"])
    assert second["rl_effects"] == first["rl_effects"]


@pytest.mark.slow
def test_quickstart_reuses_nothing_from_a_folder_of_unknown_settings(fast_quickstart, tmp_path):
    """A folder without recipe.json (an older quickstart's, or hand-made) may hold an SFT of
    other settings: nothing in it is reused — SFT, evals and RL runs are made afresh."""
    import shutil

    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    copy = tmp_path / "old"
    shutil.copytree(out, copy)
    (copy / "recipe.json").unlink()
    again = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--fast", "--out", str(copy)],
                           capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "reusing" not in again.stdout and "behaviour cloning the tiny model: 20 steps" in again.stdout
    result = json.loads((copy / "quickstart.json").read_text())
    assert result["resumed"] == [] and (copy / "recipe.json").exists()


@pytest.mark.slow
def test_research_scripts_run_from_a_quickstart(fast_quickstart, tmp_path):
    """The README's RL diagnostics start from a quickstart's folder: the one-update check and a
    probe with an eval at a chosen step run on the fast run's SFT checkpoint and write their
    results (the README quotes their output, so a broken script would make it lie)."""
    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    tiny = ["--algo", "sampo", "--num_tasks", "2", "--group_size", "4", "--mini_batch_size", "0",
            "--cold_start_steps", "100", "--lr", "1e-4"]
    check = subprocess.run([sys.executable, str(REPO / "experiments" / "rl_update_checks.py"), "one-update",
                            "--start", str(out), "--out", str(tmp_path / "checks"), *tiny],
                           capture_output=True, text=True, timeout=900)
    assert check.returncode == 0, check.stderr[-3000:]
    result = json.loads((tmp_path / "checks" / "one-update" / "result.json").read_text())["result"]
    assert result["samples"] > 0 and "one update," in check.stdout
    assert abs(result["share_pos"] + result["share_neg"] + result["share_zero"] - 1.0) < 1e-9
    assert result["adv_pos_sum"] >= 0.0 >= result["adv_neg_sum"]
    probe = subprocess.run([sys.executable, str(REPO / "experiments" / "rl_probe.py"), "--start", str(out),
                            "--out", str(tmp_path / "probe"), "--name", "p", "--test", "8", "--eval-at", "1",
                            *tiny], capture_output=True, text=True, timeout=900)
    assert probe.returncode == 0, probe.stderr[-3000:]
    row = json.loads((tmp_path / "probe" / "p" / "probe.json").read_text())["evals"][0]
    assert row["step"] == 1 and 0.0 <= row["greedy"]["after"] <= 1.0
    assert row["greedy"]["effect"]["gained"] + row["greedy"]["effect"]["lost"] <= 8


def test_a_variant_runs_the_quickstarts_recipe_with_one_field_changed(fast_quickstart, tmp_path):
    """experiments/quickstart_variant.py: the quickstart's own arena run for one preset from its
    SFT, a trainer field changed, paired against the SFT's eval on the same rooms."""
    out, proc = fast_quickstart
    assert proc.returncode == 0, proc.stderr[-3000:]
    variant = tmp_path / "variant"
    run = subprocess.run([sys.executable, str(REPO / "experiments" / "quickstart_variant.py"),
                          "--from", str(out), "--out", str(variant), "--algo", "grpo",
                          "--set", "credit=action", "--set", "kl_coef=0.2"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    cfg = json.loads((variant / "arena" / "grpo" / "seed-0" / "config.json").read_text())["config"]
    assert (cfg["credit"], cfg["kl_coef"], cfg["max_steps"], cfg["test_episodes"]) == ("action", 0.2, 2, 8)
    result = json.loads((variant / "variant.json").read_text())
    final = result["checkpoints"]["final"]
    assert final["effect"]["gained"] + final["effect"]["lost"] <= 8 and "final: RL - SFT" in run.stdout
    bad = subprocess.run([sys.executable, str(REPO / "experiments" / "quickstart_variant.py"),
                          "--from", str(tmp_path), "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not a finished quickstart" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_consistency_counts_slips_against_the_written_plan(tmp_path):
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        from quickstart_variant import plan_consistency
    finally:
        sys.path.pop(0)

    def turn(plan, move):
        return {"response": f"<think>plan: {plan} up</think><action>{move}</action>"}

    episodes = [{"steps": [turn("left", "left"), {**turn("up", "up"), "won": True}]},  # no slip, won
                {"steps": [turn("left", "down"), {**turn("up", "up"), "won": True}]},  # slip, won
                {"steps": [turn("left", "left"), {"response": "garbled", "won": False}]}]  # no slip, lost
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in episodes))
    got = plan_consistency(path)
    assert got["turns"] == 5 and got["slip_share"] == 1 / 5
    assert got["won_without_slip"] == 0.5 and got["won_with_slip"] == 1.0 and got["episodes_without_slip"] == 2


def test_quickstart_refuses_a_folder_of_other_settings(tmp_path):
    """A rerun on an --out made with other settings would read the old recipe's finished RL
    runs back as the new one's: refused up front, naming what differs and the fix."""
    from arlgym.errors import ConfigError
    from arlgym.quickstart import QuickstartConfig, _recipe, run_quickstart

    out = tmp_path / "qs"
    out.mkdir()
    (out / "recipe.json").write_text(json.dumps({**_recipe(QuickstartConfig.fast()), "rl_lr": 1e-3}))
    cfg = QuickstartConfig.fast(out=str(out))
    cfg.rl_threads = 2  # threads do not change the recipe: only rl_lr is named
    with pytest.raises(ConfigError, match=r"\(rl_lr 0.001 -> 0.0002\)\. Fix: rerun with those settings"):
        run_quickstart(cfg)
    assert sorted(p.name for p in out.iterdir()) == ["recipe.json"]  # nothing ran


@pytest.mark.slow
def test_quickstart_on_the_papers_rooms_and_prompt_plays_every_phase_there(tmp_path):
    """--room-size 6 --history-length 2 (the paper's settings) reach every phase: the
    demonstrations, the three evals and the RL run all play 6×6 rooms with two past turns in
    the prompt (no env kwargs: the envs' defaults), and the SFT's prompts show the history."""
    out = tmp_path / "qs6"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--fast", "--out",
                           str(out), "--room-size", "6", "--history-length", "2", "--rl-algos", "sampo",
                           "--teacher", "greedy", "--demos", "won"],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Sokoban 6x6/1 box" in proc.stdout and "the greedy teacher's won episodes" in proc.stdout
    identity = json.loads((out / "sft_data" / "meta.json").read_text())["identity"]
    assert identity["env_kwargs"] is None and identity["policy"] == "greedy"
    for row in ("random", "teacher", "sft"):
        assert not json.loads((out / f"eval_{row}.settings.json").read_text())["env_kwargs"]  # the defaults
    run_cfg = json.loads((out / "arena" / "sampo" / "seed-0" / "config.json").read_text())["config"]
    assert not run_cfg.get("env_kwargs")
    samples = [json.loads(x) for x in (out / "sft_data" / "samples.jsonl").read_text().splitlines()]
    assert any("Below are the most recent" in x["messages"][0]["content"] for x in samples)
    recipe = json.loads((out / "recipe.json").read_text())
    assert (recipe["room_size"], recipe["history_length"], recipe["teacher"]) == (6, 2, "greedy")


def test_a_folder_older_than_a_setting_is_read_as_what_it_ran(tmp_path):
    """recipe.json files written before room_size and history_length existed ran on 6×6 rooms
    with two past turns in the prompt: they match that recipe, and a rerun with today's
    defaults (7×7, no history) is refused, naming both, instead of being mixed in."""
    from dataclasses import replace

    from arlgym.errors import ConfigError
    from arlgym.quickstart import QuickstartConfig, _check_recipe, _recipe

    then = replace(QuickstartConfig.fast(), room_size=6, history_length=2)
    older = {k: v for k, v in _recipe(then).items() if k not in ("room_size", "history_length")}
    (tmp_path / "recipe.json").write_text(json.dumps(older))
    assert _check_recipe(tmp_path, _recipe(then))
    with pytest.raises(ConfigError, match=r"room_size 6 -> 7.*history_length 2 -> 0|history_length 2 -> 0.*room_size 6 -> 7"):
        _check_recipe(tmp_path, _recipe(QuickstartConfig.fast()))
    # written before --demos and --rl-kl-coef: won episodes only, the presets' KL
    then = replace(QuickstartConfig.fast(), demos="won", rl_kl_coef=None)
    older = {k: v for k, v in _recipe(then).items() if k not in ("demos", "rl_kl_coef")}
    (tmp_path / "recipe.json").write_text(json.dumps(older))
    assert _check_recipe(tmp_path, _recipe(then))
    with pytest.raises(ConfigError, match=r"demos"):
        _check_recipe(tmp_path, _recipe(QuickstartConfig.fast()))


def test_recipe_config_reads_a_folder_as_what_it_ran(tmp_path):
    """Scripts that rerun a phase from a folder get its settings, not today's defaults: a recipe
    written before --demos and --rl-kl-coef reads as won episodes and the presets' KL."""
    from dataclasses import replace

    from arlgym.quickstart import QuickstartConfig, _recipe, recipe_config

    then = replace(QuickstartConfig(), demos="won", rl_kl_coef=None, sft_steps=600)
    older = {k: v for k, v in _recipe(then).items() if k not in ("demos", "rl_kl_coef")}
    (tmp_path / "recipe.json").write_text(json.dumps(older))
    cfg = recipe_config(tmp_path, rl_jobs=1)
    assert (cfg.demos, cfg.rl_kl_coef, cfg.sft_steps, cfg.rl_jobs) == ("won", None, 600, 1)
    assert cfg.rl_algos == ("grpo", "sampo")


def test_demos_all_imitates_every_teacher_episode_and_won_only_the_won(tmp_path):
    """--demos picks the collector's episodes: ``won`` keeps the slipping teacher's won episodes
    (its slips thinned out by the selection), ``all`` every one, lost ones included."""
    from arlgym.quickstart import DEMO_MIN_SCORE, QuickstartConfig, env_kwargs
    from arlgym.sft.collect import CollectConfig, collect_sft

    kept = {}
    for demos in ("won", "all"):
        out = tmp_path / demos
        collect_sft(CollectConfig(policy="slips:0.75:expert", episodes=24, seed=0, batch_tasks=24,
                                  min_score=DEMO_MIN_SCORE[demos],
                                  env_kwargs=env_kwargs(QuickstartConfig())), out)
        episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        kept[demos] = [e for e in episodes if e["kept"]]
        assert sum(e["samples"] for e in kept[demos]) == len((out / "samples.jsonl").read_text().splitlines())
    assert 0 < len(kept["won"]) < 24 and all(e["won"] for e in kept["won"])
    assert len(kept["all"]) == 24 and any(not e["won"] for e in kept["all"])
    assert QuickstartConfig().demos == "all"


def test_env_kwargs_name_only_what_differs_from_the_papers_prompt_and_rooms():
    from dataclasses import replace

    from arlgym.quickstart import QuickstartConfig, env_kwargs

    cfg = QuickstartConfig()
    assert env_kwargs(cfg) == {"dim_room": 7, "history_length": 0}
    assert env_kwargs(replace(cfg, room_size=6, history_length=2)) == {}
    assert env_kwargs(replace(cfg, room_size=6)) == {"history_length": 0}


def test_rl_kl_temperature_and_validation_reach_every_arena_run(tmp_path):
    """The KL to the SFT is 0.2 in every run unless changed (None: each preset's own, the
    paper's 0.01); --rl-temperature sets the rollouts' temperature; without validation rooms
    the runs validate nothing and the final policy is reported; the spec validates as a grid."""
    from dataclasses import replace

    from arlgym.quickstart import QuickstartConfig, arena_spec

    cfg = QuickstartConfig()
    spec = arena_spec(cfg, tmp_path / "sft", tmp_path)
    assert spec.base["kl_coef"] == 0.2 and spec.base["temperature"] == 0.6
    assert (spec.base["eval_steps"], spec.base["save_best"]) == (0, False)
    spec.validate()
    spec = arena_spec(replace(cfg, rl_kl_coef=None, rl_temperature=1.0, rl_val_episodes=40),
                      tmp_path / "sft", tmp_path)
    assert "kl_coef" not in spec.base and spec.base["temperature"] == 1.0
    assert (spec.base["eval_steps"], spec.base["eval_episodes"], spec.base["save_best"]) == (4, 40, True)
    spec.validate()


def test_rl_phase_summary_weights_steps_by_their_turns():
    from arlgym.quickstart import rl_phase_summary

    log = [{"env/turns": 100.0, "env/format_valid_ratio": 0.99, "env/success_rate": 0.5},
           {"env/turns": 300.0, "env/format_valid_ratio": 0.97, "env/success_rate": 0.75}]
    s = rl_phase_summary(log, 0.8)
    # malformed: 100 * 0.01 + 300 * 0.03 = 10 of 400 responses = 2.5% (an unweighted mean says 2%)
    assert s["responses"] == 400 and abs(s["invalid_ratio"] - 0.025) < 1e-12
    assert (s["first_success"], s["last_success"], s["steps"]) == (0.5, 0.75, 2)


def test_paired_difference_by_hand():
    from arlgym.quickstart import paired_difference

    before = [True] * 50 + [False] * 50
    after = [True] * 50 + [True] * 10 + [False] * 40  # 10 rooms gained, none lost
    d = paired_difference(before, after)
    # differences: ten 1s and ninety 0s -> mean 0.1, sd sqrt(0.1*0.9*100/99), se = sd / 10
    assert abs(d["difference"] - 0.1) < 1e-12
    assert abs(d["se"] - (0.09 * 100 / 99) ** 0.5 / 10) < 1e-12
    assert d["gained"] == 10 and d["lost"] == 0 and d["z"] > 3
    with pytest.raises(ValueError):
        paired_difference([True], [True])


def test_sampled_eval_pairs_rates_per_room_with_greedy_rooms(tmp_path):
    """sampled_eval plays K episodes a room at T = 1 and returns one success rate a room, in the
    greedy eval's room order, so paired_difference pairs the same rooms; the episode file
    resumes (a second call plays nothing and returns the same)."""
    from arlgym.policies import make_policy
    from arlgym.quickstart import greedy_eval, paired_difference, sampled_eval

    summary, rates = sampled_eval(make_policy("random", seed=0), 6, 4, tmp_path / "s.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and summary["episodes"] == 24
    rooms = list(dict.fromkeys(r["task_id"] for r in rows))
    assert len(rates) == 6 and all(r in (0.0, 0.25, 0.5, 0.75, 1.0) for r in rates)
    for room, rate in zip(rooms, rates, strict=True):
        won = [r["summary"]["won"] for r in rows if r["task_id"] == room]
        assert len(won) == 4 and rate == sum(won) / 4
    assert abs(summary["success_rate"] - sum(rates) / 6) < 1e-12
    _, greedy = greedy_eval(make_policy("random", seed=0), 6, tmp_path / "g.jsonl")
    greedy_rooms = [json.loads(line)["task_id"] for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert greedy_rooms == rooms                          # the same rooms, in the same order
    assert paired_difference(greedy, rates)["rooms"] == 6
    assert sampled_eval(make_policy("random", seed=1), 6, 4, tmp_path / "s.jsonl")[1] == rates


def test_choose_threads():
    from arlgym.quickstart import choose_threads

    assert choose_threads(3) == 3 and choose_threads(0) == 0  # explicit wins
    assert choose_threads(-1, cores=2, load=0.1) == 2          # idle machine: both cores
    assert choose_threads(-1, cores=2, load=1.2) == 1          # a busy neighbour: one thread
    assert choose_threads(-1, cores=8, load=3.0) == 2          # the tiny model splits no further
    assert choose_threads(-1, cores=1, load=0.0) == 1


@pytest.mark.slow
def test_quickstart_cut_short_is_loud(tmp_path):
    out = tmp_path / "qs"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--fast", "--out", str(out),
                           "--sft-minutes", "0.0001"], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "!! CUT SHORT: SFT ran 1 of 20 steps" in proc.stdout
    assert "cut short" in proc.stderr and "--allow-short" in proc.stderr
    assert json.loads((out / "quickstart.json").read_text())["cut_short"]



@pytest.mark.parametrize("args, message", [
    (["--rl-algos", "foo,grpo"], "--rl-algos 'foo,grpo': unknown preset 'foo'"),
    (["--rl-algos", ","], "--rl-algos ',' names no preset"),
    (["--rl-algos", "grpo,sampo,grpo"], "['grpo'] named twice"),
    (["--rl-jobs", "0"], "--rl-jobs=0 is invalid: expected an int >= 1"),
    (["--room-size", "3"], "--room-size=3 is invalid: expected an int >= 5 and <= 10"),
    (["--history-length", "-1"], "--history-length=-1 is invalid: expected an int >= 0"),
    (["--teacher", "slips:2:expert"], "--teacher 'slips:2:expert' names no teacher"),
    (["--teacher", "random"], "--teacher 'random': the demonstrator must be the greedy teacher"),
    (["--teacher", "slips:0.5:random"], "Fix: --teacher greedy, expert, or slips|mistakes:<p>:greedy|expert"),
    (["--demos", "lost"], "--demos 'lost': must be won or all. Fix: --demos won"),
    (["--rl-val-episodes", "-1"], "--rl-val-episodes=-1 is invalid: expected an int >= 0"),
])
def test_quickstart_bad_rl_flags_are_named(tmp_path, args, message):
    """A mistyped preset or job count is refused before anything runs, naming the flag."""
    out = tmp_path / "qs"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
