"""`arlgym quickstart --fast` end to end: every stage runs and the three-row table is printed."""

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
    table = proc.stdout[proc.stdout.index("policy"):]
    assert "malformed; rollout success" in proc.stdout
    assert [line.split()[0] for line in table.splitlines()[1:4]] == ["random", "SFT", "SFT+SAMPO"]
    result = json.loads((out / "quickstart.json").read_text())
    assert set(result["rows"]) == {"random", "SFT", "SFT+SAMPO"}
    assert (out / "curves.png").stat().st_size > 1000
    report = (out / "report.md").read_text()  # the printed table, effect and timings, kept
    assert "RL effect (same rooms)" in report and "SFT+SAMPO" in report and "curves.png" in report
    assert (out / "sft" / "model.safetensors").exists() and (out / "rl" / "final").is_dir()


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

