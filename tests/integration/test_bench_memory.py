"""bench/bench_memory.py runs end to end at toy settings (both sides, one vocabulary) and prints
its table with the ratio row, so it does not rot between measurements."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_memory_prints_both_sides_and_their_ratios(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ARLGYM_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench/bench_memory.py"), "--vocabs", "600",
                           "--prompts", "2", "--generations", "2", "--max-new-tokens", "4",
                           "--steps", "2"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "FAILED" not in out, out
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\s+600 (trl|arlgym|ratio)\b.*$", out, re.M)}
    assert set(rows) == {"trl", "arlgym", "ratio"}, out
    ratios = [float(x) for x in re.findall(r"([\d.]+)x", rows["ratio"])]
    assert len(ratios) == 6 and all(r > 0 for r in ratios), rows["ratio"]
