"""bench/bench_serve.py's part 4 (ALFWorld rollouts: a two-server remote vector vs local worker
processes) runs end to end at toy settings, with equal trajectories on both sides and a ratio,
so it does not rot between measurements."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_serve_vector_part_compares_both_sides(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "serve.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench/bench_serve.py"), "--parts",
                           "vector", "--vec-tasks", "2", "--vec-group", "1", "--vec-batches",
                           "1", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    vec = json.loads(out.read_text())["vector"]
    assert vec["trajectories_equal"] is True
    assert vec["local"]["episodes"] == vec["remote"]["episodes"] == 2
    assert vec["local"]["steps"] == vec["remote"]["steps"] > 0
    assert vec["remote_over_local"] > 0 and "two servers / local processes" in proc.stdout
