"""`arlgym quickstart --fast` end to end: every stage runs and the three-row table is printed."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_quickstart_fast(tmp_path):
    out = tmp_path / "qs"
    proc = subprocess.run([sys.executable, "-m", "arlgym.cli", "quickstart", "--fast", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout[proc.stdout.index("policy"):]
    assert "malformed; rollout success" in proc.stdout
    assert [line.split()[0] for line in table.splitlines()[1:4]] == ["random", "SFT", "SFT+SAMPO"]
    result = json.loads((out / "quickstart.json").read_text())
    assert set(result["rows"]) == {"random", "SFT", "SFT+SAMPO"}
    assert (out / "curves.png").stat().st_size > 1000
    assert (out / "sft" / "model.safetensors").exists() and (out / "rl" / "final").is_dir()


def test_rl_phase_summary_weights_steps_by_their_turns():
    from arlgym.quickstart import rl_phase_summary

    log = [{"env/turns": 100.0, "env/format_valid_ratio": 0.99, "env/success_rate": 0.5},
           {"env/turns": 300.0, "env/format_valid_ratio": 0.97, "env/success_rate": 0.75}]
    s = rl_phase_summary(log, 0.8)
    # malformed: 100 * 0.01 + 300 * 0.03 = 10 of 400 responses = 2.5% (an unweighted mean says 2%)
    assert s["responses"] == 400 and abs(s["invalid_ratio"] - 0.025) < 1e-12
    assert (s["first_success"], s["last_success"], s["steps"]) == (0.5, 0.75, 2)
