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
    assert [line.split()[0] for line in table.splitlines()[1:4]] == ["random", "SFT", "SFT+SAMPO"]
    result = json.loads((out / "quickstart.json").read_text())
    assert set(result["rows"]) == {"random", "SFT", "SFT+SAMPO"}
    assert (out / "curves.png").stat().st_size > 1000
    assert (out / "sft" / "model.safetensors").exists() and (out / "rl" / "final").is_dir()
